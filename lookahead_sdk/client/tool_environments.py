"""Tool resources that live as long as an agent program: a sandbox directory, a container, a
port. Register them with the program:

    async with program("agent-7", release_to=[router], environments=[TempDirEnvironment()]):
        ...

`prepare()` runs when the program starts, and again when the router reports the program paused
and next in its restore queue (`restoring_soon` in `GET /programs/{id}`), so the environment is
ready before the program runs again. `teardown()` runs exactly once per environment when the
program ends (context exit) or the router expires its lease, whichever comes first; a failing
teardown is retried with backoff, and never runs concurrently with itself or with a prepare.

The router's view is polled by a light watcher (`GET {router}/programs/{id}` every second) that
runs while the program has both routers to release to and environments.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import quote

import httpx

from lookahead_sdk.base import tags as base_tags
from lookahead_sdk.errors import ConfigurationError

log = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class ToolEnvironment(Protocol):
    """A resource a program's tools use. `prepare` must be idempotent (it runs at start and
    again before a paused program is restored); `teardown` releases it."""

    async def prepare(self) -> None: ...

    async def teardown(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    attempts: int = 5
    first_delay_s: float = 0.5
    max_delay_s: float = 10.0

    def delays(self) -> list[float]:
        """Waits before each retry (`attempts - 1` of them)."""
        return [min(self.first_delay_s * 2**i, self.max_delay_s) for i in range(self.attempts - 1)]


@dataclass
class ToolEnvironments:
    """A program's environments and how they are run; `program(environments=[...])` wraps a
    plain list in one with the defaults."""

    environments: Sequence[ToolEnvironment]
    backoff: Backoff = field(default_factory=Backoff)
    watch_interval_s: float = 1.0

    def __post_init__(self) -> None:
        self.environments = tuple(self.environments)
        for env in self.environments:
            if not isinstance(env, ToolEnvironment):
                raise ConfigurationError(
                    f"environments must have async prepare() and teardown(); got {env!r}"
                )
        if not self.watch_interval_s > 0:
            raise ConfigurationError(
                f"watch_interval_s must be > 0 seconds, got {self.watch_interval_s!r}"
            )


class EnvironmentLifecycle:
    """Prepares and tears down a program's environments on one event loop.

    `teardown` runs once: the first call starts it, later and concurrent calls wait for that
    same run. A prepare in progress is cancelled first; no prepare starts after it."""

    def __init__(self, settings: ToolEnvironments) -> None:
        self.settings = settings
        self._lock = asyncio.Lock()  # prepare and teardown never overlap
        self._teardown: asyncio.Task[None] | None = None
        self._preparing: asyncio.Task[None] | None = None
        self.teardown_cause: str | None = None
        self.failed: list[ToolEnvironment] = []  # teardowns that failed every attempt

    @property
    def teardown_started(self) -> bool:
        return self._teardown is not None

    @property
    def torn_down(self) -> bool:
        return self._teardown is not None and self._teardown.done()

    async def prepare(self) -> None:
        """Prepare every environment; the first failure is raised once all have finished (none
        left preparing behind a teardown that follows)."""
        if self._teardown is not None:
            return
        async with self._lock:
            if self._teardown is None:
                results = await asyncio.gather(
                    *(env.prepare() for env in self.settings.environments), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException):
                        raise result

    def prepare_soon(self) -> None:
        """Start a prepare in the background (the program is about to be restored)."""
        if self._teardown is None and (self._preparing is None or self._preparing.done()):
            self._preparing = asyncio.create_task(self._prepare_logged(), name="env-prepare")

    async def _prepare_logged(self) -> None:
        try:
            await self.prepare()
        except Exception:
            log.exception("preparing tool environments failed")

    def start_teardown(self, cause: str) -> asyncio.Task[None]:
        """The one teardown run: started by the first caller, shared by every later one."""
        if self._teardown is None:
            self.teardown_cause = cause
            self._teardown = asyncio.create_task(self._teardown_all(), name="env-teardown")
        return self._teardown

    async def teardown(self, cause: str) -> None:
        await asyncio.shield(self.start_teardown(cause))

    async def _teardown_all(self) -> None:
        if self._preparing is not None and not self._preparing.done():
            self._preparing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._preparing
        async with self._lock:
            await asyncio.gather(*(self._teardown_one(e) for e in self.settings.environments))

    async def _teardown_one(self, env: ToolEnvironment) -> None:
        for delay in [*self.settings.backoff.delays(), None]:
            try:
                await env.teardown()
                return
            except Exception as error:
                if delay is None:
                    log.error("teardown of %r failed for good: %s", env, error)
                    self.failed.append(env)
                    return
                log.warning("teardown of %r failed (%s); retrying in %.1f s", env, error, delay)
                await asyncio.sleep(delay)


class RouterWatcher:
    """Polls `GET {router}/programs/{id}`: tears the environments down when the router reports
    the program terminated (its lease expired, or it was released there), prepares them when a
    paused program becomes `restoring_soon`."""

    def __init__(
        self, routers: Sequence[str], program_id: str, lifecycle: EnvironmentLifecycle
    ) -> None:
        self.urls = [f"{r.rstrip('/')}/programs/{quote(program_id, safe='')}" for r in routers]
        self.lifecycle = lifecycle
        self._soon: dict[str, bool] = {}

    async def run(self) -> None:
        interval = self.lifecycle.settings.watch_interval_s
        async with httpx.AsyncClient(timeout=max(interval, 2.0)) as client:
            while not self.lifecycle.teardown_started:
                for url in self.urls:
                    await self._check(client, url)
                await asyncio.sleep(interval)

    async def _check(self, client: httpx.AsyncClient, url: str) -> None:
        try:
            response = await client.get(url)
        except httpx.HTTPError as error:
            log.debug("watching %s: %s", url, error)
            return
        if response.status_code != 200:
            return  # 404: the router has not seen the program yet
        try:
            view = response.json()
        except ValueError:
            view = None
        if not isinstance(view, dict):  # not the router's view (a proxy's page): as if unreachable
            log.debug("watching %s: not a program view: %.200r", url, response.text)
            return
        if view.get("terminated"):
            cause = "lease" if view.get("lease_expired") else "released at the router"
            self.lifecycle.start_teardown(cause)
            return
        soon = bool(view.get("restoring_soon"))
        if soon and not self._soon.get(url):
            self.lifecycle.prepare_soon()
        self._soon[url] = soon


class _LoopThread:
    """An event loop on a daemon thread, for programs opened with a plain `with`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class ProgramEnvironments:
    """What `base.tags.program` runs for its environments: prepare on entry, watch the routers,
    tear down on exit. The same coroutines serve `with` (on a private loop thread) and
    `async with` (on the caller's loop)."""

    def __init__(self, scope: base_tags.program) -> None:
        given = scope.environments
        self.settings = given if isinstance(given, ToolEnvironments) else ToolEnvironments(given)
        self.program_id = scope.tags.program_id or ""
        self.routers = tuple(scope.release_to)
        self.lifecycle: EnvironmentLifecycle | None = None
        self._watch: asyncio.Task[None] | None = None
        self._thread: _LoopThread | None = None

    async def astart(self) -> None:
        self.lifecycle = EnvironmentLifecycle(self.settings)
        try:
            await self.lifecycle.prepare()
        except BaseException:
            # The program does not start, so never ends: release what was prepared now.
            await self.lifecycle.teardown("prepare failed")
            raise
        if self.routers:
            watcher = RouterWatcher(self.routers, self.program_id, self.lifecycle)
            self._watch = asyncio.create_task(watcher.run(), name="env-watch")

    async def aclose(self) -> None:
        try:
            if self._watch is not None:
                self._watch.cancel()
                try:
                    await self._watch
                except asyncio.CancelledError:
                    pass
                except Exception:  # it stopped watching early: the teardown still runs
                    log.exception("watching the routers for program %s failed", self.program_id)
        finally:
            if self.lifecycle is not None:
                await self.lifecycle.teardown("release")

    def start(self) -> None:
        self._thread = _LoopThread()
        try:
            self._thread.run(self.astart())
        except BaseException:
            self._thread.close()
            raise

    def close(self) -> None:
        assert self._thread is not None
        try:
            self._thread.run(self.aclose())
        finally:
            self._thread.close()


base_tags.register_environments(ProgramEnvironments)


# --- ready-made environments -------------------------------------------------------------------


class TempDirEnvironment:
    """A scratch directory for the program's tools (`path`), removed at teardown."""

    def __init__(self, prefix: str = "lookahead-tools-", parent: str | None = None) -> None:
        self.prefix = prefix
        self.parent = parent
        self.path: Path | None = None

    async def prepare(self) -> None:
        if self.path is None or not self.path.is_dir():
            self.path = Path(tempfile.mkdtemp(prefix=self.prefix, dir=self.parent))

    async def teardown(self) -> None:
        if self.path is not None:
            try:
                await asyncio.to_thread(shutil.rmtree, self.path, ignore_errors=False)
            except FileNotFoundError:
                if self.path.exists():  # something inside vanished meanwhile: retried
                    raise
                # else gone already (a tool removed it): nothing left to release
            self.path = None

    def __repr__(self) -> str:
        return f"TempDirEnvironment({self.path})"


class DockerEnvironment:
    """A container the program's tools run commands in (`docker exec NAME ...`): started at
    prepare (or restarted if it was stopped), removed at teardown."""

    def __init__(
        self,
        image: str,
        name: str,
        *,
        command: Sequence[str] = ("sleep", "infinity"),
        run_args: Sequence[str] = (),
        docker: str = "docker",
    ) -> None:
        self.image, self.name = image, name
        self.command, self.run_args, self.docker = tuple(command), tuple(run_args), docker

    async def prepare(self) -> None:
        state = await self._docker("inspect", "-f", "{{.State.Running}}", self.name, check=False)
        if state.strip() == "true":
            return
        if state.strip() == "false":
            await self._docker("start", self.name)
            return
        await self._docker(
            "run", "-d", "--name", self.name, *self.run_args, self.image, *self.command
        )

    async def teardown(self) -> None:
        await self._docker("rm", "-f", self.name)

    async def _docker(self, *args: str, check: bool = True) -> str:
        process = await asyncio.create_subprocess_exec(
            self.docker, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        if check and process.returncode != 0:
            raise RuntimeError(f"{self.docker} {args[0]} failed: {err.decode().strip()}")
        return out.decode() if process.returncode == 0 else ""

    def __repr__(self) -> str:
        return f"DockerEnvironment({self.image!r}, name={self.name!r})"
