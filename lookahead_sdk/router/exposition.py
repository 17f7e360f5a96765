"""The router's `/metrics` in the Prometheus text exposition format (version 0.0.4), written
out directly: no client library. Pure: snapshots in, text out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lookahead_sdk.router.metrics import RouterMetrics
from lookahead_sdk.router.state import ProgramView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "lookahead_router"


@dataclass(slots=True)
class ProxyCounters:
    """What the HTTP side counts (the policy core counts the rest)."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (route, outcome)
    upstream_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (backend, kind)
    retries: int = 0

    def request(self, route: str, outcome: str) -> None:
        self.requests[(route, outcome)] += 1

    def upstream_error(self, backend: str, kind: str) -> None:
        self.upstream_errors[(backend, kind)] += 1


def render(
    metrics: RouterMetrics,
    programs: Iterable[ProgramView],
    counters: ProxyCounters,
    *,
    pending_backends: Iterable[str] = (),
) -> str:
    lines: list[str] = []

    def family(
        name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], float]]
    ) -> None:
        full = f"{PREFIX}_{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} {kind}")
        for labels, value in samples:
            lines.append(f"{full}{_labels(labels)} {_number(value)}")

    by_state = Counter((view.status, view.phase) for view in programs)
    family(
        "programs",
        "gauge",
        "Programs in the table by status and phase.",
        (
            ({"status": status, "phase": phase}, by_state[(status, phase)])
            for status in ("active", "paused")
            for phase in ("reasoning", "acting")
        ),
    )
    family(
        "programs_marked_for_pause", "gauge", "Reasoning programs to pause when their request ends.",
        [({}, metrics.marked_for_pause)],
    )  # fmt: skip
    family("held_requests", "gauge", "Requests held at the router.", [({}, metrics.held_requests)])
    family(
        "in_flight_requests", "gauge", "Tracked requests in flight at a backend.",
        [({}, metrics.in_flight_requests)],
    )  # fmt: skip
    for name, value, text in (
        (
            "forced_admits",
            metrics.forced_admits,
            "Held requests force-admitted at the hold timeout.",
        ),
        ("pauses", metrics.pauses, "Programs paused."),
        ("restores", metrics.restores, "Programs restored from the waiting queue."),
        (
            "migrations",
            metrics.migrations,
            "Restores onto another backend than the program's last.",
        ),
        ("rejects", metrics.rejects, "Requests refused by the policy (409 / 503)."),
        ("lease_expirations", metrics.lease_expirations, "Programs released by the idle lease."),
        ("programs_terminated", metrics.terminated, "Programs released or expired."),
        ("retries", counters.retries, "Requests retried on another backend."),
    ):
        family(f"{name}_total", "counter", text, [({}, value)])
    backends = [(b.name, b) for b in metrics.backends]
    family(
        "backend_up", "gauge", "1 when the backend is up.",
        [*(({"backend": n}, int(b.up)) for n, b in backends),
         *(({"backend": n}, 0) for n in pending_backends)],
    )  # fmt: skip
    family(
        "backend_capacity_tokens", "gauge", "KV capacity of the backend in tokens.",
        [({"backend": n}, b.capacity_tokens) for n, b in backends],
    )  # fmt: skip
    family(
        "backend_accounted_tokens", "gauge", "Tokens of the programs active on the backend.",
        [({"backend": n}, b.accounted_tokens) for n, b in backends],
    )  # fmt: skip
    family(
        "backend_programs", "gauge", "Programs active on the backend.",
        [({"backend": n}, b.programs) for n, b in backends],
    )  # fmt: skip
    family(
        "requests_total", "counter", "Requests answered, by route and outcome.",
        [({"route": r, "outcome": o}, n) for (r, o), n in sorted(counters.requests.items())],
    )  # fmt: skip
    family(
        "upstream_errors_total", "counter", "Backend failures, by backend and kind.",
        [({"backend": b, "kind": k}, n) for (b, k), n in sorted(counters.upstream_errors.items())],
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
