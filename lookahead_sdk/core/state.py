"""The two states of a program: the live conversation and its background lookahead copy."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from lookahead_sdk.base.averages import moving_average
from lookahead_sdk.base.checks import require_int, require_number
from lookahead_sdk.base.messages import (
    Message,
    chain_digest,
    copy_message,
    message_digest,
    validate_message,
)
from lookahead_sdk.base.tags import BackgroundWork
from lookahead_sdk.base.tokens import TokenCounter, auto_token_counter, count_message
from lookahead_sdk.errors import StateError

EMPTY_SIGNATURE = b"\x00" * 16
RECENT_TURNS = 8  # turns `largest_recent_turn_tokens` looks back over
TAIL_TURNS = 32  # turns `largest_turn_tokens` looks back over (bursts are rarer than turns)


@dataclass(frozen=True)
class PartialOutput:
    """Assistant output still streaming; tool_name is set while it writes that tool's arguments."""

    text: str
    tool_name: str | None = None


@dataclass(frozen=True)
class _Prepared:
    """A message ready to enter the history: validated copy, token count, digest."""

    message: Message
    tokens: int
    digest: bytes


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of MainState[:end] taken at a segment boundary."""

    messages: tuple[Message, ...]
    end: int
    signature: bytes
    version: int
    tokens: int
    partial_output: PartialOutput | None = None


class MainState:
    """The live messages of one agent, with incrementally maintained bookkeeping.

    Appending costs O(new messages): each message is copied, counted and hashed once; prefix
    signatures and token prefix sums are extended, never recomputed. An edit in the middle
    recomputes only from the edited index on.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        window_tokens: int = 8192,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if not isinstance(window_tokens, int) or window_tokens <= 0:
            raise ValueError(
                f"window_tokens must be a positive int (the model's context), got {window_tokens!r}"
            )
        self.window_tokens = window_tokens
        self.token_counter = token_counter or auto_token_counter()
        self._messages: list[Message] = []
        self._message_tokens: list[int] = []
        self._token_prefix: list[int] = [0]
        self._signatures: list[bytes] = [EMPTY_SIGNATURE]
        self._view: tuple[Message, ...] | None = ()
        self.version = 0
        self.turn = 0
        self.partial_output: PartialOutput | None = None
        # Smoothed tokens added per assistant turn: lets policies trigger a few turns ahead.
        self.tokens_per_turn: float | None = None
        # The newest lookahead's time from its start until its result was warm on the server
        # (at least the time it had run when a commit came first), in the agent's idle time
        # per turn (its tool waits): how many turns of tool waits the work took. Set by the
        # runtime that drives this state, None until one has been timed. Sizes a policy's lead.
        self.lookahead_turns: float | None = None
        self._recent_turn_growth: deque[int] = deque(maxlen=RECENT_TURNS)
        self._turn_growth_tail: deque[int] = deque(maxlen=TAIL_TURNS)
        self._tokens_at_last_turn: int | None = None
        self.last_reply_tokens = 0  # the newest assistant message's tokens
        self._extend(self._prepared(messages, 0), count_turns=True)

    # -- reading -----------------------------------------------------------------------------
    @property
    def messages(self) -> tuple[Message, ...]:
        """The history, oldest first: the state's own message dicts, read-only (edits go through
        `append` / `edit` / `replace`, which re-sign them; `LookaheadRuntime.prepare` and
        `save_state` hand out copies)."""
        if self._view is None:
            self._view = tuple(self._messages)
        return self._view

    @property
    def last_message(self) -> Message | None:
        """The newest message, without building the `messages` view (O(1) on every boundary)."""
        return self._messages[-1] if self._messages else None

    def awaits_model_call(self) -> bool:
        """The model is called next: the newest message is the user's, or the last of the tool
        outputs answering every call of the model's last turn (and no model output streams)."""
        if self.partial_output is not None:
            return False
        outputs = 0
        for message in reversed(self._messages):
            role = message.get("role")
            if role == "tool":
                outputs += 1
                continue
            if role == "assistant":
                return outputs > 0 and outputs >= len(message.get("tool_calls") or ())
            return role == "user"
        return False

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def tokens(self) -> int:
        return self._token_prefix[-1]

    def tokens_between(self, start: int, end: int | None = None) -> int:
        end = len(self._messages) if end is None else end
        return self._token_prefix[end] - self._token_prefix[start]

    @property
    def tokens_since_last_turn(self) -> int:
        """What arrived after the newest assistant message (its tool outputs so far): the newest
        turn's growth, which `largest_recent_turn_tokens` counts only once the next turn starts."""
        last = self._tokens_at_last_turn
        return 0 if last is None else max(0, self.tokens - last)

    def turns_between(self, start: int, end: int) -> int:
        """Assistant turns among messages[start:end]."""
        return sum(message.get("role") == "assistant" for message in self._messages[start:end])

    @property
    def recent_turn_tokens(self) -> tuple[int, ...]:
        """What each of the last few turns (reply + tool outputs) added, oldest first."""
        return tuple(self._recent_turn_growth)

    @property
    def largest_turn_tokens(self) -> int | None:
        """The most tokens one turn added over the last `TAIL_TURNS` turns: the growth
        distribution's tail (a burst, such as a large file read, that may come again)."""
        return max(self._turn_growth_tail, default=None)

    @property
    def largest_recent_turn_tokens(self) -> int | None:
        """The most tokens one turn (reply + tool outputs) added, over the last few turns."""
        return max(self._recent_turn_growth, default=None)

    def message_tokens(self, index: int) -> int:
        return self._message_tokens[index]

    def shared_prefix_messages(self, messages: Sequence[Message]) -> int:
        """How many leading messages of `messages` are this history's, unchanged."""
        shared = 0
        for mine, theirs in zip(self._messages, messages, strict=False):
            if mine != theirs:
                break
            shared += 1
        return shared

    def shared_prefix_share(
        self, messages: Sequence[Message], *, shared_messages: int | None = None
    ) -> float:
        """The share (0..1, in tokens) of `messages` that starts with this history's leading
        messages unchanged: what a prefix cache holding this history can reuse for it.
        `shared_messages`: `shared_prefix_messages(messages)`, if the caller has it already."""
        shared = (
            self.shared_prefix_messages(messages) if shared_messages is None else shared_messages
        )
        rest = sum(count_message(self.token_counter, m) for m in messages[shared:])
        total = self._token_prefix[shared] + rest
        return self._token_prefix[shared] / total if total else 0.0

    def prefix_signature(self, end: int) -> bytes | None:
        """Signature of messages[:end], or None when the history is shorter than end."""
        if end < 0 or end >= len(self._signatures):
            return None
        return self._signatures[end]

    def snapshot(self, end: int | None = None) -> Snapshot:
        end = len(self._messages) if end is None else end
        return Snapshot(
            messages=tuple(self._messages[:end]),
            end=end,
            signature=self._signatures[end],
            version=self.version,
            tokens=self._token_prefix[end],
            partial_output=self.partial_output if end == len(self._messages) else None,
        )

    # -- editing -----------------------------------------------------------------------------
    # Every edit first prepares all new messages (validated, copied, counted, hashed), and only
    # then changes anything: a message that fails leaves the history exactly as it was.
    def append(self, *messages: Message) -> None:
        self._extend(self._prepared(messages, len(self._messages)), count_turns=True)

    def _prepared(self, messages: Iterable[Message], start: int) -> list[_Prepared]:
        prepared = []
        for index, message in enumerate(messages, start):
            copied = copy_message(validate_message(message, index))
            digest = message_digest(copied, f"messages[{index}]")
            prepared.append(_Prepared(copied, count_message(self.token_counter, copied), digest))
        return prepared

    def _extend(self, prepared: Sequence[_Prepared], *, count_turns: bool) -> None:
        for entry in prepared:
            self._messages.append(entry.message)
            self._message_tokens.append(entry.tokens)
            self._token_prefix.append(self._token_prefix[-1] + entry.tokens)
            self._signatures.append(chain_digest(self._signatures[-1], entry.digest))
            if entry.message["role"] == "assistant":
                self.partial_output = None
                self.last_reply_tokens = entry.tokens
                if count_turns:
                    self.turn += 1
                    self._observe_turn_growth()
        if prepared:
            self._touch()

    def _observe_turn_growth(self) -> None:
        tokens, previous = self.tokens, self._tokens_at_last_turn
        self._tokens_at_last_turn = tokens
        if previous is None or tokens <= previous:
            return
        growth = tokens - previous
        self._recent_turn_growth.append(growth)
        self._turn_growth_tail.append(growth)
        self.tokens_per_turn = moving_average(self.tokens_per_turn, growth, 0.3)

    def growth_state(self) -> dict[str, Any]:
        """What the state learned of the history's growth (JSON-safe), for `save_state`."""
        return {
            "tokens_per_turn": self.tokens_per_turn,
            "lookahead_turns": self.lookahead_turns,
            "recent_turn_growth": list(self._recent_turn_growth),
            "turn_growth_tail": list(self._turn_growth_tail),
            "tokens_at_last_turn": self._tokens_at_last_turn,
            "last_reply_tokens": self.last_reply_tokens,
        }

    def restore_growth(self, saved: Mapping[str, Any]) -> None:
        """Take `growth_state` output (ValueError naming the field before anything changes)."""
        rates = {
            name: require_number(name, saved[name], optional=True)
            for name in ("tokens_per_turn", "lookahead_turns")
        }
        recent = [_count("recent_turn_growth", v) for v in saved["recent_turn_growth"]]
        tail = [_count("turn_growth_tail", v) for v in saved["turn_growth_tail"]]
        at_last = require_int(
            "tokens_at_last_turn", saved["tokens_at_last_turn"], optional=True, meaning=TOKENS
        )
        last_reply = _count("last_reply_tokens", saved["last_reply_tokens"])
        self.tokens_per_turn, self.lookahead_turns = rates.values()
        self._recent_turn_growth.clear()
        self._recent_turn_growth.extend(recent)
        self._turn_growth_tail.clear()
        self._turn_growth_tail.extend(tail)
        self._tokens_at_last_turn, self.last_reply_tokens = at_last, last_reply

    def set_partial_output(self, partial: PartialOutput | None) -> None:
        """The assistant output streaming right now (e.g. a delegation instruction being written)."""
        if partial is not None and not isinstance(partial, PartialOutput):
            raise TypeError(
                f"partial output must be a PartialOutput or None, got {type(partial).__name__}"
            )
        self.partial_output = partial
        self.version += 1

    def replace(self, messages: Sequence[Message]) -> None:
        """Swap the whole history (a commit). Turn count is kept: turns are agent progress."""
        if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable):
            raise TypeError("messages must be a list of OpenAI chat-format dicts")
        prepared = self._prepared(messages, 0)
        self._cut(0)
        self._extend(prepared, count_turns=False)
        self._tokens_at_last_turn = self.tokens

    def truncate(self, end: int) -> None:
        if isinstance(end, bool) or not isinstance(end, int) or not 0 <= end <= len(self._messages):
            raise ValueError(f"truncate end must be within [0, {len(self._messages)}], got {end!r}")
        self._cut(end)

    def _cut(self, end: int) -> None:
        del self._messages[end:]
        del self._message_tokens[end:]
        del self._token_prefix[end + 1 :]
        del self._signatures[end + 1 :]
        self._touch()
        self._tokens_at_last_turn = None

    def edit(self, index: int, message: Message) -> None:
        """Replace one message; signatures of every prefix that includes it change."""
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < len(self._messages)
        ):
            raise IndexError(
                f"edit index {index!r} out of range for {len(self._messages)} messages"
            )
        prepared = self._prepared([message, *self._messages[index + 1 :]], index)
        self._cut(index)
        self._extend(prepared, count_turns=False)

    def _touch(self) -> None:
        self.version += 1
        self._view = None


class LookaheadStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    READY = "ready"
    FAILED = "failed"
    STALE = "stale"


@dataclass
class LookaheadTimings:
    started_at: float | None = None
    transform_done_at: float | None = None
    warmed_at: float | None = None

    @property
    def transform_s(self) -> float | None:
        if self.started_at is None or self.transform_done_at is None:
            return None
        return self.transform_done_at - self.started_at


@dataclass
class LookaheadState:
    """The background copy: a transform of MainState[:last_segment_end] and its provenance.

    Its status changes only through the transition methods below (each checks where it comes
    from): idle -> running (`start`) -> ready (`ready`) | failed (`fail`) | idle (`abandon`);
    running or ready -> stale (`mark_stale`); anything -> idle (`reset`, after a commit);
    idle -> ready (`restore`, from a saved state)."""

    status: LookaheadStatus = LookaheadStatus.IDLE
    messages: tuple[Message, ...] | None = None
    last_segment_end: int = 0
    covered_signature: bytes = EMPTY_SIGNATURE
    covered_version: int = -1
    covered_partial: PartialOutput | None = None
    group_id: str | None = None
    strategy_data: dict[str, Any] = field(default_factory=dict)
    timings: LookaheadTimings = field(default_factory=LookaheadTimings)
    error: BaseException | None = None
    # How far the pre-materialized (warmed) sequence reaches into MainState: result + main[end:warmed_end].
    warmed_end: int | None = None
    # The handle its background work sees (`base.tags.current_work`): promoted when a commit waits.
    work: BackgroundWork | None = None
    # Where the verbatim recent suffix the result keeps begins, in MainState (policies that
    # keep "the most recent N tokens", `ContextPolicy.kept_from`); None for others.
    kept_from: int | None = None

    @property
    def promoted(self) -> bool:
        return self.work is not None and self.work.promoted

    @property
    def in_flight_or_ready(self) -> bool:
        return self.status in (LookaheadStatus.RUNNING, LookaheadStatus.READY)

    def start(self, snapshot: Snapshot, group_id: str, *, kept_from: int | None = None) -> None:
        """A new lookahead of `snapshot` (supersedes whatever came before)."""
        self._clear(LookaheadStatus.RUNNING)
        self.kept_from = kept_from
        self.last_segment_end = snapshot.end
        self.covered_signature = snapshot.signature
        self.covered_version = snapshot.version
        self.covered_partial = snapshot.partial_output
        self.group_id = group_id
        self.timings = LookaheadTimings(started_at=time.monotonic())
        self.work = BackgroundWork(group_id)

    def ready(self, messages: Sequence[Message], data: dict[str, Any]) -> None:
        self._expect(LookaheadStatus.RUNNING, "ready")
        self.status = LookaheadStatus.READY
        self.messages = tuple(messages)
        self.strategy_data = data
        self.timings.transform_done_at = time.monotonic()

    def fail(self, error: BaseException) -> None:
        self._expect(LookaheadStatus.RUNNING, "fail")
        self.status = LookaheadStatus.FAILED
        self.error = error

    def mark_stale(self) -> None:
        if not self.in_flight_or_ready:
            raise StateError(f"only a running or ready lookahead can go stale, not {self.status}")
        self.status = LookaheadStatus.STALE

    def abandon(self) -> None:
        """The commit did not wait for it (the policy declined to promote it)."""
        self._expect(LookaheadStatus.RUNNING, "abandon")
        self._clear(LookaheadStatus.IDLE)

    def promote(self) -> None:
        """A commit waits for it: its background work stops waiting for slack."""
        if self.work is not None:
            self.work.promoted = True

    def warmed(self, end: int) -> None:
        """The server holds result + main[last_segment_end:end]."""
        self.warmed_end = end
        self.timings.warmed_at = time.monotonic()

    def restore(
        self,
        *,
        messages: Sequence[Message],
        last_segment_end: int,
        covered_signature: bytes,
        group_id: str | None,
        strategy_data: dict[str, Any],
        kept_from: int | None = None,
        warmed_end: int | None = None,
        covered_partial: PartialOutput | None = None,
    ) -> None:
        """A ready result from a saved state (committed only if it still covers the history).
        `warmed_end`: how far it was warmed; the suffix after it is warmed at the next boundary
        (the warmer knows what the server still holds, and prefills the rest).
        `covered_partial`: the output that was streaming when it was made."""
        self._expect(LookaheadStatus.IDLE, "restore")
        self.covered_partial = covered_partial
        self.kept_from = kept_from
        self.warmed_end = warmed_end
        self.status = LookaheadStatus.READY
        self.messages = tuple(messages)
        self.last_segment_end = last_segment_end
        self.covered_signature = covered_signature
        self.group_id = group_id
        self.strategy_data = dict(strategy_data)

    def take_over(self, standby: LookaheadState) -> None:
        """A ready result kept while its redo ran replaces the redo (running or failed), the
        commit taking it rather than waiting. Not warmed any more: the redo's work may have
        overwritten what its warm-up left on the server."""
        if self.status not in (LookaheadStatus.RUNNING, LookaheadStatus.FAILED):
            raise StateError(f"only a running or failed redo can be taken over, not {self.status}")
        if standby.status is not LookaheadStatus.READY or standby.messages is None:
            raise StateError(f"a standby result must be ready, not {standby.status}")
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(standby, name))
        self.warmed_end = None
        self.error = None

    def covers(self, main: MainState) -> bool:
        """The covered prefix is still exactly the start of the live history."""
        return main.prefix_signature(self.last_segment_end) == self.covered_signature

    def reset(self) -> None:
        self._clear(LookaheadStatus.IDLE)

    def _clear(self, status: LookaheadStatus) -> None:
        self.status = status
        self.messages = None
        self.error = None
        self.warmed_end = None
        self.work = None
        self.strategy_data = {}
        self.kept_from = None

    def _expect(self, status: LookaheadStatus, transition: str) -> None:
        if self.status is not status:
            raise StateError(f"lookahead {transition}() needs status {status}, not {self.status}")


TOKENS = "a token count"


def _count(name: str, value: Any) -> int:
    return require_int(name, value, meaning=TOKENS)
