"""`engine start` flags checked when parsed, hosts the engine cannot listen on, the
health check past a proxy, and the probe's engines stopped when a later one fails to start."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk.engine import probe
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import EngineStartError, PortInUseError
from lookahead_sdk.engine.server import EngineHandle, is_healthy, port_in_use
from tests.support.cli import run_cli

# Each value passes the flag's old type (a positive count) but EngineConfig rejects it.
REJECTED = [
    ("--context-length", "1000"),  # not a multiple of 256
    ("--context-length", "16384"),  # past the model's context
    ("--ctx", "1000"),  # the old spelling, same check
    ("--batch", "16"),
    ("--slots", "300"),
    ("--threads", "5000"),
    ("--cache-ram", "9999999"),
    ("--host", ""),
]


@pytest.mark.parametrize(("flag", "value"), REJECTED, ids=[f"{f} {v}" for f, v in REJECTED])
def test_engine_start_rejects_what_the_config_would_reject_naming_the_flag(
    flag: str, value: str, isolated_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["engine", "start", "--port", "18413", flag, value], capsys)
    assert code == 2, err
    error_lines = [line for line in err.splitlines() if "deprecated" not in line]
    assert len(error_lines) == 1 and f"argument {flag}:" in error_lines[0], err
    assert "Traceback" not in err and not isolated_cache.exists()  # nothing started or written


def test_engine_start_still_takes_every_default_and_a_valid_context_length() -> None:
    from lookahead_sdk.cli import build_parser

    args = build_parser().parse_args(
        ["engine", "start", "--context-length", "4096", "--host", "127.0.0.1"]
    )
    config = EngineConfig(
        host=args.host,
        slots=args.slots,
        ctx_per_slot=args.context_length,
        cache_ram_mib=args.cache_ram,
        batch_tokens=args.batch,
    )
    assert config == EngineConfig(ctx_per_slot=4096)


def test_a_host_this_machine_cannot_listen_on_is_an_engine_error_naming_the_flag() -> None:
    with pytest.raises(EngineStartError, match=r"host '10\.255\.255\.1'.*--host"):
        port_in_use("10.255.255.1", 18414)  # an address not on this machine


def test_an_ipv6_host_is_probed_and_reached_in_brackets() -> None:
    with socket.socket(socket.AF_INET6) as listener:
        try:
            listener.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        listener.listen()
        assert port_in_use("::1", listener.getsockname()[1])
    handle = EngineHandle(
        pid=1,
        config=EngineConfig(host="::1", port=18415),
        model_path=Path("m.gguf"),
        log_path=Path("e.log"),
        started_at=0.0,
    )
    assert handle.base_url == "http://[::1]:18415"


@pytest.fixture
def healthy_server() -> Iterator[str]:
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "ok"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_the_health_check_asks_the_local_engine_not_a_proxy(
    variable: str, healthy_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "http://127.0.0.1:9")  # nothing listens there
    assert is_healthy(healthy_server)


def test_the_probe_stops_the_engines_it_started_when_a_later_one_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[int] = []
    stopped: list[int] = []

    class Started:
        def __init__(self, port: int) -> None:
            self.port = port
            self.base_url = f"http://127.0.0.1:{port}"

        def stop(self) -> bool:
            stopped.append(self.port)
            return True

    def start(config: EngineConfig, **_: Any) -> Started:
        if started:  # the second engine's port is taken
            raise PortInUseError(f"port {config.port} is in use")
        started.append(config.port)
        return Started(config.port)

    monkeypatch.setattr(probe, "start_engine", start)
    with pytest.raises(PortInUseError):
        probe.probe(["q4_1", "q8_0"], 18416, [64], 1)
    assert started == [18416] and stopped == [18416]
