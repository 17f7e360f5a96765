"""Tool environments of a program: prepared on entry and before a paused program is restored,
torn down exactly once (never concurrently, retried with backoff) on exit or when the router
expires the program's lease. Router cases run the real router over a real `sim serve`."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest

from lookahead_sdk.base.tags import program
from lookahead_sdk.client.tool_environments import (
    Backoff,
    DockerEnvironment,
    EnvironmentLifecycle,
    TempDirEnvironment,
    ToolEnvironments,
)
from lookahead_sdk.errors import ConfigurationError
from lookahead_sdk.router.config import ThunderConfig
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import (
    conversation,
    router_running,
    sims_running,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)
FAST = Backoff(attempts=4, first_delay_s=0.01, max_delay_s=0.05)


class CountingEnvironment:
    def __init__(
        self, *, failures: int = 0, teardown_s: float = 0.0, gate: asyncio.Event | None = None
    ) -> None:
        self.prepares = 0
        self.teardowns = 0
        self.failures = failures
        self.teardown_s = teardown_s
        self.gate = gate  # a teardown waits for it: the test decides when it ends
        self.active = 0
        self.most_active = 0

    async def prepare(self) -> None:
        self.prepares += 1

    async def teardown(self) -> None:
        self.teardowns += 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await asyncio.sleep(self.teardown_s)
            if self.gate is not None:
                await self.gate.wait()
            if self.teardowns <= self.failures:
                raise RuntimeError(f"teardown failure {self.teardowns}")
        finally:
            self.active -= 1


async def test_concurrent_teardowns_run_once_and_never_overlap() -> None:
    env = CountingEnvironment(teardown_s=0.05)
    lifecycle = EnvironmentLifecycle(ToolEnvironments([env], backoff=FAST))
    await lifecycle.prepare()
    await asyncio.gather(*(lifecycle.teardown(c) for c in ("release", "lease") * 10))
    assert env.teardowns == 1 and env.most_active == 1 and lifecycle.torn_down
    assert lifecycle.teardown_cause == "release"
    lifecycle.prepare_soon()
    await lifecycle.prepare()
    assert env.prepares == 1  # nothing is prepared once torn down


async def test_a_failing_teardown_is_retried_with_backoff() -> None:
    env = CountingEnvironment(failures=2)
    lifecycle = EnvironmentLifecycle(ToolEnvironments([env], backoff=FAST))
    await lifecycle.teardown("release")
    assert env.teardowns == 3 and lifecycle.failed == []

    hopeless = CountingEnvironment(failures=100)
    lifecycle = EnvironmentLifecycle(ToolEnvironments([hopeless], backoff=FAST))
    await lifecycle.teardown("release")
    await lifecycle.teardown("lease")
    assert hopeless.teardowns == FAST.attempts and lifecycle.failed == [hopeless]


def test_environments_need_prepare_and_teardown() -> None:
    with pytest.raises(ConfigurationError, match="prepare"):
        program("bad", environments=[object()])


def test_a_sync_program_prepares_and_removes_its_directory() -> None:
    directory = TempDirEnvironment()
    with program("sync-env", environments=[directory]):
        assert directory.path is not None and directory.path.is_dir()
        path = directory.path
    assert not path.exists() and directory.path is None


def one_tight_backend(url: str, **thunder: float) -> ProxyConfig:
    return ProxyConfig((url,), capacities={url: 1000}, thunder=ThunderConfig(**thunder))


async def test_lease_expiry_and_release_together_tear_down_once() -> None:
    with sims_running(1) as sims:
        config = one_tight_backend(sims[0].url, lease_s=0.5, tick_s=0.1)
        async with router_running(config) as router, router.client() as client:
            env = CountingEnvironment(gate=asyncio.Event())
            settings = ToolEnvironments([env], backoff=FAST, watch_interval_s=0.05)
            scope = program("leased", release_to=[router.url], environments=settings)
            async with scope as tags:
                answer = await client.post(
                    "/v1/chat/completions",
                    json={"messages": conversation("leased", 1), "max_tokens": 1},
                    headers=tags.headers(),
                )
                assert answer.status_code == 200
                lifecycle = scope._environments.lifecycle  # type: ignore[union-attr]
                await wait_for(lambda: env.teardowns == 1, 10, "the lease expiry's teardown")
                assert not lifecycle.torn_down  # it waits for the gate: the exit overlaps it
                asyncio.get_running_loop().call_later(0.2, env.gate.set)  # type: ignore[union-attr]
            assert env.teardowns == 1 and env.most_active == 1
            assert lifecycle.teardown_cause == "lease" and env.prepares == 1
            assert scope.released == [router.url]  # the release itself still answered


async def test_prepare_runs_when_a_paused_program_is_next_to_be_restored() -> None:
    with sims_running(1) as sims:
        config = one_tight_backend(sims[0].url, decay_half_life_s=0.0)
        async with router_running(config) as router, router.client() as client:
            long = conversation("x", 1, words=280)  # ~600 tokens: two do not fit in 1,000
            await client.post("/v1/chat/completions", json={"messages": long, "program_id": "A"})
            env = CountingEnvironment()
            settings = ToolEnvironments([env], watch_interval_s=0.05)
            async with program("B", release_to=[router.url], environments=settings) as tags:
                assert env.prepares == 1
                held = asyncio.create_task(
                    client.post(
                        "/v1/chat/completions", json={"messages": long}, headers=tags.headers()
                    )
                )
                await wait_for(lambda: env.prepares == 2, 10, "a prepare before the restore")
                view = (await client.get("/programs/B")).json()
                assert view["status"] == "paused" and view["restoring_soon"]
                assert not held.done()
                await client.post("/programs/release", json={"program_id": "A"})
                assert (await asyncio.wait_for(held, 10)).status_code == 200
            assert env.teardowns == 1


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not docker_available(), reason="needs a working `docker info`")
async def test_docker_environment_runs_and_removes_a_container() -> None:
    name = f"lookahead-test-{uuid.uuid4().hex[:8]}"
    container = DockerEnvironment("busybox", name)

    async def running() -> str:
        process = await asyncio.create_subprocess_exec(
            "docker", "inspect", "-f", "{{.State.Running}}", name,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await process.communicate()
        return out.decode().strip()

    async with program("docker-env", environments=[container]):
        assert await running() == "true"
        await container.prepare()  # idempotent
    assert await running() == ""
