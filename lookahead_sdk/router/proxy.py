"""`RouterProxy`: the program-aware router's request path around the pure policy core.

The core is owned by the event loop: every core call and the execution of the decisions it
returns happen in one synchronous step, with no `await` in between, so events are applied whole
and in order (a pause and an arriving request of the same program can never interleave: the
per-program lock of upstream ThunderAgent, race-free by construction).

A request: identity from `base.protocol` (body, `custom_params`, `X-Program-Id`, Dynamo's
session header / trajectory id); untagged requests go untracked to the least-loaded backend.
A tagged one is admitted by the core: forwarded, held (its handler awaits a future that a later
`Restore`, `ForceAdmit` or `Reject` resolves, from any event or the tick loop) or refused. Its
end is always reported to the core (`request_finished`): success, upstream error, client
disconnect, backend death alike, so no program stays "reasoning".

Faults: a failure before the client got a byte is retried once (through the policy), then
answered 502 naming the backends. A connect error or a body cut off marks the backend down (the
core requeues its programs; a background probe brings it back); a 5xx answer does so only when
the backend then fails its health check too, for one request's error is no dead backend and
marking it down would forget every other program's request in flight there. A backend dying
mid-stream ends the client's stream with an SSE error event and is marked down.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import httpx

from lookahead_sdk.base.tokens import auto_token_counter, count_message
from lookahead_sdk.router.capacity import BackendInfo
from lookahead_sdk.router.decisions import (
    Decision,
    ForceAdmit,
    Forward,
    Hold,
    Pause,
    Reject,
    Requeue,
    Restore,
    Teardown,
)
from lookahead_sdk.router.discovery import BackendUnreachable, CapacityUnknown, discover, healthy
from lookahead_sdk.router.exposition import ProxyCounters, render
from lookahead_sdk.router.policies import make_policy
from lookahead_sdk.router.prompt_delta import PromptTracker
from lookahead_sdk.router.proxy_call import (
    HELD_HEADER,
    Call,
    Headers,
    LastBytesHeld,
    Reply,
    reply_error,
)
from lookahead_sdk.router.proxy_config import ProxyConfig
from lookahead_sdk.router.proxy_relay import (
    KEEPALIVE_S,
    Exchange,
    UpstreamFailed,
    exchange,
    upstream_session,
)
from lookahead_sdk.router.slots import SlotTable
from lookahead_sdk.router.table import RouterCore

log = logging.getLogger(__name__)

TASK_PREFIX = "router:"  # every task the proxy starts is named so


@dataclass(slots=True)
class _Backend:
    url: str
    info: BackendInfo | None = None  # None until its capacity is known
    in_flight: int = 0  # requests of ours at the backend, tracked or not
    probing: bool = False
    slots: SlotTable | None = None  # llama.cpp: the router chooses each program's slot


class RouterProxy:
    def __init__(
        self, config: ProxyConfig, *, count_text: Callable[[str], int] | None = None
    ) -> None:
        self.config = config
        self.core: RouterCore = make_policy(
            config.policy, thunder=config.thunder, baseline=config.baseline
        )
        self.counters = ProxyCounters()
        if count_text is None:
            counter = auto_token_counter()
            count_text = counter.count_text
            self.token_counter = counter.name
        else:
            self.token_counter = getattr(count_text, "__qualname__", "custom")
        self._count_text = count_text
        message_counter = _TextCounter(count_text)
        self._tracker = PromptTracker(count_text, lambda m: count_message(message_counter, m))
        self._backends = {url: _Backend(url) for url in config.backends}
        self._waiters: dict[str, asyncio.Future[Forward | Reject]] = {}
        self._terminated: OrderedDict[str, str] = OrderedDict()  # program id -> cause
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._client: httpx.AsyncClient | None = None  # discovery, health, /v1/models
        self._upstream: aiohttp.ClientSession | None = None  # inference calls

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=config.connect_timeout_s,
                read=config.read_timeout_s,
                write=config.connect_timeout_s,
                pool=None,
            ),
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=512, keepalive_expiry=KEEPALIVE_S
            ),
            trust_env=False,
        )
        self._upstream = upstream_session(config.connect_timeout_s, config.read_timeout_s)
        await asyncio.gather(*(self._bring_up(b) for b in self._backends.values()))
        self._spawn(self._tick_loop(), "tick")

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for request_id in list(self._waiters):
            self._resolve(Reject(request_id, "", "no_backend", 503))
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._upstream is not None:
            await self._upstream.close()
            self._upstream = None

    @property
    def client(self) -> httpx.AsyncClient:
        assert self._client is not None, "RouterProxy.start() first"
        return self._client

    def _now(self) -> float:
        return time.monotonic()

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=f"{TASK_PREFIX}{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            try:
                self._apply(self.core.tick(self._now()))
            except Exception:
                log.exception("router tick failed")

    # --- backends ------------------------------------------------------------------------------

    async def _bring_up(self, backend: _Backend) -> None:
        if not await self._try_up(backend):
            self._probe_later(backend)

    async def _try_up(self, backend: _Backend) -> bool:
        url = backend.url
        try:
            if backend.info is None:
                capacity = self.config.capacities.get(url)
                if capacity is not None:
                    if not await healthy(self.client, url):
                        return False
                    info = BackendInfo(url, "configured", capacity)
                else:
                    info = await discover(self.client, url)
                backend.info = info
                if info.slots is not None:
                    backend.slots = SlotTable(info.slots)
                self.core.add_backend(url, info.capacity_tokens, slots=info.slots)
                log.warning("backend %s up: %s, %d KV tokens", url, info.kind, info.capacity_tokens)
                self._apply(self.core.tick(self._now()))  # restore waiting programs onto it
                return True
            if not await healthy(self.client, url):
                return False
        except (BackendUnreachable, CapacityUnknown) as error:
            log.warning("backend %s not usable yet: %s", url, error)
            return False
        log.warning("backend %s is back up", url)
        self._apply(self.core.mark_up(url, self._now()))
        return True

    def _probe_later(self, backend: _Backend) -> None:
        if not backend.probing:
            backend.probing = True
            self._spawn(self._probe(backend), f"probe {backend.url}")

    async def _probe(self, backend: _Backend) -> None:
        delay = self.config.retry_s
        try:
            while True:
                await asyncio.sleep(delay)
                if await self._try_up(backend):
                    return
                delay = min(delay * 2, self.config.retry_max_s)
        finally:
            backend.probing = False

    def _backend_failed(self, url: str, kind: str, detail: str) -> None:
        self.counters.upstream_error(url, kind)
        backend = self._backends[url]
        if backend.info is not None and self.core.is_up(url):
            log.warning("backend %s marked down (%s): %s", url, kind, detail)
            self._apply(self.core.mark_down(url, self._now()))
        self._probe_later(backend)

    async def _upstream_failed(self, failure: UpstreamFailed) -> None:
        if failure.kind == "status" and await healthy(self.client, failure.backend):
            self.counters.upstream_error(failure.backend, failure.kind)
            log.warning(
                "backend %s answered an error, and is healthy: %s", failure.backend, failure
            )
            return
        self._backend_failed(failure.backend, failure.kind, str(failure))

    def _least_loaded(self, exclude: set[str]) -> str | None:
        candidates = [
            b
            for b in self._backends.values()
            if b.info is not None and b.url not in exclude and self.core.is_up(b.url)
        ]
        if not candidates:
            return None
        return min(
            candidates,
            key=lambda b: (
                self.core.accounted_tokens(b.url) / self.core.capacity_tokens(b.url),
                b.in_flight,
                b.url,
            ),
        ).url

    # --- decisions -----------------------------------------------------------------------------

    def _apply(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, Forward | Reject):
                self._resolve(decision)
            elif isinstance(decision, Restore | ForceAdmit):
                for forward in decision.forward:
                    self._resolve(forward)
                if isinstance(decision, Restore) and decision.migrated:
                    self._free_slots(decision.program_id)
            elif isinstance(decision, Pause | Requeue):
                self._free_slots(decision.program_id)
            elif isinstance(decision, Teardown):
                self._free_slots(decision.program_id)
                self._tracker.forget(decision.program_id)
                self._terminated[decision.program_id] = decision.cause
                self._terminated.move_to_end(decision.program_id)
                while len(self._terminated) > self.config.remember_terminated:
                    self._terminated.popitem(last=False)
            # Hold: the handler waits. Pause: KV is left to the engine. Requeue: the lost
            # requests fail at their dead backend by themselves. Ignored: nothing changed.

    def _left_other_backends(self, program_id: str, backend: str) -> None:
        """A program's main request went to `backend`: its main slots elsewhere hold a context
        it left (the baselines route each request afresh; thunder frees them as it migrates)."""
        for url, other in self._backends.items():
            if url != backend and other.slots is not None:
                other.slots.moved_away(program_id)

    def _free_slots(self, program_id: str) -> None:
        for backend in self._backends.values():
            if backend.slots is not None:
                backend.slots.forget(program_id)

    def _resolve(self, decision: Forward | Reject) -> None:
        waiter = self._waiters.pop(decision.request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(decision)

    async def _admitted(self, admission: Forward | Hold | Reject) -> Forward | Reject:
        if not isinstance(admission, Hold):
            return admission
        waiter: asyncio.Future[Forward | Reject] = asyncio.get_running_loop().create_future()
        self._waiters[admission.request_id] = waiter
        try:
            return await waiter
        finally:
            self._waiters.pop(admission.request_id, None)

    def _finish(self, request_id: str, *, ok: bool, total_tokens: int | None = None) -> None:
        self._apply(
            self.core.request_finished(request_id, self._now(), total_tokens=total_tokens, ok=ok)
        )

    # --- requests ------------------------------------------------------------------------------

    async def serve(self, call: Call, reply: Reply) -> None:
        """Answer one inference call; cancelled when its client disconnects."""
        outcome = "error"
        try:
            if call.program_id is None:
                outcome = await self._untracked(call, reply)
            else:
                outcome = await self._tracked(call, call.program_id, reply)
        except asyncio.CancelledError:
            outcome = "disconnected"
            raise
        finally:
            self.counters.request(call.route, outcome)

    async def _tracked(self, call: Call, program_id: str, reply: Reply) -> str:
        held_back = LastBytesHeld(reply)
        outcome = await self._tracked_exchange(call, program_id, held_back)
        await held_back.release()  # the table has recorded how the request ended
        return outcome

    async def _tracked_exchange(self, call: Call, program_id: str, reply: Reply) -> str:
        request_id = f"r{next(self._ids)}"
        lookahead = call.lookahead
        new_tokens = self._tracker.new_tokens(program_id, call.body, remember=lookahead is None)

        def arrive() -> Forward | Hold | Reject:
            return self.core.request_arrived(
                program_id, request_id, new_tokens, self._now(), lookahead=lookahead
            )

        ok, total = False, None
        held_s = 0.0  # waiting at the router for room (a restore)

        async def admitted(admission: Forward | Hold | Reject) -> Forward | Reject:
            nonlocal held_s
            started = self._now()
            decision = await self._admitted(admission)
            held_s += self._now() - started
            return decision

        try:
            admission = arrive()
            if not isinstance(admission, Reject):
                self._terminated.pop(program_id, None)  # the id is in use again
            decision = await admitted(admission)
            failures: list[UpstreamFailed] = []
            while isinstance(decision, Forward):
                if self.core.program(program_id) is None:
                    # Released after a restore forwarded this held request, before its turn
                    # came: sending it would give a program that is gone a llama.cpp slot.
                    decision = Reject(request_id, program_id, "program_released", 409)
                    break
                estimate = self._estimate(program_id)
                held = (HELD_HEADER, f"{held_s * 1000:.1f}".encode())
                try:
                    result = await self._exchange(
                        call, reply, decision.backend, (held,), request_id=request_id
                    )
                except UpstreamFailed as failure:
                    failures.append(failure)
                    self._finish(request_id, ok=False)  # ignored when mark_down forgot it
                    if len(failures) == 2:
                        break
                    self.counters.retries += 1
                    if self.core.program(program_id) is None:
                        # Released while this request ran: a retry must not bring it back.
                        decision = Reject(request_id, program_id, "program_released", 409)
                        break
                    decision = await admitted(arrive())
                    continue
                ok = result.ok
                total = result.total_tokens
                if ok and total is None and lookahead is None:
                    total = estimate + result.output_estimate
                return "ok" if ok else ("stream_error" if result.broken else "upstream_error")
            if isinstance(decision, Reject):
                await reply_error(
                    reply, decision.status, _reject_message(decision), decision.reason
                )
                return "rejected"
            await self._bad_gateway(reply, failures)
            return "failed"
        finally:
            self._finish(request_id, ok=ok, total_tokens=total)
            if ok and total is not None and lookahead is None:
                self._tracker.served(program_id, total)
            if self.core.program(program_id) is None:
                # Refused before it entered the table, or released: no Teardown forgets its
                # prompt for it.
                self._tracker.forget(program_id)

    async def _untracked(self, call: Call, reply: Reply) -> str:
        failures: list[UpstreamFailed] = []
        tried: set[str] = set()
        while len(failures) < 2 and (backend := self._least_loaded(tried)) is not None:
            tried.add(backend)
            try:
                result = await self._exchange(call, reply, backend)
            except UpstreamFailed as failure:
                failures.append(failure)
                if len(failures) == 1:
                    self.counters.retries += 1
                continue
            return "ok" if result.ok else "upstream_error"
        if not failures:
            await reply_error(reply, 503, "no backend is up", "no_backend")
            return "rejected"
        await self._bad_gateway(reply, failures)
        return "failed"

    async def _exchange(
        self,
        call: Call,
        reply: Reply,
        backend: str,
        headers: Headers = (),
        *,
        request_id: str | None = None,
    ) -> Exchange:
        """`request_id`: a tracked request's (its llama.cpp slot is chosen by its program)."""
        state = self._backends[backend]
        slots, program_id = state.slots, call.program_id
        branch = slots is not None and program_id is not None and call.lookahead is not None
        slot = None
        if slots is not None and program_id is not None and request_id is not None:
            if branch:
                slot = slots.branch_slot(program_id, request_id)
            else:
                slot = slots.slot_for(program_id)
                self._left_other_backends(program_id, backend)
        state.in_flight += 1
        try:
            assert self._upstream is not None, "RouterProxy.start() first"
            result = await exchange(
                self._upstream, call, reply, backend, call.upstream_body(slot), self._count_text,
                headers,
            )  # fmt: skip
        except UpstreamFailed as failure:
            await self._upstream_failed(failure)
            raise
        finally:
            state.in_flight -= 1
            if branch and slots is not None and program_id is not None and request_id is not None:
                # The core counts the branch slot free once the branch ends: so does the table.
                slots.branch_ended(program_id, request_id)
        if result.broken:
            self._backend_failed(backend, "stream", "the stream broke off")
        return result

    async def _bad_gateway(self, reply: Reply, failures: list[UpstreamFailed]) -> None:
        names = ", ".join(dict.fromkeys(f.backend for f in failures))
        detail = "; ".join(str(f) for f in failures)
        await reply_error(reply, 502, f"backend {names} failed: {detail}", "bad_gateway")

    def _estimate(self, program_id: str) -> int:
        """The program's main context (its lookahead branches' tokens are not part of it)."""
        return self.core.context_tokens(program_id) or 0

    # --- release and views ---------------------------------------------------------------------

    def release(self, program_id: str) -> bool:
        """Free the program now (idempotent): True when it was in the table."""
        decisions = self.core.release(program_id, self._now())
        self._apply(decisions)
        return any(isinstance(d, Teardown) for d in decisions)

    def program_view(self, program_id: str) -> dict[str, Any] | None:
        view = self.core.program(program_id)
        if view is None:
            cause = self._terminated.get(program_id)
            if cause is None:
                return None
            return {
                "program_id": program_id,
                "status": "terminated",
                "terminated": True,
                "cause": cause,
                "lease_expired": cause == "lease",
                "restoring_soon": False,
            }
        order = self.core.restore_order(self._now())
        position = order.index(program_id) if view.status == "paused" else None
        return {
            **asdict(view),
            "terminated": False,
            "lease_expired": False,
            "queue_position": position,
            "restoring_soon": position is not None and position < self.config.prepare_window,
        }

    def programs_view(self) -> dict[str, Any]:
        return {
            "policy": self.core.name,
            "programs": [asdict(view) for view in self.core.programs()],
            "waiting": list(self.core.waiting()),
        }

    def metrics_text(self) -> str:
        pending = [b.url for b in self._backends.values() if b.info is None]
        return render(
            self.core.metrics(), self.core.programs(), self.counters, pending_backends=pending
        )

    def health(self) -> dict[str, Any]:
        up = [b.url for b in self._backends.values() if b.info and self.core.is_up(b.url)]
        return {
            "status": "ok" if up else "no backend up",
            "backends_up": up,
            "backends_down": [b.url for b in self._backends.values() if b.url not in up],
        }

    async def models(self, reply: Reply) -> None:
        """`GET /v1/models` from a backend that is up."""
        tried: set[str] = set()
        while (backend := self._least_loaded(tried)) is not None:
            tried.add(backend)
            try:
                response = await self.client.get(f"{backend}/v1/models")
            except httpx.HTTPError as error:
                self._backend_failed(backend, "connect", repr(error))
                continue
            content = response.content
            await reply.start(
                response.status_code,
                [
                    (b"content-type", response.headers.get("content-type", "").encode()),
                    (b"content-length", str(len(content)).encode()),
                ],
            )
            await reply.send(content, more=False)
            return
        await reply_error(reply, 503, "no backend is up", "no_backend")

    @property
    def held_requests(self) -> int:
        return len(self._waiters)

    @property
    def tracked_contexts(self) -> int:
        return len(self._tracker)


@dataclass(frozen=True, slots=True)
class _TextCounter:
    count: Callable[[str], int]
    name: str = "proxy"

    def count_text(self, text: str) -> int:
        return self.count(text)


def _reject_message(decision: Reject) -> str:
    return {
        "program_paused": "the program is paused: best-effort lookahead work is refused",
        "program_pausing": "the program is being paused: best-effort lookahead work is refused",
        "no_free_slot": (
            "every llama.cpp slot of the program's backend holds a context: best-effort "
            "lookahead work is refused"
        ),
        "program_released": (
            "the program was released while this request was held or about to be retried"
        ),
        "no_backend": "no backend could take the request",
    }[decision.reason]
