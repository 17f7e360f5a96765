"""The reference agent loop (no framework): the model's own tool calls, lookahead context engineering.

    python examples/reference_agent.py                        # the embedded engine (started if needed)
    python examples/reference_agent.py --base-url URL         # any OpenAI-compatible server
    python examples/reference_agent.py --mode sync            # same agent, transforms on the critical path

The agent is `lookahead_sdk/bench/examples/reference_agent.py`, shipped in the package so that
`lookahead-sdk bench adapters` runs it from any install; its `run()` is re-exported here.
"""

from lookahead_sdk.bench.examples.reference_agent import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    main()
