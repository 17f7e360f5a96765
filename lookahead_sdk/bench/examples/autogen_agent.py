"""An AutoGen `AssistantAgent` (on `OpenAIChatCompletionClient`) with lookahead context engineering.

    python examples/autogen_agent.py                          # the embedded engine (started if needed)
    python examples/autogen_agent.py --base-url URL           # any OpenAI-compatible server
    python examples/autogen_agent.py --mode sync              # same agent, transforms on the critical path

(or `python -m lookahead_sdk.bench.examples.autogen_agent`). The policy is swapped in one line:
replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`. The model context's state (history
and any ready lookahead result) is saved and restored between two runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily
from autogen_ext.models.openai import OpenAIChatCompletionClient

from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.timeline import first_output_after
from lookahead_sdk.core.config import RuntimeMode
from lookahead_sdk.core.policy import context_policy
from lookahead_sdk.strategies import Summarize

# A model OpenAI does not know needs its capabilities spelled out.
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "structured_output": True,
    "family": ModelFamily.UNKNOWN,
}


def new_context(
    endpoint: Endpoint, mode: RuntimeMode, model_call_limit: int
) -> LookaheadChatCompletionContext:
    return LookaheadChatCompletionContext(  # takes its policy from @context_policy
        system_message=demo.SYSTEM_PROMPT,
        model=endpoint.model,
        config=endpoint.runtime_config(mode),
        model_call_limit=model_call_limit,
    )


@context_policy(Summarize(lookahead_at=1200, hard_limit=2400, recent_budget=400, summary_tokens=48))
async def run(
    endpoint: Endpoint,
    mode: RuntimeMode,
    steps: int,
    tool_latency_s: float = 0.0,
    on_turn: Callable[[demo.TurnRow], None] | None = None,
) -> list[demo.TurnRow]:
    client = OpenAIChatCompletionClient(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="not-needed",
        model_info=MODEL_INFO,
        http_client=endpoint.async_http_client(),
        temperature=0,
        max_tokens=96,
        max_retries=0,
        stream_options={"include_usage": True},  # the prompt size the context calibrates with
    )
    runs: list[tuple[LookaheadChatCompletionContext, LookaheadModelClient]] = []

    def rows() -> list[demo.TurnRow]:
        calls = [
            pair
            for context, tagged in runs
            for pair in zip(context.calls, tagged.calls, strict=False)
        ]
        timeline = endpoint.session.timeline
        entries = timeline.entries if timeline is not None else []
        turns = []
        for index, (call, request) in enumerate(calls):
            # AutoGen's client yields a streamed tool call only once complete: the first token
            # is when the engine's reply began (the request timeline), as the other examples see
            # it; without a timeline, when the client yielded.
            first = first_output_after(request.started_at, entries) or request.first_token_at
            ttft = first - call.started_at if first else None
            turns.append(demo.TurnRow(index, call.commit, call.context_tokens, ttft, first))
        return turns

    state = None
    prompts = (demo.task(), "Continue reading the next chunks.")
    async with demo.turn_feed(rows, on_turn):
        for prompt in prompts:
            # The program's calls over both runs (the saved state carries the count): a
            # lookahead started late in the first run is committed in the second.
            context = new_context(endpoint, mode, model_call_limit=len(prompts) * (steps // 2))
            if state is not None:
                await context.load_state(state)  # the second run resumes the first one's context
            tagged = LookaheadModelClient(client, context=context)
            runs.append((context, tagged))
            agent = AssistantAgent(
                "analyst",
                tagged,
                tools=[demo.source_reader(latency_s=tool_latency_s)],
                system_message=demo.SYSTEM_PROMPT,
                model_context=context,
                model_client_stream=True,
                max_tool_iterations=steps // 2,
            )
            try:
                await agent.run(task=prompt)
                state = await context.save_state()
            finally:
                await context.aclose()
    await client.close()
    return rows()


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(
            run(endpoint, args.mode, args.steps, args.tool_latency, demo.progress_printer(args))
        )
    demo.report(args, "AutoGen AssistantAgent", endpoint, rows)


if __name__ == "__main__":
    main()
