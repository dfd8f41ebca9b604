"""Where the newest billed usage stands in a record: the anchor of the token meter (R7, R9)."""

from __future__ import annotations

from .base import Record
from .events import CompactionBoundary, MessageAppended

__all__ = ["newest_usage"]


def newest_usage(record: Record, since: int) -> tuple[int, int] | None:
    """`(prompt_tokens, message_count)` of the newest billed reply among `entries[since:]`.

    `message_count` is the reply's position in the projection: the request that produced it
    held the messages before it. `None` when no reply carries usage, or a rewrite came after
    it (its count no longer describes the projection, R9).
    """
    for entry in reversed(record.entries[since:]):
        event = entry.event
        if isinstance(event, CompactionBoundary):
            return None
        if isinstance(event, MessageAppended) and event.usage is not None:
            seqs = record.projection.seqs
            for index in range(len(seqs) - 1, -1, -1):
                if seqs[index] == entry.seq:
                    return event.usage.prompt_tokens, index
            return None
    return None
