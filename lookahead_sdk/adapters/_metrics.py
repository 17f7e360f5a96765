"""Prometheus `/metrics` for a long-running service: the `RuntimeStats` of every runtime an
adapter holds, and of those it released, in the text exposition format (0.0.4), written out
directly (no client library) and served by a stdlib HTTP server on a daemon thread.

    server = middleware.serve_metrics(9464)     # GET http://127.0.0.1:9464/metrics
    text = middleware.metrics_text()           # or render it into your own endpoint
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lookahead_sdk.core.runtime import LookaheadRuntime, RuntimeStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "lookahead"

# Stats with a name of their own (units); the others are `lookahead_<field>_total`.
RENAMED = {
    "waited_s": ("commit_wait_seconds_total", "Seconds commits waited for a running lookahead"),
    "sync_transform_s": (
        "sync_transform_seconds_total",
        "Seconds of synchronous transforms on the critical path",
    ),
}
HELP = {
    "boundaries": "Segment boundaries (turns, tool outputs) seen",
    "lookaheads_started": "Lookahead transforms started in the background",
    "superseded_boundaries": "Boundaries superseded by a newer one while a job ran",
    "stale": "Lookaheads dropped because the history changed under them",
    "failures": "Lookahead transforms that failed or timed out",
    "abandoned": "Running lookaheads abandoned at a commit",
    "promotions": "Running lookaheads a commit waited for at latency-critical priority",
    "warmups": "Warm-ups completed",
    "warmup_failures": "Warm-ups that failed (the result kept, its cache benefit lost)",
    "live_copies": "Live contexts copied into a lookahead branch",
    "overflow_transforms": "Hits transformed again because the suffix kept them over the limit",
    "background_prompt_tokens": "Uncached prompt tokens of background work (lookaheads, warm-ups)",
    "background_completion_tokens": "Completion tokens of background work",
    "wasted_prompt_tokens": "Background prompt tokens of lookaheads never committed",
    "sync_prompt_tokens": "Uncached prompt tokens of synchronous transforms",
}
BY_KIND = ("commits", "hits", "cold_hits", "fallbacks")  # rendered as lookahead_commits_total


def add(total: RuntimeStats, stats: RuntimeStats, sign: int = 1) -> RuntimeStats:
    return replace(
        total,
        **{f.name: getattr(total, f.name) + sign * getattr(stats, f.name) for f in fields(total)},
    )


class StatsBook:
    """The runtimes an adapter holds, and the sum of those it let go of. A runtime counts from
    when it was tracked: one about to load a saved state is retired first and tracked again
    after, so the restored stats (counted where they were made) are not counted twice."""

    def __init__(self) -> None:
        self._live: dict[int, tuple[LookaheadRuntime, RuntimeStats]] = {}
        self._retired = RuntimeStats()
        self._lock = threading.Lock()

    def track(self, runtime: LookaheadRuntime) -> None:
        with self._lock:
            self._live[id(runtime)] = (runtime, replace(runtime.stats))

    def retire(self, runtime: LookaheadRuntime) -> None:
        with self._lock:
            entry = self._live.pop(id(runtime), None)
            if entry is not None:
                self._retired = add(self._retired, add(entry[0].stats, entry[1], -1))

    @property
    def live(self) -> int:
        return len(self._live)

    def total(self) -> RuntimeStats:
        with self._lock:
            total = self._retired
            for runtime, baseline in self._live.values():
                total = add(total, add(runtime.stats, baseline, -1))
        return total


def render(stats: RuntimeStats, live_runtimes: int, labels: dict[str, str]) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict, float]]) -> None:
        full = f"{PREFIX}_{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} {kind}")
        for extra, value in samples:
            lines.append(f"{full}{_labels({**labels, **extra})} {_number(value)}")

    sync = stats.commits - stats.hits - stats.fallbacks
    family(
        "commits_total",
        "counter",
        "Commits by kind: hit (a warmed lookahead result), cold_hit (a result no warm-up had "
        "prefilled), fallback (the synchronous transform), sync (sync mode)",
        [
            ({"kind": "hit"}, stats.hits - stats.cold_hits),
            ({"kind": "cold_hit"}, stats.cold_hits),
            ({"kind": "fallback"}, stats.fallbacks),
            ({"kind": "sync"}, sync),
        ],
    )
    for field in fields(stats):
        if field.name in BY_KIND:
            continue
        name, help_text = RENAMED.get(field.name, (f"{field.name}_total", HELP.get(field.name, "")))
        family(name, "counter", help_text or field.name, [({}, getattr(stats, field.name))])
    family("runtimes", "gauge", "Runtimes the adapter holds now", [({}, live_runtimes)])
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    escaped = (
        f'{key}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for key, value in sorted(labels.items())
    )
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return repr(round(value, 6)) if isinstance(value, float) else str(value)


class MetricsServer:
    """`GET /metrics` on a daemon thread; `close()` stops it."""

    def __init__(self, text: Callable[[], str], port: int = 0, host: str = "127.0.0.1") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = text().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None  # scrapes are not worth a log line each

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lookahead-metrics", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
