"""Tests for `steerable_compaction.wire`: exact round trips, wire shapes, errors, lossy mode."""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic.types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessage

from steerable_compaction.errors import ConversionError, MessageError
from steerable_compaction.messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from steerable_compaction.wire import from_anthropic, from_openai, to_anthropic, to_openai
from tests import strategies as sts

PNG = b"\x89PNG\r\n\x1a\n"
PNG_B64 = "iVBORw0KGgo="

_examples = settings(max_examples=150)


def _json(value: Any) -> Any:
    """`value` after a trip through JSON text, as a real request or response would make it."""
    return json.loads(json.dumps(value, ensure_ascii=False))


def _call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# -- round trips --------------------------------------------------------------------------------


@_examples
@given(sts.transcripts("openai"))
def test_openai_round_trip_of_agent_sessions(transcript: list[Message]) -> None:
    """`from_openai(to_openai(t)) == t` for sessions OpenAI can carry, through JSON text."""
    assert from_openai(_json(to_openai(transcript))) == transcript


@_examples
@given(sts.message_lists("openai"))
def test_openai_round_trip_of_unstructured_lists(transcript: list[Message]) -> None:
    """The OpenAI round trip does not depend on calls and results pairing up."""
    assert from_openai(_json(to_openai(transcript))) == transcript


@_examples
@given(sts.transcripts("anthropic"))
def test_anthropic_round_trip_of_agent_sessions(transcript: list[Message]) -> None:
    """`from_anthropic(*to_anthropic(t)) == t` for sessions Anthropic can carry, through JSON."""
    system, wire = _json(to_anthropic(transcript))
    assert from_anthropic(system, wire) == transcript


@_examples
@given(sts.message_lists("anthropic"))
def test_anthropic_round_trip_of_unstructured_lists(transcript: list[Message]) -> None:
    """The Anthropic round trip survives adjacent tool and user messages in any order."""
    assert from_anthropic(*to_anthropic(transcript)) == transcript


@given(sts.agent_transcripts("both", restored_orphans=True))
def test_restored_orphans_round_trip_in_both_formats(transcript: list[Message]) -> None:
    """A session that starts with orphaned tool results converts exactly either way."""
    assert from_openai(to_openai(transcript)) == transcript
    assert from_anthropic(*to_anthropic(transcript)) == transcript


@_examples
@given(sts.message_lists("any"))
def test_openai_strict_either_round_trips_or_names_the_field(transcript: list[Message]) -> None:
    """Strict `to_openai` never loses data silently: it round-trips or raises ConversionError."""
    try:
        wire = to_openai(transcript)
    except ConversionError as exc:
        assert exc.index is not None and 0 <= exc.index < len(transcript)
        assert exc.field is not None and exc.field.startswith("parts")
    else:
        assert from_openai(wire) == transcript


@_examples
@given(sts.message_lists("any"))
def test_anthropic_strict_either_round_trips_or_names_the_field(
    transcript: list[Message],
) -> None:
    """Strict `to_anthropic` round-trips (up to JSON spelling) or raises ConversionError."""
    try:
        system, wire = to_anthropic(transcript)
    except ConversionError as exc:
        assert exc.index is not None and 0 <= exc.index < len(transcript)
        assert exc.field is not None
    else:
        assert to_anthropic(from_anthropic(system, wire)) == (system, wire)


@_examples
@given(sts.message_lists("any"))
def test_openai_lossy_output_is_a_fixed_point(transcript: list[Message]) -> None:
    """Lossy output decodes to a transcript that strict `to_openai` encodes to the same wire."""
    wire = to_openai(transcript, lossy=True)
    assert to_openai(from_openai(wire)) == wire


@_examples
@given(sts.message_lists("any"))
def test_anthropic_lossy_output_is_a_fixed_point(transcript: list[Message]) -> None:
    """Lossy output decodes to a transcript that strict `to_anthropic` encodes to the same."""
    system, wire = to_anthropic(transcript, lossy=True)
    assert to_anthropic(from_anthropic(system, wire)) == (system, wire)


@given(sts.message_lists("both"))
def test_lossy_changes_nothing_a_format_can_carry(transcript: list[Message]) -> None:
    """`lossy=True` only matters for values the target cannot carry."""
    assert to_openai(transcript, lossy=True) == to_openai(transcript)
    assert to_anthropic(transcript, lossy=True) == to_anthropic(transcript)


@given(sts.json_objects(), sts.tool_call_ids())
def test_anthropic_arguments_come_back_canonical(arguments: dict[str, Any], call_id: str) -> None:
    """Any spelling of a JSON object returns as compact, non-ASCII-preserving JSON."""
    spaced = json.dumps(arguments, indent=2)
    _, wire = to_anthropic([Message.assistant(tool_calls=[_call(call_id, "f", spaced)])])
    (message,) = from_anthropic(None, wire)
    assert message.tool_calls[0].arguments == sts.canonical_json(arguments)


# -- the real SDKs accept the shapes ------------------------------------------------------------


@given(sts.assistant_messages("both", max_texts=1))
def test_openai_assistant_message_survives_the_sdk_response_model(message: Message) -> None:
    """An encoded assistant message validates as `ChatCompletionMessage` and decodes back."""
    (wire,) = to_openai([message])
    reply = ChatCompletionMessage.model_validate(wire)
    assert from_openai([reply.model_dump()]) == [message]
    assert from_openai([reply.model_dump(exclude_none=True)]) == [message]


@given(sts.assistant_messages("both"))
def test_anthropic_assistant_content_survives_the_sdk_response_model(message: Message) -> None:
    """Encoded assistant content validates as an `anthropic.types.Message` and decodes back."""
    _, (wire,) = to_anthropic([message])
    content = wire["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    response = anthropic.types.Message.model_validate(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": blocks,
            "stop_reason": "tool_use" if message.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    dumped = [block.model_dump() for block in response.content]
    assert from_anthropic(None, [{"role": "assistant", "content": dumped}]) == [message]


# -- exact OpenAI shapes ------------------------------------------------------------------------

SESSION = [
    Message.system("You are a coding agent."),
    Message.user(
        [TextPart(text="What is in this screenshot?"), ImagePart(media_type="image/png", data=PNG)]
    ),
    Message.assistant(
        "Let me look.",
        [
            _call("call_1", "read_file", '{"path":"a.py"}'),
            _call("call_2", "ls", '{"dir":"."}'),
        ],
    ),
    Message.tool("call_1", "print('hi')"),
    Message.tool("call_2", [TextPart(text="a.py"), TextPart(text="b.py")]),
    Message.user([ImagePart(url="https://example.com/cat.png")]),
    Message.assistant(tool_calls=[_call("call_3", "bash", '{"cmd":"ls"}')]),
    Message.tool("call_3", ""),
    Message.assistant("Done."),
]


def test_openai_session_matches_the_documented_payload() -> None:
    """A whole session encodes to the Chat Completions request shape, message by message."""
    assert to_openai(SESSION) == [
        {"role": "system", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this screenshot?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"dir":"."}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}],
        },
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": ""},
        {"role": "assistant", "content": "Done."},
    ]
    assert from_openai(to_openai(SESSION)) == SESSION


@pytest.mark.parametrize(
    ("message", "wire"),
    [
        (Message(role="user"), {"role": "user", "content": []}),
        (Message(role="system"), {"role": "system", "content": []}),
        (Message.user(""), {"role": "user", "content": ""}),
        (Message(role="assistant"), {"role": "assistant", "content": None}),
        (Message.assistant(""), {"role": "assistant", "content": ""}),
        (
            Message(role="assistant", parts=(TextPart(text="a"), TextPart(text="b"))),
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ),
        (Message.tool("c", []), {"role": "tool", "tool_call_id": "c", "content": []}),
    ],
)
def test_openai_edge_shapes(message: Message, wire: dict[str, Any]) -> None:
    """Empty parts, empty strings and text-free assistants each get their own distinct shape."""
    assert to_openai([message]) == [wire]
    assert from_openai([wire]) == [message]


def test_from_openai_ignores_extra_keys_and_reads_developer_as_system() -> None:
    """`name`, `refusal`, `detail` and friends are dropped; `developer` is a system message."""
    wire: list[dict[str, Any]] = [
        {"role": "developer", "content": "rules", "name": "ops"},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://e.x/a.png", "detail": "low"}}
            ],
        },
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": None, "audio": None},
    ]
    assert from_openai(wire) == [
        Message.system("rules"),
        Message.user([ImagePart(url="https://e.x/a.png")]),
        Message(role="assistant"),
    ]


def test_openai_data_url_keeps_unusual_media_types() -> None:
    """The data URL's media type is everything between `data:` and `;base64`."""
    image = ImagePart(media_type="image/svg+xml;charset=utf-8", data=b"<svg/>")
    assert from_openai(to_openai([Message.user([image])])) == [Message.user([image])]


# -- exact Anthropic shapes ---------------------------------------------------------------------


def test_anthropic_session_matches_the_documented_payload() -> None:
    """System splits out, tool_use inputs are objects, parallel results share one user turn."""
    system, wire = to_anthropic(SESSION)
    assert system == "You are a coding agent."
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this screenshot?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read_file",
                    "input": {"path": "a.py"},
                },
                {"type": "tool_use", "id": "call_2", "name": "ls", "input": {"dir": "."}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "print('hi')"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}],
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_3", "name": "bash", "input": {"cmd": "ls"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_3", "content": ""}],
        },
        {"role": "assistant", "content": "Done."},
    ]
    assert from_anthropic(system, wire) == SESSION


def test_anthropic_tool_result_carries_images_and_is_error() -> None:
    """`is_error` appears only when true; images inside a result are base64 or url blocks."""
    result = Message.tool(
        "toolu_1",
        [TextPart(text="failed"), ImagePart(media_type="image/jpeg", data=b"\xff\xd8")],
        is_error=True,
    )
    _, wire = to_anthropic([result, Message.tool("toolu_2", "ok")])
    assert wire == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "failed"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/jpeg",
                                "data": "/9g=",
                            },
                        },
                    ],
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("systems", "expected"),
    [
        ([], None),
        ([Message.system("one")], "one"),
        ([Message.system("")], ""),
        (
            [Message.system("a"), Message.system("b")],
            [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        ),
    ],
)
def test_anthropic_system_shapes(systems: list[Message], expected: Any) -> None:
    """No system is `None`, one is a string, several are one text block per message."""
    transcript = [*systems, Message.user("hi")]
    system, wire = to_anthropic(transcript)
    assert system == expected
    assert wire == [{"role": "user", "content": "hi"}]
    assert from_anthropic(system, wire) == transcript


@pytest.mark.parametrize(
    ("message", "content"),
    [
        (Message(role="user"), []),
        (Message(role="assistant"), []),
        (Message.assistant(""), ""),
        (Message.tool("t", []), [{"type": "tool_result", "tool_use_id": "t", "content": []}]),
    ],
)
def test_anthropic_edge_shapes(message: Message, content: Any) -> None:
    """Empty parts become an empty block list; an empty string stays a string."""
    _, wire = to_anthropic([message])
    assert wire == [
        {"role": "assistant" if message.role == "assistant" else "user", "content": content}
    ]
    assert from_anthropic(None, wire) == [message]


def test_from_anthropic_splits_a_mixed_user_turn_results_first() -> None:
    """Tool results become tool messages, then the turn's other blocks one user message."""
    wire = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "also, hurry", "cache_control": {"type": "ephemeral"}},
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "is_error": False},
            ],
        }
    ]
    assert from_anthropic([{"type": "text", "text": "sys"}], wire) == [
        Message.system("sys"),
        Message.tool("a", "1"),
        Message.tool("b", []),
        Message.user([TextPart(text="also, hurry")]),
    ]


def test_from_anthropic_writes_input_as_compact_json_keeping_non_ascii() -> None:
    """`tool_use.input` becomes `json.dumps(input, ensure_ascii=False, separators=(",", ":"))`."""
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {"路径": "ü", "n": [1, 2.5]}}
    (message,) = from_anthropic(None, [{"role": "assistant", "content": [block]}])
    assert message.tool_calls == (_call("t", "f", '{"路径":"ü","n":[1,2.5]}'),)


# -- ConversionError ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            Message.tool("c", [TextPart(text="x"), ImagePart(url="https://e.x/i.png")]),
            "parts[0].content[1]",
        ),
        (Message.tool("c", "boom", is_error=True), "parts[0].is_error"),
        (
            Message.user([ImagePart(url="https://e.x/i.png", media_type="image/png")]),
            "parts[0].media_type",
        ),
    ],
)
def test_to_openai_refuses_what_it_cannot_carry(message: Message, field: str) -> None:
    """ConversionError names the message index and the neutral field."""
    with pytest.raises(ConversionError) as info:
        to_openai([Message.user("hi"), message])
    assert (info.value.index, info.value.field) == (1, field)
    assert isinstance(info.value, MessageError)


@pytest.mark.parametrize("arguments", ["[]", "1", '"s"', "null", "not json", "", '{"a": NaN}', "{"])
def test_to_anthropic_refuses_arguments_that_are_not_a_json_object(arguments: str) -> None:
    """Only a JSON object can become `tool_use.input`."""
    message = Message.assistant("x", [_call("a", "f", "{}"), _call("b", "f", arguments)])
    with pytest.raises(ConversionError) as info:
        to_anthropic([Message.user("go"), message])
    assert (info.value.index, info.value.field) == (1, "parts[2].arguments")


@pytest.mark.parametrize(
    ("transcript", "index", "field"),
    [
        ([Message.user("u"), Message.system("late")], 1, "role"),
        ([Message(role="system", parts=(TextPart(text="a"), TextPart(text="b")))], 0, "parts"),
        ([Message(role="system")], 0, "parts"),
        (
            [Message.tool("t", [ImagePart(url="https://e.x/a", media_type="image/png")])],
            0,
            "parts[0].content[0].media_type",
        ),
    ],
)
def test_to_anthropic_refuses_what_it_cannot_carry(
    transcript: list[Message], index: int, field: str
) -> None:
    """Late or multi-part system messages and typed URL images raise ConversionError."""
    with pytest.raises(ConversionError) as info:
        to_anthropic(transcript)
    assert (info.value.index, info.value.field) == (index, field)


# -- lossy=True ---------------------------------------------------------------------------------


def test_openai_lossy_turns_tool_images_into_pointers_and_flags_errors_in_text() -> None:
    """Images become `[image: …]` text and `is_error` becomes an `Error: ` prefix."""
    result = Message.tool(
        "c",
        [
            TextPart(text="no such file"),
            ImagePart(media_type="image/png", data=PNG),
            ImagePart(url="https://e.x/a.png"),
        ],
        is_error=True,
    )
    assert to_openai([result], lossy=True) == [
        {
            "role": "tool",
            "tool_call_id": "c",
            "content": [
                {"type": "text", "text": "Error: no such file"},
                {"type": "text", "text": "[image: image/png]"},
                {"type": "text", "text": "[image: https://e.x/a.png]"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([], "Error: "),
        ("", "Error: "),
        (
            [ImagePart(media_type="image/gif", data=b"")],
            "Error: [image: image/gif]",
        ),
    ],
)
def test_openai_lossy_error_prefix_when_there_is_no_leading_text(
    content: Any, expected: Any
) -> None:
    """The prefix goes on the first text part, or is the whole content when there is none."""
    (wire,) = to_openai([Message.tool("c", content, is_error=True)], lossy=True)
    assert wire["content"] == expected


def test_lossy_drops_a_url_images_media_type() -> None:
    """Neither format carries a media type for a URL image; lossy mode drops it."""
    typed = Message.user([ImagePart(url="https://e.x/a.png", media_type="image/png")])
    plain = Message.user([ImagePart(url="https://e.x/a.png")])
    assert to_openai([typed], lossy=True) == to_openai([plain])
    assert to_anthropic([typed], lossy=True) == to_anthropic([plain])


def test_anthropic_lossy_wraps_non_object_arguments() -> None:
    """Arguments that are not a JSON object travel as `{"raw_arguments": <text>}`."""
    message = Message.assistant(tool_calls=[_call("t", "f", '["a", 1]')])
    _, wire = to_anthropic([message], lossy=True)
    assert wire[0]["content"][0]["input"] == {"raw_arguments": '["a", 1]'}


def test_anthropic_lossy_hoists_late_system_and_joins_multi_part_system() -> None:
    """System messages all land in `system`, in order, one block each."""
    transcript = [
        Message(role="system", parts=(TextPart(text="a"), TextPart(text="b"))),
        Message.user("u"),
        Message.system("reminder"),
        Message(role="system"),
    ]
    system, wire = to_anthropic(transcript, lossy=True)
    assert system == [
        {"type": "text", "text": "ab"},
        {"type": "text", "text": "reminder"},
        {"type": "text", "text": ""},
    ]
    assert wire == [{"role": "user", "content": "u"}]


# -- MessageError from bad wire input -----------------------------------------------------------

_URL = {"type": "image_url", "image_url": {"url": "https://e.x/a.png"}}


def _user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def _assistant_calls(*calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def _fn(call_id: Any = "c", name: Any = "f", arguments: Any = "{}", **extra: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
        **extra,
    }


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ("not an object", None),
        ({"content": "x"}, "role"),
        ({"role": 7, "content": "x"}, "role"),
        ({"role": "narrator", "content": "x"}, "role"),
        ({"role": "function", "name": "f", "content": "x"}, "role"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": None}, "content"),
        ({"role": "user", "content": 5}, "content"),
        ({"role": "system", "content": [_URL]}, "content[0].type"),
        (_user("hi"), "content[0]"),
        (_user({"type": "text"}), "content[0].text"),
        (_user({"text": "x"}), "content[0].type"),
        (_user({"type": "input_audio", "input_audio": {}}), "content[0].type"),
        (_user({"type": "image_url"}), "content[0].image_url"),
        (_user({"type": "image_url", "image_url": {}}), "content[0].image_url.url"),
        (_user(_URL, {"type": "image_url", "image_url": {"url": ""}}), "content[1].image_url.url"),
        (
            _user({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}),
            "content[0].image_url.url",
        ),
        (
            _user({"type": "image_url", "image_url": {"url": "data:image/png;base64,é"}}),
            "content[0].image_url.url",
        ),
        (
            _user({"type": "image_url", "image_url": {"url": "data:image/png,abc"}}),
            "content[0].image_url.url",
        ),
        (
            _user({"type": "image_url", "image_url": {"url": "data:text/plain;base64,AA=="}}),
            "content[0].image_url.url",
        ),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "tool", "tool_call_id": "", "content": "x"}, "tool_call_id"),
        ({"role": "tool", "tool_call_id": "c", "content": [_URL]}, "content[0].type"),
        (
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            "content[0].type",
        ),
        ({"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls"),
        (_assistant_calls("call"), "tool_calls[0]"),
        (_assistant_calls({**_fn(), "type": "custom"}), "tool_calls[0].type"),
        (_assistant_calls({"id": "c", "type": "function"}), "tool_calls[0].function"),
        (_assistant_calls(_fn(call_id="")), "tool_calls[0].id"),
        (_assistant_calls(_fn(name=None)), "tool_calls[0].function.name"),
        (_assistant_calls(_fn(arguments={"a": 1})), "tool_calls[0].function.arguments"),
        (_assistant_calls(_fn(), _fn()), "tool_calls"),
    ],
)
def test_from_openai_names_index_and_field_of_bad_input(bad: Any, field: str | None) -> None:
    """Malformed wire input raises MessageError (never ConversionError) naming index and field."""
    with pytest.raises(MessageError) as info:
        from_openai(cast(Any, [{"role": "user", "content": "fine"}, bad]))
    assert (info.value.index, info.value.field) == (1, field)
    assert not isinstance(info.value, ConversionError)


def test_from_openai_rejects_a_non_list() -> None:
    """The messages value itself must be an array."""
    with pytest.raises(MessageError) as info:
        from_openai(cast(Any, {"role": "user", "content": "x"}))
    assert (info.value.index, info.value.field) == (None, None)


def _image(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


_B64 = {"type": "base64", "media_type": "image/png", "data": "AA=="}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ([], None),
        ({"role": "system", "content": "x"}, "role"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": {"type": "text", "text": "x"}}, "content"),
        ({"role": "user", "content": [{"type": "document", "source": {}}]}, "content[0].type"),
        (
            {
                "role": "user",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            },
            "content[0].type",
        ),
        (
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]},
            "content[0].type",
        ),
        ({"role": "assistant", "content": [_image(_B64)]}, "content[0].type"),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]},
            "content[0].id",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
            },
            "content[0].input",
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"x": float("nan")}}
                ],
            },
            "content[0].input",
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                    {"type": "text", "text": "after"},
                ],
            },
            "content[1]",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}] * 2,
            },
            "content",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
            "content[0].tool_use_id",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}],
            },
            "content[0].is_error",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": 3}],
            },
            "content[0].content",
        ),
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [_image({**_B64, "data": "A"})],
                    }
                ],
            },
            "content[0].content[0].source.data",
        ),
        (
            {"role": "user", "content": [_image({"type": "file", "file_id": "f"})]},
            "content[0].source.type",
        ),
        (
            {"role": "user", "content": [_image({**_B64, "media_type": "text/plain"})]},
            "content[0].source.media_type",
        ),
        (
            {
                "role": "user",
                "content": [_image({"type": "url", "url": "data:image/png;base64,AA=="})],
            },
            "content[0].source.url",
        ),
        ({"role": "user", "content": [_image({"type": "url"})]}, "content[0].source.url"),
    ],
)
def test_from_anthropic_names_index_and_field_of_bad_input(bad: Any, field: str | None) -> None:
    """Malformed wire input raises MessageError naming the message index and dotted field."""
    with pytest.raises(MessageError) as info:
        from_anthropic(None, cast(Any, [{"role": "user", "content": "fine"}, bad]))
    assert (info.value.index, info.value.field) == (1, field)


@pytest.mark.parametrize(
    ("system", "field"),
    [
        (5, "system"),
        ([{"type": "image", "source": _B64}], "system[0].type"),
        ([{"type": "text"}], "system[0].text"),
        (["text"], "system[0]"),
    ],
)
def test_from_anthropic_names_the_system_field(system: Any, field: str) -> None:
    """A bad `system` has no message index; its field starts with `system`."""
    with pytest.raises(MessageError) as info:
        from_anthropic(system, [])
    assert (info.value.index, info.value.field) == (None, field)


@given(st.sampled_from(["user", "assistant", "tool"]), st.integers(0, 5))
def test_error_index_counts_wire_messages(role: str, position: int) -> None:
    """The index is the position of the offending wire message, whatever precedes it."""
    good: list[dict[str, Any]] = [{"role": "user", "content": "ok"}] * position
    with pytest.raises(MessageError) as info:
        bad: dict[str, Any] = {"role": role, "content": 1, "tool_call_id": "c"}
        from_openai([*good, bad])
    assert info.value.index == position


def test_tool_result_value_types_are_unchanged() -> None:
    """`ToolResult` decoded from either format keeps its call id and error flag."""
    (message,) = from_anthropic(
        None,
        [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": True}],
            }
        ],
    )
    assert message.tool_result == ToolResult(call_id="t", is_error=True)
