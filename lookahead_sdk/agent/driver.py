"""Run N reference agents on the code-analysis workload and collect the TTFT benchmark figures."""

from __future__ import annotations

import asyncio
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import httpx
from openai import AsyncOpenAI

from lookahead_sdk.agent.loop import AgentRun, ReferenceAgent, TurnRecord
from lookahead_sdk.agent.run_trace import RunTrace
from lookahead_sdk.agent.workload import (
    DEFAULT_LARGE_OUTPUT_EVERY,
    MAIN_SYSTEM_PROMPT,
    CodeAnalysisWorkload,
    Delegation,
    Step,
    default_read_tokens,
    workload_tools,
)
from lookahead_sdk.base.completion import OpenAICompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import program
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.client.endpoint import Endpoint
from lookahead_sdk.client.engine_counters import read_engine_counters
from lookahead_sdk.client.session import ServerSession
from lookahead_sdk.client.slack import DEFAULT_GATE_ADMISSION, GateAdmission, SlackGate
from lookahead_sdk.client.timeline import (
    RequestTimeline,
    background_overlap,
    engine_idle_s,
    mean_background,
    reply_decode_s,
    summed_turn_waits,
    turn_waits_by_kind,
)
from lookahead_sdk.client.transport import tagged_async_http_client
from lookahead_sdk.client.warmers import LlamaCppWarmer, make_warmer
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.offload_store import OffloadStore
from lookahead_sdk.core.policy import ContextPolicy
from lookahead_sdk.core.warmer import Warmer
from lookahead_sdk.strategies import Isolate, KeepRecent, Offload, Summarize

STRATEGIES: tuple[str, ...] = ("offload", "keep_recent", "summarize", "isolate")
Mode = Literal["sync", "lookahead"]
# `RunResult` fields pooled by concatenation and by sum (`RunResult.pooled`).
POOLED_LISTS = (
    "transform_ttft_s",
    "normal_ttft_s",
    "transform_new_tokens",
    "normal_new_tokens",
    "transform_context_tokens",
    "lookahead_turns",
)
POOLED_COUNTS = (
    "transform_turns",
    "lookahead_hits",
    "stale",
    "fallbacks",
    "extra_prompt_tokens",
    "cached_prompt_tokens",
    "prefilled_prompt_tokens",
    "wasted_prompt_tokens",
    "regrown_lookaheads",
    "standby_commits",
    "deferred_starts",
    "out_of_reach_starts",
    "resized_commits",
)


@dataclass
class RunResult:
    """One (strategy, mode) run over all agents; raw lists so anyone can recompute."""

    transform_ttft_s: list[float] = field(default_factory=list)
    normal_ttft_s: list[float] = field(default_factory=list)
    # Per turn, in the same order: tokens the history gained since the agent's previous call.
    transform_new_tokens: list[int] = field(default_factory=list)
    normal_new_tokens: list[int] = field(default_factory=list)
    # Per transform turn: the main context right after its commit (what the next turns build on).
    transform_context_tokens: list[int] = field(default_factory=list)
    # Per timed lookahead, the turns it took from start to warm (KeepRecent leads by them + 1).
    lookahead_turns: list[float] = field(default_factory=list)
    transform_turns: int = 0
    lookahead_hits: int = 0
    stale: int = 0
    fallbacks: int = 0
    extra_prompt_tokens: int = 0  # prompt tokens prefilled by lookahead background work
    cached_prompt_tokens: int = 0  # foreground prompt tokens served from the prefix cache
    prefilled_prompt_tokens: int = 0  # all prompt tokens the engine computed, background included
    wasted_prompt_tokens: int = 0  # background tokens of lookaheads that were never committed
    regrown_lookaheads: int = 0  # ready results redone as the history's growth moved off
    standby_commits: int = 0  # commits that took a redone result's predecessor, not waiting
    deferred_starts: int = 0  # boundaries at which a due lookahead started later (would not fit)
    out_of_reach_starts: int = 0  # due lookaheads not started: the run ends before their commit
    resized_commits: int = 0  # commits resized to a synchronous commit's size
    wall_s: float = 0.0
    # Where the turns' TTFTs went, summed per turn kind ("normal", "transform") and cause
    # (`TURN_WAIT_CAUSES`): seconds before the request went out (commit, synchronous transform),
    # then the request's wait split by what the server ran beside it (`timeline.wait_behind`).
    turn_wait_s: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per background request kind: requests, seconds, and seconds while a foreground request
    # waited for its first token (`timeline.background_overlap`).
    background: dict[str, dict[str, float]] = field(default_factory=dict)
    # Foreground replies' decoding (first token to end), summed (`timeline.reply_decode_s`).
    reply_decode_s: float = 0.0
    # Seconds no request to the engine was in flight (`timeline.engine_idle_s`).
    engine_idle_s: float = 0.0
    gate_wait_s: float = 0.0  # best-effort work held back by the slack gate, summed
    background_yields: float = 0  # background LLM replies stopped for a foreground request
    # CPU seconds the client process (the agents, the SDK, its HTTP clients) used over the run:
    # on a machine the engine shares, the lookahead's own bookkeeping competes with the engine.
    client_cpu_s: float = 0.0
    # What llama-server counted over the run (`client.engine_counters`): prompt and generated
    # tokens, `llama_decode` calls, busy slots per call; empty where the server exports none.
    engine_counters: dict[str, float] = field(default_factory=dict)
    # What llama-server's RAM prompt cache did over the run (`engine.prompt_cache_log`), where
    # the bench read it from the embedded engine's log; else empty.
    prompt_cache: dict[str, float] = field(default_factory=dict)
    # Batches the embedded engine aborted for an arriving latency-critical request, and the
    # tokens they undid (`engine.abort_log`), where the bench read its log; else empty.
    batch_aborts: dict[str, float] = field(default_factory=dict)
    # Runs pooled into this record (`pooled`): how many, and each one's wall time.
    repeats: int = 1
    wall_s_each: list[float] = field(default_factory=list)

    @classmethod
    def pooled(cls, runs: Sequence[RunResult]) -> RunResult:
        """Repeated runs of one strategy and mode as one record: turn lists and token counts
        over all of them (so p50s, hits and per-turn waits are over every turn), the wall time
        as the mean run's (each run's kept), background work, reply decoding and gate figures per
        run (means)."""
        if not runs:
            raise ValueError("pooled needs at least one run")
        count = len(runs)
        merged = cls(repeats=count, wall_s_each=[run.wall_s for run in runs])
        merged.wall_s = sum(merged.wall_s_each) / count
        for run in runs:
            for name in POOLED_LISTS:
                getattr(merged, name).extend(getattr(run, name))
            for name in POOLED_COUNTS:
                setattr(merged, name, getattr(merged, name) + getattr(run, name))
        merged.turn_wait_s = summed_turn_waits(run.turn_wait_s for run in runs)
        merged.background = mean_background([run.background for run in runs])
        merged.gate_wait_s = sum(run.gate_wait_s for run in runs) / count
        merged.reply_decode_s = sum(run.reply_decode_s for run in runs) / count
        merged.engine_idle_s = sum(run.engine_idle_s for run in runs) / count
        merged.background_yields = sum(run.background_yields for run in runs) / count
        merged.client_cpu_s = sum(run.client_cpu_s for run in runs) / count
        merged.engine_counters = _mean_if_all([run.engine_counters for run in runs])
        merged.prompt_cache = _mean_if_all([run.prompt_cache for run in runs])
        merged.batch_aborts = _mean_if_all([run.batch_aborts for run in runs])
        return merged

    def add(self, run: AgentRun) -> None:
        for turn in run.turns:
            if turn.is_transform_turn:
                self.transform_ttft_s.append(turn.ttft_s)
                self.transform_new_tokens.append(turn.new_tokens)
                self.transform_context_tokens.append(turn.context_tokens)
            else:
                self.normal_ttft_s.append(turn.ttft_s)
                self.normal_new_tokens.append(turn.new_tokens)
            self.transform_turns += turn.is_transform_turn
            self.cached_prompt_tokens += turn.cached_tokens
            self.prefilled_prompt_tokens += max(0, turn.prompt_tokens - turn.cached_tokens)
        self.lookahead_turns.extend(round(turns, 2) for turns in run.lookahead_turns)
        stats = run.stats
        self.lookahead_hits += stats.hits
        self.stale += stats.stale
        self.fallbacks += stats.fallbacks
        self.extra_prompt_tokens += stats.background_prompt_tokens
        self.wasted_prompt_tokens += stats.wasted_prompt_tokens
        self.regrown_lookaheads += stats.regrown_lookaheads
        self.standby_commits += stats.standby_commits
        self.deferred_starts += stats.deferred_starts
        self.out_of_reach_starts += stats.out_of_reach_starts
        self.resized_commits += stats.resized_commits
        self.prefilled_prompt_tokens += stats.background_prompt_tokens + stats.sync_prompt_tokens

    def add_wait_breakdown(self, trace: RunTrace) -> None:
        """The run's turn waits summed per turn kind and cause, the background requests' load
        and the replies' decoding, from its trace."""
        self.turn_wait_s = turn_waits_by_kind(
            ("transform" if turn.is_transform_turn else "normal", split)
            for turn, split in zip(trace.turns, trace.waits, strict=True)
        )
        for kind, load in background_overlap(trace.requests, now=trace.ended_at).items():
            self.background[kind] = asdict(load)
        self.reply_decode_s = reply_decode_s(trace.requests, now=trace.ended_at)
        self.engine_idle_s = engine_idle_s(
            trace.requests, started_at=trace.started_at, ended_at=trace.ended_at
        )

    def to_json(self) -> dict:
        return asdict(self)


def _mean_if_all(counted: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each count's mean over the runs, when every run has the counts; else empty."""
    if not counted or not all(counted):
        return {}
    return {name: round(sum(c[name] for c in counted) / len(counted), 3) for name in counted[0]}


def process_cpu_s() -> float:
    """CPU seconds (user and system) this process has used, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def handover_from_history(plan: Sequence[Delegation]) -> Callable[[Sequence[Message]], str]:
    """Isolate's sub-agent system prompt: the handover of the module the history is delegating."""
    by_prompt = {delegation.prompt: delegation.handover for delegation in plan}

    def handover(history: Sequence[Message]) -> str:
        for message in reversed(history):
            if message.get("role") == "user" and message.get("content") in by_prompt:
                return by_prompt[message["content"]]
        raise ValueError("no delegation prompt in the history to hand over")

    return handover


def make_policy(
    strategy: str, *, store_dir: Path, plan: Sequence[Delegation] = ()
) -> ContextPolicy:
    if strategy == "offload":
        return Offload(store=OffloadStore(store_dir))
    if strategy == "keep_recent":
        return KeepRecent()
    if strategy == "summarize":
        return Summarize()
    if strategy == "isolate":
        return Isolate(subagent_system=handover_from_history(plan))
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


async def warm_client_stack(base_url: str, *, model: str, warmer: str = "openai") -> None:
    """One untimed one-token request through the client stack the agents use: the first request
    of a process builds the OpenAI client's request and response models (tens of ms), which
    would otherwise land on whichever run goes first. The caller clears the server's cache after."""
    session = await ServerSession.connect(
        base_url, wire="llamacpp" if warmer == "llamacpp" else "openai"
    )
    llm = Endpoint.from_session(session, model=model, emulate_tool_calls=False).chat_client(None)
    try:
        await llm.chat([{"role": "user", "content": "ready?"}], max_tokens=1)
    finally:
        await llm.aclose()


def run_warmer(
    warmer: str,
    session: ServerSession,
    gate: SlackGate | None,
    *,
    small_batches: bool = True,
    warm_up_batch_tokens: int | None = None,
) -> Warmer:
    """The warmer of a lookahead run: on llama.cpp gated by the run's slack gate, a chunk that
    may meet the next request in small batches unless `small_batches` is False, a chunk past
    1K cached tokens in `warm_up_batch_tokens` batches (None: the engine's)."""
    if warmer == "llamacpp":
        return LlamaCppWarmer(
            session,
            gate=gate,
            yield_batches=small_batches,
            warm_up_batch_tokens=warm_up_batch_tokens,
        )
    return make_warmer(warmer, session)


async def run_agents(
    base_url: str,
    *,
    strategy: str,
    mode: Mode,
    agents: int,
    steps: int,
    window_tokens: int,
    warmer: str = "openai",
    seed: int = 0,
    model: str = "default",
    token_counter: TokenCounter | None = None,
    max_tokens: int = 32,
    on_turn: Callable[[TurnRecord], None] | None = None,
    slack_admission: bool | None = None,
    slack_admit: GateAdmission = DEFAULT_GATE_ADMISSION,
    small_batches: bool = True,
    warm_up_batch_tokens: int | None = None,
    tool_latency_s: float = 0.0,
    tool_output_tokens: tuple[int, int] | None = None,
    large_output_every: int = DEFAULT_LARGE_OUTPUT_EVERY,
    on_trace: Callable[[RunTrace], None] | None = None,
) -> RunResult:
    """`agents` concurrent agents (seeds seed..seed+agents-1), each its own program. Reads are
    `tool_output_tokens` long (default: scaled to `window_tokens`, see `default_read_tokens`).
    `slack_admit` is the client-side gate's rule (`SlackGate`), used with the llama.cpp warmer,
    as `small_batches` (`LlamaCppWarmer(yield_batches=...)`) and `warm_up_batch_tokens`.
    `on_trace` gets the run's turns and requests once it completes."""
    if agents < 1:
        raise ValueError(f"agents must be >= 1, got {agents}")
    read_tokens = tool_output_tokens or default_read_tokens(window_tokens)
    counter = token_counter or auto_token_counter(base_url)
    # Client-side slack admission stands in for the server's on engines without priorities.
    if slack_admission is None:
        slack_admission = warmer == "llamacpp"
    session = await ServerSession.connect(
        base_url, wire="llamacpp" if warmer == "llamacpp" else "openai"
    )
    gate = session.gate(admit=slack_admit) if slack_admission else None
    session.timeline = RequestTimeline()
    llm = Endpoint.from_session(session, model=model, emulate_tool_calls=False).chat_client(gate)
    warm = (
        run_warmer(
            warmer,
            session,
            gate,
            small_batches=small_batches,
            warm_up_batch_tokens=warm_up_batch_tokens,
        )
        if mode == "lookahead"
        else None
    )
    result = RunResult()
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory(prefix="lookahead-offload-") as store_dir:

        def build_agent(index: int) -> tuple[ReferenceAgent, str, list[Step]]:
            workload = CodeAnalysisWorkload(
                seed=seed + index,
                steps=steps,
                token_counter=counter,
                tool_latency_s=tool_latency_s,
                tokens_per_output=read_tokens,
                large_output_every=large_output_every,
            )
            plan = workload.delegation_plan() if strategy == "isolate" else workload.read_plan()
            policy = make_policy(
                strategy,
                store_dir=Path(store_dir),
                plan=[p for p in plan if isinstance(p, Delegation)],
            )
            agent = ReferenceAgent(
                llm,
                ToolRegistry(workload_tools(workload)),
                policy=policy,
                config=RuntimeConfig(
                    mode=mode, window_tokens=window_tokens, warmer=warm, token_counter=counter
                ),
                max_tokens=max_tokens,
                on_turn=on_turn,
            )
            return agent, workload.task(), list(plan)

        # The workloads' plans size every read with the token counter (many server calls):
        # build them before the clock starts, so no agent's first turn waits behind the others'.
        built = [build_agent(index) for index in range(agents)]

        async def one_agent(index: int) -> AgentRun:
            agent, task, plan = built[index]
            async with program(f"{strategy}-{mode}-a{index}-s{seed}", release_to=()):
                return await agent.run(MAIN_SYSTEM_PROMPT, task, plan=plan)

        counters_before = await read_engine_counters(base_url)
        started, cpu_started = loop.time(), process_cpu_s()
        trace_started = time.perf_counter()
        trace: RunTrace | None = None
        try:
            runs = await asyncio.gather(*(one_agent(i) for i in range(agents)))
            for run in runs:
                result.add(run)
            trace = RunTrace(
                [turn for run in runs for turn in run.turns],
                session.timeline.entries,
                trace_started,
                time.perf_counter(),
            )
            result.add_wait_breakdown(trace)
            result.gate_wait_s = gate.waited_s if gate is not None else 0.0
            result.background_yields = llm.yields
        finally:
            await llm.aclose()
            if warm is not None:
                await warm.aclose()
    result.wall_s = loop.time() - started
    result.client_cpu_s = process_cpu_s() - cpu_started
    counters_after = await read_engine_counters(base_url)
    if counters_before is not None and counters_after is not None:
        result.engine_counters = counters_after.since(counters_before)
    if on_trace is not None and trace is not None:  # outside the measured time
        on_trace(trace)
    return result


async def run_program(
    base_url: str,
    program_id: str,
    workload: CodeAnalysisWorkload,
    policy: ContextPolicy,
    *,
    release_to: Sequence[str] = (),
    max_tokens: int = 32,
    model: str = "default",
    http_client: httpx.AsyncClient | None = None,
    on_turn: Callable[[TurnRecord], None] | None = None,
    window_tokens: int | None = None,
) -> AgentRun:
    """One synchronous reference agent running `workload`'s read plan as program `program_id`
    against an OpenAI-compatible server, or a router in front of several; released to each of
    `release_to` at the end. `http_client` (default: a tagging client, closed at the end) must
    tag requests with the program (`tagged_async_http_client`). `window_tokens`: the model's
    context per request (a llama.cpp slot's)."""
    openai = AsyncOpenAI(
        base_url=f"{base_url.rstrip('/').removesuffix('/v1')}/v1",
        api_key="not-needed",
        http_client=http_client or tagged_async_http_client(),
        max_retries=0,
    )
    agent = ReferenceAgent(
        OpenAICompletionClient(openai, model),
        ToolRegistry(workload_tools(workload)),
        policy=policy,
        config=RuntimeConfig(
            mode="sync", window_tokens=window_tokens, token_counter=workload.token_counter
        ),
        max_tokens=max_tokens,
        on_turn=on_turn,
    )
    try:
        async with program(program_id, release_to=tuple(release_to)):
            return await agent.run(MAIN_SYSTEM_PROMPT, workload.task(), plan=workload.read_plan())
    finally:
        await openai.close()
