"""The warmer interface: every hook is a declared method, and a wrapper forwards all of them.

The bug this design removes: a wrapper forwarding only the hooks its author remembered (the
tool-call warmer lost the live-context copy, the wait for the chunk in flight and the spend
accounting of the llama.cpp warmer it wrapped)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from lookahead_sdk import (
    CommitKind,
    DelegatingWarmer,
    LookaheadRuntime,
    RequestShape,
    Warmer,
    WarmupSpend,
)
from lookahead_sdk.client.toolcall_transport import ToolCallWarmer
from lookahead_sdk.core.warmer import WarmupResult

from .test_live_copy import LARGE, CopyingWarmer, drive, offload_runtime

HOOKS = sorted(
    name
    for name, member in vars(Warmer).items()
    if not name.startswith("_") and inspect.isfunction(member)
)
SAMPLE_ARGUMENTS: dict[str, Any] = {
    "messages": [{"role": "user", "content": "hello"}],
    "shape": RequestShape("model"),
    "open_last": True,
    "spend": WarmupSpend(),
    "group_id": "group-1",
    "program_id": "program-1",
    "share": 0.5,
    "shared_messages": 2,
    "replaced": True,
    "live_prefix_share": 0.25,
    "child_id": "program-1/sub1",
}


class RecordingWarmer(Warmer):
    """Records every hook call as (hook, bound arguments)."""

    copies_live_context = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _record(self, hook: str, *args: Any, **kwargs: Any) -> None:
        bound = inspect.signature(getattr(Warmer, hook)).bind(self, *args, **kwargs)
        bound.apply_defaults()
        self.calls.append((hook, {k: v for k, v in bound.arguments.items() if k != "self"}))


def _recorder(hook: str) -> Any:
    if inspect.iscoroutinefunction(getattr(Warmer, hook)):

        async def record_async(self: RecordingWarmer, *args: Any, **kwargs: Any) -> Any:
            self._record(hook, *args, **kwargs)
            return WarmupResult(1, 0, 0.0) if hook == "warm" else True

        return record_async

    def record(self: RecordingWarmer, *args: Any, **kwargs: Any) -> Any:
        self._record(hook, *args, **kwargs)
        return True

    return record


for _hook in HOOKS:
    setattr(RecordingWarmer, _hook, _recorder(_hook))


def call(warmer: Warmer, hook: str) -> dict[str, Any]:
    parameters = list(inspect.signature(getattr(Warmer, hook)).parameters)[1:]
    arguments = {name: SAMPLE_ARGUMENTS[name] for name in parameters}
    result = getattr(warmer, hook)(**arguments)
    if inspect.isawaitable(result):
        asyncio.run(result)
    return arguments


def test_the_interface_declares_every_hook_the_runtime_calls() -> None:
    runtime_source = inspect.getsource(LookaheadRuntime)
    called = {hook for hook in HOOKS if f".{hook}(" in runtime_source}
    assert set(HOOKS) - {"aclose"} <= called  # aclose belongs to whoever owns the warmer
    base = Warmer()
    with pytest.raises(NotImplementedError, match="must implement warm"):
        call(base, "warm")
    assert base.finish_warm_up("p") is False and not base.copies_live_context


@pytest.mark.parametrize("wrapper", [DelegatingWarmer, ToolCallWarmer])
@pytest.mark.parametrize("hook", HOOKS)
def test_a_wrapper_forwards_every_hook(wrapper: type[DelegatingWarmer], hook: str) -> None:
    inner = RecordingWarmer()
    arguments = call(wrapper(inner), hook)
    [(seen_hook, seen)] = inner.calls
    assert seen_hook == hook
    if wrapper is ToolCallWarmer and "messages" in arguments:
        # Rendered like the tool-call transport sends them; every other argument unchanged.
        seen = {k: v for k, v in seen.items() if k not in ("messages", "shape")}
        arguments = {k: v for k, v in arguments.items() if k not in ("messages", "shape")}
    assert seen == arguments
    assert wrapper(inner).copies_live_context


def test_a_wrapper_rejects_what_is_not_a_warmer() -> None:
    with pytest.raises(TypeError, match=r"subclass lookahead_sdk\.Warmer"):
        DelegatingWarmer(object())  # type: ignore[arg-type]


def test_a_wrapped_warmer_still_gets_the_live_context_copies(tmp_path: Path) -> None:
    """What failed before: the runtime asked the wrapper for a copy it did not forward."""
    inner = CopyingWarmer()

    async def run() -> LookaheadRuntime:
        async with offload_runtime(tmp_path, ToolCallWarmer(inner)) as runtime:
            await drive(runtime, [120] * 30)
        return runtime

    runtime = asyncio.run(run())
    assert inner.copies and runtime.stats.live_copies == len(inner.copies)


class FailingHandOver(RecordingWarmer):
    async def hand_over(self, *args: Any, **kwargs: Any) -> None:
        self._record("hand_over", *args, **kwargs)
        raise ConnectionError("server gone")


def test_a_failed_hand_over_leaves_the_sub_agent_to_prefill_its_context(tmp_path: Path) -> None:
    """Handing a sub-agent its slot is an optimization: a warmer failing at it is logged, and
    the caller goes on to the sub-agent's first request with the context it was given."""
    warmer = FailingHandOver()
    spawned = [{"role": "system", "content": "sub-agent"}, {"role": "user", "content": "go"}]

    async def run() -> None:
        async with offload_runtime(tmp_path, warmer) as runtime:
            await runtime.hand_over(f"{runtime.program_id}/sub1", spawned)

    asyncio.run(run())
    [arguments] = [seen for hook, seen in warmer.calls if hook == "hand_over"]
    assert arguments["messages"] == spawned and arguments["child_id"].endswith("/sub1")


@pytest.mark.parametrize("mode", ["lookahead", "sync"])
def test_every_commit_tells_the_warmer_how_the_live_context_was_replaced(
    tmp_path: Path, mode: str
) -> None:
    """A hit calls `committed`; a transform on the critical path (sync mode here, a fallback
    alike) calls `committed_synchronously`: a llama.cpp warmer marks the slots holding the
    replaced context dead on either (`SlotPairs.retire`)."""
    warmer = RecordingWarmer()

    async def run() -> list[CommitKind]:
        commits: list[CommitKind] = []
        async with offload_runtime(tmp_path, warmer, mode=mode) as runtime:
            await drive(runtime, ([120] * 3 + [LARGE]) * 6, commits)
        return commits

    commits = asyncio.run(run())
    hits = [seen for hook, seen in warmer.calls if hook == "committed"]
    synchronous = [seen for hook, seen in warmer.calls if hook == "committed_synchronously"]
    assert commits
    if mode == "lookahead":
        assert len(hits) == commits.count(CommitKind.HIT) and not synchronous
    else:
        assert not hits and synchronous == [
            {"program_id": warmer.calls[0][1]["program_id"], "replaced": True}
        ] * len(commits)
