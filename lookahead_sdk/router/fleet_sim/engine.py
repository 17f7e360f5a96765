"""One simulated serving engine (SGLang-like) in virtual time, timed by the batch latency model.

- KV: `capacity_tokens`. A request admitted to run locks its prompt plus its reply; when it ends,
  its KV stays cached for its program (one entry per program) until evicted, least recently
  used first and from the tail (a radix cache evicts leaves first, so a prefix outlives its
  extensions). A program's next request reuses `min(cached, prompt)` tokens and prefills the rest.
- Scheduling: FIFO admission while the KV fits (evicting cached entries as needed; the head of
  the queue blocks when even that is not enough); prefill has priority: a prefill batch takes up
  to `chunk_tokens` prompt tokens (chunked prefill), its time `Est = T_GEMM(M) + alpha_p * sum A_j`;
  otherwise a decode iteration over every running request, `T_GEMM(n) + alpha_d * sum context`.
  Consecutive decode iterations with the same batch are simulated as one macro step of up to
  `max_macro_s` (a request arriving meanwhile waits at most that long to join).

The engine does not know about programs' phases: without a router holding them back, more agents
than KV means each returning program finds its prefix evicted and re-prefills it (thrash).

Simplifications, all in the engine's favour (so against the router): a request reserves its whole
reply at admission, so a running request is never retracted and recomputed (SGLang and vLLM
overcommit and retract under pressure); programs share no system-prompt prefix.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from lookahead_sdk.scheduling.latency_model import LatencyModel, attention_units


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    program_id: str
    prompt_tokens: int
    decode_tokens: int
    fresh_tokens: int  # prompt tokens no engine could have cached (new since the last reply)
    submitted_s: float = 0.0
    cached_tokens: int = 0
    prefilled: int = 0  # of the uncached part
    decoded: int = 0
    first_token_s: float | None = None

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.decode_tokens


@dataclass(slots=True)
class EngineStats:
    prefill_tokens: int = 0
    reprefill_tokens: int = 0  # prefilled again although some engine had computed them before
    cached_hit_tokens: int = 0
    decode_tokens: int = 0
    evicted_tokens: int = 0
    busy_s: float = 0.0
    batches: int = 0


@dataclass(slots=True)
class _Batch:
    end_s: float
    prefill: list[tuple[EngineRequest, int]] = field(default_factory=list)
    decode_iterations: int = 0


class SimEngine:
    def __init__(
        self,
        name: str,
        capacity_tokens: int,
        model: LatencyModel,
        *,
        chunk_tokens: int = 8192,
        max_macro_s: float = 0.1,
    ) -> None:
        if capacity_tokens <= 0 or chunk_tokens <= 0 or max_macro_s <= 0:
            raise ValueError("capacity_tokens, chunk_tokens and max_macro_s must be > 0")
        self.name = name
        self.capacity_tokens = capacity_tokens
        self.stats = EngineStats()
        self._model = model
        self._alpha_decode_ms = model.profile.alpha_decode_ms
        self._alpha_prefill_ms = model.profile.alpha_prefill_ms
        self._chunk_tokens = chunk_tokens
        self._max_macro_s = max_macro_s
        self._cache: OrderedDict[str, int] = OrderedDict()  # program -> cached tokens, LRU first
        self._cached_total = 0
        self._locked = 0
        self._queue: deque[EngineRequest] = deque()
        self._prefilling: deque[EngineRequest] = deque()
        self._running: dict[str, EngineRequest] = {}
        self._decode_context = 0  # sum over running requests of prompt + decoded
        self._batch: _Batch | None = None

    @property
    def busy(self) -> bool:
        return self._batch is not None

    @property
    def batch_end_s(self) -> float | None:
        return None if self._batch is None else self._batch.end_s

    def cached_tokens(self, program_id: str) -> int:
        return self._cache.get(program_id, 0)

    def submit(self, request: EngineRequest, now: float) -> None:
        request.submitted_s = now
        self._queue.append(request)

    def start_batch(self, now: float) -> float | None:
        """Start the next batch if idle and there is work; returns when it ends."""
        if self._batch is not None:
            return self._batch.end_s
        self._admit(now)
        batch = self._prefill_batch(now) or self._decode_batch(now)
        self._batch = batch
        return None if batch is None else batch.end_s

    def finish_batch(self) -> list[EngineRequest]:
        """Apply the batch that ended; returns the requests whose reply is complete."""
        batch = self._batch
        assert batch is not None, "finish_batch without a running batch"
        self._batch = None
        for request, tokens in batch.prefill:
            request.prefilled += tokens
            self.stats.prefill_tokens += tokens
            if request.prefilled == request.uncached:
                self._prefilling.remove(request)
                self._start_decoding(request, batch.end_s)
        if batch.decode_iterations:
            # The running set cannot change during a decode batch (batches run one at a time).
            for request in self._running.values():
                request.decoded += batch.decode_iterations
            self._decode_context += batch.decode_iterations * len(self._running)
            self.stats.decode_tokens += batch.decode_iterations * len(self._running)
        done = [r for r in self._running.values() if r.decoded >= r.decode_tokens]
        for request in done:
            self._complete(request)
        return done

    # --- internals -----------------------------------------------------------------------------

    def _admit(self, now: float) -> None:
        while self._queue:
            request = self._queue[0]
            if self._locked + request.kv_tokens > self.capacity_tokens:
                return  # cannot fit even with every cached prefix evicted: head-of-line waits
            entry = self._cache.get(request.program_id, 0)
            hit = min(entry, request.prompt_tokens)
            # After admission the entry is gone (its first `hit` tokens now locked).
            overflow = self._locked + request.kv_tokens + self._cached_total - entry
            if overflow > self.capacity_tokens:
                self._evict(overflow - self.capacity_tokens, protect=request.program_id)
            self._queue.popleft()
            self._cache.pop(request.program_id, None)
            self._cached_total -= entry
            request.cached_tokens = hit
            self._locked += request.kv_tokens
            self.stats.cached_hit_tokens += hit
            self.stats.reprefill_tokens += max(0, request.uncached - request.fresh_tokens)
            if request.uncached > 0:
                self._prefilling.append(request)
            else:
                self._start_decoding(request, now)

    def _start_decoding(self, request: EngineRequest, now: float) -> None:
        request.first_token_s = now
        request.decoded = 1  # the last prefill chunk yields the first token
        self._decode_context += request.prompt_tokens + 1
        self.stats.decode_tokens += 1
        self._running[request.request_id] = request

    def _evict(self, tokens: int, *, protect: str) -> None:
        for program_id in list(self._cache):
            if tokens <= 0:
                return
            if program_id == protect:
                continue
            cached = self._cache[program_id]
            taken = min(cached, tokens)
            if taken == cached:
                del self._cache[program_id]
            else:
                self._cache[program_id] = cached - taken
            self._cached_total -= taken
            self.stats.evicted_tokens += taken
            tokens -= taken

    def _prefill_batch(self, now: float) -> _Batch | None:
        if not self._prefilling:
            return None
        budget = self._chunk_tokens
        chunks: list[tuple[EngineRequest, int]] = []
        forward = 0
        units = 0
        for request in self._prefilling:
            if budget <= 0:
                break
            tokens = min(budget, request.uncached - request.prefilled)
            units += attention_units(tokens, request.cached_tokens + request.prefilled)
            chunks.append((request, tokens))
            forward += tokens
            budget -= tokens
        # Running requests wait while a prefill batch runs (SGLang's default, no mixed chunks).
        duration_s = (self._model.gemm_ms(forward) + self._alpha_prefill_ms * units) / 1e3
        self.stats.busy_s += duration_s
        self.stats.batches += 1
        return _Batch(now + duration_s, prefill=chunks)

    def _decode_batch(self, now: float) -> _Batch | None:
        if not self._running:
            return None
        count = len(self._running)
        remaining = min(r.decode_tokens - r.decoded for r in self._running.values())
        gemm_ms = self._model.gemm_ms(count)
        context = self._decode_context
        first_ms = gemm_ms + self._alpha_decode_ms * context
        iterations = max(1, min(remaining, int(self._max_macro_s * 1e3 / first_ms)))
        # k iterations, the context growing by `count` each: k gemm + alpha_d (k C + n k(k-1)/2)
        total_ms = iterations * gemm_ms + self._alpha_decode_ms * (
            iterations * context + count * iterations * (iterations - 1) / 2
        )
        duration_s = total_ms / 1e3
        self.stats.busy_s += duration_s
        self.stats.batches += 1
        return _Batch(now + duration_s, decode_iterations=iterations)

    def _complete(self, request: EngineRequest) -> None:
        del self._running[request.request_id]
        self._locked -= request.kv_tokens
        self._decode_context -= request.prompt_tokens + request.decoded
        previous = self._cache.pop(request.program_id, 0)
        kept = max(previous, request.kv_tokens)
        self._cache[request.program_id] = kept
        self._cached_total += kept - previous
