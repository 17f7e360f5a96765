"""Where the turns' TTFT went (`RunResult.turn_wait_s`, `background`, `gate_wait_s`): tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from lookahead_sdk.bench.common import compact_table

TURN_KINDS: tuple[tuple[str, str, str], ...] = (
    ("normal", "N", "normal_ttft_s"),
    ("transform", "T", "transform_ttft_s"),
)
CAUSE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("before_request", "before"),
    ("alone", "alone"),
    ("warm_up", "warm-up"),
    ("background_llm", "bg LLM"),
    ("slot_copy", "slot cp"),
    ("other_foreground", "other"),
)
BACKGROUND_COLUMNS: tuple[tuple[str, str], ...] = (
    ("warm_up", "warm-up"),
    ("background_llm", "bg LLM"),
    ("slot_copy", "slot cp"),
)

WAITS_LEGEND = (
    "Where the TTFT went, mean ms per turn (N: normal turns, T: transform turns): before: "
    "before the request went out (the commit's wait and a synchronous transform); then the "
    "request's wait for its first token, each instant put down to the first of: a warm-up "
    "chunk, a background LLM call (a lookahead summary), a llama.cpp slot copy, another "
    "program's request, or nothing beside it (alone: its own prefill). Background: requests, "
    "seconds run, seconds of those while some foreground request waited for its first "
    "token, and seconds of the rest while a foreground reply was decoding (on a CPU that "
    "reply decodes slower by about as much; '-': not measured in that run); yields: "
    "background LLM replies stopped when a foreground request arrived and continued later; "
    "aborts: batches holding best-effort tokens that the embedded engine aborted when a "
    "foreground request arrived ('-': not read); "
    "gate: seconds best-effort work waited for slack. The whole run, sync -> lookahead: "
    "seconds the foreground replies spent decoding (first token to end); seconds with no "
    "request to the engine in flight (what the synchronous run leaves is the most background "
    "work that can run without lengthening it); CPU seconds the client process used; what "
    "llama-server counted (tokens: prompt and generated; calls: llama_decode calls; ms/tok: "
    "the run's busy time, wall less idle, per token)."
)


Runs = Mapping[str, Mapping[str, Mapping[str, Any]]]  # name -> mode -> run


def has_waits(runs: Runs) -> bool:
    """`runs`: `bench ttft`'s "strategies", or `bench adapters`' runs by framework."""
    return bool(runs) and all(
        "turn_wait_s" in run for by_mode in runs.values() for run in by_mode.values()
    )


def waits_tables(runs: Runs, *, name: str = "strategy") -> list[Table]:
    """Per strategy (or framework), mode and turn kind: the mean TTFT split by cause; per
    strategy, the lookahead run's background requests. Empty for runs recorded before the
    timeline."""
    if not has_waits(runs):
        return []
    waits = compact_table(
        "Where the TTFT went (mean ms per turn)",
        ("run", "TTFT", *(label for _, label in CAUSE_COLUMNS)),
    )
    background = compact_table(
        "Background requests (lookahead runs, per run): n / s run / s during a foreground wait"
        " / s beside a decoding reply",
        (name, *(label for _, label in BACKGROUND_COLUMNS), "yields", "aborts", "gate s"),
    )
    # Runs recorded before the engine's counters were read keep their table as it was.
    counted = any(
        run.get("engine_counters") for by_mode in runs.values() for run in by_mode.values()
    )
    whole_run = compact_table(
        "The whole run, per run, sync -> lookahead",
        (
            name,
            "replies decoding s",
            "engine idle s",
            "client CPU s",
            *(ENGINE_COLUMNS if counted else ()),
        ),
    )
    for run_name, by_mode in runs.items():
        for kind, letter, ttft_key in TURN_KINDS:
            for mode in ("sync", "lookahead"):
                run = by_mode[mode]
                turns = len(run[ttft_key])
                sums = run["turn_wait_s"].get(kind)
                if not turns or sums is None:
                    continue
                waits.add_row(
                    f"{run_name} {'look' if mode == 'lookahead' else mode} {letter}",
                    _ms(sum(run[ttft_key]) / turns),
                    *(_ms(sums[cause] / turns) for cause, _ in CAUSE_COLUMNS),
                )
        look = by_mode["lookahead"]
        gate_wait_s = look.get("gate_wait_s")
        background.add_row(
            run_name,
            *(_load(look["background"].get(kind)) for kind, _ in BACKGROUND_COLUMNS),
            _count(look.get("background_yields")),
            _count((look.get("batch_aborts") or {}).get("aborts")),
            "-" if gate_wait_s is None else f"{gate_wait_s:.1f}",
        )
        sync = by_mode["sync"]
        whole_run.add_row(
            run_name,
            _sync_to_lookahead(sync.get("reply_decode_s"), look.get("reply_decode_s")),
            _sync_to_lookahead(sync.get("engine_idle_s"), look.get("engine_idle_s")),
            _sync_to_lookahead(sync.get("client_cpu_s"), look.get("client_cpu_s"), decimals=1),
            *(engine_cells(sync, look) if counted else ()),
        )
    cache = prompt_cache_table(runs, name=name)
    return [waits, background, whole_run, *([cache] if cache is not None else [])]


def prompt_cache_table(runs: Runs, *, name: str = "strategy") -> Table | None:
    """llama-server's RAM prompt cache per run, sync -> lookahead: prompts saved, saves skipped
    because the request marked the slot's prompt dead, the main-loop seconds the cache's
    updates took (every slot waits for them), prompts loaded back and their tokens (prefill
    saved). None unless the bench read it (`bench ttft --log-prompt-cache`)."""
    if not any(run.get("prompt_cache") for by_mode in runs.values() for run in by_mode.values()):
        return None
    columns = (
        name,
        "saves",
        "discards",
        "saved tokens",
        "main-loop s",
        "longest s",
        "loads",
        "loaded tokens",
    )
    table = compact_table("llama-server's RAM prompt cache, per run, sync -> lookahead", columns)
    for run_name, by_mode in runs.items():
        sync, look = (by_mode[mode].get("prompt_cache") or {} for mode in ("sync", "lookahead"))
        if not sync or not look:
            table.add_row(run_name, *("-" for _ in columns[1:]))
            continue
        table.add_row(
            run_name,
            _sync_to_lookahead(sync["saves"], look["saves"]),
            # Runs before the engine could skip saves did not count discards.
            _sync_to_lookahead(sync.get("discards"), look.get("discards")),
            _sync_to_lookahead(sync["saved_tokens"], look["saved_tokens"]),
            _sync_to_lookahead(sync["update_s"], look["update_s"], decimals=1),
            _sync_to_lookahead(sync["longest_update_s"], look["longest_update_s"], decimals=2),
            _sync_to_lookahead(sync["loads"], look["loads"]),
            _sync_to_lookahead(sync["loaded_tokens"], look["loaded_tokens"]),
        )
    return table


def _sync_to_lookahead(sync_s: float | None, look_s: float | None, *, decimals: int = 0) -> str:
    """Seconds per run, sync -> lookahead ('-': not measured then)."""
    if sync_s is None or look_s is None:
        return "-"
    return f"{sync_s:.{decimals}f}->{look_s:.{decimals}f}"


ENGINE_COLUMNS = ("tokens", "calls", "ms/tok")


def engine_cells(sync: Mapping[str, Any], look: Mapping[str, Any]) -> tuple[str, str, str]:
    """What llama-server counted, sync -> lookahead: prompt + generated tokens, `llama_decode`
    calls, and the engine's busy time (the run's wall less its idle time) per token, which
    says whether a run computed more tokens or paid more for each ('-': not counted)."""
    counted = [run.get("engine_counters") or {} for run in (sync, look)]
    if not all(counted):
        return ("-", "-", "-")
    tokens = [c["prompt_tokens"] + c["generated_tokens"] for c in counted]
    calls = [c["decode_calls"] for c in counted]
    busy_ms = [
        1000 * (run["wall_s"] - run["engine_idle_s"]) / count if count else 0.0
        for run, count in zip((sync, look), tokens, strict=True)
    ]
    return (
        f"{tokens[0] / 1000:.1f}K->{tokens[1] / 1000:.1f}K",
        f"{calls[0]:.0f}->{calls[1]:.0f}",
        f"{busy_ms[0]:.2f}->{busy_ms[1]:.2f}",
    )


def _count(value: float | None) -> str:
    """A count per run: whole for one run, a mean with one decimal over several."""
    return "-" if value is None else f"{value:.1f}".removesuffix(".0")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def _load(load: dict[str, float] | None) -> str:
    if not load or not load["requests"]:
        return "-"
    beside_decode = load.get("during_foreground_decode_s")  # not in JSON before it was measured
    return (
        f"{load['requests']:.0f}/{load['seconds']:.1f}/{load['during_foreground_wait_s']:.1f}"
        f"/{'-' if beside_decode is None else f'{beside_decode:.1f}'}"
    )
