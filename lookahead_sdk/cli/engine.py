"""`lookahead-sdk engine build|start|stop|status`."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator

from lookahead_sdk.base.args import (
    Number,
    add_renamed,
    existing_file,
    non_negative_int,
    port,
    positive_float,
)
from lookahead_sdk.engine.build import ensure_binaries
from lookahead_sdk.engine.config import (
    DEFAULT_PORT,
    FLASH_ATTN_MODES,
    KV_PAD,
    MAX_BATCH_TOKENS,
    MAX_CACHE_RAM_MIB,
    MAX_SLOTS,
    MAX_THREADS,
    MIN_BATCH_TOKENS,
    MODEL_CONTEXT,
    EngineConfig,
)
from lookahead_sdk.engine.errors import EngineError
from lookahead_sdk.engine.model import DEFAULT_QUANTIZATION, QUANTIZATIONS, model_path
from lookahead_sdk.engine.server import engine_status, ensure_engine, stop_engine

# The ranges EngineConfig accepts, checked when the flags are parsed: a value it would reject
# fails there, naming the flag, before anything is built or started.
_slots = Number(int, low=1, high=MAX_SLOTS)
_threads = Number(int, low=1, high=MAX_THREADS)
_batch = Number(int, low=MIN_BATCH_TOKENS, high=MAX_BATCH_TOKENS)
_context_tokens = Number(int, low=KV_PAD, high=MODEL_CONTEXT)


def context_length(text: str) -> int:
    """Tokens per slot: what `_context_tokens` takes, and a multiple of KV_PAD (llama.cpp pads
    the per-slot context to one)."""
    value = _context_tokens(text)
    if value % KV_PAD:
        raise argparse.ArgumentTypeError(
            f"expected a multiple of {KV_PAD} (llama.cpp pads the context to one) "
            f"from {KV_PAD} to {MODEL_CONTEXT}, got {text!r}"
        )
    return value


def cache_ram(text: str) -> int:
    value = non_negative_int(text)
    if value > MAX_CACHE_RAM_MIB:  # said in full (Number's message rounds it)
        raise argparse.ArgumentTypeError(
            f"expected an integer >= 0 and <= {MAX_CACHE_RAM_MIB} (MiB), got {text!r}"
        )
    return value


def host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected an address to listen on such as 127.0.0.1")
    return text.strip()


def register(subparsers: argparse._SubParsersAction) -> None:
    engine = subparsers.add_parser(
        "engine", help="build, start, stop the embedded llama.cpp engine"
    )
    commands = engine.add_subparsers(dest="engine_command", metavar="ACTION", required=True)

    build = commands.add_parser("build", help="build llama-server + llama-quantize (cached)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument(
        "--sdist", type=existing_file, help="local llama-cpp-python sdist (else pip download)"
    )
    build.set_defaults(func=_run_build)

    start = commands.add_parser("start", help="start the engine (reuse it if already running)")
    start.add_argument("--port", type=port, default=DEFAULT_PORT)
    start.add_argument(
        "--slots", type=_slots, default=EngineConfig.slots, help="parallel slots (-np)"
    )
    add_renamed(
        start,
        "--context-length",
        "--ctx",
        type=context_length,
        default=MODEL_CONTEXT,
        help=f"context tokens per slot (a multiple of {KV_PAD}, at most {MODEL_CONTEXT})",
    )
    start.add_argument(
        "--threads",
        type=_threads,
        default=None,
        help="CPU threads (default: $LOOKAHEAD_SDK_ENGINE_THREADS, else all CPUs)",
    )
    start.add_argument("--quant", choices=QUANTIZATIONS, default=DEFAULT_QUANTIZATION)
    start.add_argument("--host", type=host, default=EngineConfig.host)
    start.add_argument(
        "--cache-ram",
        type=cache_ram,
        default=EngineConfig.cache_ram_mib,
        help="host-memory prompt cache in MiB for prompts evicted from a slot (0: off)",
    )
    start.add_argument(
        "--flash-attn",
        choices=FLASH_ATTN_MODES,
        default=EngineConfig.flash_attn,
        help="llama.cpp flash attention (default off: faster for short turns on long contexts on CPU)",
    )
    start.add_argument(
        "--batch",
        type=_batch,
        default=EngineConfig.batch_tokens,
        help="tokens per batch (--batch-size); a short urgent prompt waits for at most one batch",
    )
    start.add_argument(
        "--timeout", type=positive_float, default=180.0, help="seconds to wait for /health"
    )
    start.set_defaults(func=_run_start)

    stop = commands.add_parser("stop", help="stop the engine we started on a port")
    stop.add_argument("--port", type=port, default=DEFAULT_PORT)
    stop.set_defaults(func=_run_stop)

    status = commands.add_parser("status", help="print the engine's state as JSON")
    status.add_argument("--port", type=port, default=DEFAULT_PORT)
    status.set_defaults(func=_run_status)


def _run_build(args: argparse.Namespace) -> int:
    def build() -> int:
        binaries = ensure_binaries(force=args.force, sdist=args.sdist)
        print(f"llama-server:   {binaries.server}\nllama-quantize: {binaries.quantize}")
        print(f"model ({DEFAULT_QUANTIZATION}): {model_path(DEFAULT_QUANTIZATION)}")
        return 0

    return _reporting_errors(build)


def _run_start(args: argparse.Namespace) -> int:
    def start() -> int:
        config = EngineConfig(
            host=args.host,
            port=args.port,
            slots=args.slots,
            ctx_per_slot=args.context_length,
            threads=args.threads,
            quantization=args.quant,
            cache_ram_mib=args.cache_ram,
            flash_attn=args.flash_attn,
            batch_tokens=args.batch,
        )
        handle = ensure_engine(config, timeout_s=args.timeout)
        verb = "already running" if handle.reused else "started"
        print(f"engine {verb}: {handle.openai_base_url} (pid {handle.pid}, log {handle.log_path})")
        return 0

    return _reporting_errors(start)


def _run_stop(args: argparse.Namespace) -> int:
    def stop() -> int:
        stopped = stop_engine(args.port)
        print(
            f"engine on port {args.port} stopped"
            if stopped
            else f"no engine of ours on {args.port}"
        )
        return 0

    return _reporting_errors(stop)


def _run_status(args: argparse.Namespace) -> int:
    def status() -> int:
        found = engine_status(args.port)
        if found is None:
            print(json.dumps({"port": args.port, "running": False, "healthy": False}))
            return 1
        print(json.dumps(found.to_dict(), indent=2))
        return 0 if found.healthy else 1

    return _reporting_errors(status)


def _reporting_errors(action: Callable[[], int]) -> int:
    with _engine_warnings_on_stderr():
        try:
            return action()
        except (EngineError, ValueError, TypeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1


@contextlib.contextmanager
def _engine_warnings_on_stderr() -> Iterator[None]:
    """Show the engine's warnings (e.g. a state file it repaired) to whoever runs the command."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("lookahead_sdk.engine")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
