from __future__ import annotations

from steerable_compaction import Message
from steerable_compaction.host.events import entry_event
from steerable_compaction.messages import message_to_dict
from steerable_compaction.record import MemoryRecord, Reminder


def test_entry_event_covers_reminders() -> None:
    """A reminder reaches the host with its reason and message."""
    record = MemoryRecord()
    record.append(Reminder(reason="compaction_thrashing", message=Message.user("slow down")))
    assert entry_event(record.entries[0]) == {
        "seq": 0,
        "type": "reminder",
        "reason": "compaction_thrashing",
        "message": message_to_dict(Message.user("slow down")),
    }


def test_entry_event_shows_an_abandoned_bracket_and_its_reason() -> None:
    """Recovery's `compaction_abandoned` reaches the host with the bracket id and why."""
    from steerable_compaction.record import CompactionAbandoned, CompactionStart

    record = MemoryRecord()
    record.append_message(Message.user("goal"))
    record.append(
        CompactionStart(compaction_id="k1", span=(0, 1), pre_tokens=9, action="summarize")
    )
    record.append(CompactionAbandoned(compaction_id="k1", reason="no summary was recorded"))
    assert entry_event(record.entries[-1]) == {
        "seq": 2,
        "type": "compaction_abandoned",
        "compaction_id": "k1",
        "reason": "no summary was recorded",
    }


def test_a_compaction_event_shows_the_seqs_replaced_and_the_retention_check() -> None:
    """The boundary's history range and retained atoms (found, kept, dropped) reach the host."""
    from steerable_compaction.record import CompactionBoundary, CompactionStart

    record = MemoryRecord()
    for i in range(3):
        record.append_message(Message.user(f"m{i}"))
    record.append(
        CompactionStart(compaction_id="k3", span=(0, 2), pre_tokens=90, action="summarize")
    )
    record.append(
        CompactionBoundary(
            action="summarize",
            pre_tokens=90,
            post_tokens=40,
            replacement_count=2,
            compaction_id="k3",
            span=(0, 2),
            replacement=(Message.user("<compacted-summary>\ns\n</compacted-summary>"),),
            history=(0, 1),
            retained=(7, 2),
        )
    )
    event = entry_event(record.entries[-1])
    assert event["history"] == [0, 1]
    assert event["retained"] == {"found": 7, "kept": 2, "dropped": 5}
