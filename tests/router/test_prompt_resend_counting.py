"""A chat request that resends its program's last messages unchanged (a client's retry after a
failure, another sample at the same point) adds nothing to the program: before, its whole
history counted again on top of the last usage, and with a backend that reports no usage the
program's tokens grew by its history on every resend."""

from __future__ import annotations

from lookahead_sdk.router.prompt_delta import PromptTracker
from lookahead_sdk.router.proxy_config import ProxyConfig
from tests.router.proxy_helpers import StubBackend, router_running, stub_running


def test_the_same_messages_again_add_no_tokens() -> None:
    tracker = PromptTracker(len, lambda m: len(m["content"]))
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "defg"}]
    assert tracker.new_tokens("p", {"messages": messages}, remember=True) == 7
    assert tracker.new_tokens("p", {"messages": messages}, remember=True) == 0
    assert tracker.new_tokens("p", {"messages": list(messages)}, remember=False) == 0
    longer = [*messages, {"role": "assistant", "content": "r"}, {"role": "user", "content": "xy"}]
    assert tracker.new_tokens("p", {"messages": longer}, remember=True) == 2  # reply skipped
    changed = [messages[0], {"role": "user", "content": "other"}]
    assert tracker.new_tokens("p", {"messages": changed}, remember=True) == 8  # all of it


async def test_resending_a_chat_request_does_not_grow_the_program_without_usage() -> None:
    async with (
        stub_running(StubBackend(report_usage=False)) as stub,
        router_running(ProxyConfig((stub.url,)), count_text=len) as router,
        router.client() as client,
    ):
        body = {"messages": [{"role": "user", "content": "x" * 1000}], "program_id": "P"}
        tokens = []
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
            view = router.proxy.core.program("P")
            assert view is not None
            tokens.append(view.tokens)
        # The first answer: the prompt and the counted reply "a b c"; each resend adds only its
        # counted reply (the estimate without usage), not the 1,000-character history again.
        assert tokens[1] - tokens[0] < 100 and tokens[2] - tokens[1] < 100, tokens
