"""A LlamaIndex `FunctionAgent` (on `OpenAILike`) with lookahead context engineering.

    python examples/llamaindex_agent.py                       # the embedded engine (started if needed)
    python examples/llamaindex_agent.py --base-url URL        # any OpenAI-compatible server
    python examples/llamaindex_agent.py --mode sync           # same agent, transforms on the critical path

(or `python -m lookahead_sdk.bench.examples.llamaindex_agent`). The policy is swapped in one line:
replace the `@context_policy(...)` decorator's argument, e.g.
`@context_policy(Offload(threshold=200, hard_limit=2400))`. `llm.memory()` keeps the committed
history: pass it to the next `agent.run` to continue from it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai_like import OpenAILike

from lookahead_sdk.adapters.llamaindex import LookaheadLLM
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
    model = OpenAILike(
        model=endpoint.model,
        api_base=endpoint.openai_base_url,
        api_key="not-needed",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=endpoint.window_tokens,
        http_client=endpoint.http_client(),
        async_http_client=endpoint.async_http_client(),
        temperature=0,
        max_tokens=96,
        max_retries=0,
    )
    # Takes its policy from @context_policy; closes the config's summarizer and warmer. The run
    # makes max_iterations calls and, with early_stopping_method="generate", one more.
    llm = LookaheadLLM(model, config=endpoint.runtime_config(mode), model_call_limit=steps + 1)
    agent = FunctionAgent(
        tools=[demo.source_reader(latency_s=tool_latency_s)],
        llm=llm,
        system_prompt=demo.SYSTEM_PROMPT,
    )

    def rows() -> list[demo.TurnRow]:
        return [
            demo.TurnRow(index, call.commit, call.context_tokens, call.ttft_s, call.first_token_at)
            for index, call in enumerate(llm.calls)
        ]

    try:
        async with demo.turn_feed(rows, on_turn):
            await agent.run(
                demo.task(),
                memory=llm.memory(),
                max_iterations=steps,
                early_stopping_method="generate",
            )
    finally:
        await llm.aclose()
    return rows()


def main() -> None:
    args = demo.example_parser(__doc__).parse_args()
    with demo.example_endpoint(args) as endpoint:
        rows = asyncio.run(
            run(endpoint, args.mode, args.steps, args.tool_latency, demo.progress_printer(args))
        )
    demo.report(args, "LlamaIndex FunctionAgent", endpoint, rows)


if __name__ == "__main__":
    main()
