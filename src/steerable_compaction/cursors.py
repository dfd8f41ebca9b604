"""`RecordCursors`: what the engine reads from the record, each entry read once.

The engine needs three facts the projection alone does not tell: each message's round (how
many assistant replies came before it), where the session's goal stands, and the newest reply's
billed usage. Each is read from the append-only record through a cursor that only looks at the
entries appended since its last look, so a step costs O(new entries). These are caches, not
decisions: a fresh engine reading the same record finds the same answers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .compaction.regions import is_goal_candidate
from .messages import Message
from .record import MessageAppended, Record
from .record.usage import newest_usage

__all__ = ["RecordCursors"]


class RecordCursors:
    """Incremental reads over `record` for the engine: rounds, the goal, the newest usage."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self._assistant_seqs: list[int] = []
        self._scanned = 0
        self._goal_scanned = 0
        self._opening_goal: Message | None = None  # newest user message before an assistant's
        self._named_goal: Message | None = None  # newest user message a host named the goal
        self._opening_done = False
        self._usage_scanned = 0

    def rounds(self, seqs: Sequence[int]) -> list[int]:
        """Each message's round: how many assistant replies the record held before it."""
        entries = self.record.entries
        for entry in entries[self._scanned :]:
            event = entry.event
            if isinstance(event, MessageAppended) and event.message.role == "assistant":
                self._assistant_seqs.append(entry.seq)
        self._scanned = len(entries)
        return [bisect.bisect_left(self._assistant_seqs, seq) for seq in seqs]

    def goal_index(self, messages: Sequence[Message]) -> int | None:
        """Where the goal stands in `messages`, as the record tells it (`opening_goal`'s rule).

        The goal is the newest user message a host named the goal, else the newest user
        message appended before the first assistant message: read from the record, not the
        projection, where kept user messages stand before the first summary. `None` when the
        goal is no longer in view (a fold took it, say).
        """
        entries = self.record.entries
        for entry in entries[self._goal_scanned :]:
            event = entry.event
            if not isinstance(event, MessageAppended):
                continue
            message = event.message
            if message.role == "assistant":
                self._opening_done = True
            elif message.goal and message.role == "user":
                self._named_goal = message
            elif not self._opening_done and is_goal_candidate(message):
                self._opening_goal = message
        self._goal_scanned = len(entries)
        goal = self._named_goal or self._opening_goal
        if goal is None:
            return None
        for i, message in enumerate(messages):
            if message is goal or (message.role == "user" and message == goal):
                return i
        return None

    def new_usage(self) -> tuple[int, int] | None:
        """The newest reply's `(prompt_tokens, message_count)` appended since the last look.

        `None` when none carries usage or a rewrite came after it (`record.usage.newest_usage`).
        """
        found = newest_usage(self.record, self._usage_scanned)
        self._usage_scanned = len(self.record.entries)
        return found
