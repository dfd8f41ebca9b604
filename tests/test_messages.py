"""Tests for `steerable_compaction.messages`: validation, constructors, views, record JSON form."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import given, settings

from steerable_compaction.errors import MessageError
from steerable_compaction.messages import (
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    message_from_dict,
    message_to_dict,
    messages_from_dicts,
)
from tests import strategies as sts

PNG = ImagePart(media_type="image/png", data=b"\x89PNG")
URL = ImagePart(url="https://example.com/a.png")
CALL = ToolCall(id="call_1", name="read_file", arguments='{"path": "a.py"}')


def _any(value: object) -> Any:
    """Pass a deliberately ill-typed value past the type checker."""
    return cast(Any, value)


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ImagePart(), "data"),
        (lambda: ImagePart(data=b"x", url="https://e.x/a", media_type="image/png"), "data"),
        (lambda: ImagePart(data=_any("aGk="), media_type="image/png"), "data"),
        (lambda: ImagePart(data=b"x"), "media_type"),
        (lambda: ImagePart(data=b"x", media_type=""), "media_type"),
        (lambda: ImagePart(url=""), "url"),
        (lambda: ImagePart(url="data:image/png;base64,AA=="), "url"),
        (lambda: ImagePart(url="https://e.x/a", media_type="png"), "media_type"),
        (lambda: ToolCall(id="", name="f"), "id"),
        (lambda: ToolCall(id="a", name=""), "name"),
        (lambda: ToolCall(id="a", name="f", arguments=_any({"k": 1})), "arguments"),
        (lambda: ToolResult(call_id=""), "call_id"),
        (lambda: ToolResult(call_id="a", content=_any((TextPart(text="ok"), CALL))), "content[1]"),
        (lambda: Message(role=_any("robot")), "role"),
        (lambda: Message(role=_any(["user"])), "role"),
        (lambda: Message(role="system", parts=(PNG,)), "parts[0]"),
        (lambda: Message(role="user", parts=(TextPart(text="x"), CALL)), "parts[1]"),
        (lambda: Message(role="assistant", parts=(CALL, TextPart(text="late"))), "parts[1]"),
        (lambda: Message(role="assistant", parts=(CALL, CALL)), "parts"),
        (lambda: Message(role="tool"), "parts"),
        (
            lambda: Message(role="tool", parts=(ToolResult(call_id="a"), ToolResult(call_id="b"))),
            "parts",
        ),
        (lambda: Message(role="tool", parts=(TextPart(text="x"),)), "parts[0]"),
    ],
)
def test_invalid_values_raise_message_error_naming_the_field(
    build: Callable[[], object], field: str
) -> None:
    """Every constructor rejects a bad value with `MessageError` whose `.field` names it."""
    with pytest.raises(MessageError) as info:
        build()
    assert info.value.field == field
    assert info.value.index is None


def test_text_must_be_a_string() -> None:
    """`TextPart` rejects non-string text."""
    with pytest.raises(MessageError, match="text must be a string"):
        TextPart(text=_any(None))


def test_sequences_become_tuples() -> None:
    """Lists given as parts or result content are stored as tuples, so values stay hashable."""
    message = Message(role="user", parts=_any([TextPart(text="a"), URL]))
    result = ToolResult(call_id="c", content=_any([TextPart(text="b")]))
    assert message.parts == (TextPart(text="a"), URL)
    assert result.content == (TextPart(text="b"),)
    assert len({message, Message.user([TextPart(text="a"), URL])}) == 1


def test_values_are_frozen() -> None:
    """Messages and parts cannot be mutated after construction."""
    message = Message.user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.role = "system"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CALL.arguments = "{}"  # type: ignore[misc]


# -- constructors -------------------------------------------------------------------------------


def test_constructors_build_the_documented_parts() -> None:
    """`system`/`user`/`assistant`/`tool` build one message of their role with the given parts."""
    assert Message.system("be brief") == Message(role="system", parts=(TextPart(text="be brief"),))
    assert Message.user("hi") == Message(role="user", parts=(TextPart(text="hi"),))
    assert Message.user([URL, PNG]).parts == (URL, PNG)
    assert Message.assistant().parts == ()
    assert Message.assistant("").parts == (TextPart(text=""),)
    assert Message.assistant("ok", [CALL]).parts == (TextPart(text="ok"), CALL)
    assert Message.assistant(tool_calls=[CALL]).parts == (CALL,)
    assert Message.tool("call_1", "out") == Message(
        role="tool", parts=(ToolResult(call_id="call_1", content=(TextPart(text="out"),)),)
    )
    assert Message.tool("call_1", [PNG], is_error=True).parts == (
        ToolResult(call_id="call_1", content=(PNG,), is_error=True),
    )


def test_tool_call_defaults_to_empty_object_arguments() -> None:
    """A `ToolCall` without arguments carries `{}`."""
    assert ToolCall(id="a", name="f").parsed_arguments() == {}


def test_parsed_arguments_decodes_or_names_the_field() -> None:
    """`parsed_arguments` returns the decoded JSON, or raises naming `arguments`."""
    assert CALL.parsed_arguments() == {"path": "a.py"}
    with pytest.raises(MessageError) as info:
        ToolCall(id="a", name="f", arguments='{"path": ').parsed_arguments()
    assert info.value.field == "arguments"


# -- views --------------------------------------------------------------------------------------


def test_text_joins_text_parts_only() -> None:
    """`.text` concatenates text parts, skipping images and tool calls."""
    assert Message.user([TextPart(text="a"), PNG, TextPart(text="b")]).text == "ab"
    assert Message.assistant("thinking", [CALL]).text == "thinking"
    assert Message(role="system").text == ""


def test_tool_message_text_is_its_results_text() -> None:
    """A tool message's `.text` and its result's `.text` are the result's text parts."""
    message = Message.tool("c", [TextPart(text="1"), URL, TextPart(text="2")])
    assert message.text == "12"
    assert message.tool_result is not None
    assert message.tool_result.text == "12"


def test_tool_calls_and_tool_result_views() -> None:
    """`.tool_calls` lists an assistant's calls in order; `.tool_result` is set only on tools."""
    other = ToolCall(id="call_2", name="ls")
    assistant = Message.assistant("x", [CALL, other])
    assert assistant.tool_calls == (CALL, other)
    assert assistant.tool_result is None
    assert Message.user("hi").tool_calls == ()
    tool = Message.tool("call_1", "out")
    assert tool.tool_calls == ()
    assert tool.tool_result == ToolResult(call_id="call_1", content=(TextPart(text="out"),))


def test_images_include_those_inside_a_tool_result() -> None:
    """`.images` finds images in user parts and inside a tool result, in order."""
    assert Message.user([PNG, TextPart(text="x"), URL]).images == (PNG, URL)
    assert Message.tool("c", [URL, TextPart(text="x"), PNG]).images == (URL, PNG)
    assert Message.assistant("no images").images == ()


# -- the record's JSON form ---------------------------------------------------------------------


def test_message_to_dict_shapes() -> None:
    """The record form spells every part type, base64 for bytes, `is_error` only when set."""
    assert message_to_dict(Message.user([TextPart(text="hi"), PNG, URL])) == {
        "role": "user",
        "parts": [
            {"type": "text", "text": "hi"},
            {"type": "image", "media_type": "image/png", "data": "iVBORw=="},
            {"type": "image", "url": "https://example.com/a.png"},
        ],
    }
    assert message_to_dict(Message.assistant(tool_calls=[CALL])) == {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "read_file",
                "arguments": '{"path": "a.py"}',
            }
        ],
    }
    assert message_to_dict(Message.tool("c", [], is_error=True)) == {
        "role": "tool",
        "parts": [{"type": "tool_result", "call_id": "c", "content": [], "is_error": True}],
    }
    assert message_to_dict(Message.tool("c", "ok"))["parts"][0] == {
        "type": "tool_result",
        "call_id": "c",
        "content": [{"type": "text", "text": "ok"}],
    }


@settings(max_examples=200)
@given(sts.messages("any"))
def test_record_form_round_trips_through_json_text(message: Message) -> None:
    """`message_from_dict(message_to_dict(m)) == m`, also after a trip through JSON text."""
    encoded = message_to_dict(message)
    assert message_from_dict(encoded) == message
    assert message_from_dict(json.loads(json.dumps(encoded))) == message


@given(sts.transcripts("any"))
def test_messages_from_dicts_decodes_a_whole_transcript(transcript: list[Message]) -> None:
    """`messages_from_dicts` decodes a list written by `message_to_dict`, in order."""
    assert messages_from_dicts([message_to_dict(m) for m in transcript]) == transcript


_TEXT = {"type": "text", "text": "x"}
_B64_IMAGE = {"type": "image", "media_type": "image/png", "data": "AA=="}


def _parts(role: str, *parts: Any) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def _result(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_result", "call_id": "c", "content": [], **fields}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ("not an object", None),
        ({"parts": []}, "role"),
        ({"role": 1, "parts": []}, "role"),
        ({"role": "robot", "parts": []}, "role"),
        ({"role": "user"}, "parts"),
        ({"role": "user", "parts": {}}, "parts"),
        (_parts("user", "x"), "parts[0]"),
        (_parts("user", {"text": "x"}), "parts[0].type"),
        (_parts("user", {"type": "video"}), "parts[0].type"),
        (_parts("user", _TEXT, {"type": "text"}), "parts[1].text"),
        (_parts("user", {"type": "text", "text": 1}), "parts[0].text"),
        (_parts("user", {**_B64_IMAGE, "data": "%%"}), "parts[0].data"),
        (_parts("user", {**_B64_IMAGE, "data": 5}), "parts[0].data"),
        (_parts("user", {"type": "image", "data": "AA=="}), "parts[0].media_type"),
        (_parts("user", {"type": "image"}), "parts[0].data"),
        (_parts("user", {"type": "image", "url": "data:image/png;base64,AA=="}), "parts[0].url"),
        (
            _parts("user", {"type": "image", "url": "https://e.x", "media_type": "x"}),
            "parts[0].media_type",
        ),
        (
            _parts("user", {"type": "tool_call", "id": "a", "name": "f", "arguments": "{}"}),
            "parts[0]",
        ),
        (_parts("assistant", {"type": "tool_call", "id": "a", "name": "f"}), "parts[0].arguments"),
        (
            _parts("assistant", {"type": "tool_call", "id": "", "name": "f", "arguments": ""}),
            "parts[0].id",
        ),
        (
            _parts(
                "assistant", {"type": "tool_call", "id": "a", "name": "f", "arguments": ""}, _TEXT
            ),
            "parts[1]",
        ),
        (_parts("tool"), "parts"),
        (_parts("tool", {"type": "tool_result", "call_id": "c"}), "parts[0].content"),
        (_parts("tool", {"type": "tool_result", "content": []}), "parts[0].call_id"),
        (_parts("tool", _result(is_error="no")), "parts[0].is_error"),
        (
            _parts("tool", _result(content=[_TEXT, {**_B64_IMAGE, "data": "A"}])),
            "parts[0].content[1].data",
        ),
        (_parts("tool", _result(content=[_result()])), "parts[0].content[0]"),
    ],
)
def test_message_from_dict_names_index_and_field(obj: Any, field: str | None) -> None:
    """Decoding errors carry the caller's `index` and the dotted path of the bad field."""
    with pytest.raises(MessageError) as info:
        message_from_dict(obj, index=7)
    assert (info.value.index, info.value.field) == (7, field)
    assert "message 7" in str(info.value)


def test_messages_from_dicts_names_the_failing_position() -> None:
    """`messages_from_dicts` reports the list position of the message that failed."""
    good = message_to_dict(Message.user("ok"))
    with pytest.raises(MessageError) as info:
        messages_from_dicts([good, good, {"role": "user", "parts": [{"type": "text"}]}])
    assert (info.value.index, info.value.field) == (2, "parts[0].text")


def test_non_ascii_image_data_is_a_message_error() -> None:
    """Image data that is not ASCII base64 raises `MessageError` naming `parts[0].data`."""
    with pytest.raises(MessageError) as info:
        message_from_dict(_parts("user", {**_B64_IMAGE, "data": "é"}))
    assert info.value.field == "parts[0].data"
