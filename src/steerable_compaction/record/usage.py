"""Where the newest billed usage stands in a record: the anchor of the token meter (R7, R9)."""

from __future__ import annotations

from .base import Record
from .events import MessageAppended

__all__ = ["newest_usage"]


def newest_usage(record: Record, since: int) -> tuple[int, int] | None:
    """`(prompt_tokens, message_count)` of the newest billed reply among `entries[since:]`.

    `message_count` is the reply's position in the projection: the request that produced it
    held the messages before it. `None` when no reply carries usage, or a rewrite came after
    it (its count no longer describes the projection, R9).
    """
    if since < 0:  # as in `entries[since:]`
        since = max(len(record.entries) + since, 0)
    newest = record._newest_usage  # kept by the record as it takes entries in: O(1)
    if newest < 0 or newest < since or record._newest_boundary > newest:
        return None
    event = record.entries[newest].event
    assert isinstance(event, MessageAppended) and event.usage is not None
    seqs = record.projection.seqs
    for index in range(len(seqs) - 1, -1, -1):  # the reply is near the end
        if seqs[index] == newest:
            return event.usage.prompt_tokens, index
    return None
