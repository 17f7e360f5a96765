"""Running one of our ASGI servers (`router serve`, `sim serve`) as a long-lived process."""

from __future__ import annotations

import gc
from typing import Any


def freeze_startup_objects() -> int:
    """Take every object alive now (modules, the app, its settings) out of the garbage
    collector's reach, after collecting what is already garbage; returns how many.

    A full (generation 2) collection traverses every tracked object. A started server holds
    ~130,000, and each full collection of the router or `sim serve` took 50-110 ms on the 2-core
    development machine: a stall that every request in flight waits out (the router's p99
    overhead, docs/router.md). Frozen objects are never traversed again, so collections see only
    what the server allocated since."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def serve_asgi(app: Any, *, host: str, port: int, log_level: str, lifespan: str = "auto") -> None:
    """uvicorn on `app` until stopped, with the startup heap frozen: uvicorn's loop and
    protocol modules are imported (`Config.load`) before the freeze, so they are in it too."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan=lifespan)
    config.load()
    freeze_startup_objects()
    uvicorn.Server(config).run()
