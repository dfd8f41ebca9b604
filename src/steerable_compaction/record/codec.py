"""Encoding record entries as JSON objects, and reading every schema version we ever wrote.

Schema v4 (current), one object per line or row: `{"v": 4, "seq": n, "kind": ..., ...fields,
"crc": c}`. Fields are those of the event dataclasses; messages use `messages.message_to_dict`.
`crc` comes last: it is `zlib.crc32` of the line's UTF-8 bytes before `,"crc":`, so a changed
byte anywhere in an entry is found on open. v4 adds the `compaction_abandoned` kind.

Schema v3 is v4 without `crc` and without `compaction_abandoned`; its entries load unchecked.

Schema v2 had no brackets. Its boundary, `{"v": 2, "seq": n, "kind": "compaction_boundary",
"action", "pre_tokens", "post_tokens", "replacement_count"}`, declared that everything before it
left the projection; the rewritten transcript followed it as ordinary `message` lines. A v2
boundary therefore upgrades, in memory, to a boundary with the same fields whose `span` covers
the whole projection before it and whose `replacement` is empty: the projection after it is
exactly what v2 showed. v2 `message` lines are v3 lines already. Nothing on disk is ever
rewritten by an upgrade.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from json.scanner import make_scanner
from typing import Any, assert_never

from ..errors import MessageError, RecordError
from ..messages import message_from_dict, message_to_dict
from .events import (
    CompactionAbandoned,
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
from .fast import message_entry

__all__ = [
    "CHECKED_SINCE",
    "SCHEMA_VERSION",
    "decode_entry",
    "decode_line",
    "encode_body",
    "encode_entry",
    "encode_line",
    "iter_lines",
    "iter_rows",
    "parse_line",
]

SCHEMA_VERSION = 4
CHECKED_SINCE = 4
"""The first schema version whose entries carry a checksum."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_CRC_KEY = b',"crc":'
_POWERS = [0, *(10**i for i in range(1, 11))]  # d digits: _POWERS[d - 1] <= crc < _POWERS[d]


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
            if event.focus is not None:
                start["focus"] = event.focus
            return start
        case CompactionSummary():
            out = {"compaction_id": event.compaction_id, "summary": event.summary}
            if event.source != "summarizer":
                out["source"] = event.source
            if event.retention_budget is not None:
                out["retention_budget"] = event.retention_budget
            if event.refused is not None:
                out["refused"] = event.refused
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
        case CompactionAbandoned():
            abandoned = {"compaction_id": event.compaction_id, "reason": event.reason}
            if event.cause != "recovery":
                abandoned["cause"] = event.cause
            return abandoned
        case _:
            assert_never(event)


def encode_entry(entry: Entry) -> dict[str, Any]:
    """The JSON object for `entry`, without its checksum (which belongs to the encoded bytes)."""
    return {"v": SCHEMA_VERSION, "seq": entry.seq, "kind": entry.event.kind} | _event_fields(
        entry.event
    )


def encode_body(entry: Entry) -> bytes:
    """`entry` as one checksummed JSON object in UTF-8, without a newline (an SQLite row)."""
    head = _dumps(encode_entry(entry)).encode("utf-8")[:-1]  # all but the closing brace
    return b'%s,"crc":%d}' % (head, zlib.crc32(head))


def encode_line(entry: Entry) -> bytes:
    """`entry` as one JSONL line (newline-terminated; JSON escapes every inner newline)."""
    return encode_body(entry) + b"\n"


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
        focus=f.get("focus", str, None),
    )


def _decode_summary(f: _Fields) -> Event:
    return CompactionSummary(
        compaction_id=f.get("compaction_id", str),
        summary=f.get("summary", str),
        source=f.get("source", str, "summarizer"),
        retention_budget=f.get("retention_budget", int, None),
        refused=f.get("refused", str, None),
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


def _decode_abandoned(f: _Fields) -> Event:
    return CompactionAbandoned(
        compaction_id=f.get("compaction_id", str),
        reason=f.get("reason", str),
        cause=f.get("cause", str, "recovery"),
    )


_DECODERS: dict[str, Callable[[_Fields], Event]] = {
    "message": _decode_message,
    "compaction_start": _decode_start,
    "compaction_summary": _decode_summary,
    "compaction_boundary": _decode_boundary,
    "reminder": _decode_reminder,
    "compaction_abandoned": _decode_abandoned,
}
_SINCE = {"compaction_abandoned": 4}  # kinds newer than schema v3


def _decode_v2_boundary(f: _Fields, projection_len: int) -> Event:
    return CompactionBoundary(
        action=f.get("action", str),
        pre_tokens=f.get("pre_tokens", int),
        post_tokens=f.get("post_tokens", int),
        replacement_count=f.get("replacement_count", int),
        span=(0, projection_len),
    )


def decode_entry(obj: Any, *, projection_len: int) -> Entry:
    """Decode one JSON object of any supported schema version into an `Entry`.

    `projection_len` is the length of the projection before this entry (v2 boundaries need it).
    Checksums belong to lines (`parse_line`). Raises `RecordError` without a location; the
    store adds file and line.
    """
    entry = message_entry(obj, SCHEMA_VERSION)  # most entries of a long record
    if entry is not None:
        return entry
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
    if version < _SINCE.get(kind, 0):
        raise RecordError(f"schema v{version} has no {kind!r} entries")
    return Entry(seq, decoder(f))


# -- lines and checksums -------------------------------------------------------------------------


def _checksum(line: bytes) -> int | None:
    """The checksum `line` ends with, verified; `None` for a line without one."""
    at = line.rfind(_CRC_KEY)
    if at < 0:
        return None
    digits = line[at + len(_CRC_KEY) : -1]
    if line[-1:] != b"}" or not digits.isdigit() or len(digits) > 10:
        raise RecordError("the entry's checksum is malformed")
    if zlib.crc32(line[:at]) != int(digits):
        raise RecordError("checksum mismatch: the entry changed after it was written")
    return int(digits)


def _settle(obj: Any, crc: int | None) -> Any:
    """Check that an entry carries a checksum exactly when its version has one; drop it."""
    version = obj.get("v") if type(obj) is dict else None
    if type(version) is not int or version > SCHEMA_VERSION:
        return obj  # decode_entry names what is wrong (a newer schema may check otherwise)
    if crc is None:
        if version >= CHECKED_SINCE:
            raise RecordError(f"a v{version} entry without its checksum")
        return obj
    if version < CHECKED_SINCE:
        raise RecordError(f"a v{version} entry cannot carry a checksum")
    del obj["crc"]  # the last key of the line: `_checksum` read this very value
    return obj


def parse_line(line: bytes) -> Any:
    """Parse one line (or SQLite row) and verify its checksum; the object, without `crc`.

    Raises `RecordError` without a location for anything that is not a well-formed entry line.
    """
    try:
        obj = json.loads(line)
    except RecursionError:
        raise RecordError("not an entry: the JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer too long to convert
        raise RecordError(f"not valid JSON: {exc}") from None
    version = obj.get("v") if type(obj) is dict else None
    if type(version) is int and version > SCHEMA_VERSION:
        return obj  # a newer schema may check otherwise: decode_entry says it is newer
    return _settle(obj, _checksum(line))


# What `json.loads` runs for each value, without its wrappers (typeshed types it as a class).
_scan: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def iter_lines(data: bytes) -> Iterator[Any]:
    """Parse newline-terminated lines one at a time: each line's object, without `crc`.

    Raises `RecordError` whose `line` is the bad line's 1-based index in `data` (the store
    adds its file). Objects come one by one, so a loader that turns each into an entry reuses
    the memory of the last, as `json.loads` on each line would.

    The fast loop decodes the whole text once and calls the JSON scanner once per line (about
    half the cost of `json.loads` per line), checking each checksum in place. A value must end
    exactly at its line's first newline (so value `i` is line `i`) and a checksum must be
    exactly `,"crc":<digits>}` at the line's end. At the first line in doubt it hands the rest
    to `parse_line`, line by line, which names what is wrong.
    """
    find, rfind, crc32 = data.find, data.rfind, zlib.crc32
    done = at = start = 0  # lines parsed; the next line's start in `text` and in `data`
    try:
        text = data.decode("utf-8")
        size = len(data)
        same = len(text) == size  # ASCII: a line starts at the same index in both
        while start < size:
            newline = find(b"\n", start)
            obj, end = _scan(text, at)
            if end != (newline if same else text.find("\n", at)) or type(obj) is not dict:
                break
            version, key = obj.get("v"), rfind(_CRC_KEY, start, newline)
            if key < 0:
                if type(version) is not int or version >= CHECKED_SINCE:
                    break
            else:
                crc = obj.pop("crc", None)
                digits = newline - key - len(_CRC_KEY) - 1  # `,"crc":<digits>}` ends the line
                if type(crc) is not int or version != CHECKED_SINCE or not 0 < digits < 11:
                    break
                if not _POWERS[digits - 1] <= crc < _POWERS[digits]:
                    break
                if crc32(data[start:key]) != crc:
                    break
            yield obj
            done, at, start = done + 1, end + 1, newline + 1
    except (ValueError, RecursionError, StopIteration):
        pass
    for i, line in enumerate(data[start:].split(b"\n")[:-1], start=done + 1):
        try:
            obj = parse_line(line)
        except RecordError as exc:
            raise RecordError(exc.reason, line=i) from None
        yield obj


def iter_rows(rows: Sequence[bytes]) -> Iterator[Any]:
    """`iter_lines` for separate lines (SQLite rows), which may hold anything, newlines too."""
    if not any(b"\n" in row for row in rows):
        yield from iter_lines(b"".join(row + b"\n" for row in rows))
        return
    for i, row in enumerate(rows, start=1):
        try:
            obj = parse_line(row)
        except RecordError as exc:
            raise RecordError(exc.reason, line=i) from None
        yield obj


def decode_line(line: bytes, *, projection_len: int) -> Entry:
    """Decode one JSONL line (without its newline), checksum verified."""
    return decode_entry(parse_line(line), projection_len=projection_len)
