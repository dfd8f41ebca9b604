"""Provider-neutral transcript values.

A transcript is a list of `Message`. Each message has a role and a tuple of parts:

| role        | parts allowed                                   |
|-------------|-------------------------------------------------|
| `system`    | `TextPart`                                      |
| `user`      | `TextPart`, `ImagePart`                         |
| `assistant` | `TextPart`, then `ToolCall` (calls come last)   |
| `tool`      | exactly one `ToolResult`                        |

Values are frozen and hashable, so they can be shared between the record, the projection and
requests without copying. A `pinned` message is never folded or summarized: compaction re-sends
it byte-identical (pinning is not part of any wire format). `message_to_dict` /
`message_from_dict` are the record's own lossless JSON form (not a provider wire format; see
`steerable_compaction.wire` for those).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

from .errors import MessageError

__all__ = [
    "ContentPart",
    "ImagePart",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "message_from_dict",
    "message_to_dict",
    "messages_from_dicts",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
_ROLES: frozenset[str] = frozenset(get_args(Role))


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """A run of text."""

    text: str
    type: Literal["text"] = "text"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise MessageError(
                f"text must be a string, got {type(self.text).__name__}", field="text"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image, either inline bytes (with `media_type`) or a remote `url`.

    Inline images need a `media_type` such as `image/png`; a URL image may omit it because the
    wire formats do not carry one. Data URLs are not accepted as `url`: pass the decoded bytes.
    """

    media_type: str | None = None
    data: bytes | None = field(default=None, repr=False)
    url: str | None = None
    type: Literal["image"] = "image"

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise MessageError("an image needs exactly one of data or url", field="data")
        if self.data is not None:
            if not isinstance(self.data, bytes):
                raise MessageError("image data must be bytes", field="data")
            if not self.media_type:
                raise MessageError("an inline image needs a media_type", field="media_type")
        if self.url is not None:
            if not isinstance(self.url, str) or not self.url:
                raise MessageError("image url must be a non-empty string", field="url")
            if self.url.startswith("data:"):
                raise MessageError(
                    "pass a data URL's decoded bytes as data=, not url=", field="url"
                )
        if self.media_type is not None and not (
            isinstance(self.media_type, str) and self.media_type.startswith("image/")
        ):
            raise MessageError(
                f"media_type must look like 'image/png', got {self.media_type!r}",
                field="media_type",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call issued by an assistant message.

    `arguments` is the JSON text exactly as the model produced it: the bytes are kept so that a
    replayed transcript stays byte-identical to what the provider has cached. Only a fold
    (`compaction.fold_arguments`) changes them, in the projection, never in the record: it
    re-encodes the arguments with their long strings folded.
    """

    id: str
    name: str
    arguments: str = "{}"
    type: Literal["tool_call"] = "tool_call"

    def __post_init__(self) -> None:
        for name in ("id", "name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise MessageError(f"tool call {name} must be a non-empty string", field=name)
        if not isinstance(self.arguments, str):
            raise MessageError("tool call arguments must be JSON text (str)", field="arguments")

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON; raises `MessageError` if they are not valid JSON."""
        try:
            return json.loads(self.arguments)
        except json.JSONDecodeError as exc:
            raise MessageError(f"arguments are not valid JSON: {exc}", field="arguments") from exc


ContentPart: TypeAlias = TextPart | ImagePart


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """The answer to the tool call whose id is `call_id`."""

    call_id: str
    content: tuple[ContentPart, ...] = ()
    is_error: bool = False
    type: Literal["tool_result"] = "tool_result"

    def __post_init__(self) -> None:
        if not isinstance(self.call_id, str) or not self.call_id:
            raise MessageError("tool result call_id must be a non-empty string", field="call_id")
        if not isinstance(self.content, tuple):
            object.__setattr__(self, "content", tuple(self.content))
        for i, part in enumerate(self.content):
            if not isinstance(part, (TextPart, ImagePart)):
                raise MessageError(
                    f"tool result content holds text and images, not {type(part).__name__}",
                    field=f"content[{i}]",
                )

    @property
    def text(self) -> str:
        """The concatenated text of the result's text parts."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


Part: TypeAlias = TextPart | ImagePart | ToolCall | ToolResult

_ALLOWED: dict[str, tuple[type, ...]] = {
    "system": (TextPart,),
    "user": (TextPart, ImagePart),
    "assistant": (TextPart, ToolCall),
    "tool": (ToolResult,),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One transcript entry: a role and its parts (see the module docstring for the rules).

    `pinned` keeps the message out of every fold and summary: compaction re-sends it as it is.
    `goal` names a user message as the session's goal (the task): compaction keeps it verbatim
    and never takes an earlier user message (a demonstration) for it.
    """

    role: Role
    parts: tuple[Part, ...] = ()
    pinned: bool = False
    goal: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or self.role not in _ROLES:
            raise MessageError(
                f"role must be one of {sorted(_ROLES)}, got {self.role!r}", field="role"
            )
        if type(self.pinned) is not bool:
            raise MessageError(f"pinned must be True or False, got {self.pinned!r}", field="pinned")
        if type(self.goal) is not bool:
            raise MessageError(f"goal must be True or False, got {self.goal!r}", field="goal")
        if self.goal and self.role != "user":
            raise MessageError(
                f"only a user message can be the goal, not {self.role}", field="goal"
            )
        if not isinstance(self.parts, tuple):
            object.__setattr__(self, "parts", tuple(self.parts))
        allowed = _ALLOWED[self.role]
        seen_call = False
        for i, part in enumerate(self.parts):
            if not isinstance(part, allowed):
                names = ", ".join(t.__name__ for t in allowed)
                raise MessageError(
                    f"a {self.role} message holds {names}, not {type(part).__name__}",
                    field=f"parts[{i}]",
                )
            if isinstance(part, ToolCall):
                seen_call = True
            elif seen_call:
                raise MessageError(
                    "an assistant message's tool calls must follow all of its text",
                    field=f"parts[{i}]",
                )
        if self.role == "tool" and len(self.parts) != 1:
            raise MessageError(
                f"a tool message holds exactly one ToolResult, got {len(self.parts)} parts",
                field="parts",
            )
        if seen_call:
            ids = [p.id for p in self.parts if isinstance(p, ToolCall)]
            if len(set(ids)) != len(ids):
                raise MessageError("tool call ids repeat within one message", field="parts")

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message holding `text`."""
        return cls(role="system", parts=(TextPart(text=text),))

    @classmethod
    def user(
        cls, content: str | Iterable[ContentPart], *, pinned: bool = False, goal: bool = False
    ) -> Message:
        """A user message from text or text/image parts (`pinned`: never compacted; `goal`).

        `goal=True` names it the session's goal (see the class docstring).
        """
        parts = (TextPart(text=content),) if isinstance(content, str) else tuple(content)
        return cls(role="user", parts=parts, pinned=pinned, goal=goal)

    @classmethod
    def assistant(cls, text: str | None = None, tool_calls: Iterable[ToolCall] = ()) -> Message:
        """An assistant message with optional text followed by tool calls."""
        parts: list[Part] = [] if text is None else [TextPart(text=text)]
        parts.extend(tool_calls)
        return cls(role="assistant", parts=tuple(parts))

    @classmethod
    def tool(
        cls, call_id: str, content: str | Iterable[ContentPart], *, is_error: bool = False
    ) -> Message:
        """A tool message answering `call_id`."""
        body = (TextPart(text=content),) if isinstance(content, str) else tuple(content)
        return cls(
            role="tool", parts=(ToolResult(call_id=call_id, content=body, is_error=is_error),)
        )

    def pin(self) -> Message:
        """This message, pinned: never folded or summarized, re-sent as it is."""
        if self.pinned:
            return self
        return Message(role=self.role, parts=self.parts, pinned=True, goal=self.goal)

    def as_goal(self) -> Message:
        """This user message, named the session's goal (`goal`)."""
        if self.goal:
            return self
        return Message(role=self.role, parts=self.parts, pinned=self.pinned, goal=True)

    # -- views --------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The concatenated text of the message, including a tool result's text."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, TextPart):
                out.append(part.text)
            elif isinstance(part, ToolResult):
                out.append(part.text)
        return "".join(out)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls this message issues (empty unless it is an assistant message)."""
        return tuple(p for p in self.parts if isinstance(p, ToolCall))

    @property
    def tool_result(self) -> ToolResult | None:
        """The tool result this message carries, if it is a tool message."""
        if self.role == "tool":
            part = self.parts[0]
            assert isinstance(part, ToolResult)
            return part
        return None

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """Every image in the message, including those inside a tool result."""
        out: list[ImagePart] = []
        for part in self.parts:
            if isinstance(part, ImagePart):
                out.append(part)
            elif isinstance(part, ToolResult):
                out.extend(p for p in part.content if isinstance(p, ImagePart))
        return tuple(out)


# -- the record's JSON form ---------------------------------------------------------------------


def _part_to_dict(part: Part) -> dict[str, Any]:
    match part:
        case TextPart():
            return {"type": "text", "text": part.text}
        case ImagePart():
            out: dict[str, Any] = {"type": "image"}
            if part.media_type is not None:
                out["media_type"] = part.media_type
            if part.data is not None:
                out["data"] = base64.b64encode(part.data).decode("ascii")
            else:
                out["url"] = part.url
            return out
        case ToolCall():
            return {
                "type": "tool_call",
                "id": part.id,
                "name": part.name,
                "arguments": part.arguments,
            }
        case ToolResult():
            result: dict[str, Any] = {
                "type": "tool_result",
                "call_id": part.call_id,
                "content": [_part_to_dict(p) for p in part.content],
            }
            if part.is_error:
                result["is_error"] = True
            return result


def message_to_dict(message: Message) -> dict[str, Any]:
    """The record's JSON form of `message` (lossless; images are base64)."""
    out: dict[str, Any] = {"role": message.role, "parts": [_part_to_dict(p) for p in message.parts]}
    if message.pinned:
        out["pinned"] = True  # written only when set: unpinned messages keep their old form
    if message.goal:
        out["goal"] = True
    return out


def _bad(key: str, kind: type, obj: Mapping[str, Any]) -> MessageError:
    if key not in obj:
        return MessageError(f"missing {key!r}", field=key)
    return MessageError(f"expected {kind.__name__}, got {type(obj[key]).__name__}", field=key)


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if type(value) is not str:
        raise _bad(key, str, obj)
    return value


def _join(prefix: str, field: str | None) -> str:
    return f"{prefix}.{field}" if field else prefix


def _parts_from_list(raw: Any, prefix: str) -> tuple[Any, ...]:
    out = []
    for i, obj in enumerate(raw):
        try:
            out.append(_part_from_dict(obj))
        except MessageError as exc:
            raise MessageError(exc.reason, field=_join(f"{prefix}[{i}]", exc.field)) from None
    return tuple(out)


def _part_from_dict(obj: Any) -> Part:
    """Decode one part; errors carry the field path relative to the part."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise MessageError(f"a part must be an object, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "text":
        return TextPart(text=_str(obj, "text"))
    if kind == "tool_call":
        return ToolCall(
            id=_str(obj, "id"), name=_str(obj, "name"), arguments=_str(obj, "arguments")
        )
    if kind == "tool_result":
        content = obj.get("content")
        if type(content) is not list:
            raise _bad("content", list, obj)
        is_error = obj.get("is_error", False)
        if type(is_error) is not bool:
            raise MessageError("is_error must be a boolean", field="is_error")
        return ToolResult(
            call_id=_str(obj, "call_id"),
            content=_parts_from_list(content, "content"),
            is_error=is_error,
        )
    if kind == "image":
        data = obj.get("data")
        raw: bytes | None = None
        if data is not None:
            if type(data) is not str:
                raise MessageError("image data must be base64 text", field="data")
            try:
                raw = base64.b64decode(data, validate=True)
            except ValueError as exc:  # binascii.Error, or non-ASCII text
                raise MessageError(f"bad base64: {exc}", field="data") from None
        return ImagePart(media_type=obj.get("media_type"), data=raw, url=obj.get("url"))
    raise MessageError(f"unknown part type {kind!r}", field="type")


def message_from_dict(obj: Any, *, index: int | None = None) -> Message:
    """Decode the record's JSON form; errors name `index` and the offending field."""
    try:
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise MessageError(f"a message must be an object, got {type(obj).__name__}")
        role = _str(obj, "role")
        raw_parts = obj.get("parts")
        if type(raw_parts) is not list:
            raise _bad("parts", list, obj)
        flags = {}
        for flag in ("pinned", "goal"):
            flags[flag] = obj.get(flag, False)
            if type(flags[flag]) is not bool:
                raise MessageError(f"{flag} must be a boolean", field=flag)
        parts = _parts_from_list(raw_parts, "parts")
        return Message(role=role, parts=parts, **flags)  # type: ignore[arg-type]
    except MessageError as exc:
        raise MessageError(exc.reason, index=index, field=exc.field) from None


def messages_from_dicts(objs: Sequence[Any]) -> list[Message]:
    """Decode a list of messages in the record's JSON form."""
    return [message_from_dict(o, index=i) for i, o in enumerate(objs)]
