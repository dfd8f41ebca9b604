"""Host events: each record entry, and each compaction outcome, as a JSON-ready dict.

A host (the JSON-RPC sidecar, the demo's live view, your own UI) receives one event per new record
entry through an `EventSink`. `entry_event` gives the event's `type` (`user`, `tool_calls`,
`tool_result`, `reply`, `system`, `compaction_start`, `compaction_summary`, `compaction`,
`reminder`), its `seq` and the entry's fields; message events carry the message in the record's
JSON form, so a host can rebuild the raw history from them alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..hooks import CompactionOutcome
from ..messages import message_to_dict
from ..record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    MessageAppended,
    Reminder,
    Usage,
)

__all__ = ["EventSink", "entry_event", "outcome_json", "usage_json"]

EventSink = Callable[[dict[str, Any]], None]
"""Receives host events (see `entry_event`)."""


def usage_json(usage: Usage) -> dict[str, int]:
    """A reply's token usage as JSON."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def outcome_json(outcome: CompactionOutcome) -> dict[str, Any]:
    """A compaction outcome (written or not, with its reason) as JSON."""
    return {
        "trigger": outcome.trigger,
        "action": outcome.action,
        "written": outcome.written,
        "effective": outcome.effective,
        "pre_tokens": outcome.pre_tokens,
        "post_tokens": outcome.post_tokens,
        "compaction_id": outcome.compaction_id,
        "summarizer_called": outcome.summarizer_called,
        "reason": outcome.reason,
    }


def entry_event(entry: Entry) -> dict[str, Any]:
    """The host event for one record entry: `type`, `seq` and the entry's fields, JSON-ready.

    Message events carry the message in the record's JSON form, so a host can rebuild the raw
    history (and seed it back) from them alone.
    """
    event = entry.event
    out: dict[str, Any] = {"seq": entry.seq}
    if isinstance(event, MessageAppended):
        message = event.message
        if message.role == "assistant":
            out["type"] = "tool_calls" if message.tool_calls else "reply"
        else:
            out["type"] = {"system": "system", "user": "user", "tool": "tool_result"}[message.role]
        out["message"] = message_to_dict(message)
        if event.usage is not None:
            out["usage"] = usage_json(event.usage)
        if message.tool_calls:
            out["calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
            ]
        result = message.tool_result
        if result is not None:
            out["call_id"] = result.call_id
            out["is_error"] = result.is_error
        if out["type"] == "reply":
            out["text"] = message.text
    elif isinstance(event, CompactionStart):
        out |= {
            "type": "compaction_start",
            "compaction_id": event.compaction_id,
            "action": event.action,
            "trigger": event.trigger,
            "span": list(event.span),
            "pre_tokens": event.pre_tokens,
            "kept": list(event.kept),
        }
    elif isinstance(event, CompactionSummary):
        out |= {
            "type": "compaction_summary",
            "compaction_id": event.compaction_id,
            "source": event.source,
            "chars": len(event.summary),
        }
    elif isinstance(event, CompactionBoundary):
        out |= {
            "type": "compaction",
            "action": event.action,
            "trigger": event.trigger,
            "pre_tokens": event.pre_tokens,
            "post_tokens": event.post_tokens,
            "replacement_count": event.replacement_count,
            "compaction_id": event.compaction_id,
            "span": None if event.span is None else list(event.span),
            "edits": len(event.edits),
            "replacement": [message_to_dict(m) for m in event.replacement],
            "history": None if event.history is None else list(event.history),
            "retained": None
            if event.retained is None
            else {
                "found": event.retained[0],
                "kept": event.retained[1],
                "dropped": event.retained[0] - event.retained[1],
            },
        }
    elif isinstance(event, CompactionAbandoned):
        out |= {
            "type": "compaction_abandoned",
            "compaction_id": event.compaction_id,
            "reason": event.reason,
        }
    else:
        assert isinstance(event, Reminder)
        out |= {
            "type": "reminder",
            "reason": event.reason,
            "message": message_to_dict(event.message),
        }
    return out
