"""A multimodal message (text and an image) that a commit keeps reaches the model unchanged:
AutoGen holds it as a `UserMessage` with content parts, and the committed history the context
adopts must not flatten it to text."""

from __future__ import annotations

from autogen_agentchat.messages import MultiModalMessage
from autogen_core import Image
from autogen_core.models import UserMessage
from PIL import Image as PILImage

from lookahead_sdk.adapters.autogen import LookaheadChatCompletionContext
from lookahead_sdk.base.tokens import ApproxTokenCounter, CachedTokenCounter
from lookahead_sdk.core.runtime import CommitKind
from lookahead_sdk.strategies import KeepRecent

from .test_autogen_adapter import analyst, replay, run_then_close


def test_a_kept_multimodal_task_reaches_the_model_with_its_image_after_a_commit() -> None:
    image = Image(PILImage.new("RGB", (4, 4), "red"))
    client = replay(10, vision=True)
    ctx = LookaheadChatCompletionContext(
        KeepRecent(budget=400, lookahead_at=600, hard_limit=900),  # keeps the task
        system_message="analyze",
        token_counter=CachedTokenCounter(ApproxTokenCounter()),
        window_tokens=8192,
    )
    task = MultiModalMessage(content=["what is this", image], source="user")
    run_then_close(analyst(client, ctx), ctx, task)
    committed = [i for i, call in enumerate(ctx.calls) if call.commit is not CommitKind.NONE]
    assert committed, "the history never reached the hard limit"
    for sent in client.received[committed[0] :]:
        task = next(m for m in sent if isinstance(m, UserMessage))
        assert isinstance(task.content, list), task
        assert task.content[0] == "what is this"
        assert isinstance(task.content[1], Image)
        assert task.content[1].data_uri == image.data_uri
