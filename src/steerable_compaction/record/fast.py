"""The fast path for loading message entries, the bulk of any long record.

Building a frozen dataclass through its constructor costs more than parsing its JSON. For the
shapes `message_to_dict` writes for text and tool calls, `message_entry` checks the invariants
the constructors check (exact types, role rules, calls after text, unique call ids, non-empty
ids) and sets the slots directly. Anything else (images, usage, an unknown key, a field these
builders do not know) returns `None`, and the caller takes the validating decoder.
tests/test_record_codec.py proves both paths agree.

`appended` and `entry_of` are the constructors of an append (`Record.append_message` builds both
for every message): the same values as `MessageAppended(message=m)` and `Entry(seq, event)`,
built by the same slot setters (these two classes check nothing on construction).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..messages import Message, TextPart, ToolCall, ToolResult
from .events import Entry, Event, MessageAppended

__all__ = ["ENABLED", "appended", "entry_of", "message_entry"]

_new = object.__new__
_CLASSES = (Message, TextPart, ToolCall, ToolResult, MessageAppended, Entry)
_FIELDS = [
    ["role", "parts", "pinned", "goal"],
    ["text", "type"],
    ["id", "name", "arguments", "type"],
    ["call_id", "content", "is_error", "type"],
    ["message", "usage", "kind"],
    ["seq", "event"],
]
MemberDescriptor = type(Entry.__dict__["seq"])

ENABLED = [[f.name for f in fields(cls)] for cls in _CLASSES] == _FIELDS and all(
    type(cls.__dict__.get(name)) is MemberDescriptor
    for cls, names in zip(_CLASSES, _FIELDS, strict=True)
    for name in names
)
"""Whether the value classes still have exactly the fields (slots) these builders set."""


def _setters(cls: type, *names: str) -> tuple[Any, ...]:
    # A slot's own setter: a third faster than `object.__setattr__`, which looks it up.
    return tuple(cls.__dict__[name].__set__ if ENABLED else None for name in names)


_ROLE, _PARTS, _PINNED, _GOAL = _setters(Message, "role", "parts", "pinned", "goal")
_TEXT, _TEXT_TYPE = _setters(TextPart, "text", "type")
_CALL_ID, _CALL_NAME, _CALL_ARGUMENTS, _CALL_TYPE = _setters(
    ToolCall, "id", "name", "arguments", "type"
)
_RESULT_ID, _CONTENT, _IS_ERROR, _RESULT_TYPE = _setters(
    ToolResult, "call_id", "content", "is_error", "type"
)
_MESSAGE, _USAGE, _KIND = _setters(MessageAppended, "message", "usage", "kind")
_SEQ, _EVENT = _setters(Entry, "seq", "event")


class _Defer(Exception):
    """Not a shape the fast path builds: use the validating decoder."""


def _text(item: Any) -> TextPart:
    if type(item) is not dict or len(item) != 2 or item["type"] != "text":
        raise _Defer
    text = item["text"]
    if type(text) is not str:
        raise _Defer
    part = _new(TextPart)
    _TEXT(part, text)
    _TEXT_TYPE(part, "text")
    return part


def _call(item: dict[str, Any], seen: set[str]) -> ToolCall:
    if len(item) != 4 or item["type"] != "tool_call":
        raise _Defer
    cid, name, arguments = item["id"], item["name"], item["arguments"]
    if type(cid) is not str or not cid or cid in seen or type(name) is not str or not name:
        raise _Defer
    if type(arguments) is not str:
        raise _Defer
    seen.add(cid)
    call = _new(ToolCall)
    _CALL_ID(call, cid)
    _CALL_NAME(call, name)
    _CALL_ARGUMENTS(call, arguments)
    _CALL_TYPE(call, "tool_call")
    return call


def _result(raw: list[Any]) -> ToolResult:
    if len(raw) != 1 or type(raw[0]) is not dict:
        raise _Defer
    item = raw[0]
    cid, content, is_error = item["call_id"], item["content"], item.get("is_error", False)
    if type(cid) is not str or not cid or type(content) is not list or type(is_error) is not bool:
        raise _Defer
    if item["type"] != "tool_result" or len(item) != (4 if "is_error" in item else 3):
        raise _Defer
    result = _new(ToolResult)
    _RESULT_ID(result, cid)
    _CONTENT(result, (_text(content[0]),) if len(content) == 1 else tuple(map(_text, content)))
    _IS_ERROR(result, is_error)
    _RESULT_TYPE(result, "tool_result")
    return result


def _assistant(raw: list[Any]) -> tuple[Any, ...]:
    parts: list[Any] = []
    seen: set[str] = set()
    for item in raw:
        if type(item) is not dict:
            raise _Defer
        parts.append(_text(item) if item.get("type") == "text" and not seen else _call(item, seen))
    return tuple(parts)


def message_entry(obj: Any, max_version: int) -> Entry | None:
    """The entry for `obj` if it is a plain message entry of a known shape, else `None`."""
    if not ENABLED or type(obj) is not dict or len(obj) != 4:
        return None
    try:
        seq, version, kind, message = obj["seq"], obj["v"], obj["kind"], obj["message"]
        if kind != "message" or type(seq) is not int or type(version) is not int:
            return None
        if not 2 <= version <= max_version or type(message) is not dict or len(message) != 2:
            return None
        role, raw = message["role"], message["parts"]
        if type(raw) is not list:
            return None
        if role == "tool":
            parts: tuple[Any, ...] = (_result(raw),)
        elif role == "assistant":
            parts = _assistant(raw)
        elif role == "user" or role == "system":
            parts = tuple(map(_text, raw))
        else:
            return None
    except (_Defer, KeyError, TypeError):
        return None
    out = _new(Message)
    _ROLE(out, role)
    _PARTS(out, parts)
    _PINNED(out, False)  # a pinned message has a third key: the validating decoder builds it
    _GOAL(out, False)  # so does a goal
    return entry_of(seq, appended(out))


def appended(message: Message) -> MessageAppended:
    """`MessageAppended(message=message)`, without the frozen constructor's `object.__setattr__`."""
    if not ENABLED:
        return MessageAppended(message=message)
    event = _new(MessageAppended)
    _MESSAGE(event, message)
    _USAGE(event, None)
    _KIND(event, "message")
    return event


def entry_of(seq: int, event: Event) -> Entry:
    """`Entry(seq, event)`, without the frozen constructor's `object.__setattr__`."""
    if not ENABLED:
        return Entry(seq, event)
    entry = _new(Entry)
    _SEQ(entry, seq)
    _EVENT(entry, event)
    return entry
