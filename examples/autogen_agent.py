"""An AutoGen `AssistantAgent` (on `OpenAIChatCompletionClient`) with lookahead context engineering.

    python examples/autogen_agent.py                          # the embedded engine (started if needed)
    python examples/autogen_agent.py --base-url URL           # any OpenAI-compatible server
    python examples/autogen_agent.py --mode sync              # same agent, transforms on the critical path

The policy is swapped in one line: replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`. The model context's state (history
and any ready lookahead result) is saved and restored between two runs.
"""

from __future__ import annotations

import asyncio

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily
from autogen_ext.models.openai import OpenAIChatCompletionClient

from lookahead_sdk import context_policy
from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.core.runtime import RuntimeMode
from lookahead_sdk.strategies import Summarize

# A model OpenAI does not know needs its capabilities spelled out.
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "structured_output": True,
    "family": ModelFamily.UNKNOWN,
}


def new_context(endpoint: Endpoint, mode: RuntimeMode) -> LookaheadChatCompletionContext:
    gate = endpoint.slack_gate()
    return LookaheadChatCompletionContext(  # takes its policy from @context_policy
        system_message=demo.SYSTEM_PROMPT,
        model=endpoint.model,
        mode=mode,
        window_tokens=endpoint.window_tokens,
        summarizer=endpoint.chat_client(gate),
        warmer=endpoint.warmer(gate) if mode == "lookahead" else None,
        token_counter=endpoint.token_counter(),
    )


@context_policy(Summarize(lookahead_at=1200, hard_limit=2400, recent_budget=400, summary_tokens=48))
async def run(
    endpoint: Endpoint, mode: RuntimeMode, steps: int, tool_latency_s: float = 0.0
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
    )
    rows: list[demo.TurnRow] = []
    state = None
    for prompt in (demo.task(), "Continue reading the next chunks."):
        context = new_context(endpoint, mode)
        if state is not None:
            await context.load_state(state)  # the second run resumes the first one's context
        tagged = LookaheadModelClient(client, context=context)
        agent = AssistantAgent(
            "analyst",
            tagged,
            tools=[demo.source_reader(latency_s=tool_latency_s)],
            system_message=demo.SYSTEM_PROMPT,
            model_context=context,
            max_tool_iterations=steps // 2,
        )
        try:
            await agent.run(task=prompt)
            state = await context.save_state()
        finally:
            await context.aclose()
        rows += [
            demo.TurnRow(
                len(rows) + i,
                call.commit,
                call.context_tokens,
                request.first_token_at - call.started_at if request.first_token_at else None,
            )
            for i, (call, request) in enumerate(zip(context.calls, tagged.calls, strict=False))
        ]
    await client.close()
    return rows


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(run(endpoint, args.mode, args.steps, args.tool_latency))
    demo.report(args, "AutoGen AssistantAgent", endpoint, rows)


if __name__ == "__main__":
    main()
