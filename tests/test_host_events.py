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
