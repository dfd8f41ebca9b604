"""Lossless conversion between a transcript and the OpenAI / Anthropic wire formats.

`to_openai` / `from_openai` speak the Chat Completions `messages` list; `to_anthropic` /
`from_anthropic` speak the Messages API's `(system, messages)` pair. For every transcript a
format can carry, `from_x(to_x(t)) == t` holds exactly, because the encoding is canonical:

- parts that are exactly one `TextPart` become a string `content`; any other parts tuple (the
  empty one included) becomes a list of content parts; an assistant message without text gets
  OpenAI `content: None`, and the `tool_calls` key only when it has calls;
- Anthropic: the leading system messages become `system` (`None` for none, a string for one,
  one text block per message for several); consecutive tool messages share one user message
  of `tool_result` blocks; `ToolCall.arguments` must parse to a JSON object, which
  `from_anthropic` writes back as compact JSON (`separators=(",", ":")`, `ensure_ascii=False`),
  so another spelling of the same object converts but returns in that canonical spelling.

A valid message that the target cannot carry raises `ConversionError` naming the message index
and the neutral field. With `lossy=True` the converters degrade instead, deterministically:

- OpenAI, an image inside a tool result: the text `[image: <media_type>]` (`<url>` if remote);
- OpenAI, `ToolResult.is_error`: the first text part gets the prefix `Error: `;
- both, a URL image with a `media_type`: the `media_type` is dropped;
- Anthropic, arguments that are not a JSON object: `input = {"raw_arguments": <the text>}`;
- Anthropic, a system message after a non-system one: hoisted into `system`, order kept;
- Anthropic, a system message without exactly one part: its text joined into one block.

Decoding raises `MessageError` whose `.index` is the wire message's position and `.field` the
dotted path inside it (`content[1].image_url.url`); a bad Anthropic `system` has `index=None`
and a field starting with `system`. Unknown extra keys (`name`, `refusal`, `detail`,
`cache_control`, `citations` …) are ignored; unknown roles and content-part or block types
(`refusal`, `input_audio`, `thinking`, `document` …) are errors rather than silently dropped.
OpenAI's `developer` role reads as `system`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, assert_never

from .errors import ConversionError, MessageError
from .messages import ContentPart, ImagePart, Message, Part, TextPart, ToolCall, ToolResult

__all__ = ["AnthropicSystem", "from_anthropic", "from_openai", "to_anthropic", "to_openai"]

AnthropicSystem: TypeAlias = str | list[dict[str, Any]] | None
"""The Anthropic `system` value: absent, one string, or a list of text blocks."""

_ERROR_PREFIX = "Error: "
_RAW_ARGUMENTS = "raw_arguments"
_ARRAY = (list, tuple)
_KIND_NAMES: dict[type, str] = {str: "a string", bool: "a boolean", dict: "an object"}
_KIND_NAMES.update({Mapping: "an object", list: "an array", tuple: "an array"})


# -- to OpenAI ----------------------------------------------------------------------------------


def to_openai(messages: Sequence[Message], *, lossy: bool = False) -> list[dict[str, Any]]:
    """Encode `messages` as a Chat Completions `messages` list.

    Raises:
        ConversionError: a message holds what OpenAI cannot carry (see the module docstring),
            unless `lossy` is set.
    """
    return [_openai_message(message, i, lossy) for i, message in enumerate(messages)]


def _openai_message(message: Message, i: int, lossy: bool) -> dict[str, Any]:
    parts = _content_parts(message.parts)
    match message.role:
        case "system" | "user":
            return {"role": message.role, "content": _content(parts, i, "parts", lossy, _oa_image)}
        case "assistant":
            content = _content(parts, i, "parts", lossy, _oa_image) if parts else None
            out: dict[str, Any] = {"role": "assistant", "content": content}
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in message.tool_calls
                ]
            return out
        case "tool":
            result = _tool_result(message)
            parts = _openai_result_parts(result, i, lossy)
            content = _content(parts, i, "parts[0].content", lossy, _oa_image)
            return {"role": "tool", "tool_call_id": result.call_id, "content": content}
        case _:
            assert_never(message.role)


def _openai_result_parts(result: ToolResult, i: int, lossy: bool) -> list[ContentPart]:
    parts = list(result.content)
    for j, part in enumerate(parts):
        if isinstance(part, ImagePart):
            if not lossy:
                reason = "OpenAI tool messages carry text only, not images"
                raise ConversionError(reason, index=i, field=f"parts[0].content[{j}]")
            pointer = part.media_type if part.data is not None else part.url
            parts[j] = TextPart(text=f"[image: {pointer}]")
    if result.is_error:
        if not lossy:
            reason = "OpenAI tool messages have no error flag"
            raise ConversionError(reason, index=i, field="parts[0].is_error")
        first = parts[0] if parts else None
        if isinstance(first, TextPart):
            parts[0] = TextPart(text=_ERROR_PREFIX + first.text)
        else:
            parts.insert(0, TextPart(text=_ERROR_PREFIX))
    return parts


def _oa_image(part: ImagePart, i: int, where: str, lossy: bool) -> dict[str, Any]:
    if part.data is not None:
        url = f"data:{part.media_type};base64,{_b64encode(part.data)}"
    else:
        url = _image_url(part, i, where, lossy, "OpenAI")
    return {"type": "image_url", "image_url": {"url": url}}


# -- to Anthropic -------------------------------------------------------------------------------


def to_anthropic(
    messages: Sequence[Message], *, lossy: bool = False
) -> tuple[AnthropicSystem, list[dict[str, Any]]]:
    """Encode `messages` as the Messages API's `(system, messages)` pair.

    Raises:
        ConversionError: a message holds what Anthropic cannot carry (see the module
            docstring), unless `lossy` is set.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the open user message of tool results
    for i, message in enumerate(messages):
        match message.role:
            case "system":
                system.append(_anthropic_system_text(message, i, bool(out), lossy))
            case "user":
                content = _content(_content_parts(message.parts), i, "parts", lossy, _an_image)
                out.append({"role": "user", "content": content})
                results = None
            case "assistant":
                out.append(
                    {"role": "assistant", "content": _anthropic_assistant(message, i, lossy)}
                )
                results = None
            case "tool":
                if results is None:
                    results = []
                    out.append({"role": "user", "content": results})
                results.append(_anthropic_result(_tool_result(message), i, lossy))
            case _:
                assert_never(message.role)
    if len(system) <= 1:
        return (system[0] if system else None), out
    return [{"type": "text", "text": text} for text in system], out


def _anthropic_system_text(message: Message, i: int, late: bool, lossy: bool) -> str:
    if late and not lossy:
        reason = "Anthropic carries system text only before the first non-system message"
        raise ConversionError(reason, index=i, field="role")
    if len(message.parts) != 1 and not lossy:
        reason = f"an Anthropic system entry is one text block, not {len(message.parts)} parts"
        raise ConversionError(reason, index=i, field="parts")
    return message.text


def _anthropic_assistant(message: Message, i: int, lossy: bool) -> str | list[dict[str, Any]]:
    texts = _content_parts(message.parts)
    if not message.tool_calls:
        return _content(texts, i, "parts", lossy, _an_image)
    blocks = _blocks(texts, i, "parts", lossy, _an_image)
    for j, call in enumerate(message.tool_calls, start=len(texts)):  # calls follow all text
        arguments = _anthropic_input(call, i, f"parts[{j}]", lossy)
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _anthropic_input(call: ToolCall, i: int, where: str, lossy: bool) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        return value
    if not lossy:
        reason = f"Anthropic tool_use input must be a JSON object, got {call.arguments[:40]!r}"
        raise ConversionError(reason, index=i, field=f"{where}.arguments")
    return {_RAW_ARGUMENTS: call.arguments}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _anthropic_result(result: ToolResult, i: int, lossy: bool) -> dict[str, Any]:
    content = _content(result.content, i, "parts[0].content", lossy, _an_image)
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": content,
    }
    if result.is_error:
        block["is_error"] = True
    return block


def _an_image(part: ImagePart, i: int, where: str, lossy: bool) -> dict[str, Any]:
    source: dict[str, Any]
    if part.data is not None:
        source = {"type": "base64", "media_type": part.media_type, "data": _b64encode(part.data)}
    else:
        source = {"type": "url", "url": _image_url(part, i, where, lossy, "Anthropic")}
    return {"type": "image", "source": source}


# -- shared encoding helpers --------------------------------------------------------------------

_ImageEncoder: TypeAlias = Callable[[ImagePart, int, str, bool], dict[str, Any]]


def _content(
    parts: Sequence[ContentPart], i: int, where: str, lossy: bool, image: _ImageEncoder
) -> str | list[dict[str, Any]]:
    """A string for exactly one text part, else a list of blocks (the canonical choice)."""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return _blocks(parts, i, where, lossy, image)


def _blocks(
    parts: Sequence[ContentPart], i: int, where: str, lossy: bool, image: _ImageEncoder
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        match part:
            case TextPart():
                out.append({"type": "text", "text": part.text})
            case ImagePart():
                out.append(image(part, i, f"{where}[{j}]", lossy))
            case _:
                assert_never(part)
    return out


def _content_parts(parts: Sequence[Part]) -> list[ContentPart]:
    return [p for p in parts if isinstance(p, TextPart | ImagePart)]


def _tool_result(message: Message) -> ToolResult:
    result = message.tool_result
    assert result is not None  # a tool message holds exactly one ToolResult
    return result


def _image_url(part: ImagePart, i: int, where: str, lossy: bool, target: str) -> str:
    if part.media_type is not None and not lossy:
        reason = f"{target} URL images carry no media_type"
        raise ConversionError(reason, index=i, field=f"{where}.media_type")
    assert part.url is not None  # an ImagePart holds data or a url
    return part.url


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# -- from OpenAI --------------------------------------------------------------------------------


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Decode a Chat Completions `messages` list.

    Raises:
        MessageError: the payload is malformed; `.index` and `.field` say where.
    """
    return _decode_each(_array(messages, ""), _openai_decode)


def _openai_decode(obj: Any) -> list[Message]:
    message = _mapping(obj, "")
    role = _get(message, "role", str, "")
    match role:
        case "system" | "developer":
            return [Message(role="system", parts=tuple(_openai_parts(message, images=False)))]
        case "user":
            return [Message.user(_openai_parts(message, images=True))]
        case "tool":
            call_id = _nonempty(message, "tool_call_id", "")
            return [Message.tool(call_id, _openai_parts(message, images=False))]
        case "assistant":
            parts: list[Part] = []
            if message.get("content") is not None:
                parts.extend(_openai_parts(message, images=False))
            calls = _get(message, "tool_calls", _ARRAY, "", optional=True) or ()
            parts.extend(_openai_call(call, f"tool_calls[{j}]") for j, call in enumerate(calls))
            try:
                return [Message(role="assistant", parts=tuple(parts))]
            except MessageError as exc:  # only a repeated tool call id can get here
                raise MessageError(exc.reason, field="tool_calls") from None
    raise MessageError(f"unknown role {role!r}", field="role")


def _openai_parts(message: Mapping[str, Any], *, images: bool) -> list[ContentPart]:
    content = _get(message, "content", (str, *_ARRAY), "")
    if isinstance(content, str):
        return [TextPart(text=content)]
    parts: list[ContentPart] = []
    for j, item in enumerate(content):
        where = f"content[{j}]"
        part = _mapping(item, where)
        kind = _get(part, "type", str, where)
        if kind == "text":
            parts.append(TextPart(text=_get(part, "text", str, where)))
        elif kind == "image_url" and images:
            image_url = _get(part, "image_url", Mapping, where)
            url = _get(image_url, "url", str, f"{where}.image_url")
            parts.append(_openai_image(url, f"{where}.image_url.url"))
        else:
            raise MessageError(f"unsupported content part type {kind!r}", field=f"{where}.type")
    return parts


def _openai_image(url: str, where: str) -> ImagePart:
    if not url.startswith("data:"):
        return _image(where, False, url=url)
    header, comma, payload = url.removeprefix("data:").rpartition(",")
    if not comma or not header.endswith(";base64"):
        raise MessageError(
            "a data URL must look like 'data:<media_type>;base64,<data>'", field=where
        )
    media_type = header.removesuffix(";base64")
    return _image(where, False, media_type=media_type, data=_b64decode(payload, where))


def _openai_call(obj: Any, where: str) -> ToolCall:
    call = _mapping(obj, where)
    kind = _get(call, "type", str, where)
    if kind != "function":
        raise MessageError(f"unsupported tool call type {kind!r}", field=f"{where}.type")
    function = _get(call, "function", Mapping, where)
    at = f"{where}.function"
    return ToolCall(
        id=_nonempty(call, "id", where),
        name=_nonempty(function, "name", at),
        arguments=_get(function, "arguments", str, at),
    )


# -- from Anthropic -----------------------------------------------------------------------------


def from_anthropic(
    system: str | Sequence[Mapping[str, Any]] | None, messages: Sequence[Mapping[str, Any]]
) -> list[Message]:
    """Decode a Messages API `(system, messages)` pair.

    A user message holding `tool_result` blocks becomes one tool message per block, followed by
    a user message with its other blocks, if it has any.

    Raises:
        MessageError: the payload is malformed; `.index` and `.field` say where.
    """
    out = _anthropic_system(system)
    out.extend(_decode_each(_array(messages, ""), _anthropic_decode))
    return out


def _anthropic_system(system: Any) -> list[Message]:
    if system is None:
        return []
    if isinstance(system, str):
        return [Message.system(system)]
    out: list[Message] = []
    for j, item in enumerate(_array(system, "system")):
        where = f"system[{j}]"
        block = _mapping(item, where)
        kind = _get(block, "type", str, where)
        if kind != "text":
            raise MessageError(f"a system block must be text, got {kind!r}", field=f"{where}.type")
        out.append(Message.system(_get(block, "text", str, where)))
    return out


def _anthropic_decode(obj: Any) -> list[Message]:
    message = _mapping(obj, "")
    role = _get(message, "role", str, "")
    if role not in ("user", "assistant"):
        raise MessageError(f"unknown role {role!r}", field="role")
    content = _get(message, "content", (str, *_ARRAY), "")
    if isinstance(content, str):
        return [
            Message(role="user" if role == "user" else "assistant", parts=(TextPart(text=content),))
        ]
    results: list[Message] = []
    parts: list[Part] = []
    for j, item in enumerate(content):
        where = f"content[{j}]"
        block = _mapping(item, where)
        kind = _get(block, "type", str, where)
        if role == "user" and kind == "tool_result":
            results.append(_anthropic_tool_message(block, where))
        elif role == "assistant" and kind == "tool_use":
            parts.append(_anthropic_call(block, where))
        else:
            parts.append(_anthropic_block(block, kind, where, images=role == "user"))
    if role == "user":
        user = [Message.user(_content_parts(parts))] if parts or not results else []
        return [*results, *user]
    try:
        return [Message(role="assistant", parts=tuple(parts))]
    except MessageError as exc:  # text after a tool_use, or a repeated id: parts[j] is content[j]
        field = (exc.field or "").replace("parts", "content", 1)
        raise MessageError(exc.reason, field=field) from None


def _anthropic_call(block: Mapping[str, Any], where: str) -> ToolCall:
    arguments = _get(block, "input", dict, where)
    try:
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"input is not JSON: {exc}", field=f"{where}.input") from None
    return ToolCall(
        id=_nonempty(block, "id", where), name=_nonempty(block, "name", where), arguments=text
    )


def _anthropic_tool_message(block: Mapping[str, Any], where: str) -> Message:
    call_id = _nonempty(block, "tool_use_id", where)
    raw = _get(block, "content", (str, *_ARRAY), where, optional=True)
    content: list[ContentPart] = []
    if isinstance(raw, str):
        content.append(TextPart(text=raw))
    elif raw is not None:
        for j, item in enumerate(raw):
            at = f"{where}.content[{j}]"
            part = _mapping(item, at)
            kind = _get(part, "type", str, at)
            content.append(_anthropic_block(part, kind, at, images=True))
    is_error = _get(block, "is_error", bool, where, optional=True) or False
    return Message.tool(call_id, content, is_error=is_error)


def _anthropic_block(
    block: Mapping[str, Any], kind: str, where: str, *, images: bool
) -> ContentPart:
    if kind == "text":
        return TextPart(text=_get(block, "text", str, where))
    if kind == "image" and images:
        at = f"{where}.source"
        source = _get(block, "source", Mapping, where)
        source_type = _get(source, "type", str, at)
        if source_type == "base64":
            media_type = _get(source, "media_type", str, at)
            data = _b64decode(_get(source, "data", str, at), f"{at}.data")
            return _image(at, True, media_type=media_type, data=data)
        if source_type == "url":
            return _image(at, True, url=_get(source, "url", str, at))
        raise MessageError(f"unsupported image source type {source_type!r}", field=f"{at}.type")
    raise MessageError(f"unsupported content block type {kind!r}", field=f"{where}.type")


# -- shared decoding helpers --------------------------------------------------------------------


def _decode_each(items: Sequence[Any], decode: Callable[[Any], list[Message]]) -> list[Message]:
    out: list[Message] = []
    for i, item in enumerate(items):
        try:
            out.extend(decode(item))
        except MessageError as exc:
            raise MessageError(exc.reason, index=i, field=exc.field) from None
    return out


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _expected(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in kinds))


def _get(
    obj: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: str,
    *,
    optional: bool = False,
) -> Any:
    """`obj[key]` if it is a `kind`; `None` if `optional` and the key is absent or null."""
    value = obj.get(key)
    if value is None:
        if optional:
            return None
        reason = f"missing {key!r}" if key not in obj else f"{key!r} must not be null"
        raise MessageError(reason, field=_field(where, key))
    if not isinstance(value, kind):
        raise MessageError(
            f"expected {_expected(kind)}, got {type(value).__name__}", field=_field(where, key)
        )
    return value


def _nonempty(obj: Mapping[str, Any], key: str, where: str) -> str:
    value: str = _get(obj, key, str, where)
    if not value:
        raise MessageError(f"{key!r} must not be empty", field=_field(where, key))
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MessageError(f"expected an object, got {type(value).__name__}", field=where or None)
    return value


def _array(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, _ARRAY):
        raise MessageError(f"expected an array, got {type(value).__name__}", field=where or None)
    return value


def _image(where: str, per_field: bool, **fields: Any) -> ImagePart:
    """An `ImagePart`; its errors name `where`, or `where.<field>` when `per_field`."""
    try:
        return ImagePart(**fields)
    except MessageError as exc:
        field = f"{where}.{exc.field}" if per_field and exc.field else where
        raise MessageError(exc.reason, field=field) from None


def _b64decode(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:  # binascii.Error, or non-ASCII text
        raise MessageError(f"bad base64: {exc}", field=where) from None
