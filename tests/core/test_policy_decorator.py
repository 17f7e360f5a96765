"""One decorator swaps the context policy of a function, a class, or an agent object."""

from __future__ import annotations

from lookahead_sdk import LookaheadRuntime, context_policy
from lookahead_sdk.agent.loop import ReferenceAgent
from lookahead_sdk.base.completion import ChatClient
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


def test_switching_policies_on_the_reference_agent_is_one_line() -> None:
    agent = ReferenceAgent(ChatClient("http://127.0.0.1:9"), ToolRegistry(), policy=Summarize())
    swapped = context_policy(Offload())(agent)
    assert isinstance(swapped.policy, Offload) and isinstance(agent.policy, Summarize)
    assert isinstance(swapped.new_runtime([]).policy, Offload)


def test_decorated_agent_class_defaults_to_the_policy() -> None:
    @context_policy(KeepRecent(max_turns=3))
    class ShortMemoryAgent(ReferenceAgent):
        pass

    agent = ShortMemoryAgent(ChatClient("http://127.0.0.1:9"), ToolRegistry())
    policy = agent.new_runtime([]).policy
    assert isinstance(policy, KeepRecent) and policy.max_turns == 3
    assert ReferenceAgent.default_context_policy is None
