"""`lookahead-sdk router serve`: the program-aware router (ThunderAgent's pause / restore of
whole agent programs) in front of SGLang, vLLM, llama.cpp or simulated backends."""

from __future__ import annotations

import argparse
import re

from lookahead_sdk.base.args import (
    comma_list,
    http_url,
    non_negative_float,
    port,
    positive_float,
    positive_int,
)
from lookahead_sdk.errors import ConfigurationError
from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.policies import POLICY_NAMES
from lookahead_sdk.router.proxy_config import ProxyConfig, parse_capacity
from lookahead_sdk.sim.http_body import DEFAULT_BODY_LIMIT

DEFAULTS = ThunderConfig()


def register(subparsers: argparse._SubParsersAction) -> None:
    router = subparsers.add_parser("router", help="the program-aware router (HTTP proxy)")
    commands = router.add_subparsers(dest="router_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="route agent programs across backends, pausing and restoring whole programs",
        description=(
            "An OpenAI / SGLang-compatible HTTP proxy that tracks agent programs (by program_id, "
            "X-Program-Id or Dynamo's session / trajectory id), pauses whole programs when a "
            "backend's KV is over-subscribed and restores them from one global queue onto any "
            "backend. See docs/router.md."
        ),
    )
    serve.add_argument(
        "--backends",
        type=comma_list(http_url),
        required=True,
        help="comma-separated backend base URLs, e.g. http://gpu0:30000,http://gpu1:30000",
    )
    serve.add_argument("--policy", choices=POLICY_NAMES, default="thunder")
    serve.add_argument(
        "--capacity",
        type=comma_list(capacity),
        action="append",
        default=[],
        metavar="URL=TOKENS",
        help="a backend's KV capacity in tokens (repeatable, or comma-separated); otherwise "
        "discovered from the backend (SGLang /get_server_info, vLLM /metrics, llama.cpp /props "
        "+ /slots)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8300)
    serve.add_argument(
        "--api-key", help="require 'Authorization: Bearer KEY' on every route but /health"
    )
    serve.add_argument(
        "--tick-s", type=positive_float, default=DEFAULTS.tick_s,
        help="seconds between policy ticks (restore, hold timeouts, pause, leases)",
    )  # fmt: skip
    serve.add_argument(
        "--decay-half-life-s", type=non_negative_float, default=DEFAULTS.decay_half_life_s,
        help="half-life of acting programs' tokens when an aged request preempts (0: no decay, "
        "so no preemption)",
    )  # fmt: skip
    serve.add_argument(
        "--aging-s", type=positive_float, default=DEFAULTS.aging_s,
        help="a request held this long goes first and may preempt acting programs",
    )  # fmt: skip
    serve.add_argument(
        "--swap-budget", type=non_negative_float, default=DEFAULTS.swap_budget,
        help="per backend, preemption re-admits at most this fraction of the context tokens the "
        "backend served (0: no preemption)",
    )  # fmt: skip
    serve.add_argument(
        "--lease-s", type=positive_float, default=DEFAULTS.lease_s,
        help="release a program idle this long (its client vanished)",
    )  # fmt: skip
    serve.add_argument(
        "--hold-timeout-s", type=positive_float, default=DEFAULTS.hold_timeout_s,
        help="force-admit a request held this long (keep it below the clients' read timeout)",
    )  # fmt: skip
    serve.add_argument(
        "--pause-at", type=positive_float, default=DEFAULTS.pause_at,
        help="pause programs when a backend's tokens exceed this fraction of its capacity",
    )  # fmt: skip
    serve.add_argument(
        "--pause-to", type=positive_float, default=DEFAULTS.pause_to,
        help="... down to this fraction (at most --pause-at)",
    )  # fmt: skip
    serve.add_argument(
        "--restore-to", type=positive_float, default=DEFAULTS.restore_to,
        help="restore waiting programs while a backend stays under this fraction (at most "
        "--pause-at)",
    )  # fmt: skip
    serve.add_argument(
        "--max-body-bytes", type=positive_int, default=DEFAULT_BODY_LIMIT,
        help="largest request body accepted (413 beyond)",
    )  # fmt: skip
    serve.add_argument(
        "--log-level", default="warning", choices=("debug", "info", "warning", "error")
    )
    serve.set_defaults(func=run_serve)


def capacity(text: str) -> tuple[str, int]:
    """`URL=TOKENS`: a backend's KV capacity."""
    try:
        return parse_capacity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected URL=TOKENS (an http:// or https:// URL, a positive integer), got {text!r}"
        ) from None


# The ThunderConfig fields set from flags: their errors name the flag.
THUNDER_FLAGS = (
    "tick_s", "decay_half_life_s", "aging_s", "swap_budget", "lease_s", "hold_timeout_s",
    "pause_at", "pause_to", "restore_to",
)  # fmt: skip
_THUNDER_FIELD = re.compile(rf"\b(?:ThunderConfig\.)?({'|'.join(THUNDER_FLAGS)})\b")


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The proxy's settings; a combination of values that cannot work (--pause-to above
    --pause-at, a --capacity for a URL not in --backends) raises ConfigurationError naming
    the flags."""
    try:
        thunder = ThunderConfig(**{name: getattr(args, name) for name in THUNDER_FLAGS})
    except ValueError as error:
        flags = _THUNDER_FIELD.sub(lambda m: "--" + m.group(1).replace("_", "-"), str(error))
        raise ConfigurationError(flags) from None
    try:
        return ProxyConfig(
            backends=args.backends,
            policy=args.policy,
            capacities=dict(item for group in args.capacity for item in group),
            thunder=thunder,
            api_key=args.api_key,
            max_body_bytes=args.max_body_bytes,
        )
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def run_serve(args: argparse.Namespace) -> int:
    import logging

    from lookahead_sdk.cli.serving import serve_asgi
    from lookahead_sdk.router.http_app import RouterApp
    from lookahead_sdk.router.proxy import RouterProxy

    config = config_from_args(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per upstream request
    proxy = RouterProxy(config)
    print(
        f"router ({config.policy}) on http://{args.host}:{args.port} in front of "
        f"{', '.join(config.backends)}; token counter {proxy.token_counter}",
        flush=True,
    )
    serve_asgi(
        RouterApp(proxy), host=args.host, port=args.port, log_level=args.log_level, lifespan="on"
    )
    return 0
