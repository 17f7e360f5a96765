"""The reference agent loop (no framework): the model's own tool calls, lookahead context engineering.

    python examples/reference_agent.py                        # the embedded engine (started if needed)
    python examples/reference_agent.py --base-url URL         # any OpenAI-compatible server
    python examples/reference_agent.py --mode sync            # same agent, transforms on the critical path

The policy is swapped in one line: replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`.
"""

from __future__ import annotations

import asyncio

from lookahead_sdk import context_policy, program
from lookahead_sdk.agent.loop import ReferenceAgent
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.core.runtime import RuntimeMode
from lookahead_sdk.strategies import Summarize


@context_policy(Summarize(lookahead_at=1200, hard_limit=2400, recent_budget=400, summary_tokens=48))
async def run(
    endpoint: Endpoint, mode: RuntimeMode, steps: int, tool_latency_s: float = 0.0
) -> list[demo.TurnRow]:
    gate = endpoint.slack_gate()
    llm = endpoint.chat_client(
        gate
    )  # the agent's streaming chat client, through the same transport
    warmer = endpoint.warmer(gate) if mode == "lookahead" else None
    agent = ReferenceAgent(  # takes its policy from @context_policy
        llm,
        ToolRegistry([demo.source_tool(latency_s=tool_latency_s)]),
        mode=mode,
        window_tokens=endpoint.window_tokens,
        warmer=warmer,
        token_counter=endpoint.token_counter(),
        max_tokens=96,
        send_tools=True,
    )
    try:
        async with program(release_to=()):
            record = await agent.run(demo.SYSTEM_PROMPT, demo.task(), max_steps=steps)
    finally:
        await llm.aclose()
        if warmer is not None:
            await warmer.aclose()
    return [
        demo.TurnRow(index, turn.commit, turn.context_tokens, turn.ttft_s)
        for index, turn in enumerate(record.turns)
    ]


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(run(endpoint, args.mode, args.steps, args.tool_latency))
    demo.report(args, "Reference agent", endpoint, rows)


if __name__ == "__main__":
    main()
