"""Encoding record entries as JSON objects, and reading every schema version we ever wrote.

Schema v3 (current), one object per line or row: `{"v": 3, "seq": n, "kind": ..., ...fields}`.
Fields are those of the event dataclasses; messages use `messages.message_to_dict`.

Schema v2 had no brackets. Its boundary, `{"v": 2, "seq": n, "kind": "compaction_boundary",
"action", "pre_tokens", "post_tokens", "replacement_count"}`, declared that everything before it
left the projection; the rewritten transcript followed it as ordinary `message` lines. A v2
boundary therefore upgrades, in memory, to a v3 boundary with the same fields whose `span` covers
the whole projection before it and whose `replacement` is empty: the projection after it is
exactly what v2 showed. v2 `message` lines are v3 lines already. Nothing on disk is ever
rewritten by an upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, assert_never

from ..errors import MessageError, RecordError
from ..messages import message_from_dict, message_to_dict
from .events import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Entry,
    Event,
    MessageAppended,
    Reminder,
    Usage,
)

__all__ = [
    "SCHEMA_VERSION",
    "decode_entry",
    "decode_line",
    "encode_entry",
    "encode_line",
]

SCHEMA_VERSION = 3

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _usage_to_dict(usage: Usage) -> dict[str, int]:
    out = {"prompt_tokens": usage.prompt_tokens}
    if usage.completion_tokens:
        out["completion_tokens"] = usage.completion_tokens
    if usage.cached_tokens:
        out["cached_tokens"] = usage.cached_tokens
    if usage.cache_write_tokens:
        out["cache_write_tokens"] = usage.cache_write_tokens
    return out


def _event_fields(event: Event) -> dict[str, Any]:
    match event:
        case MessageAppended():
            out: dict[str, Any] = {"message": message_to_dict(event.message)}
            if event.usage is not None:
                out["usage"] = _usage_to_dict(event.usage)
            return out
        case CompactionStart():
            start: dict[str, Any] = {
                "compaction_id": event.compaction_id,
                "span": list(event.span),
                "pre_tokens": event.pre_tokens,
                "action": event.action,
                "trigger": event.trigger,
            }
            if event.kept:
                start["kept"] = list(event.kept)
            return start
        case CompactionSummary():
            out = {"compaction_id": event.compaction_id, "summary": event.summary}
            if event.source != "summarizer":
                out["source"] = event.source
            return out
        case CompactionBoundary():
            boundary: dict[str, Any] = {
                "action": event.action,
                "trigger": event.trigger,
                "pre_tokens": event.pre_tokens,
                "post_tokens": event.post_tokens,
                "replacement_count": event.replacement_count,
            }
            if event.compaction_id is not None:
                boundary["compaction_id"] = event.compaction_id
            if event.edits:
                boundary["edits"] = [
                    {"index": e.index, "message": message_to_dict(e.message)} for e in event.edits
                ]
            if event.span is not None:
                boundary["span"] = list(event.span)
                boundary["replacement"] = [message_to_dict(m) for m in event.replacement]
            if event.history is not None:
                boundary["history"] = list(event.history)
            if event.retained is not None:
                boundary["retained"] = {"found": event.retained[0], "kept": event.retained[1]}
            return boundary
        case Reminder():
            return {"reason": event.reason, "message": message_to_dict(event.message)}
        case _:
            assert_never(event)


def encode_entry(entry: Entry) -> dict[str, Any]:
    """The v3 JSON object for `entry`."""
    return {"v": SCHEMA_VERSION, "seq": entry.seq, "kind": entry.event.kind} | _event_fields(
        entry.event
    )


def encode_line(entry: Entry) -> bytes:
    """`entry` as one JSONL line (UTF-8, newline-terminated; JSON escapes every inner newline)."""
    return (_dumps(encode_entry(entry)) + "\n").encode("utf-8")


# -- decoding ------------------------------------------------------------------------------------


class _Fields:
    """Typed access to one object's fields, raising `RecordError` that names the field."""

    __slots__ = ("obj",)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj

    def get(self, key: str, kind: type, default: Any = ...) -> Any:
        if key not in self.obj:
            if default is ...:
                raise RecordError(f"missing field {key!r}")
            return default
        value = self.obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RecordError(
                f"field {key!r} should be {kind.__name__}, got {type(value).__name__}"
            )
        return value

    def span(self, key: str) -> tuple[int, int]:
        raw = self.get(key, list)
        if len(raw) != 2:
            raise RecordError(f"field {key!r} should be [start, end], got {raw!r}")
        return (raw[0], raw[1])


def _message(obj: Any, field: str) -> Any:
    try:
        return message_from_dict(obj)
    except MessageError as exc:
        raise RecordError(f"field {field!r}: {exc}") from None


def _decode_message(f: _Fields) -> Event:
    usage = f.obj.get("usage")
    return MessageAppended(
        message=_message(f.get("message", dict), "message"),
        usage=None if usage is None else _decode_usage(f.get("usage", dict)),
    )


def _decode_usage(obj: Mapping[str, Any]) -> Usage:
    f = _Fields(obj)
    return Usage(
        prompt_tokens=f.get("prompt_tokens", int),
        completion_tokens=f.get("completion_tokens", int, 0),
        cached_tokens=f.get("cached_tokens", int, 0),
        cache_write_tokens=f.get("cache_write_tokens", int, 0),
    )


def _decode_start(f: _Fields) -> Event:
    return CompactionStart(
        compaction_id=f.get("compaction_id", str),
        span=f.span("span"),
        pre_tokens=f.get("pre_tokens", int),
        action=f.get("action", str),
        trigger=f.get("trigger", str, "pressure"),
        kept=tuple(f.get("kept", list, [])),
    )


def _decode_summary(f: _Fields) -> Event:
    return CompactionSummary(
        compaction_id=f.get("compaction_id", str),
        summary=f.get("summary", str),
        source=f.get("source", str, "summarizer"),
    )


def _decode_boundary(f: _Fields) -> Event:
    edits = []
    for i, raw in enumerate(f.get("edits", list, [])):
        if not isinstance(raw, Mapping):
            raise RecordError(f"field 'edits[{i}]' should be an object")
        ef = _Fields(raw)
        edits.append(
            Edit(index=ef.get("index", int), message=_message(ef.get("message", dict), "edits"))
        )
    span = f.span("span") if "span" in f.obj else None
    replacement = tuple(
        _message(m, f"replacement[{i}]") for i, m in enumerate(f.get("replacement", list, []))
    )
    history = f.span("history") if "history" in f.obj else None
    retained = None
    if "retained" in f.obj:
        rf = _Fields(f.get("retained", dict))
        retained = (rf.get("found", int), rf.get("kept", int))
    return CompactionBoundary(
        action=f.get("action", str),
        trigger=f.get("trigger", str, "pressure"),
        pre_tokens=f.get("pre_tokens", int),
        post_tokens=f.get("post_tokens", int),
        replacement_count=f.get("replacement_count", int),
        compaction_id=f.get("compaction_id", str, None),
        edits=tuple(edits),
        span=span,
        replacement=replacement,
        history=history,
        retained=retained,
    )


def _decode_reminder(f: _Fields) -> Event:
    return Reminder(
        reason=f.get("reason", str), message=_message(f.get("message", dict), "message")
    )


_DECODERS: dict[str, Callable[[_Fields], Event]] = {
    "message": _decode_message,
    "compaction_start": _decode_start,
    "compaction_summary": _decode_summary,
    "compaction_boundary": _decode_boundary,
    "reminder": _decode_reminder,
}


def _decode_v2_boundary(f: _Fields, projection_len: int) -> Event:
    return CompactionBoundary(
        action=f.get("action", str),
        pre_tokens=f.get("pre_tokens", int),
        post_tokens=f.get("post_tokens", int),
        replacement_count=f.get("replacement_count", int),
        span=(0, projection_len),
    )


def decode_entry(obj: Any, *, projection_len: int) -> Entry:
    """Decode one JSON object of any supported schema version into a v3 `Entry`.

    `projection_len` is the length of the projection before this entry (v2 boundaries need it).
    Raises `RecordError` without a location; the store adds file and line.
    """
    if type(obj) is dict and obj.get("kind") == "message" and obj.get("v") in (2, 3):
        # The hot path when loading a long record: most entries are messages.
        seq = obj.get("seq")
        message = obj.get("message")
        if type(seq) is int and type(message) is dict and "usage" not in obj:
            return Entry(seq, MessageAppended(message=_message(message, "message")))
    if not isinstance(obj, Mapping):
        raise RecordError(f"an entry must be a JSON object, got {type(obj).__name__}")
    f = _Fields(obj)
    version = f.get("v", int)
    seq = f.get("seq", int)
    kind = f.get("kind", str)
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"schema v{version} was written by a newer steerable-compaction; "
            f"this version reads up to v{SCHEMA_VERSION}"
        )
    if version < 2:
        raise RecordError(f"unsupported schema version v{version}")
    if version == 2:
        if kind == "compaction_boundary":
            return Entry(seq, _decode_v2_boundary(f, projection_len))
        if kind != "message":
            raise RecordError(f"schema v2 has no {kind!r} entries")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise RecordError(f"unknown kind {kind!r}")
    return Entry(seq, decoder(f))


def decode_line(line: bytes, *, projection_len: int) -> Entry:
    """Decode one JSONL line (without its newline)."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"not valid JSON: {exc}") from None
    return decode_entry(obj, projection_len=projection_len)
