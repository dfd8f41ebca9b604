"""`newest_usage`: the meter's anchor, kept by the record as entries arrive (O(1) per look)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings

from steerable_compaction import Message
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    Event,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
    Usage,
)
from steerable_compaction.record.usage import newest_usage

from .record_sessions import event_sequences


def scanned(record: Record, since: int) -> tuple[int, int] | None:
    """The definition, read off the entries: newest first, a boundary ends the search."""
    for entry in reversed(record.entries[since:]):
        event = entry.event
        if isinstance(event, CompactionBoundary):
            return None
        if isinstance(event, MessageAppended) and event.usage is not None:
            return event.usage.prompt_tokens, list(record.projection.seqs).index(entry.seq)
    return None


@settings(max_examples=60, deadline=None)
@given(event_sequences())
def test_newest_usage_is_the_scan_of_the_entries(events: list[Event]) -> None:
    """Appended or loaded from disk, at every length and from every `since`, the same answer."""
    memory = MemoryRecord()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        with JsonlRecord(path, fsync="never") as writer:
            for event in events:
                memory.append(event)
                writer.append(event)
                for since in range(len(memory.entries) + 1):
                    assert newest_usage(memory, since) == scanned(memory, since)
        with JsonlRecord(path, readonly=True) as loaded:
            for since in range(len(loaded.entries) + 1):
                assert newest_usage(loaded, since) == scanned(loaded, since)


def test_a_rewrite_after_the_reply_hides_its_usage_until_the_next_reply() -> None:
    """R9: a boundary after the billed reply makes its count stale; the next reply anchors again."""
    record = MemoryRecord()
    record.append_message(Message.user("goal"))
    record.append(MessageAppended(message=Message.assistant("one"), usage=Usage(prompt_tokens=120)))
    assert newest_usage(record, 0) == (120, 1)
    assert newest_usage(record, 2) is None  # nothing new since the last look
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=130,
            post_tokens=90,
            replacement_count=1,
            edits=(Edit(index=0, message=Message.user("[folded]")),),
        )
    )
    assert newest_usage(record, 0) is None
    record.append(MessageAppended(message=Message.assistant("two"), usage=Usage(prompt_tokens=95)))
    assert newest_usage(record, 0) == (95, 2)


def test_a_negative_since_counts_from_the_end_as_a_slice_does() -> None:
    """`since=-k` looks at the last k entries, and an empty record has no usage at all."""
    assert newest_usage(MemoryRecord(), -3) is None
    record = MemoryRecord()
    record.append(MessageAppended(message=Message.assistant("a"), usage=Usage(prompt_tokens=7)))
    record.append_message(Message.user("b"))
    assert newest_usage(record, -2) == scanned(record, -2) == (7, 0)
    assert newest_usage(record, -1) is scanned(record, -1) is None
    assert newest_usage(record, -9) == scanned(record, -9)
