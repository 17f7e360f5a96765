"""A backend closing a pooled keep-alive connection just as the router sends the next call on it
(servers drop idle connections after ~5 s) is no backend failure: the call goes out once more on
a new connection, the backend stays up, and the call runs once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import program, router_running

pytestmark = pytest.mark.timeout(60)


@dataclass
class ClosingBackend:
    """A raw HTTP/1.1 backend. Every connection answers its first inference call and keeps
    alive; a second inference call on the same connection finds it closed unread, as an idle
    close racing the write would. `answered` counts the calls it ran."""

    answered: int = 0
    closed_unread: int = 0
    url: str = ""
    _inference: dict[int, int] = field(default_factory=dict)  # connection -> calls run

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = id(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                length = 0
                for line in head.decode().split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if method == "POST" and self._inference.get(connection, 0) >= 1:
                    self.closed_unread += 1
                    return  # closes the connection without reading the call
                body = await reader.readexactly(length) if length else b""
                answer = self._answer(path, body)
                if method == "POST":
                    self._inference[connection] = self._inference.get(connection, 0) + 1
                    self.answered += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"connection: keep-alive\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(answer), answer)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, path: str, body: bytes) -> bytes:
        if path == "/get_server_info":
            return json.dumps({"max_total_num_tokens": 100_000}).encode()
        if path == "/health":
            return b'{"status": "ok"}'
        usage = {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103}
        return json.dumps({"choices": [{"index": 0, "text": "a b c"}], "usage": usage}).encode()


@contextlib.asynccontextmanager
async def closing_backend() -> AsyncIterator[ClosingBackend]:
    backend = ClosingBackend()
    server = await asyncio.start_server(backend.handle, "127.0.0.1", 0)
    backend.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield backend


async def test_a_pooled_connection_closed_by_the_backend_is_resent_not_a_failure() -> None:
    async with closing_backend() as backend:
        config = ProxyConfig((backend.url,), retry_s=60)
        async with router_running(config) as router, router.client() as client:
            # The router releases a connection to its pool just after the answer went out: a
            # call sent at once may open a new one. Calls go on until two met a closed one.
            steps = 0
            while backend.closed_unread < 2 and steps < 50:
                steps += 1
                messages = [{"role": "user", "content": f"step {steps}"}]
                call = {"messages": messages, "program_id": "K", "max_tokens": 2}
                answer = await client.post("/v1/chat/completions", json=call)
                assert answer.status_code == 200, answer.text
            assert backend.closed_unread == 2
            assert backend.answered == steps  # each call ran once
            assert not router.proxy.counters.upstream_errors
            assert (await client.get("/health")).json()["backends_down"] == []
            assert (await program(client, "K"))["steps"] == steps
