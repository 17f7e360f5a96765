"""What a commit does to the program, by the policy's `commit_mode`: the one place where
"replace" and "spawn" differ.

- "replace" (Offload, KeepRecent, Summarize): the committed context replaces the live history.
  The agent's next model call commits (`prepare()`), a commit can be decided when a model turn
  ends (`should_commit_ahead`), and a result whose suffix keeps it over the limit is transformed
  again at once.
- "spawn" (Isolate): the live history stays; the committed context starts a sub-agent, which the
  agent asks for (`commit()`) when it delegates. Its lookahead warms an instruction still being
  written (the last message open), and the same history is never spawned twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from lookahead_sdk.base.messages import Message
from lookahead_sdk.core.policy import CommitMode
from lookahead_sdk.core.state import LookaheadState, MainState


@dataclass(frozen=True)
class CommitTarget:
    mode: CommitMode
    rewrites_history: bool

    def applies_before_model_call(self) -> bool:
        """`prepare()` commits: the commit rewrites what the next model call sends."""
        return self.rewrites_history

    def decides_ahead(self) -> bool:
        """A commit may be decided when a model turn ends (before its tool outputs arrive)."""
        return self.rewrites_history

    def transforms_overflow(self) -> bool:
        """A hit still over the limit with its suffix is transformed again at once."""
        return self.rewrites_history

    def warms_open(self, lookahead: LookaheadState) -> bool:
        """Warm the lookahead's last message open (a delegation instruction being written)."""
        return not self.rewrites_history and lookahead.covered_partial is not None

    def outlived(self, lookahead: LookaheadState, main: MainState) -> bool:
        """A lookahead made while an instruction streamed (spawn) covers the history before the
        message that stream becomes: once another message follows that one, the stream did not
        end in the delegation it was made for, and its context (a sub-agent prompt made from
        the history then) would be committed for a later history."""
        return (
            not self.rewrites_history
            and lookahead.covered_partial is not None
            and len(main) > lookahead.last_segment_end + 1
        )

    def apply(self, main: MainState, messages: list[Message]) -> bytes | None:
        """Carry out a commit of `messages`. Returns the signature of the spawned history (spawn),
        so the same history is not spawned again; None for replace."""
        if self.rewrites_history:
            main.replace(messages)
            return None
        return main.prefix_signature(len(main))

    def already_committed(self, main: MainState, spawned_at: bytes | None) -> bool:
        return not self.rewrites_history and spawned_at == main.prefix_signature(len(main))


COMMIT_TARGETS: dict[CommitMode, CommitTarget] = {
    "replace": CommitTarget("replace", rewrites_history=True),
    "spawn": CommitTarget("spawn", rewrites_history=False),
}
