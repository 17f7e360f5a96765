"""The three framework agents of `test_integration_on_engine.py`, built as a user would on their
own server: the framework's own model object (its summarizer by default), no window, token
counter or summarizer given (each is learned from the model and its server), `warmer="auto"`.

Run as a script it is the second process of the persistence test: it rebuilds the agent,
resumes it from what the first process saved through the framework's own mechanism, runs one
more step and prints what the resumed runtime holds as JSON:

    python -m tests.adapters.engine_agents FRAMEWORK BASE_URL SAVED_FILE
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
from pathlib import Path
from typing import Any

from lookahead_sdk import Endpoint, RequestTags
from lookahead_sdk.bench import examples as demo
from lookahead_sdk.core.runtime import LookaheadRuntime
from lookahead_sdk.strategies import Summarize
from lookahead_sdk.strategies.summarize import SUMMARY_PREFIX

MAX_TOKENS = 80
THREAD = "t1"
CONTINUE = "Continue with the next chunk."


def small_policy() -> Summarize:
    return Summarize(lookahead_at=600, hard_limit=900, recent_budget=300, summary_tokens=24)


def tools() -> list[Any]:
    return [demo.source_reader(lines=12)]


# -- LangChain ---------------------------------------------------------------------------------
def langchain_agent(endpoint: Endpoint, steps: int, saver: Any, callbacks: list[Any]) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    from lookahead_sdk.adapters.langchain import LookaheadMiddleware

    model = ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="none",
        temperature=0,
        max_tokens=MAX_TOKENS,
        http_client=endpoint.http_client(),
        http_async_client=endpoint.async_http_client(),
        streaming=True,
        callbacks=callbacks,  # the model's own callbacks see every call of it, summaries too
    )
    middleware = LookaheadMiddleware(
        small_policy(),
        warmer="auto",
        tags=RequestTags(program_id="lc-int"),
        release_after_agent=False,
    )
    agent = create_agent(
        model,
        [StructuredTool.from_function(coroutine=tool) for tool in tools()],
        system_prompt=demo.SYSTEM_PROMPT,
        middleware=[middleware, ModelCallLimitMiddleware(run_limit=steps, exit_behavior="end")],
        checkpointer=saver,
    )
    return model, middleware, agent


def dump_saver(saver: Any, path: Path) -> None:
    """An InMemorySaver's storage to a file (langgraph-checkpoint-sqlite is not installed)."""
    storage = {t: {ns: dict(c) for ns, c in spaces.items()} for t, spaces in saver.storage.items()}
    path.write_bytes(
        pickle.dumps({"storage": storage, "writes": dict(saver.writes), "blobs": dict(saver.blobs)})
    )


def load_saver(path: Path) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    saved = pickle.loads(path.read_bytes())
    saver = InMemorySaver()
    for thread, spaces in saved["storage"].items():
        for space, checkpoints in spaces.items():
            saver.storage[thread][space].update(checkpoints)
    saver.writes.update(saved["writes"])
    saver.blobs.update(saved["blobs"])
    return saver


async def resume_langchain(endpoint: Endpoint, saver: Any) -> LookaheadRuntime:
    _, middleware, agent = langchain_agent(endpoint, 1, saver, [])
    try:
        await agent.ainvoke(
            {"messages": [{"role": "user", "content": CONTINUE}]},
            {"configurable": {"thread_id": THREAD}},
        )
        return middleware.runtime_for(THREAD).runtime
    finally:
        await middleware.aclose()


# -- LlamaIndex --------------------------------------------------------------------------------
def llamaindex_agent(endpoint: Endpoint) -> Any:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    from lookahead_sdk.adapters.llamaindex import LookaheadLLM

    model = OpenAILike(  # no context_window: the server reports it
        model=endpoint.model,
        api_base=endpoint.openai_base_url,
        api_key="none",
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0,
        max_tokens=MAX_TOKENS,
        http_client=endpoint.http_client(),
        async_http_client=endpoint.async_http_client(),
        max_retries=0,
        timeout=600,  # a summary on a busy CPU engine can take over the default minute
    )
    llm = LookaheadLLM(model, small_policy(), warmer="auto", tags=RequestTags(program_id="li-int"))
    agent = FunctionAgent(tools=tools(), llm=llm, system_prompt=demo.SYSTEM_PROMPT)
    return model, llm, agent


async def resume_llamaindex(endpoint: Endpoint, data: dict[str, Any]) -> LookaheadRuntime:
    from llama_index.core.workflow import Context

    _, llm, agent = llamaindex_agent(endpoint)
    try:
        ctx = Context.from_dict(agent, data, serializer=llm.serializer())
        await agent.run(CONTINUE, ctx=ctx, max_iterations=1, early_stopping_method="generate")
        return llm.session.runtime
    finally:
        await llm.aclose()


# -- AutoGen -----------------------------------------------------------------------------------
def autogen_agent(endpoint: Endpoint, steps: int) -> Any:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelFamily
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient

    client = OpenAIChatCompletionClient(
        model=endpoint.model,
        base_url=endpoint.openai_base_url,
        api_key="none",
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": True,
            "structured_output": True,
            "family": ModelFamily.UNKNOWN,
        },
        http_client=endpoint.async_http_client(),
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
    )
    context = LookaheadChatCompletionContext(
        small_policy(),
        model_client=client,
        system_message=demo.SYSTEM_PROMPT,
        warmer="auto",
        tags=RequestTags(program_id="ag-int"),
    )
    tagged = LookaheadModelClient(client, context=context)
    agent = AssistantAgent(
        "analyst",
        tagged,
        tools=tools(),
        system_message=demo.SYSTEM_PROMPT,
        model_context=context,
        max_tool_iterations=steps,
    )
    return client, tagged, context, agent


async def resume_autogen(endpoint: Endpoint, document: dict[str, Any]) -> LookaheadRuntime:
    from autogen_agentchat.agents import AssistantAgent

    from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext, LookaheadModelClient

    context = LookaheadChatCompletionContext.load_component(document["context"])
    client = LookaheadModelClient.load_component(document["client"])
    agent = AssistantAgent(
        "analyst",
        client,
        tools=tools(),
        system_message=demo.SYSTEM_PROMPT,
        model_context=context,
        max_tool_iterations=1,
    )
    try:
        await agent.load_state(document["state"])
        await agent.run(task=CONTINUE)
        return context.runtime
    finally:
        await context.aclose()
        await client.close()


def report(runtime: LookaheadRuntime) -> dict[str, Any]:
    messages = runtime.main.messages
    return {
        "commits": runtime.stats.commits,
        "boundaries": runtime.stats.boundaries,
        "summarized": any(str(m.get("content") or "").startswith(SUMMARY_PREFIX) for m in messages),
        "continued": any(m.get("content") == CONTINUE for m in messages),
        "window_tokens": runtime.main.window_tokens,
    }


def main() -> None:
    framework, base_url, saved = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    endpoint = Endpoint.connect(base_url)
    if framework == "langchain":
        runtime = asyncio.run(resume_langchain(endpoint, load_saver(saved)))
    else:
        resume = resume_llamaindex if framework == "llamaindex" else resume_autogen
        runtime = asyncio.run(resume(endpoint, json.loads(saved.read_text())))
    print(json.dumps(report(runtime)))


if __name__ == "__main__":
    main()
