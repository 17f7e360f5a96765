"""AdapterLoop.arun: a quick operation answers its async hook without yielding the caller's
loop; a slow one, or one that needs the caller's loop, is awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest

from lookahead_sdk.core import hosted
from lookahead_sdk.core.hosted import QUICK_OPERATION_S, AdapterLoop


@pytest.fixture
def adapter_loop() -> Iterator[AdapterLoop]:
    loop = AdapterLoop("test-adapter")
    yield loop
    loop.close([])


def test_a_quick_operation_returns_before_the_callers_other_tasks_run(
    adapter_loop: AdapterLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "Quick" is a bound on the operation's time: a generous one, so a busy machine cannot
    # push this operation past it.
    monkeypatch.setattr(hosted, "QUICK_OPERATION_S", 30.0)

    async def quick() -> str:
        return "done"

    async def main() -> list[str]:
        order: list[str] = []
        asyncio.get_running_loop().call_soon(order.append, "other task")
        order.append(await adapter_loop.arun(quick()))
        await asyncio.sleep(0)
        return order

    assert asyncio.run(main()) == ["done", "other task"]


def test_a_slow_operation_lets_the_callers_loop_run_meanwhile(adapter_loop: AdapterLoop) -> None:
    async def slow() -> str:
        await asyncio.sleep(QUICK_OPERATION_S * 25)
        return "done"

    async def main() -> list[str]:
        order: list[str] = []
        asyncio.get_running_loop().call_soon(order.append, "other task")
        order.append(await adapter_loop.arun(slow()))
        return order

    assert asyncio.run(main()) == ["other task", "done"]


def test_an_operation_that_needs_the_callers_loop_completes(adapter_loop: AdapterLoop) -> None:
    """E.g. a summary through the framework's own client, which lives on the caller's loop."""

    async def main() -> str:
        home = asyncio.get_running_loop()

        async def on_home() -> str:
            return "from the caller's loop"

        async def needs_home() -> str:
            future = asyncio.run_coroutine_threadsafe(on_home(), home)
            return await asyncio.wrap_future(future)

        return await asyncio.wait_for(adapter_loop.arun(needs_home()), timeout=30)

    assert asyncio.run(main()) == "from the caller's loop"


def test_a_failing_quick_operation_raises_in_the_hook(adapter_loop: AdapterLoop) -> None:
    async def fails() -> None:
        raise ValueError("window_tokens must be positive")

    async def main() -> None:
        await adapter_loop.arun(fails())

    with pytest.raises(ValueError, match="window_tokens"):
        asyncio.run(main())


def test_a_submitted_failure_is_raised_by_the_very_next_call(adapter_loop: AdapterLoop) -> None:
    """The next call raises it even when it comes before the submitted operation ran (the
    hook right after a segment boundary), instead of running its own operation."""
    hosted_runtime = hosted.HostedRuntime(adapter_loop, cast(Any, "runtime"))
    ran: list[str] = []

    async def fails_later(_: object) -> None:
        await asyncio.sleep(0.05)  # still queued when the call below is given
        raise ValueError("tokenizer timed out")

    async def record(_: object) -> str:
        ran.append("call")
        return "done"

    hosted_runtime.submit(fails_later)
    with pytest.raises(ValueError, match="tokenizer timed out"):
        hosted_runtime.call(record)
    assert ran == []  # the call's own operation did not run
    assert hosted_runtime.call(record) == "done"  # raised once, then gone


def test_several_submitted_failures_are_raised_by_one_call(adapter_loop: AdapterLoop) -> None:
    """Raised together (the first, with notes naming the others): one per call would make as
    many calls after it fail, each without running its own operation."""
    hosted_runtime = hosted.HostedRuntime(adapter_loop, cast(Any, "runtime"))

    def failing(number: int) -> Any:
        async def operation(_: object) -> None:
            raise ValueError(f"failure {number}")

        return operation

    async def record(_: object) -> str:
        return "done"

    for number in range(3):
        hosted_runtime.submit(failing(number))
    with pytest.raises(ValueError, match="failure 0") as raised:
        hosted_runtime.call(record)
    notes = getattr(raised.value, "__notes__", [])
    assert [n for n in notes if "failure 1" in n] and [n for n in notes if "failure 2" in n]
    assert hosted_runtime.call(record) == "done"  # none left for the next call
