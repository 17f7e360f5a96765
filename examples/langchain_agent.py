"""A LangChain agent (`create_agent` + `ChatOpenAI`) with lookahead context engineering.

    python examples/langchain_agent.py                        # the embedded engine (started if needed)
    python examples/langchain_agent.py --base-url URL         # any OpenAI-compatible server
    python examples/langchain_agent.py --mode sync            # same agent, transforms on the critical path

The agent is `lookahead_sdk/bench/examples/langchain_agent.py`, shipped in the package so that
`lookahead-sdk bench adapters` runs it from any install; its `run()` is re-exported here.
"""

from lookahead_sdk.bench.examples.langchain_agent import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    main()
