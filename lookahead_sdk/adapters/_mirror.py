"""Keeping a runtime's history in step with a framework's own message list.

A framework hands its adapter the full list it is about to send (or just stored). The mirror
works out what is new since it last looked and appends only that, so each hook costs O(new
messages) conversions. Messages are matched by identity, then by a cheap framework key (e.g. a
LangChain message id), then by the digest of their OpenAI form.

Two views are tracked, because after a commit they differ:
- `seen`: the framework's list as last synced (a framework may keep its uncommitted list, e.g.
  LlamaIndex's scratchpad);
- `main`: one framework item per runtime message (the committed history, items reused where the
  commit kept a message verbatim, built with `from_openai` where it made a new one).
A new list extending `seen` or `main` appends its tail; anything else replaces the history (a
running lookahead then goes stale by the runtime's own signature check: safe, never wrong).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, count
from typing import Generic, TypeVar

from lookahead_sdk.base.messages import Message, message_digest

M = TypeVar("M")
_item = operator.attrgetter("item")


@dataclass
class Entry(Generic[M]):
    item: M
    key: Hashable | None
    message: Message
    digest: bytes


@dataclass(frozen=True)
class SyncPlan:
    append: list[Message]
    replace: list[Message] | None = None  # set when the framework's list diverged from ours

    @property
    def changed(self) -> bool:
        return bool(self.append) or self.replace is not None


class HistoryMirror(Generic[M]):
    def __init__(
        self,
        to_openai: Callable[[M], Message],
        from_openai: Callable[[Message], M],
        key: Callable[[M], Hashable | None] = lambda item: None,
    ) -> None:
        self.to_openai = to_openai
        self.from_openai = from_openai
        self.key = key
        self.seen: list[Entry[M]] = []
        self.main: list[Entry[M]] = []

    def entry(self, item: M) -> Entry[M]:
        message = self.to_openai(item)
        return Entry(item, self.key(item), message, message_digest(message))

    def _matches(self, entry: Entry[M], item: M) -> bool:
        if entry.item is item:
            return True
        key = self.key(item)
        if key is not None and entry.key is not None:
            return key == entry.key
        return message_digest(self.to_openai(item)) == entry.digest

    def _extends(self, entries: Sequence[Entry[M]], items: Sequence[M]) -> bool:
        if len(items) < len(entries):
            return False
        # Frameworks usually hand back the very objects they were given, except a few they
        # rebuild per call (LlamaIndex's memory messages): an identity check at C speed finds
        # those, and only they are compared by key or digest, so a hook stays O(new messages)
        # in practice even over a long history.
        rebuilt = compress(count(), map(operator.is_not, map(_item, entries), items))
        return all(self._matches(entries[index], items[index]) for index in rebuilt)

    def plan(self, items: Sequence[M]) -> SyncPlan:
        """Update both views for the framework's current `items`; what the runtime must do."""
        if self._extends(self.seen, items):
            new = [self.entry(item) for item in items[len(self.seen) :]]
            self.seen.extend(new)
            self.main.extend(new)
            return SyncPlan([e.message for e in new])
        if self._extends(self.main, items):
            new = [self.entry(item) for item in items[len(self.main) :]]
            self.main.extend(new)
            self.seen = list(self.main)
            return SyncPlan([e.message for e in new])
        entries = [self.entry(item) for item in items]
        self.seen, self.main = entries, list(entries)
        return SyncPlan([], replace=[e.message for e in entries])

    def extend(self, items: Sequence[M]) -> list[Message]:
        """Items the framework is about to add after what was seen (e.g. a tool's output)."""
        new = [self.entry(item) for item in items]
        self.seen.extend(new)
        self.main.extend(new)
        return [e.message for e in new]

    def adopt(self, committed: Sequence[Message]) -> list[M]:
        """`main` becomes the committed history; returns it as framework items."""
        reusable: dict[bytes, list[Entry[M]]] = {}
        for old in (*self.main, *self.seen):
            if all(old is not e for e in reusable.get(old.digest, ())):
                reusable.setdefault(old.digest, []).append(old)
        entries = []
        for message in committed:
            digest = message_digest(message)
            candidates = reusable.get(digest)
            entry = candidates.pop(0) if candidates else None  # each old item is reused once
            if entry is None:
                item = self.from_openai(message)
                entry = Entry(item, self.key(item), message, digest)
            entries.append(entry)
        self.main = entries
        return [e.item for e in entries]

    def stored(self, items: Sequence[M], start: int) -> tuple[list[M], list[Entry[M]]]:
        """What storing `items` after `seen[:start]` means (e.g. a run's scratchpad that the agent
        stores once the run ends, plus its final answer): the items not already mirrored as
        `seen[start:]` (matched in order), and the mirrored entries that no stored item covers
        (e.g. ReAct's formatted reasoning steps, stored as one joined message instead)."""
        candidates = self.seen[start:]
        covered: list[Entry[M]] = []
        new: list[M] = []
        position = 0
        for item in items:
            match = next(
                (
                    index
                    for index in range(position, len(candidates))
                    if self._matches(candidates[index], item)
                ),
                None,
            )
            if match is None:
                new.append(item)
            else:
                covered.append(candidates[match])
                position = match + 1
        uncovered = [entry for entry in candidates if all(entry is not c for c in covered)]
        return new, uncovered

    def drop(self, entries: Sequence[Entry[M]]) -> list[Message]:
        """Forget `entries` in both views (wherever a commit kept them); returns `main`'s messages."""
        self.seen = [e for e in self.seen if all(e is not d for d in entries)]
        self.main = [e for e in self.main if all(e is not d for d in entries)]
        return [e.message for e in self.main]

    @property
    def diverged(self) -> bool:
        """The runtime's history is not the framework's list (a commit rewrote it)."""
        return len(self.seen) != len(self.main) or any(map(operator.is_not, self.seen, self.main))

    def restore(self, messages: Sequence[Message], items: Sequence[M] | None = None) -> SyncPlan:
        """The runtime just loaded a saved history `messages`: mirror it. Without `items`, as new
        framework items (`main_items`). With the framework's own list `items`, those matching the
        saved history in content are paired with it and the rest is the plan (appended; or, when
        the list does not start with that history, it replaces it)."""
        if items is None:
            entries = []
            for message in messages:
                item = self.from_openai(message)
                entries.append(Entry(item, self.key(item), message, message_digest(message)))
            self.seen, self.main = entries, list(entries)
            return SyncPlan([])
        entries = [self.entry(item) for item in items]
        self.seen, self.main = entries, list(entries)
        saved = [message_digest(message) for message in messages]
        if [entry.digest for entry in entries[: len(saved)]] == saved:
            return SyncPlan([entry.message for entry in entries[len(saved) :]])
        return SyncPlan([], replace=[entry.message for entry in entries])

    def main_items(self) -> list[M]:
        return [e.item for e in self.main]

    @contextmanager
    def undone_on_error(self) -> Iterator[None]:
        """Both views as they were when the block raises (the runtime refused what the block
        mirrored): the next sync offers those items again. O(1): the views only grow in place
        or are replaced by new lists, so truncating the old ones restores them."""
        seen, main = self.seen, self.main
        seen_end, main_end = len(seen), len(main)
        try:
            yield
        except BaseException:
            del seen[seen_end:]
            del main[main_end:]
            self.seen, self.main = seen, main
            raise

    def reset(self) -> None:
        self.seen, self.main = [], []
