"""A LangChain agent (`create_agent` + `ChatOpenAI`) with lookahead context engineering.

    python examples/langchain_agent.py                        # the embedded engine (started if needed)
    python examples/langchain_agent.py --base-url URL         # any OpenAI-compatible server
    python examples/langchain_agent.py --mode sync            # same agent, transforms on the critical path

(or `python -m lookahead_sdk.bench.examples.langchain_agent`). The policy is swapped in one line:
replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from lookahead_sdk.adapters.langchain import LookaheadCallbackHandler, LookaheadMiddleware
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
    # Takes its policy from @context_policy; closes the config's summarizer and warmer. The run
    # ends at its model-call limit: no lookahead starts that it would end before committing.
    middleware = LookaheadMiddleware(config=endpoint.runtime_config(mode), model_call_limit=steps)
    model = ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="not-needed",
        http_client=endpoint.http_client(),
        http_async_client=endpoint.async_http_client(),
        temperature=0,
        max_tokens=96,
        streaming=True,
    )
    tools = [
        StructuredTool.from_function(coroutine=demo.source_reader(latency_s=tool_latency_s)),
        *middleware.tools,
    ]
    agent = create_agent(
        model,
        tools,
        system_prompt=demo.SYSTEM_PROMPT,
        middleware=[middleware, ModelCallLimitMiddleware(run_limit=steps, exit_behavior="end")],
    )
    observer = LookaheadCallbackHandler(endpoint.token_counter())

    def rows() -> list[demo.TurnRow]:
        return [
            demo.TurnRow(
                index,
                call.commit,
                call.context_tokens,
                None if seen.first_token_at is None else seen.first_token_at - call.started_at,
                seen.first_token_at,
            )
            for index, (call, seen) in enumerate(
                zip(middleware.calls, observer.model_calls, strict=False)
            )
        ]

    try:
        async with demo.turn_feed(rows, on_turn):
            await agent.ainvoke(
                {"messages": [{"role": "user", "content": demo.task()}]},
                {"callbacks": [observer]},
            )
    finally:
        await middleware.aclose()
    return rows()


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(
            run(endpoint, args.mode, args.steps, args.tool_latency, demo.progress_printer(args))
        )
    demo.report(args, "LangChain agent", endpoint, rows)


if __name__ == "__main__":
    main()
