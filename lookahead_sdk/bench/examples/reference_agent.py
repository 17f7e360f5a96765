"""The reference agent loop (no framework): the model's own tool calls, lookahead context engineering.

    python examples/reference_agent.py                        # the embedded engine (started if needed)
    python examples/reference_agent.py --base-url URL         # any OpenAI-compatible server
    python examples/reference_agent.py --mode sync            # same agent, transforms on the critical path

(or `python -m lookahead_sdk.bench.examples.reference_agent`). The policy is swapped in one line:
replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lookahead_sdk.agent.loop import ReferenceAgent, TurnRecord
from lookahead_sdk.base.tags import program
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.core.config import RuntimeMode
from lookahead_sdk.core.policy import context_policy
from lookahead_sdk.strategies import Summarize


@context_policy(Summarize(lookahead_at=1200, hard_limit=2400, recent_budget=400, summary_tokens=48))
async def run(
    endpoint: Endpoint,
    mode: RuntimeMode,
    steps: int,
    tool_latency_s: float = 0.0,
    on_turn: Callable[[demo.TurnRow], None] | None = None,
) -> list[demo.TurnRow]:
    # The agent's streaming chat client, through the same transport; it also summarizes.
    llm = endpoint.chat_client(endpoint.slack_gate())
    config = endpoint.runtime_config(mode, summarizer=llm)
    turns: list[TurnRecord] = []
    agent = ReferenceAgent(  # takes its policy from @context_policy
        llm,
        ToolRegistry([demo.source_tool(latency_s=tool_latency_s)]),
        config=config,
        max_tokens=96,
        send_tools=True,
        on_turn=turns.append,
    )

    def rows() -> list[demo.TurnRow]:
        return [
            demo.TurnRow(
                index,
                turn.commit,
                turn.context_tokens,
                turn.ttft_s,
                turn.first_token_at or None,
            )
            for index, turn in enumerate(turns)
        ]

    try:
        async with program(release_to=()), demo.turn_feed(rows, on_turn):
            await agent.run(demo.SYSTEM_PROMPT, demo.task(), max_steps=steps)
    finally:
        await llm.aclose()
        if config.warmer is not None:
            await config.warmer.aclose()
    return rows()


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(
            run(endpoint, args.mode, args.steps, args.tool_latency, demo.progress_printer(args))
        )
    demo.report(args, "Reference agent", endpoint, rows)


if __name__ == "__main__":
    main()
