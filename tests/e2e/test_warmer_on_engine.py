"""LlamaCppWarmer on the real embedded engine: a warm-up sharing most of its prompt with the live
context starts from a copy of the live slot (llama.cpp slot save + restore) instead of
prefilling that prefix again, and the commit then runs where more of its context is cached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from lookahead_sdk import Endpoint, LlamaCppWarmer, RequestTags, ServerSession, use_tags
from lookahead_sdk.agent.workload import corpus_root
from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.tokens import auto_token_counter
from lookahead_sdk.core.state import MainState
from lookahead_sdk.core.warmer import RequestShape

pytestmark = pytest.mark.engine


def source_excerpt() -> str:
    return (corpus_root() / "textwrap.py").read_text()[:9000]  # ~2.3K tokens


def live_and_rewritten(program_id: str) -> tuple[list[dict], list[dict]]:
    source = source_excerpt()
    live = [
        {"role": "system", "content": f"You review code. ({program_id})"},
        {"role": "user", "content": f"Read this:\n{source}"},
        {"role": "assistant", "content": "Read it."},
        {"role": "user", "content": "Note the risky parts. " * 20},
    ]
    # An Offload-like rewrite: everything but the last message is kept verbatim.
    return live, [*live[:-1], {"role": "user", "content": "[offloaded tool output] risky parts"}]


@asynccontextmanager
async def program_on_engine(
    base_url: str, program_id: str
) -> AsyncIterator[tuple[LlamaCppWarmer, OpenAICompletionClient]]:
    """A gated warmer with `program_id` attached (its slot pair), and a foreground client."""
    session = await ServerSession.connect(base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    warmer.attach(program_id)
    llm = Endpoint.from_session(session, emulate_tool_calls=False).chat_client()
    try:
        yield warmer, llm
    finally:
        warmer.detach(program_id)
        await llm.aclose()
        await warmer.aclose()


async def cached_share_of_warm_up(
    warmer: LlamaCppWarmer, program_id: str, messages: list[dict]
) -> float:
    with use_tags(RequestTags(program_id).lookahead(f"{program_id}:g")):
        result = await warmer.warm(messages, shape=RequestShape())
    return result.cached_tokens / result.prompt_tokens


async def warm_after_live_turn(base_url: str, program_id: str, *, slot_copies: bool) -> float:
    """Cached share of a warm-up made after the program's live context was served."""
    live, rewritten = live_and_rewritten(program_id)
    async with program_on_engine(base_url, program_id) as (warmer, llm):
        warmer.slot_copies = slot_copies
        with use_tags(RequestTags(program_id)):
            await llm.chat(live, max_tokens=1)  # the live slot now holds `live`
        live_state = MainState(live, token_counter=auto_token_counter(base_url))
        share = live_state.shared_prefix_share(rewritten)
        assert share > 0.8 and live_state.shared_prefix_messages(rewritten) == 3
        warmer.live_prefix(program_id, share, shared_messages=3)
        return await cached_share_of_warm_up(warmer, program_id, rewritten)


async def test_a_warm_up_starts_from_a_copy_of_the_live_slot(embedded_engine) -> None:
    base_url = embedded_engine.base_url
    seeded = await warm_after_live_turn(base_url, "seed-copy", slot_copies=True)
    cold = await warm_after_live_turn(base_url, "seed-none", slot_copies=False)
    # It resumed exactly where the copy ends: only the rewritten last message was prefilled.
    assert seeded >= 0.99, "the branch slot did not start from all of the live slot's KV"
    assert cold < 0.5, "without a copy the branch slot should have had to prefill the prefix"


async def test_a_server_without_slot_copies_still_warms(embedded_engine) -> None:
    """An engine started without --slot-save-path refuses the copy: the warm-up goes on cold."""
    base_url = embedded_engine.base_url
    session = await ServerSession.connect(base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    warmer.attach("seed-refused")
    try:
        original = warmer._post

        async def refusing(path: str, body: dict) -> dict:
            if "/slots/" in path:
                request = httpx.Request("POST", f"{base_url}{path}")
                raise httpx.HTTPStatusError(
                    "slot save disabled", request=request, response=httpx.Response(501)
                )
            return await original(path, body)

        warmer._post = refusing  # type: ignore[method-assign]
        _, rewritten = live_and_rewritten("seed-refused")
        warmer.live_prefix("seed-refused", 0.9)
        with use_tags(RequestTags("seed-refused").lookahead("seed-refused:g")):
            result = await warmer.warm(rewritten, shape=RequestShape())
        assert result.prompt_tokens > 0 and not warmer.slot_copies
        assert session.slots is not None and session.slots.pair("seed-refused") is not None
    finally:
        warmer.detach("seed-refused")
        await warmer.aclose()


async def test_a_model_turn_with_tool_calls_is_warmed_up_to_its_tool_result(
    embedded_engine,
) -> None:
    """While the tools run, a warm-up of [..., assistant tool call] renders what the next
    request will start with, up to the tool result's content, so the call is cached too."""
    warmer = LlamaCppWarmer(embedded_engine.base_url)
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "read_source", "arguments": '{"path": "csv.py"}'},
    }
    history = [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": "Read csv.py."},
        {"role": "assistant", "content": "Reading it.", "tool_calls": [call]},
    ]
    next_request = [*history, {"role": "tool", "tool_call_id": "call_7", "content": "import re"}]
    try:
        warmed = await warmer.render(history, RequestShape())
        sent = await warmer.render(next_request, RequestShape())
        closed_before = await warmer.render(history[:2], RequestShape())
    finally:
        await warmer.aclose()
    # (SmolLM2's template renders the call's content, not its arguments.)
    assert sent.startswith(warmed) and "Reading it." in warmed and "import re" not in warmed
    assert len(warmed) > len(closed_before) + len("Reading it.")  # the turn, closed


async def warm_rewrite_of_next_output(base_url: str, program_id: str, *, fork: bool) -> float:
    """The model's turn ends with a tool call; optionally the live context is copied to the
    branch then (`fork_live`); the output then arrives and an Offload-like rewrite of it is
    warmed, with no notice of the live prefix. Returns the warm-up's cached share."""
    source = source_excerpt()
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_source", "arguments": '{"path": "textwrap.py"}'},
    }
    history: list[dict] = [
        {"role": "system", "content": f"You review code. ({program_id})"},
        {"role": "user", "content": f"Read this:\n{source}"},
    ]
    async with program_on_engine(base_url, program_id) as (warmer, llm):
        with use_tags(RequestTags(program_id)):
            await llm.chat(history, max_tokens=8)  # the model's turn, in the live slot
        history.append({"role": "assistant", "content": "Reading it.", "tool_calls": [call]})
        if fork:
            assert await warmer.fork_live(program_id, history, shape=RequestShape())
            # The branch holds it now: a second copy is skipped.
            assert not await warmer.fork_live(program_id, history, shape=RequestShape())
        placeholder = "[offloaded tool output: 900 tokens; read it back with read_offloaded]"
        rewritten = [*history, {"role": "tool", "tool_call_id": "call_1", "content": placeholder}]
        return await cached_share_of_warm_up(warmer, program_id, rewritten)


async def test_a_live_context_copied_while_the_tools_run_leaves_the_warm_up_only_its_rewrite(
    embedded_engine,
) -> None:
    base_url = embedded_engine.base_url
    forked = await warm_rewrite_of_next_output(base_url, "fork-copy", fork=True)
    cold = await warm_rewrite_of_next_output(base_url, "fork-none", fork=False)
    # Only the assistant's turn (the slot holds what the model generated, not the planned
    # call) and the placeholder were prefilled.
    assert forked >= 0.95, f"the warm-up prefilled {1 - forked:.0%} of its prompt"
    assert cold < 0.5, "without a copy the branch slot should have had to prefill the prefix"


def handover(task: str, role: str = "You are a sub-agent that reviews one module.") -> list[dict]:
    """A sub-agent's first context (Isolate): a shared role prompt and module, then its task."""
    return [
        {"role": "system", "content": role},
        {"role": "user", "content": f"Module:\n{source_excerpt()}\n\nYour task: {task}"},
    ]


def recorded_slot_copies(warmer: LlamaCppWarmer) -> list[tuple[int, int]]:
    """The (source, target) of every slot copy `warmer` makes from now on."""
    copies: list[tuple[int, int]] = []
    copy_slot = warmer._copy_slot

    async def recorded(source: int, target: int) -> int | None:
        copies.append((source, target))
        return await copy_slot(source, target)

    warmer._copy_slot = recorded  # type: ignore[method-assign]
    return copies


async def test_a_warm_up_starts_from_a_copy_of_another_programs_slot_holding_its_prefix(
    embedded_engine,
) -> None:
    """Two agents delegate the same module with the same role prompt: the second sub-agent's
    warm-up starts from a copy of the slot the first one's context was warmed in (and where
    that sub-agent now runs), not from scratch; with slot copies and recall off it prefills it
    all."""
    session = await ServerSession.connect(embedded_engine.base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    programs = ("first", "second", "control")
    for program_id in programs:
        warmer.attach(program_id)

    try:
        task = handover("find the risky parts")
        first = await cached_share_of_warm_up(warmer, "first", task)
        # The sub-agent runs where it was warmed.
        await warmer.hand_over("first", "first/sub", task, shape=RequestShape())
        second = await cached_share_of_warm_up(
            warmer, "second", handover("list the public functions")
        )
        # Neither a copy nor a first chunk long enough for the server's RAM cache to match.
        warmer.slot_copies = False
        session.slots.recalled_prefix = lambda ids: 0  # type: ignore[method-assign, union-attr]
        control = await cached_share_of_warm_up(warmer, "control", handover("count the branches"))
    finally:
        for program_id in (*programs, "first/sub"):
            warmer.detach(program_id)
        await warmer.aclose()
    assert first < 0.5, "nothing held the first sub-agent's context yet"
    assert second >= 0.9, f"the second warm-up prefilled {1 - second:.0%} of its prompt"
    assert control < 0.5, "without a slot copy the engine should have prefilled it"


async def test_the_next_sub_agent_is_warmed_in_the_slot_a_finished_one_ran_in(
    embedded_engine,
) -> None:
    """One agent delegating twice more after its first sub-agent ended: the branch it is given
    at the second hand-over is the free slot holding the most of the next context, so that
    warm-up needs no copy at all."""
    session = await ServerSession.connect(embedded_engine.base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    warmer.attach("lead")
    copies = recorded_slot_copies(warmer)

    async def warm(task: str) -> float:
        return await cached_share_of_warm_up(warmer, "lead", handover(task))

    async def hand_over(child_id: str, task: str) -> None:
        await warmer.hand_over("lead", child_id, handover(task), shape=RequestShape())

    try:
        await warm("find the risky parts")
        await hand_over("lead/sub1", "find the risky parts")
        warmer.detach("lead/sub1")  # it ended; its slot is free and still holds its context
        assert await warm("list the public functions") >= 0.9  # from a copy of that slot
        assert len(copies) == 1
        await hand_over("lead/sub2", "list the public functions")
        assert len(copies) == 1, "the handed slot holds the warmed context: nothing to copy"
        assert await warm("count the branches") >= 0.9
        assert len(copies) == 1, "the new branch should have held the prefix already"
    finally:
        for program_id in ("lead", "lead/sub2"):
            warmer.detach(program_id)
        await warmer.aclose()


async def test_an_unwarmed_sub_agent_starts_from_a_copy_of_the_slot_holding_its_prefix(
    embedded_engine,
) -> None:
    """An agent delegates twice with the same role prompt and module. The first sub-agent's
    context was warmed and it ran; the second delegation's tool call came in one piece, so its
    warm-up never ran and the branch handed over holds other work (an earlier warm-up). The
    hand-over makes that slot a copy of the first sub-agent's, and the second sub-agent's
    first request prefills only its own task. (Without the copy, llama.cpp's RAM prompt cache
    (`--cache-ram`) may still find the prefix on this idle engine; with four agents it had
    churned, and such requests prefilled cold: docs/benchmarks.md.)"""
    session = await ServerSession.connect(embedded_engine.base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    llm = Endpoint.from_session(session, emulate_tool_calls=False).chat_client()
    copies = recorded_slot_copies(warmer)
    warmer.attach("lead")
    role = "You are a sub-agent that reviews one module, unwarmed."
    first_task = handover("find the risky parts", role)
    second_task = handover("count the branches", role)
    slots = session.slots
    assert slots is not None
    try:
        await cached_share_of_warm_up(warmer, "lead", first_task)
        await warmer.hand_over("lead", "lead/sub1", first_task, shape=RequestShape())
        first_slot = slots.pair("lead/sub1").current  # type: ignore[union-attr]
        assert not copies, "the first sub-agent's slot holds its warmed context: no copy"
        with use_tags(RequestTags("lead/sub1")):
            await llm.chat(first_task, max_tokens=4)
        warmer.detach("lead/sub1")  # it ended; its slot still holds its context
        unrelated = [{"role": "user", "content": "Summarize the weather. " * 40}]
        await cached_share_of_warm_up(warmer, "lead", unrelated)  # other work in the branch
        await warmer.hand_over("lead", "lead/sub2", second_task, shape=RequestShape())
        handed = slots.pair("lead/sub2")
        assert handed is not None and handed.current != first_slot
        assert copies == [(first_slot, handed.current)]
        with use_tags(RequestTags("lead/sub2")):
            result = await llm.chat(second_task, max_tokens=4)
    finally:
        for program_id in ("lead", "lead/sub2"):
            warmer.detach(program_id)
        await llm.aclose()
        await warmer.aclose()
    share = result.cached_tokens / result.prompt_tokens
    assert share >= 0.9, f"the sub-agent's first request prefilled {1 - share:.0%} of it"


async def warm_after_its_prefix_left_the_slots(base_url: str, *, recall: bool) -> float:
    """A sub-agent context is warmed, then other work replaces it in the branch slot
    (llama-server moves it to its RAM prompt cache); a second context sharing its role prompt
    and module is warmed there. Returns that warm-up's cached share."""
    session = await ServerSession.connect(base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    warmer.attach("lead")
    assert session.slots is not None
    if not recall:
        session.slots.recalled_prefix = lambda ids: 0  # type: ignore[method-assign]
    role = f"You are a sub-agent that reviews one module (recalled: {recall})."
    try:
        await cached_share_of_warm_up(warmer, "lead", handover("find the risky parts", role))
        unrelated = [{"role": "user", "content": "Summarize the weather. " * 40}]
        await cached_share_of_warm_up(warmer, "lead", unrelated)
        assert not [
            cached for cached in session.slots.cached_prefixes() if len(cached.ids) > 1000
        ], "no slot should be known to hold the first context any more"
        return await cached_share_of_warm_up(warmer, "lead", handover("count the branches", role))
    finally:
        warmer.detach("lead")
        await warmer.aclose()


async def test_a_warm_up_whose_prefix_left_the_slots_finds_it_in_the_servers_ram_cache(
    embedded_engine,
) -> None:
    """The warm-up's first chunk ends where the remembered context and its prompt part, so
    llama-server loads that prefix from its RAM prompt cache; first chunks of the usual size
    cover too little of the cached prompt for the server to match it, and prefill it all."""
    recalled = await warm_after_its_prefix_left_the_slots(embedded_engine.base_url, recall=True)
    chunked = await warm_after_its_prefix_left_the_slots(embedded_engine.base_url, recall=False)
    assert recalled >= 0.9, f"the warm-up prefilled {1 - recalled:.0%} of its prompt"
    assert chunked < 0.5, "with usual first chunks the engine should have prefilled it"


async def test_a_committed_context_moved_to_the_branch_is_copied_back_to_its_home_slot(
    embedded_engine,
) -> None:
    """A commit whose warm-up ran in the branch slot leaves the live context there; while the
    model's tools run, the warmer copies it back to the program's home slot (so live contexts
    sit in consecutive slots), and the next turn runs there with its context cached."""
    session = await ServerSession.connect(embedded_engine.base_url)
    warmer = LlamaCppWarmer(session, gate=session.gate())
    llm = Endpoint.from_session(session, emulate_tool_calls=False).chat_client()
    copies = recorded_slot_copies(warmer)
    program_id = "home-return"
    warmer.attach(program_id)
    slots = session.slots
    assert slots is not None
    live, _ = live_and_rewritten(program_id)
    # A keep-recent-like rewrite: the system prompt and the newest message only.
    committed = [live[0], {"role": "user", "content": "Keep going. " + source_excerpt()[:3000]}]
    try:
        pair = slots.pair(program_id)
        assert pair is not None
        home, branch = pair.current, pair.branch
        with use_tags(RequestTags(program_id)):
            await llm.chat(live, max_tokens=1)  # the live context, in the home slot
        await cached_share_of_warm_up(warmer, program_id, committed)  # warmed in the branch
        warmer.committed(program_id, replaced=True, live_prefix_share=0.1)
        assert slots.pair(program_id).current == branch  # type: ignore[union-attr]
        with use_tags(RequestTags(program_id)):
            reply = await llm.chat(committed, max_tokens=4)  # the commit, served in the branch
        assert not copies and warmer.wants_live_copy(program_id)
        history = [*committed, {"role": "assistant", "content": reply.message["content"] or ""}]
        assert await warmer.fork_live(program_id, history, shape=RequestShape())
        assert copies == [(branch, home)]
        after = slots.pair(program_id)
        assert after is not None and (after.current, after.branch) == (home, branch)
        assert not warmer.wants_live_copy(program_id)
        next_turn = [*history, {"role": "user", "content": "And then?"}]
        with use_tags(RequestTags(program_id)):
            result = await llm.chat(next_turn, max_tokens=1)  # in the home slot again
    finally:
        warmer.detach(program_id)
        await llm.aclose()
        await warmer.aclose()
    share = result.cached_tokens / result.prompt_tokens
    assert share >= 0.9, f"the turn after the copy back prefilled {1 - share:.0%} of it"
