"""One decorator swaps the context policy of a function, a class, or an agent object."""

from __future__ import annotations

from openai import AsyncOpenAI

from lookahead_sdk import LookaheadRuntime, context_policy
from lookahead_sdk.agent.loop import ReferenceAgent
from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.strategies import KeepRecent, Offload, Summarize


async def test_decorated_agent_function_runs_its_runtimes_with_the_policy() -> None:
    @context_policy(Summarize())
    async def agent_entry() -> LookaheadRuntime:
        return LookaheadRuntime()

    runtime = await agent_entry()
    assert isinstance(runtime.policy, Summarize)
    await runtime.aclose()


def test_decorated_sync_function_and_no_leak_outside() -> None:
    import pytest

    @context_policy(KeepRecent())
    def build():
        from lookahead_sdk.core.policy import active_policy

        return active_policy()

    assert isinstance(build(), KeepRecent)
    with pytest.raises(ValueError, match="policy"):
        LookaheadRuntime()


def offline_client() -> OpenAICompletionClient:
    return OpenAICompletionClient(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x"), "m")


def test_switching_policies_on_the_reference_agent_is_one_line() -> None:
    agent = ReferenceAgent(offline_client(), ToolRegistry(), policy=Summarize())
    swapped = context_policy(Offload())(agent)
    assert isinstance(swapped.policy, Offload) and isinstance(agent.policy, Summarize)
    assert isinstance(swapped.new_runtime([]).policy, Offload)


def test_decorated_agent_class_defaults_to_the_policy() -> None:
    @context_policy(KeepRecent(max_turns=3))
    class ShortMemoryAgent(ReferenceAgent):
        pass

    agent = ShortMemoryAgent(offline_client(), ToolRegistry())
    policy = agent.new_runtime([]).policy
    assert isinstance(policy, KeepRecent) and policy.max_turns == 3
    assert ReferenceAgent.default_context_policy is None


def test_generators_keep_the_policy_while_their_body_runs_and_only_then() -> None:
    import pytest

    from lookahead_sdk.core.policy import active_policy

    @context_policy(KeepRecent())
    def steps():
        seen = yield active_policy()
        yield (seen, active_policy())
        return "done"

    generator = steps()
    assert isinstance(next(generator), KeepRecent)
    assert active_policy() is None  # not in the caller's code between steps
    seen, policy = generator.send("sent")
    assert seen == "sent" and isinstance(policy, KeepRecent)
    with pytest.raises(StopIteration) as stop:
        next(generator)
    assert stop.value.value == "done"


async def test_async_generators_keep_the_policy_while_their_body_runs() -> None:
    from lookahead_sdk.core.policy import active_policy

    @context_policy(Offload())
    async def stream():
        for _ in range(2):
            yield LookaheadRuntime().policy  # a runtime built inside takes the policy

    policies = [policy async for policy in stream()]
    assert len(policies) == 2 and all(isinstance(p, Offload) for p in policies)
    assert active_policy() is None


def test_a_throw_into_a_decorated_generator_reaches_its_body() -> None:
    @context_policy(KeepRecent())
    def guarded():
        try:
            yield 1
        except ValueError:
            yield "handled"

    generator = guarded()
    next(generator)
    assert generator.throw(ValueError("x")) == "handled"


def test_what_cannot_take_a_policy_is_refused_saying_what_to_decorate() -> None:
    import pytest

    class FrameworkAgent:  # reads no default_context_policy
        pass

    with pytest.raises(TypeError, match="nothing in it reads a default policy"):
        context_policy(Summarize())(FrameworkAgent)
    with pytest.raises(TypeError, match="Decorate an agent function"):
        context_policy(Summarize())(FrameworkAgent())

    @context_policy(KeepRecent())
    class MyRuntime(LookaheadRuntime):
        pass

    assert isinstance(MyRuntime().policy, KeepRecent)
