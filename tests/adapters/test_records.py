"""The adapters' bounded per-call records: `CallLog` and `HookClock`."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lookahead_sdk.adapters._records import DEFAULT_KEEP, CallLog, HookClock
from lookahead_sdk.errors import ConfigurationError


def test_the_log_keeps_the_most_recent_records_and_reads_like_a_list() -> None:
    log: CallLog[int] = CallLog(keep=3)
    for n in range(10):
        log.append(n)
    assert len(log) == 3 and log.keep == 3
    assert list(log) == [7, 8, 9] and log[0] == 7 and log[-1] == 9 and log[1:] == [8, 9]
    assert [n for n in log if n > 7] == [8, 9]
    with pytest.raises(IndexError):
        log[3]
    log.clear()
    assert len(log) == 0 and list(log) == []


def test_the_default_bound() -> None:
    log: CallLog[int] = CallLog()
    for n in range(DEFAULT_KEEP + 5):
        log.append(n)
    assert DEFAULT_KEEP == 1000 and len(log) == DEFAULT_KEEP and log[0] == 5


def test_the_observer_sees_every_record_even_those_not_kept() -> None:
    seen: list[int] = []
    log: CallLog[int] = CallLog(keep=0, on_record=seen.append)
    for n in range(2500):
        log.append(n)
    assert seen == list(range(2500)) and len(log) == 0


def test_records_from_several_threads_are_all_observed() -> None:
    seen: list[int] = []
    log: CallLog[int] = CallLog(keep=10, on_record=seen.append)

    def record(base: int) -> None:
        for n in range(1000):
            log.append(base + n)

    threads = [threading.Thread(target=record, args=(k * 1000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(4000)) and len(log) == 10


@pytest.mark.parametrize("keep", [-1, 1.5, "10", None, True])
def test_a_bad_bound_is_refused_naming_the_argument(keep: Any) -> None:
    with pytest.raises(ConfigurationError, match="keep_calls must be an int >= 0"):
        CallLog(keep)


def test_a_bad_observer_is_refused_naming_the_argument() -> None:
    with pytest.raises(ConfigurationError, match="on_call must be a callable"):
        CallLog(10, "print")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="on_tool_output must be a callable"):
        CallLog(10, 3, names=("keep_calls", "on_tool_output"))  # type: ignore[arg-type]


def test_the_clock_keeps_recent_turns_and_reports_each_ended_one() -> None:
    ended: list[float] = []
    clock = HookClock(keep=2, on_turn=ended.append)
    with clock.measure():  # a hook before the first model call opens a turn
        pass
    for _ in range(4):
        clock.start_turn()
        with clock.measure():
            pass
    assert len(ended) == 4  # the turn still running is not reported yet
    turns = clock.turns_ms
    assert len(turns) == 3 and turns[:2] == ended[-2:]  # two kept ended turns + the running one
    clock.end_turn()
    assert len(ended) == 5 and clock.turns_ms == ended[-2:]
    assert all(t >= 0 for t in ended)


def test_the_clock_refuses_a_bad_bound() -> None:
    with pytest.raises(ConfigurationError, match="keep_calls"):
        HookClock(keep=-5)
