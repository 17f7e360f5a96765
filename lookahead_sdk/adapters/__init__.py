"""Framework adapters: lookahead context engineering inside LangChain, LlamaIndex and AutoGen
agents, through each framework's own extension point, and the one-line tagging integration for
anything built on the OpenAI SDK.

Import the framework module you use (each imports its framework lazily from here):

    from lookahead_sdk.adapters.langchain import LookaheadMiddleware, LookaheadCallbackHandler
    from lookahead_sdk.adapters.llamaindex import LookaheadLLM, LookaheadMemory
    from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
    from lookahead_sdk.adapters.openai import tagged_async_http_client, Endpoint

Every adapter takes its policy from `policy=...`, an enclosing `@context_policy(...)` function,
or `context_policy(Offload())(adapter_or_agent)`: switching Summarize for Offload is one line.
Each takes the framework's own model object as its summarizer (by default the agent's own),
learns the window, tokenizer and tag wire from the model and its server, reports commits and
warm-ups through the framework's event channel, serves Prometheus metrics (`serve_metrics`) and
persists through the framework's own mechanism. docs/adapters/ has a page per framework.
"""
