"""`serve_asgi`: our servers start uvicorn with the startup heap frozen, uvicorn's own modules
included, so a full collection does not traverse them while requests are in flight."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from lookahead_sdk.cli.serving import freeze_startup_objects, serve_asgi


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    gc.disable()  # no automatic collection between the test's steps
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


class Tracked:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_freeze_takes_live_objects_out_of_collections_and_collects_garbage_first() -> None:
    live = Tracked()
    garbage = weakref.ref(Tracked())
    assert garbage() is not None
    frozen = freeze_startup_objects()
    assert frozen == gc.get_freeze_count() > 0
    assert garbage() is None
    # Frozen objects are in no generation the collector traverses.
    assert not any(o is live for generation in range(3) for o in gc.get_objects(generation))


def test_serve_asgi_freezes_after_loading_uvicorn_and_before_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    def run(server: uvicorn.Server, sockets: Any = None) -> None:
        seen["loaded"] = server.config.loaded
        seen["frozen"] = gc.get_freeze_count()
        seen["protocol_frozen"] = not any(
            o is server.config.http_protocol_class for g in range(3) for o in gc.get_objects(g)
        )
        seen["port"] = server.config.port

    monkeypatch.setattr(uvicorn.Server, "run", run)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not served in this test")

    serve_asgi(app, host="127.0.0.1", port=18999, log_level="warning", lifespan="off")
    assert seen["loaded"] is True
    assert seen["frozen"] > 0
    assert seen["protocol_frozen"]
    assert seen["port"] == 18999
