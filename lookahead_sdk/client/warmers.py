"""KV pre-materialization: prefill a transformed prefix on the server before the commit needs it.

A warm-up only helps if the server caches exactly the tokens the commit request will produce, so
each warmer renders messages the way that server's chat endpoint does:
- `OpenAIWarmer`: any OpenAI-compatible server; the real chat request with max_tokens=1.
- `LlamaCppWarmer`: llama.cpp `llama-server`; `/apply-template` renders with the server's own
  template, `/completion` with n_predict=0 and cache_prompt=true prefills without generating.
- `SGLangWarmer`: SGLang native `/generate` with max_new_tokens=0 on the exact token ids (chat
  `max_tokens=0` means unbounded there, so it is never used).
Warm-ups go out with the caller's contextvar tags (best-effort lookahead tags inside the runtime).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import httpx

from lookahead_sdk.base.messages import Message, calls_tools
from lookahead_sdk.base.protocol import BEST_EFFORT_BATCH_FIELD, WireFormat
from lookahead_sdk.base.tags import current_tags, current_work
from lookahead_sdk.base.tokens import common_prefix_length
from lookahead_sdk.client.llamacpp_slots import SlotPair, SlotPairs
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.slack import BatchSizer, ChunkSizer, SlackGate
from lookahead_sdk.client.transport import tagged_async_http_client
from lookahead_sdk.core.warmer import RequestShape, Warmer, WarmupResult, WarmupSpend

# Marks the end of an open (still being written) last message, to cut the rendering right there.
OPEN_MESSAGE_SENTINEL = "\u2063LOOKAHEAD-OPEN\u2063"


class _HttpWarmer(Warmer):
    """A warmer talking to one server over HTTP. `server` is its `ServerSession` (shared with
    the transports and gate of that server), or a URL for a session of its own."""

    wire: ClassVar[WireFormat] = "openai"
    # Its requests are the server's own chat requests: tags go in the session's wire (vLLM's
    # `priority`, SGLang's `custom_params`, only the header for a hosted API), not in `wire`,
    # which then applies only to a session made here from a URL.
    follows_session_wire: ClassVar[bool] = False

    def __init__(
        self,
        server: ServerSession | str,
        *,
        timeout_s: float = 300.0,
        api_key: str | None = None,
    ) -> None:
        self.session = (
            server if isinstance(server, ServerSession) else ServerSession(server, wire=self.wire)
        )
        self.server_url = self.session.base_url
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        wire = self.session.wire if self.follows_session_wire else self.wire
        self._client = tagged_async_http_client(
            wire=wire, session=self.session, timeout=timeout_s, headers=headers
        )

    @classmethod
    async def connect(cls, base_url: str, **kwargs: Any) -> Self:
        """A warmer with a session that knows what the server reports (its slots, on llama.cpp;
        the wire its tags travel in, for `OpenAIWarmer`)."""
        wire = None if cls.follows_session_wire else cls.wire
        return cls(await ServerSession.connect(base_url, wire=wire), **kwargs)

    async def aclose(self) -> None:
        await self._client.aclose()

    def model_call_next(self, program_id: str) -> None:
        """Announce it to the session: this program's best-effort requests go out after it (the
        tagging transport), and a gate holds back best-effort work until it is sent."""
        self.session.foreground.expect(program_id)

    def detach(self, program_id: str) -> None:
        """It ended: the session stops forecasting its next request."""
        self.session.foreground.forget(program_id)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._client.post(f"{self.server_url}{path}", json=body)
        response.raise_for_status()
        return response.json()


class OpenAIWarmer(_HttpWarmer):
    """Any OpenAI-compatible server: the real chat request with max_tokens=1, its tags in the
    session's wire like the agent's own requests."""

    follows_session_wire = True

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        started = time.perf_counter()
        body = {
            **shape.chat_fields(),
            "messages": list(messages),
            "max_tokens": 1,
            "temperature": 0,
        }
        usage = (await self._post("/v1/chat/completions", body)).get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        result = WarmupResult(
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            cached_tokens=int(details.get("cached_tokens") or 0),
            seconds=time.perf_counter() - started,
        )
        if spend is not None:
            spend.prefilled_tokens += result.prefilled_tokens
        return result


log = logging.getLogger(__name__)
SEEDED_PREFIX_TRUST = 0.9
# With `warm_up_batch_tokens` set, a warm-up chunk extending at least this many cached tokens
# goes in those batches: below it, the engine's larger batches prefill faster.
LONG_CONTEXT_TOKENS = 1024


@dataclass
class BranchSlot:
    """What a `LlamaCppWarmer` knows of one program's branch slot, beside what the slot holds
    (`LlamaCppWarmer._branch_holds`)."""

    # The token ids of the last warm-up since the last commit (the share of them the branch
    # holds decides where the commit goes).
    prompt_ids: list[int] = field(default_factory=list)
    # What its chunks left there, for a program without a slot pair only: with one, the
    # session's slot record (`SlotPairs.note_cached`) says it, for every warmer of the server.
    unpaired_ids: list[int] = field(default_factory=list)
    live_prefix_share: float = 0.0  # the share of the next warm-up the live context holds
    live_prefix_messages: int = 0  # and how many of its leading messages that is
    # A commit is waiting for the lookahead group of its latest warm-up (`group_id`): no
    # further chunk for that group, including from a warm-up of it that starts only now.
    finishing: bool = False
    group_id: str | None = None


class LlamaCppWarmer(_HttpWarmer):
    """llama.cpp has no request priorities, so with a `SlackGate` the warm-up goes out in chunks,
    each only when the gate finds slack (slack admission done on the client, see `slack`); each
    chunk extends the cached prefix of the previous one in the same slot. Chunks are sized to
    take about `chunk_target_s` at the engine's measured prefill rate (`ChunkSizer`), less when
    the session forecasts a foreground request sooner (from its programs' recent gaps between
    requests, so a chunk sent late in a tool call ends before the call can return): a chunk in
    flight when a foreground request arrives delays it by up to one of the engine's batches
    (the embedded engine stops a best-effort prompt after its running batch): a chunk sent in
    idle time that would still run when the next request is forecast asks for small batches
    (`yield_batches`, toward 50 ms each; stock llama.cpp ignores it), if in them it ends
    before the request forecast after that one. Opt-in, `warm_up_batch_tokens=N`: any other
    chunk extending `LONG_CONTEXT_TOKENS` or more cached tokens asks for N-token batches. On
    the embedded engine's CPU backend a batch's attention scratch grows with batch x context:
    alone, past ~2K cached tokens, 32-token batches prefilled 19-30% faster than 128-token ones,
    and a warm-up beside three decoding replies ended ~9% sooner than the same work serially.
    With four agents it lost: best-effort work gets only the batches the decoding replies
    leave, 32 tokens a step fell behind the commits (docs/benchmarks.md, "Warm-up batches").
    Programs attached to
    it get a slot pair (see `llamacpp_slots`): the warm-up is built in the program's branch slot,
    never over its live context. Slot placement needs a session that knows the server's slots
    (`await LlamaCppWarmer.connect(url)`, or `Endpoint.warmer()`); without one the server's own
    slot choice applies."""

    wire = "llamacpp"
    copies_live_context = True

    def __init__(
        self,
        server: ServerSession | str,
        *,
        gate: SlackGate | None = None,
        chunk_target_s: float = 0.4,
        max_chunk_tokens: int = 2048,
        yield_batches: bool = True,
        warm_up_batch_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        if warm_up_batch_tokens is not None and (
            isinstance(warm_up_batch_tokens, bool)
            or not isinstance(warm_up_batch_tokens, int)
            or warm_up_batch_tokens < 1
        ):
            raise ValueError(
                f"warm_up_batch_tokens must be a positive number of tokens or None (the "
                f"engine's batches), got {warm_up_batch_tokens!r}"
            )
        super().__init__(server, **kwargs)
        if gate is not None and gate.foreground is not self.session.foreground:
            raise ValueError(
                "gate watches another server session than this warmer's: build both from one "
                "ServerSession (session.gate(), LlamaCppWarmer(session, gate=...)) or an Endpoint"
            )
        self.gate = gate
        self.chunks = ChunkSizer(target_s=chunk_target_s, max_tokens=max_chunk_tokens)
        # Sizes the batches of chunks that may meet the next foreground request; None: off.
        self.yield_batches = BatchSizer() if yield_batches else None
        self.warm_up_batch_tokens = warm_up_batch_tokens
        self._branches: dict[str, BranchSlot] = {}  # per program
        self.slot_copies = True  # off after the server refuses one (no --slot-save-path)

    def attach(self, program_id: str) -> None:
        """The program's slot pair; a program that comes back (the next run of a framework
        agent that loaded the last run's state) gets its old pair and branch record while no
        other program used them (`SlotPairs.resume`), so its ready lookahead commits where it
        was warmed."""
        if self.session.slots is not None:
            kept = self.session.slots.resume(program_id)
            if isinstance(kept, BranchSlot):
                kept.finishing = False
                self._branches[program_id] = kept

    def committed(
        self, program_id: str, *, replaced: bool, live_prefix_share: float | None = None
    ) -> None:
        """The committed context goes to whichever slot holds more of it: the branch (the
        warm-up) or the live slot (a commit rewriting only recent messages, or a warm-up that
        did not get far, leaves most of it there). Shares, not token counts: the runtime counts
        with its own tokenizer, this warmer in the server's token ids."""
        branch = self._branch(program_id)
        branch.finishing = False
        prompt_ids, branch.prompt_ids = branch.prompt_ids, []
        warmed_share = (
            common_prefix_length(prompt_ids, self._branch_holds(program_id)) / len(prompt_ids)
            if prompt_ids
            else 0.0
        )
        # Unpaired, the server placed the commit where it chose: what the next warm-up finds
        # there is unknown.
        branch.unpaired_ids = []
        slots = self.session.slots
        if not replaced or slots is None:
            return
        if live_prefix_share is None or warmed_share > live_prefix_share:
            slots.swap(program_id)
        # The branch now holds the replaced context (swapped), or a copy of the committed one
        # that the live slot holds too.
        slots.retire(program_id, branch=True)

    def committed_synchronously(self, program_id: str, *, replaced: bool) -> None:
        """The live slot holds the context the transform replaced, the branch a warm-up that
        will not be committed: both dead."""
        if replaced and self.session.slots is not None:
            self.session.slots.retire(program_id, current=True, branch=True)

    def finish_warm_up(self, program_id: str) -> bool:
        """A commit of `program_id` is waiting: its warm-up in flight sends no further chunk and
        returns once the chunk the engine is computing is done (the engine computes it either
        way, and `committed` then knows the branch holds it). The commit request prefills the
        rest in one go. It holds until the commit (`committed`) or a warm-up for another
        lookahead: a warm-up of the same lookahead whose task starts only after this call (the
        suffix a boundary just before the commit appended) must not send chunks either, or the
        commit waits for them until `warmup_wait_timeout_s` (traced: 2 s on a KeepRecent commit,
        behind a chunk that itself waited 1 s for the commit's own announced request).

        The chunk in flight is waited for only while no other program's latency-critical
        prompt waits for its first token. While one does, the embedded engine gives best-effort
        prompt tokens no batch (priority-aware batching), so the chunk ends only after those
        prompts, and the commit's request, pinned to the same slot, waits for it: False, and
        the runtime cancels it at once (what it computed stays cached; llama-server frees the
        slot once it sees the request gone, within its 1 s connection poll). Traced with four
        agents, a sub-agent's first request waited the whole 2 s for a chunk sent 3.6 s before
        the delegation ended, then 3.3 s more for a copy into that slot."""
        self._branch(program_id).finishing = True
        return self.session.foreground.prefilling_except(program_id) == 0

    def live_prefix(self, program_id: str, share: float, shared_messages: int = 0) -> None:
        """The program's next warm-up starts with `share` (in tokens; its first `shared_messages`
        messages) of its live context (e.g. an Offload lookahead rewriting only recent outputs):
        the branch slot can start as a copy of the live slot instead of prefilling that part."""
        branch = self._branch(program_id)
        branch.live_prefix_share, branch.live_prefix_messages = share, shared_messages

    def _branch_holds(self, program_id: str) -> Sequence[int]:
        """The token ids the program's branch slot is known to start with: a warm-up extending
        them starts where they end, not with chunks over a prefix the slot already holds. For a
        program with a slot pair, the session's record of the slot (what this or another
        program's warm-up or copy left there, while valid); else what this warmer's chunks
        left (the server places them itself, mostly in the slot holding the most of them)."""
        paired = self._paired(program_id)
        if paired is None:
            return self._branch(program_id).unpaired_ids
        slots, pair = paired
        return slots.holds(pair.branch)

    def _branch_now_holds(self, program_id: str, ids: list[int]) -> None:
        """The program's branch slot now holds `ids` (for its and other warm-ups to start
        from)."""
        paired = self._paired(program_id)
        if paired is None:
            self._branch(program_id).unpaired_ids = ids
        else:
            slots, pair = paired
            slots.note_cached(program_id, pair.branch, ids)

    def _recalled_prefix(self, ids: Sequence[int]) -> int:
        """Tokens of `ids` a context noted recently on this server starts with (0 without
        slot knowledge)."""
        return 0 if self.session.slots is None else self.session.slots.recalled_prefix(ids)

    def _paired(self, program_id: str) -> tuple[SlotPairs, SlotPair] | None:
        """The session's slot pairs and the program's pair, when it has one."""
        slots = self.session.slots
        pair = slots.pair(program_id) if slots is not None else None
        return None if slots is None or pair is None else (slots, pair)

    @property
    def waits_for_slack(self) -> bool:
        return self.gate is not None

    async def _wait_for_slack(self, until: Callable[[], bool] | None = None) -> None:
        if self.gate is not None:
            await self.gate.wait(until=until)

    def _branch(self, program_id: str) -> BranchSlot:
        return self._branches.setdefault(program_id, BranchSlot())

    async def _seed_branch(self, program_id: str) -> bool:
        """Copy the live slot's KV into the branch slot (llama.cpp slot save + restore): a
        fraction of a second where prefilling the same prefix takes seconds on a CPU."""
        paired = self._paired(program_id)
        if paired is None:
            return False
        _, pair = paired
        return await self._copy_slot(pair.current, pair.branch) is not None

    async def _copy_slot(self, source: int, target: int) -> int | None:
        """Copy slot `source`'s KV into slot `target`; the tokens restored, or None when the
        server has no slot copies."""
        if not self.slot_copies:
            return None
        filename = {"filename": f"branch-{target}.bin"}
        try:
            await self._post(f"/slots/{source}?action=save", filename)
            restored = await self._post(f"/slots/{target}?action=restore", filename)
        except httpx.HTTPStatusError as error:
            self.slot_copies = False
            log.warning(
                "llama.cpp slot copies unavailable (start it with --slot-save-path): %r", error
            )
            return None
        return int(restored.get("n_restored", 0))

    async def _seed_from_cached_slot(
        self,
        program_id: str,
        ids: list[int],
        end: int,
        finishing: Callable[[], bool] = lambda: False,
        *,
        gated: bool = True,
    ) -> int:
        """Where a warm-up that would start at `end` (past what its branch slot holds) starts
        instead: from a copy of the slot holding the longest prefix of `ids`
        (`SlotPairs.cached_prefixes`: another sub-agent's context with the same role prompt,
        say), when that saves at least a chunk's prefill. A busy slot is passed over: llama.cpp
        saves it only once its request ends. `gated`: the copy waits for slack (best-effort
        work) and is dropped once `finishing`."""
        paired = self._paired(program_id)
        if paired is None:
            return end
        slots, pair = paired
        shared = {
            cached.slot: common_prefix_length(ids, cached.ids)
            for cached in slots.cached_prefixes(exclude=pair.branch)
        }
        log.debug("%s known slots: %s (branch %d)", program_id, shared, pair.branch)
        worth = end + self.chunks.min_tokens
        shared = {slot: length for slot, length in shared.items() if length > worth}
        if not shared or not self.slot_copies:
            return end
        idle = await self._idle_slots()
        candidates = [slot for slot in shared if slot in idle]
        log.debug("%s slots holding more: %s, idle: %s", program_id, shared, sorted(idle))
        if not candidates:
            return end
        source = max(candidates, key=shared.__getitem__)
        if gated:
            await self._wait_for_slack(finishing)
            if finishing():
                return end
        started = time.perf_counter()
        restored = await self._copy_slot(source, pair.branch)
        if restored is None:
            return end
        slots.mirror_live(program_id, False)
        seeded = min(shared[source], restored, len(ids) - 1)
        slots.note_cached(program_id, pair.branch, ids[:seeded])
        log.debug(
            "%s branch seeded from slot %d up to %d of %d in %.2f s",
            program_id,
            source,
            seeded,
            len(ids),
            time.perf_counter() - started,
        )
        return max(end, seeded)

    async def _idle_slots(self) -> set[int]:
        try:
            response = await self._client.get(f"{self.server_url}/slots")
            response.raise_for_status()
            return {slot["id"] for slot in response.json() if not slot.get("is_processing")}
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            log.warning("could not read the server's slots: %r", error)
            return set()

    async def fork_live(
        self, program_id: str, messages: Sequence[Message], *, shape: RequestShape
    ) -> bool:
        """The program's live slot holds `messages` now (its model turn just ended; its tools
        run): copy it into the branch slot, so that a lookahead keeping this prefix prefills
        only its rewrite (`ContextPolicy.keeps_live_prefix`). Done at the warm-up instead, the
        copy would wait for the live slot's next request to end (llama.cpp defers a save of a
        busy slot): seconds with several agents. Gated like a chunk: a copy occupies the engine
        about 0.1 s (save 0.14-0.19 s and restore 0.04 s for 7.9K tokens, measured), which a
        foreground prompt arriving first would wait for. (A copy for a summary starts when its
        lookahead does, often as the model's next request goes out.) False when nothing was
        copied (the branch already holds all but a chunk of it, or the server has no slot
        copies)."""
        ids = await self._tokenize(await self.render(messages, shape))
        if len(ids) - common_prefix_length(ids, self._branch_holds(program_id)) < (
            self.chunks.min_tokens
        ):
            return False
        # A save waiting for the live slot's request does not hold the engine; sending it while
        # a foreground prompt is prefilled could (it may be served first).
        await self._wait_for_slack()
        started = time.perf_counter()
        paired = self._paired(program_id)
        if paired is None:
            return False
        slots, pair = paired
        live_placements = slots.placements(pair.current)
        if await self._copy_slot(pair.current, pair.branch) is None:
            return False
        self._branch(program_id).prompt_ids = []
        self._branch_now_holds(program_id, ids)
        slots.mirror_live(program_id, True)  # a summary of the live context may now run there
        settled = slots.settle_home(program_id, live_placements=live_placements)
        log.debug(
            "%s live context (%d tokens) copied to the branch in %.2f s%s",
            program_id,
            len(ids),
            time.perf_counter() - started,
            ", back in its home slot" if settled else "",
        )
        return True

    def wants_live_copy(self, program_id: str) -> bool:
        """A commit left the program's live context in its pair's other slot and the home slot
        holds the replaced context: a copy back (`fork_live`, gated like a warm-up chunk, about
        0.05 s of engine time for 2.5K tokens) puts the live contexts of all programs in
        consecutive slots again, which the engine decodes in one micro-batch
        (`SlotPairs.settle_home`)."""
        slots = self.session.slots
        return self.slot_copies and slots is not None and slots.away_from_home(program_id)

    async def hand_over(
        self,
        program_id: str,
        child_id: str,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
    ) -> None:
        """A sub-agent spawned from this program's lookahead runs in the slot it was warmed in
        (until `detach(child_id)`). A delegation whose tool call reaches the client in one piece
        leaves its warm-up no time to run, and that slot holds other work: then the slot starts
        as a copy of the idle slot holding the longest prefix of the sub-agent's context
        (another sub-agent's, with the same role prompt), when that saves at least a chunk's
        prefill. Not gated: the sub-agent's first request, foreground work, waits for it."""
        slots = self.session.slots
        if slots is None or not slots.hand_over(program_id, child_id):
            return
        pair = slots.pair(child_id)
        assert pair is not None  # just handed over
        ids = await self._tokenize(await self.render(messages, shape))
        held = common_prefix_length(ids, slots.holds(pair.current))
        await self._seed_from_cached_slot(child_id, ids, held, gated=False)
        # Its first request leaves its context there: the next sub-agent may start from it.
        slots.note_cached(child_id, pair.current, ids)

    def detach(self, program_id: str) -> None:
        super().detach(program_id)
        branch = self._branches.pop(program_id, None)
        if self.session.slots is not None:
            self.session.slots.release(program_id, keep=branch)

    async def render(
        self, messages: Sequence[Message], shape: RequestShape, *, open_last: bool = False
    ) -> str:
        """The prompt text of `messages` as the chat endpoint renders them. With open_last, up to
        the end of the last message's content so far. A last assistant message with tool calls
        (its tools are running) is rendered closed, up to where its first tool result's content
        will start: the next request continues exactly there."""
        if not messages:
            return await self._apply_template(messages, shape)
        *head, last = messages
        if open_last:
            marked = {**last, "content": f"{last.get('content') or ''}{OPEN_MESSAGE_SENTINEL}"}
            rendered = await self._apply_template([*head, marked], shape)
        elif calls_tools(last):
            call_id = last["tool_calls"][0].get("id", "")
            result = {"role": "tool", "tool_call_id": call_id, "content": OPEN_MESSAGE_SENTINEL}
            rendered = await self._apply_template([*messages, result], shape)
        else:
            return await self._apply_template(messages, shape)
        cut = rendered.rfind(OPEN_MESSAGE_SENTINEL)
        if cut < 0:
            raise ValueError(
                "the chat template dropped the open message's content; cannot render it open"
            )
        return rendered[:cut]

    async def _seeded_length(
        self, ids: list[int], shared: Sequence[Message], shape: RequestShape
    ) -> int | None:
        """Tokens of `ids` a copy of the live slot holds: the common prefix with the server's
        rendering of the messages the two share (None when that is not known)."""
        if not shared:
            return None
        try:
            live_ids = await self._tokenize(await self.render(shared, shape))
        except httpx.HTTPError as error:
            log.warning("could not measure the copied live prefix: %r", error)
            return None
        return common_prefix_length(ids, live_ids)

    async def _tokenize(self, prompt: str) -> list[int]:
        return (await self._post("/tokenize", {"content": prompt, "parse_special": True}))["tokens"]

    async def _apply_template(self, messages: Sequence[Message], shape: RequestShape) -> str:
        body = {**shape.chat_fields(), "messages": list(messages)}
        return (await self._post("/apply-template", body))["prompt"]

    async def _prefill(
        self, prompt: str | list[int], *, yielding: bool = False, cached_tokens: int = 0
    ) -> tuple[int, int]:
        """Prefill `prompt` (n_predict=0); the tokens computed and found cached. A best-effort
        prompt goes in the batches `session.best_effort_batch` sizes (all best-effort work, when
        set), else, `yielding`, in those `yield_batches` sizes, else, extending `cached_tokens`
        of at least `LONG_CONTEXT_TOKENS`, in `warm_up_batch_tokens` batches."""
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": 0,
            "cache_prompt": True,
            "temperature": 0,
        }
        tags = current_tags()
        best_effort = tags is not None and tags.priority_class == "be"
        sizer = self.session.best_effort_batch if best_effort else None
        near_request = sizer is None and best_effort and yielding and self.yield_batches is not None
        if near_request:
            sizer = self.yield_batches
        if sizer is not None:  # sent here so that the size observed is the size asked for
            batch = body[BEST_EFFORT_BATCH_FIELD] = sizer.tokens
        elif (
            best_effort
            and self.warm_up_batch_tokens is not None
            and cached_tokens >= LONG_CONTEXT_TOKENS
        ):
            body[BEST_EFFORT_BATCH_FIELD] = self.warm_up_batch_tokens
        timings = (await self._post("/completion", body)).get("timings") or {}
        prefilled = int(timings.get("prompt_n", 0))
        seconds = float(timings.get("prompt_ms", 0.0)) / 1000
        if not near_request:  # small batches prefill slower: learn the usual batches' rate
            self.chunks.observe(prefilled, seconds)
        if sizer is not None:
            sizer.observe(prefilled, seconds, batch)
        return prefilled, int(timings.get("cache_n", 0))

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        started = time.perf_counter()
        spend = spend if spend is not None else WarmupSpend()
        messages = list(messages)
        # llama-server renders a trailing assistant message as one to continue; the next request
        # closes it, so only the prefix before it is shared (`render` closes one with tool calls).
        while (
            messages
            and messages[-1].get("role") == "assistant"
            and not calls_tools(messages[-1])
            and not open_last
        ):
            messages.pop()
        prompt = await self.render(messages, shape, open_last=open_last)
        # Token ids even without a gate: the branch must know what it holds, or `committed`
        # could not tell that the commit belongs in the branch slot.
        ids = await self._tokenize(prompt)
        if not ids:
            return WarmupResult(0, 0, time.perf_counter() - started)
        tags = current_tags()
        program_id = tags.program_id if tags is not None else ""
        group_id = tags.lookahead_group_id if tags is not None else None
        branch = self._branch(program_id)
        # Another lookahead's warm-up: a commit's wait for the last one is over.
        if group_id != branch.group_id:
            branch.group_id, branch.finishing = group_id, False
        end = common_prefix_length(ids, self._branch_holds(program_id))
        branch.prompt_ids = ids
        live_prefix = int(branch.live_prefix_share * len(ids))
        live_messages = min(branch.live_prefix_messages, len(messages))
        branch.live_prefix_share, branch.live_prefix_messages = 0.0, 0

        def finishing() -> bool:
            return branch.finishing

        log.debug(
            "%s warm-up of %d tokens: branch holds %d, live context %d",
            program_id,
            len(ids),
            end,
            live_prefix,
        )
        if live_prefix > end + self.chunks.min_tokens:
            await self._wait_for_slack(finishing)
            seed_started = time.perf_counter()
            if not branch.finishing and await self._seed_branch(program_id):
                # Resume exactly where the copy ends: a chunk ending short of it would drop the
                # rest (a slot keeps only its last prompt), one starting past it would leave a gap.
                seeded = await self._seeded_length(ids, messages[:live_messages], shape)
                if seeded is None:  # client-side counts approximate the server's tokens
                    seeded = int(live_prefix * SEEDED_PREFIX_TRUST)
                end = min(max(end, seeded), len(ids) - 1)
                log.debug(
                    "%s branch seeded from the live slot up to %d in %.2f s",
                    program_id,
                    end,
                    time.perf_counter() - seed_started,
                )
        if not branch.finishing:
            end = await self._seed_from_cached_slot(program_id, ids, end, finishing)
        # The server most likely still holds a prefix a recent context shared (a slot, or its
        # RAM prompt cache): a first chunk ending there finds it cached, one of the usual size
        # too short for llama-server to match it. (If it is gone, that chunk is longer.)
        recalled = self._recalled_prefix(ids)
        first_chunk_end = recalled if recalled > end + self.chunks.min_tokens else None
        prefilled_total = 0
        work = current_work()
        while end < len(ids):
            if work is not None:  # the gate weighs it against the idle time before the commit
                work.remaining_s = (len(ids) - end) / self.chunks.tokens_per_s
            waited_from = time.perf_counter()
            await self._wait_for_slack(finishing)
            if branch.finishing:
                break
            sent_at = time.perf_counter()
            if self.session.slots is not None:
                self.session.slots.mirror_live(program_id, False)
            forecasts = self.session.foreground.forecast_requests()
            next_request_s = forecasts[0] if forecasts else None
            # Without a gate nothing makes room for foreground work: one request does it all.
            chunk = self.chunks.next_tokens(next_request_s) if self.gate is not None else len(ids)
            start, end = end, min(len(ids), max(end + chunk, first_chunk_end or 0))
            first_chunk_end = None
            yielding = self._may_meet_next_request(end - start, forecasts)
            spend.prefilled_tokens += end - start  # computed even if this request is cancelled
            self._branch_now_holds(program_id, ids[:start])  # until the chunk is in
            prefilled, _ = await self._prefill(ids[:end], yielding=yielding, cached_tokens=start)
            log.debug(
                "%s chunk %d-%d%s: gate %.2f s, engine %.2f s, computed %d",
                program_id,
                start,
                end,
                " in small batches" if yielding else "",
                sent_at - waited_from,
                time.perf_counter() - sent_at,
                prefilled,
            )
            spend.prefilled_tokens += prefilled - (end - start)
            prefilled_total += prefilled
            self._branch_now_holds(program_id, ids[:end])
        # Stopped early by a commit: the prompt so far is what the branch holds.
        return WarmupResult(
            end, end - prefilled_total, time.perf_counter() - started, complete=end >= len(ids)
        )

    def _may_meet_next_request(self, tokens: int, forecasts: Sequence[float]) -> bool:
        """Whether a chunk of `tokens` sent now, in idle time, should go in small batches: it
        would still run when the next foreground request is forecast
        (`ForegroundRegistry.forecast_requests`), which would wait for the engine's batch
        running then, and in small batches it ends before the request forecast after that one.
        Small batches prefill slower, and the rest of the chunk runs beside the requests that
        arrive meanwhile: it pays for one of them, not for several (four agents lost 5-11% of
        their run to it, docs/benchmarks.md "Small batches near the next request"). Only in
        idle time: while other requests keep the engine busy, best-effort work gets only the
        batches they leave, and in small batches it fell behind its commits (four agents,
        "Best-effort batch cap")."""
        if self.gate is None or self.yield_batches is None or not forecasts:
            return False
        if self.session.foreground.inflight > 0:
            return False
        if tokens / self.chunks.tokens_per_s <= forecasts[0]:
            return False
        if len(forecasts) < 2:
            return True
        small_rate = self.yield_batches.tokens_per_s or self.chunks.tokens_per_s
        return tokens / small_rate <= forecasts[1]


class SGLangWarmer(_HttpWarmer):
    """SGLang: `/v1/tokenize` renders messages through the same path as the chat endpoint; the
    ids are prefilled by native `/generate` with max_new_tokens=0. Tags travel in
    `sampling_params.custom_params`, which stock SGLang carries to the scheduler."""

    wire = "sglang"

    async def token_ids(
        self, messages: Sequence[Message], shape: RequestShape, *, open_last: bool = False
    ) -> list[int]:
        ids = await self._tokenize(messages, shape)
        if not (open_last and messages):
            return ids
        # The open message ends where renderings with and without a sentinel appended diverge.
        *head, last = messages
        marked = {**last, "content": f"{last.get('content') or ''}{OPEN_MESSAGE_SENTINEL}"}
        return ids[: common_prefix_length(ids, await self._tokenize([*head, marked], shape))]

    async def _tokenize(self, messages: Sequence[Message], shape: RequestShape) -> list[int]:
        body = {**shape.chat_fields(), "messages": list(messages), "add_generation_prompt": False}
        reply = await self._post("/v1/tokenize", body)
        ids = reply.get("tokens")
        if not isinstance(ids, list):
            raise ValueError(f"{self.server_url}/v1/tokenize answered without token ids: {reply!r}")
        return ids

    def _sampling(self, **fields: Any) -> dict[str, Any]:
        tags = current_tags()
        custom = tags.to_custom_params() if tags is not None else {}
        return {"max_new_tokens": 0, "temperature": 0, "custom_params": {**custom, **fields}}

    async def warm(
        self,
        messages: Sequence[Message],
        *,
        shape: RequestShape,
        open_last: bool = False,
        spend: WarmupSpend | None = None,
    ) -> WarmupResult:
        started = time.perf_counter()
        input_ids = await self.token_ids(messages, shape, open_last=open_last)
        meta = (
            await self._post(
                "/generate", {"input_ids": input_ids, "sampling_params": self._sampling()}
            )
        ).get("meta_info") or {}
        result = WarmupResult(
            prompt_tokens=int(meta.get("prompt_tokens", len(input_ids))),
            cached_tokens=int(meta.get("cached_tokens", 0)),
            seconds=time.perf_counter() - started,
        )
        if spend is not None:
            spend.prefilled_tokens += result.prefilled_tokens
        return result

    async def promote(self, group_id: str) -> None:
        """A one-token prefill carrying `promote_group_id` raises the whole group to LC."""
        await self._post(
            "/generate",
            {"input_ids": [0], "sampling_params": self._sampling(promote_group_id=group_id)},
        )


WARMERS: dict[str, type[_HttpWarmer]] = {
    "openai": OpenAIWarmer,
    "llamacpp": LlamaCppWarmer,
    "sglang": SGLangWarmer,
}


def make_warmer(kind: str, server: ServerSession | str, **kwargs: Any) -> Warmer:
    try:
        warmer_class = WARMERS[kind]
    except KeyError:
        raise ValueError(f"warmer must be one of {sorted(WARMERS)}, got {kind!r}") from None
    return warmer_class(server, **kwargs)
