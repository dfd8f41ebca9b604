"""The projection: what the model sees, as a pure fold of the record.

`Projection.apply` folds one entry in place: a message appends in O(1), a boundary rewrites (its
cost is the size of the rewrite plus one list splice), bracket events only change bookkeeping.
`project(entries)` is the same fold from scratch. Unclosed brackets are ignored (their span stays
visible) and remain listed in `open_brackets` until a boundary or an abandon closes them.

Every invariant is checked before anything changes, so a rejected entry leaves the projection
as it was and a store can refuse to write it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import assert_never

from ..errors import RecordError
from ..messages import Message
from .events import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    MessageAppended,
    Reminder,
)

__all__ = ["OpenBracket", "Projection", "project"]


@dataclass(frozen=True, slots=True)
class OpenBracket:
    """A bracket whose boundary has not been written (yet): `summary` is set once paid for."""

    start_seq: int
    start: CompactionStart
    summary: CompactionSummary | None = None


class Projection:
    """The message list the model sees, maintained incrementally from record entries.

    `messages[i]` came from the entry with seq `seqs[i]`: the message or reminder itself, or the
    boundary whose replacement put it there.
    """

    __slots__ = ("_messages", "_open", "_rewrites", "_seqs")

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._seqs: list[int] = []
        self._open: dict[str, OpenBracket] = {}
        self._rewrites = 0

    @property
    def messages(self) -> Sequence[Message]:
        """The projected transcript (a read-only view; copy it with `list()` to keep it)."""
        return self._messages

    @property
    def seqs(self) -> Sequence[int]:
        """For each projected message, the seq of the record entry it came from."""
        return self._seqs

    @property
    def rewrites(self) -> int:
        """How many boundaries were folded in: while it stays, `messages` only grew at the end."""
        return self._rewrites

    @property
    def open_brackets(self) -> tuple[OpenBracket, ...]:
        """Brackets started but not closed, oldest first."""
        return tuple(self._open.values())

    def __len__(self) -> int:
        return len(self._messages)

    def copy(self) -> Projection:
        """An independent copy (the messages themselves are immutable and shared)."""
        other = Projection()
        other._messages = list(self._messages)
        other._seqs = list(self._seqs)
        other._open = dict(self._open)
        other._rewrites = self._rewrites
        return other

    def check(self, entry: Entry) -> None:
        """Raise `RecordError` if `entry` cannot be applied to this projection."""
        event = entry.event
        match event:
            case MessageAppended() | Reminder():
                pass
            case CompactionStart():
                if event.compaction_id in self._open:
                    raise RecordError(f"bracket {event.compaction_id!r} is already open")
                self._check_span(event.span)
            case CompactionSummary():
                bracket = self._open.get(event.compaction_id)
                if bracket is None:
                    raise RecordError(f"summary for unknown bracket {event.compaction_id!r}")
                if bracket.summary is not None:
                    raise RecordError(f"bracket {event.compaction_id!r} already has a summary")
            case CompactionBoundary():
                self._check_boundary(event)
            case CompactionAbandoned():
                if event.compaction_id not in self._open:
                    raise RecordError(f"abandon of unknown bracket {event.compaction_id!r}")
            case _:
                assert_never(event)

    def extend(self, seqs: Iterable[int], messages: Iterable[Message]) -> None:
        """Append `messages` from entries `seqs`: what `apply` does for messages, in bulk."""
        self._messages.extend(messages)
        self._seqs.extend(seqs)

    def append(self, seq: int, message: Message) -> None:
        """Append `message` from entry `seq`: what `apply` does for a message entry."""
        self._messages.append(message)
        self._seqs.append(seq)

    def apply(self, entry: Entry) -> None:
        """Fold `entry` into the projection; raises `RecordError` (changing nothing) if invalid."""
        event = entry.event
        if type(event) is MessageAppended:  # nearly every entry: before the match over kinds
            self._messages.append(event.message)
            self._seqs.append(entry.seq)
            return
        match event:
            case MessageAppended():
                self._messages.append(event.message)
                self._seqs.append(entry.seq)
            case Reminder():
                self._messages.append(event.message)
                self._seqs.append(entry.seq)
            case CompactionStart():
                self.check(entry)
                self._open[event.compaction_id] = OpenBracket(entry.seq, event)
            case CompactionSummary():
                self.check(entry)
                bracket = self._open[event.compaction_id]
                self._open[event.compaction_id] = OpenBracket(
                    bracket.start_seq, bracket.start, event
                )
            case CompactionBoundary():
                self._check_boundary(event)
                self._rewrite(entry.seq, event)
            case CompactionAbandoned():
                self.check(entry)
                del self._open[event.compaction_id]
            case _:
                assert_never(event)

    def _check_span(self, span: tuple[int, int]) -> None:
        if span[1] > len(self._messages):
            raise RecordError(
                f"span {span!r} reaches past the projection's {len(self._messages)} messages"
            )

    def _check_boundary(self, event: CompactionBoundary) -> None:
        for edit in event.edits:
            if edit.index >= len(self._messages):
                raise RecordError(
                    f"edit at index {edit.index} is past the projection's "
                    f"{len(self._messages)} messages"
                )
        if event.span is not None:
            self._check_span(event.span)
        if event.compaction_id is not None:
            bracket = self._open.get(event.compaction_id)
            if bracket is None:
                raise RecordError(f"boundary closes unknown bracket {event.compaction_id!r}")
            if bracket.start.span != event.span:
                raise RecordError(
                    f"boundary span {event.span!r} differs from bracket "
                    f"{event.compaction_id!r} span {bracket.start.span!r}"
                )

    def _rewrite(self, seq: int, event: CompactionBoundary) -> None:
        self._rewrites += 1
        for edit in event.edits:
            self._messages[edit.index] = edit.message
        if event.span is not None:
            start, end = event.span
            self._messages[start:end] = event.replacement
            self._seqs[start:end] = [seq] * len(event.replacement)
        if event.compaction_id is not None:
            del self._open[event.compaction_id]


def project(entries: Iterable[Entry]) -> list[Message]:
    """The transcript the model sees after `entries` (a pure function of the record)."""
    projection = Projection()
    for entry in entries:
        projection.apply(entry)
    return list(projection.messages)
