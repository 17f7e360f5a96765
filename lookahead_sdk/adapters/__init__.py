"""Framework adapters: lookahead context engineering inside LangChain, LlamaIndex and AutoGen
agents, through each framework's own extension point, and the one-line tagging integration for
anything built on the OpenAI SDK.

Import the framework module you use (each imports its framework lazily from here):

    from lookahead_sdk.adapters.langchain import LookaheadMiddleware, LookaheadCallbackHandler
    from lookahead_sdk.adapters.llamaindex import LookaheadLLM, LookaheadMemory
    from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient
    from lookahead_sdk.adapters.openai import tagged_async_http_client, Endpoint

Every adapter takes its policy from `policy=...`, an enclosing `@context_policy(...)` function,
or `context_policy(Offload())(adapter)`: switching Summarize for Offload is one line.
"""
