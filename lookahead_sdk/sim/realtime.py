"""Wall-clock driver: runs a `SimCluster` inside an asyncio loop, `time_scale` wall seconds per
simulated second (a time scale above 1 slows the simulation down, so Python and HTTP overhead
become small in simulated time). Token events reach listeners at their simulated times."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lookahead_sdk.sim.cluster import SimCluster
from lookahead_sdk.sim.request import SimRequest

log = logging.getLogger(__name__)


class RealtimeDriver:
    def __init__(self, cluster: SimCluster, *, time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise ValueError(
                f"time_scale must be > 0 (wall seconds per simulated second), got {time_scale!r}"
            )
        self.cluster = cluster
        self.time_scale = time_scale
        self._loop: asyncio.AbstractEventLoop | None = None
        self._origin_s = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def now_ms(self) -> float:
        assert self._loop is not None, "RealtimeDriver.start() first"
        return (self._loop.time() - self._origin_s) * 1000.0 / self.time_scale

    def wall_s(self, sim_ms: float) -> float:
        """Wall seconds that `sim_ms` simulated milliseconds take."""
        return sim_ms / 1000.0 * self.time_scale

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._origin_s = self._loop.time()
        self._task = asyncio.create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, request: SimRequest) -> None:
        """Submit now; `request.arrival_ms` is set to the current simulated time."""
        request.arrival_ms = self.now_ms()
        self.cluster.submit(request)
        self._wake.set()

    def abort(self, request: SimRequest) -> bool:
        """Stop a request whose client went away (its KV frees at once)."""
        aborted = self.cluster.abort(request.rid, self.now_ms())
        self._wake.set()
        return aborted

    async def _run(self) -> None:
        try:
            await self._loop_forever()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.error = error
            log.exception("the simulated engine stopped")
            raise

    async def _loop_forever(self) -> None:
        while True:
            now = self.now_ms()
            self.cluster.finish_due(now)
            self.cluster.start_idle(now)
            end_ms = self.cluster.next_end_ms()
            self._wake.clear()
            timeout = None if end_ms is None else max(0.0, self.wall_s(end_ms - self.now_ms()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
