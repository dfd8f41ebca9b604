from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, RecordError
from steerable_compaction.errors import MessageError
from steerable_compaction.messages import (
    TextPart,
    ToolCall,
    ToolResult,
    message_from_dict,
    message_to_dict,
)
from steerable_compaction.record import (
    SCHEMA_VERSION,
    CompactionAbandoned,
    CompactionStart,
    Entry,
    Event,
    MessageAppended,
    decode_entry,
    encode_entry,
    fast,
)
from steerable_compaction.record.codec import (
    decode_line,
    encode_body,
    encode_line,
    iter_lines,
    iter_rows,
    parse_line,
)

from . import strategies
from .record_sessions import event_sequences, small_session, with_crc


def lines_of(events: list[Event]) -> list[bytes]:
    return [encode_body(Entry(i, e)) for i, e in enumerate(events)]


def v3_line(seq: int, text: str) -> bytes:
    obj = {"v": 3, "seq": seq, "kind": "message", "message": message_to_dict(Message.user(text))}
    return json.dumps(obj, separators=(",", ":")).encode()


# -- the v4 line ---------------------------------------------------------------------------------


@given(events=event_sequences(max_ops=20))
def test_every_event_survives_the_line_round_trip(events: list[Event]) -> None:
    """Property: `decode_line(encode_line(e))` is `e`, for every event of every valid session."""
    projection_len = 0
    for seq, event in enumerate(events):
        line = encode_line(Entry(seq, event))
        assert line.endswith(b"}\n") and line.count(b"\n") == 1
        assert decode_line(line[:-1], projection_len=projection_len) == Entry(seq, event)


def test_a_line_ends_with_the_crc32_of_everything_before_its_checksum() -> None:
    """The checksum is `zlib.crc32` of the line's bytes before `,"crc":`, written last."""
    body = encode_body(Entry(0, MessageAppended(message=Message.user("héllo"))))
    head, _, crc = body.rpartition(b',"crc":')
    assert crc.endswith(b"}") and int(crc[:-1]) == zlib.crc32(head)
    assert json.loads(body)["v"] == SCHEMA_VERSION == 4
    assert json.loads(head + b"}") == encode_entry(
        Entry(0, MessageAppended(message=Message.user("héllo")))
    )


def test_every_single_byte_change_in_a_line_is_a_record_error() -> None:
    """A line with any one byte changed (three ways) never decodes: CRC-32 sees every burst."""
    for line in lines_of(small_session()):
        for i in range(len(line)):
            for mask in (0x01, 0x20, 0xFF):
                bad = line[:i] + bytes([line[i] ^ mask]) + line[i + 1 :]
                with pytest.raises(RecordError):
                    decode_line(bad, projection_len=9)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"v":4,"seq":0,"kind":"message"}', "v4 entry without its checksum"),
        (with_crc(v3_line(0, "a")), "v3 entry cannot carry a checksum"),
        (b'{"v":4,"seq":0,"kind":"message","crc":12x}', "not valid JSON"),
        (b'{"v":4,"seq":0,"crc":1,"kind":"message"}', "malformed"),
        (b'{"v":4,"seq":0,"kind":"message","crc":99999999999}', "malformed"),
        (b'{"v":4,"seq":0,"kind":"message","crc":7}', "checksum mismatch"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"v":4,"seq":' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"v":NaN,"seq":0,"kind":"message"}', "field 'v' should be int"),
        (b'{"v":9,"seq":0,"kind":"message","crc":1}', "newer steerable-compaction"),
        (b"\xff", "not valid JSON"),
    ],
)
def test_bad_lines_are_record_errors_saying_what_is_wrong(line: bytes, reason: str) -> None:
    """Checksums missing, misplaced, malformed or wrong, hostile JSON: a `RecordError` each."""
    with pytest.raises(RecordError, match=reason):
        decode_line(line, projection_len=0)


def test_a_line_written_before_checksums_decodes_unchecked() -> None:
    """A v3 line has no checksum and still loads (old records always load)."""
    entry = decode_line(v3_line(5, "old"), projection_len=0)
    assert entry == Entry(5, MessageAppended(message=Message.user("old")))


def test_an_abandon_needs_schema_v4() -> None:
    """`compaction_abandoned` is new in v4: a v3 entry of that kind is corrupt."""
    obj = {"v": 3, "seq": 1, "kind": "compaction_abandoned", "compaction_id": "k", "reason": "r"}
    with pytest.raises(RecordError, match="schema v3 has no 'compaction_abandoned'"):
        decode_entry(obj, projection_len=0)
    abandon = CompactionAbandoned(compaction_id="k", reason="crashed")
    assert decode_line(encode_body(Entry(1, abandon)), projection_len=0).event == abandon


def test_a_start_writes_kept_only_when_it_keeps_something() -> None:
    """Records without kept messages stay byte-identical to those written before the field."""
    plain = CompactionStart(compaction_id="k", span=(2, 5), pre_tokens=9, action="summarize")
    assert "kept" not in encode_entry(Entry(3, plain))
    kept = CompactionStart(
        compaction_id="k",
        span=(2, 5),
        pre_tokens=9,
        action="summarize",
        kept=[2, 4],  # type: ignore[arg-type]
    )
    assert kept.kept == (2, 4)
    assert encode_entry(Entry(3, kept))["kept"] == [2, 4]
    assert decode_entry(encode_entry(Entry(3, kept)), projection_len=9).event == kept


def collect(objs: Iterator[Any]) -> tuple[list[Any], RecordError | None]:
    """The objects an iterator yields before it raises, and what it raised."""
    out: list[Any] = []
    try:
        out.extend(objs)
    except RecordError as exc:
        return out, exc
    return out, None


# -- many lines at once --------------------------------------------------------------------------


@given(events=event_sequences(max_ops=20))
def test_parsing_many_lines_at_once_equals_parsing_each(events: list[Event]) -> None:
    """Property: the one-pass parse of many lines gives what `parse_line` gives for each."""
    lines = [*lines_of(events), v3_line(len(events), "old")]
    expected = [parse_line(line) for line in lines]
    assert list(iter_lines(b"".join(line + b"\n" for line in lines))) == expected
    assert list(iter_rows(lines)) == expected
    assert list(iter_rows([*lines, b'{"v":3,\n"seq":0}'])) == [*expected, {"v": 3, "seq": 0}]
    assert all("crc" not in obj for obj in expected)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"   ",
        b"{",
        b'{"a":1} {"b":2}',
        b'{"v":4,"seq":2,"kind":"message","crc":1}',
        b'{"v":4,"seq":2,"kind":"message","crc": 1}',
        b'{"v":4,"seq":2,"kind":"message","crc":true}',
        b'{"v":3,"seq":2,"kind":"message","crc":1}',
        b"\xff\xfe",
        b"[" * 50_000,
    ],
)
def test_parsing_many_lines_stops_at_the_first_bad_one_and_names_it(bad: bytes) -> None:
    """The objects before the first bad line come back with an error naming that line."""
    good = lines_of(small_session()[:4])
    for objs, error in (
        collect(iter_rows([*good[:2], bad, *good[2:]])),
        collect(iter_lines(b"\n".join([*good[:2], bad, *good[2:]]) + b"\n")),
    ):
        assert objs == [parse_line(line) for line in good[:2]]
        assert error is not None and error.line == 3


def test_rows_holding_newlines_are_parsed_one_by_one_naming_the_bad_one() -> None:
    """Rows are not lines: a row holding a newline is still one value, or a named error."""
    good = lines_of(small_session()[:3])
    spread = b'{"v":3,\n"seq":3,"kind":"message","message":{"role":"user","parts":[]}}'
    assert list(iter_rows([*good, spread]))[-1]["seq"] == 3
    objs, error = collect(iter_rows([*good, spread, b"{bad\n"]))
    assert len(objs) == 4 and error is not None and error.line == 5


def test_a_value_spanning_two_lines_is_not_taken_for_two_entries() -> None:
    """JSON that continues on the next line is two bad lines, not one good entry."""
    objs, error = collect(iter_lines(b'{"v":3,"seq":0,\n"kind":"message"}\n'))
    assert objs == [] and error is not None and error.line == 1


# -- the fast path for messages ------------------------------------------------------------------


def test_the_fast_path_knows_every_field_of_the_values_it_builds() -> None:
    """A field added to a message class turns the fast path off until it learns the field."""
    assert fast.ENABLED
    assert [f.name for f in fields(Message)] == ["role", "parts", "pinned", "goal"]
    assert [f.name for f in fields(TextPart)] == ["text", "type"]
    assert [f.name for f in fields(ToolCall)] == ["id", "name", "arguments", "type"]
    assert [f.name for f in fields(ToolResult)] == ["call_id", "content", "is_error", "type"]


@given(message=strategies.messages("any"))
def test_the_fast_path_builds_exactly_what_the_validating_decoder_builds(message: Message) -> None:
    """Property: for every valid message the fast path gives the same value, or defers."""
    obj = {"v": 4, "seq": 3, "kind": "message", "message": message_to_dict(message)}
    entry = fast.message_entry(obj, 4)
    assert entry is None or entry == decode_entry(obj, projection_len=0)
    if entry is not None:
        built = entry.event.message  # type: ignore[union-attr]
        assert built == message_from_dict(obj["message"]) == message
        assert hash(built) == hash(message) and repr(built) == repr(message)


def _mutate(draw: Callable[..., Any], value: Any) -> Any:
    """`value` with one random change somewhere inside it."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        out = dict(value)
        action = draw(st.sampled_from(["recurse", "replace", "delete", "add"]))
        if action == "recurse":
            out[key] = _mutate(draw, value[key])
        elif action == "replace":
            out[key] = draw(strategies.json_values(max_leaves=3))
        elif action == "delete":
            del out[key]
        else:
            out[draw(st.sampled_from(["type", "text", "x", "is_error", "id", "role"]))] = draw(
                strategies.json_values(max_leaves=2)
            )
        return out
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        out_list = list(value)
        action = draw(st.sampled_from(["recurse", "duplicate", "delete"]))
        if action == "recurse":
            out_list[i] = _mutate(draw, value[i])
        elif action == "duplicate":
            out_list.insert(i, value[i])
        else:
            del out_list[i]
        return out_list
    return draw(strategies.json_values(max_leaves=3))


@given(data=st.data(), message=strategies.messages("any"))
def test_the_fast_path_never_accepts_what_the_validating_decoder_refuses(
    data: st.DataObject, message: Message
) -> None:
    """Property: on a damaged message object the fast path defers or agrees with the decoder."""
    obj = _mutate(data.draw, message_to_dict(message))
    entry = fast.message_entry({"v": 4, "seq": 0, "kind": "message", "message": obj}, 4)
    if entry is not None:
        assert message_from_dict(obj) == entry.event.message  # type: ignore[union-attr]
    else:
        try:
            message_from_dict(obj)
        except MessageError:
            pass


def _entry(message: Any, **extra: Any) -> dict[str, Any]:
    return {"v": 4, "seq": 0, "kind": "message", "message": message, **extra}


_TEXT = {"type": "text", "text": "t"}
_CALL = {"type": "tool_call", "id": "c1", "name": "run", "arguments": "{}"}
_RESULT = {"type": "tool_result", "call_id": "c1", "content": [_TEXT]}


@pytest.mark.parametrize(
    "obj",
    [
        _entry({"role": "user", "parts": [_TEXT]}, usage={"prompt_tokens": 1}),
        _entry({"role": "user", "parts": [{"type": "text", "text": 5}]}),
        _entry({"role": "user", "parts": [{"type": "image", "url": "http://x/y.png"}]}),
        _entry({"role": "robot", "parts": []}),
        _entry({"role": "user", "parts": "t"}),
        _entry({"role": "assistant", "parts": [_CALL, _TEXT]}),
        _entry({"role": "assistant", "parts": [_CALL, _CALL]}),
        _entry({"role": "assistant", "parts": ["t"]}),
        _entry({"role": "assistant", "parts": [{**_CALL, "id": ""}]}),
        _entry({"role": "assistant", "parts": [{**_CALL, "arguments": {}}]}),
        _entry({"role": "tool", "parts": [_RESULT, _RESULT]}),
        _entry({"role": "tool", "parts": [{**_RESULT, "call_id": ""}]}),
        _entry({"role": "tool", "parts": [{**_RESULT, "type": "tool_call"}]}),
        _entry({"role": "tool", "parts": [{**_RESULT, "extra": 1}]}),
        _entry({"role": "tool", "parts": ["t"]}),
        {**_entry({"role": "user", "parts": []}), "seq": True},
        {**_entry({"role": "user", "parts": []}), "v": 9},
        {**_entry({"role": "user", "parts": []}), "kind": "reminder"},
        _entry({"role": "user"}),
    ],
)
def test_the_fast_path_defers_every_shape_it_does_not_build(obj: dict[str, Any]) -> None:
    """Anything but a plain text or tool-call message goes to the validating decoder."""
    assert fast.message_entry(obj, 4) is None


def test_the_fast_path_builds_a_tool_round() -> None:
    """The shapes it does build: text and calls, a text tool result, an error result."""
    call = fast.message_entry(_entry({"role": "assistant", "parts": [_TEXT, _CALL]}), 4)
    result = fast.message_entry(
        _entry({"role": "tool", "parts": [{**_RESULT, "is_error": True}]}), 4
    )
    assert call is not None and result is not None
    assert call.event == MessageAppended(
        message=Message.assistant("t", [ToolCall(id="c1", name="run", arguments="{}")])
    )
    assert result.event == MessageAppended(message=Message.tool("c1", "t", is_error=True))


@given(message=strategies.messages("any"), seq=st.integers(0, 2**40))
def test_the_append_constructors_build_what_the_dataclass_constructors_build(
    message: Message, seq: int
) -> None:
    """Property: `appended` and `entry_of` (`Record.append_message`) equal the constructors."""
    event = fast.appended(message)
    assert event == MessageAppended(message=message) and event.message is message
    assert repr(event) == repr(MessageAppended(message=message))
    entry = fast.entry_of(seq, event)
    assert entry == Entry(seq, event) and hash(entry) == hash(Entry(seq, event))
    assert entry.event is event
