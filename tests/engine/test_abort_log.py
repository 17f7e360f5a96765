"""The embedded engine's aborted batches as its log tells them (`engine.abort_log`)."""

from __future__ import annotations

from lookahead_sdk.engine.abort_log import BatchAborts, batch_aborts
from lookahead_sdk.engine.patches import ABORT_LOG_LINE


def test_each_abort_line_counts_one_batch_and_its_undone_tokens() -> None:
    log = "\n".join(
        [
            "slot update_slots: id  0 | task 12 | prompt processing progress, n_tokens = 256",
            f"1.03.257.412 I srv  unbatch_best: {ABORT_LOG_LINE}, 128 tokens undone",
            "srv  log_server_r: done request: POST /completion 127.0.0.1 200",
            f"1.06.258.369 I srv  unbatch_best: {ABORT_LOG_LINE}, 17 tokens undone",
        ]
    )
    assert batch_aborts(log) == BatchAborts(aborts=2, undone_tokens=145)


def test_a_stock_server_log_has_none() -> None:
    assert batch_aborts("srv  update_slots: all slots are idle\n") == BatchAborts()
    assert batch_aborts("").to_json() == {"aborts": 0, "undone_tokens": 0}
