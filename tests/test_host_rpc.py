from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from steerable_compaction import Message, PreStepAction, StepContext
from steerable_compaction.errors import OverflowRetriesExhaustedError, ProviderError
from steerable_compaction.host.protocol import (
    BUSY,
    COMPACTION_DISABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SEED_CONFLICT,
    TURN_FAILED,
)
from steerable_compaction.host.session import Session
from steerable_compaction.messages import message_from_dict, message_to_dict
from steerable_compaction.providers.base import Provider
from steerable_compaction.record import JsonlRecord, MemoryRecord, MessageAppended, SqliteRecord
from steerable_compaction.testing import FunctionProvider, ScriptedProvider

from .host_helpers import UNECHOABLE_IDS, Gate, Json, Wire, demo_session, events, strict_json


async def test_send_streams_the_turns_events_before_its_response() -> None:
    """`agent.chat.send` notifies each new record entry in order, then answers with the turn."""
    record = MemoryRecord()
    wire = Wire(demo_session(record, system="Be brief."))
    lines = await wire.call("agent.chat.send", {"input": "Look around (read 2 files)."})
    response = lines[-1]
    assert response["id"] == 1 and "result" in response
    streamed = events(lines[:-1])
    assert len(streamed) == len(lines) - 1
    assert [e["type"] for e in streamed] == [
        "user",
        "tool_calls",
        "tool_result",
        "tool_calls",
        "tool_result",
        "tool_calls",
        "tool_result",
        "reply",
    ]
    assert all(e["request"] == 1 and e["turn"] == 1 for e in streamed)
    assert [e["seq"] for e in streamed] == list(range(1, 9))  # seq 0 is the system prompt
    assert streamed[1]["calls"] == [{"id": "call_1", "name": "list_files", "arguments": "{}"}]
    assert streamed[2]["call_id"] == "call_1" and streamed[2]["is_error"] is False
    assert streamed[1]["usage"]["prompt_tokens"] > 0
    result = response["result"]
    assert result["stop"] == "answered" and result["rounds"] == 4
    assert result["reply"] == streamed[-1]["text"] and result["reply"].startswith("I read 2 files")
    assert result["threshold"] == wire.session.policy.threshold_tokens
    raw = [message_from_dict(e["message"]) for e in streamed]
    assert raw == [e.event.message for e in record.history()][1:]  # type: ignore[union-attr]


async def test_compaction_events_stream_with_the_summarizer_cache_share(tmp_path: Path) -> None:
    """Fold and summary compactions reach the host as events (folds first, as configured).

    A summary's bracket comes first and its boundary carries the summarizer call's usage.
    """
    harness = tmp_path / "fold-first.harness.yaml"
    harness.write_text("compaction:\n  fold_first: true\n", encoding="utf-8")
    wire = Wire(demo_session(MemoryRecord(), harness=harness))
    lines = await wire.call("agent.chat.send", {"input": "Map it (read 16 files)."})
    streamed = events(lines)
    kinds = [e["type"] for e in streamed]
    boundaries = [e for e in streamed if e["type"] == "compaction"]
    actions = [b["action"] for b in boundaries]
    first_summary = actions.index("summarize")
    assert first_summary >= 2 and set(actions[:first_summary]) == {"compact"}  # folds first
    start = kinds.index("compaction_start")
    assert kinds[start : start + 2] == ["compaction_start", "compaction_summary"]
    summary = boundaries[first_summary]
    assert summary["compaction_id"] == streamed[start]["compaction_id"]
    assert summary["replacement_count"] == summary["span"][1] - summary["span"][0]
    assert summary["summarizer"]["cached_tokens"] / summary["summarizer"]["prompt_tokens"] > 0.8
    assert boundaries[0]["edits"] > 0 and "summarizer" not in boundaries[0]
    compactions = lines[-1]["result"]["compactions"]
    assert [c["action"] for c in compactions] == actions
    assert all(c["written"] and c["post_tokens"] < c["pre_tokens"] for c in compactions)


async def test_r15_compact_runs_manual_compaction_at_the_next_step_boundary() -> None:
    """`agent.chat.compact` schedules a manual compaction; the next turn's first step runs it."""
    wire = Wire(demo_session(MemoryRecord()))
    await wire.result("agent.chat.send", {"input": "Warm up (read 6 files)."})
    scheduled = await wire.result("agent.chat.compact")
    assert scheduled == {"scheduled": True, "ran": False, "running_turn": False}
    assert (await wire.result("agent.chat.status"))["compact_requested"] is True
    lines = await wire.call("agent.chat.send", {"input": "Go on (read 1 files)."})
    first = next(e for e in events(lines) if e["type"] == "compaction")
    assert first["trigger"] == "manual"
    status = await wire.result("agent.chat.status")
    assert status["compact_requested"] is False
    assert status["last_boundary"]["trigger"] == "manual"


async def test_r15_compact_now_runs_at_once_between_turns() -> None:
    """`now: true` compacts immediately, streams the events and returns the outcome."""
    wire = Wire(demo_session(MemoryRecord()))
    await wire.result("agent.chat.send", {"input": "Warm up (read 6 files)."})
    lines = await wire.call("agent.chat.compact", {"now": True})
    result = lines[-1]["result"]
    assert result["scheduled"] is False and result["ran"] is True
    outcome = result["outcome"]
    assert outcome["trigger"] == "manual" and outcome["written"] is True
    boundary = events(lines)[-1]
    assert boundary["type"] == "compaction" and boundary["action"] == outcome["action"]
    if outcome["action"] == "summarize":
        assert boundary["summarizer"]["prompt_tokens"] > 0
    assert all(e["request"] == lines[-1]["id"] for e in events(lines))
    assert result["pressure"] < outcome["pre_tokens"]


async def test_compact_now_is_no_request_to_the_cold_cache_rule() -> None:
    """Between turns no request leaves: the engine's request count and clock stay as they were.

    Growth is measured on from where the compaction left the context (issue 28).
    """
    wire = Wire(demo_session(MemoryRecord()))
    await wire.result("agent.chat.send", {"input": "Warm up (read 6 files)."})
    compaction = wire.session.harness.compaction
    assert compaction is not None
    before = compaction.state
    result = await wire.result("agent.chat.compact", {"now": True})
    assert result["outcome"]["written"] is True
    after = compaction.state
    assert (after.steps, after.last_request_at) == (before.steps, before.last_request_at)
    assert after.last_sent_tokens == compaction.pressure()


async def test_compact_now_on_an_empty_record_reports_nothing_written() -> None:
    """With nothing to compact the outcome says so instead of failing."""
    wire = Wire(demo_session(MemoryRecord()))
    result = await wire.result("agent.chat.compact", {"now": True})
    assert result["ran"] is True and result["outcome"]["written"] is False
    assert result["outcome"]["reason"]


async def test_compact_is_refused_when_the_harness_has_no_compaction(tmp_path: Path) -> None:
    """A harness without `pressure_compaction` answers compact with COMPACTION_DISABLED."""
    harness = tmp_path / "h.yaml"
    harness.write_text("context: [spill]\n")
    wire = Wire(demo_session(MemoryRecord(), harness=harness, system="Be brief."))
    for params in (None, {"now": True}):
        error = await wire.error("agent.chat.compact", params)
        assert error["code"] == COMPACTION_DISABLED
        assert "not enabled" in error["message"]
    status = await wire.result("agent.chat.status")
    assert status["compaction_enabled"] is False and status["pressure"] > 0


async def test_r40_history_pages_through_the_raw_history() -> None:
    """`agent.chat.history` pages the raw messages (compacted ones included) with their seqs."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    await wire.result("agent.chat.send", {"input": "Map it (read 12 files)."})
    assert len(record.projection) < record.message_count
    pages: list[Json] = []
    offset: int | None = 0
    while offset is not None:
        page = await wire.result("agent.chat.history", {"offset": offset, "limit": 10})
        pages += page["messages"]
        offset = page["next_offset"]
        assert page["total"] == record.message_count
    assert [p["index"] for p in pages] == list(range(record.message_count))
    assert [p["seq"] for p in pages] == [e.seq for e in record.history()]
    assert pages[0]["message"] == message_to_dict(Message.user("Map it (read 12 files)."))
    assert "usage" in pages[1] and "usage" not in pages[0]
    past = await wire.result("agent.chat.history", {"offset": 500})
    assert past["messages"] == [] and past["next_offset"] is None


async def test_status_reports_pressure_threshold_circuit_and_last_boundary() -> None:
    """`agent.chat.status` is a snapshot a host UI can render as it is."""
    wire = Wire(demo_session(MemoryRecord()))
    before = await wire.result("agent.chat.status")
    assert before["last_boundary"] is None and before["pressure"] == 0
    assert before["circuit"] == {
        "open": False,
        "reason": None,
        "consecutive_failures": 0,
        "rapid_refills": 0,
    }
    await wire.result("agent.chat.send", {"input": "Map it (read 12 files)."})
    status = await wire.result("agent.chat.status")
    assert status["window"] == 4096
    assert status["threshold"] == wire.session.policy.threshold_tokens
    assert 0 < status["pressure"] < status["threshold"]
    assert status["pressure_ratio"] == round(status["pressure"] / status["threshold"], 4)
    assert status["last_boundary"]["action"] == "summarize"
    assert status["last_boundary"]["post_tokens"] < status["last_boundary"]["pre_tokens"]
    assert status["turn"] == 1 and status["round"] == 16 and status["busy"] is False
    assert status["messages"] > status["visible_messages"] and status["open_brackets"] == []
    assert status["record"] is None and status["provider"] == "caching"


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("{not json", PARSE_ERROR),
        (b"\xff\xfe", PARSE_ERROR),
        ("[" * 100_000, PARSE_ERROR),
        ("42", INVALID_REQUEST),
        ("[]", INVALID_REQUEST),
        ('{"jsonrpc": "1.0", "id": 1, "method": "agent.chat.status"}', INVALID_REQUEST),
        ('{"jsonrpc": "2.0", "id": 1, "method": 7}', INVALID_REQUEST),
        ('{"jsonrpc": "2.0", "id": [1], "method": "agent.chat.status"}', INVALID_REQUEST),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "agent.chat.status", "params": 3}',
            INVALID_REQUEST,
        ),
        ('{"jsonrpc": "2.0", "id": 1, "method": "agent.chat.nope"}', METHOD_NOT_FOUND),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "agent.chat.status", "params": [1]}',
            INVALID_PARAMS,
        ),
    ],
)
async def test_bad_input_gets_a_json_rpc_error_and_the_server_lives_on(
    line: str | bytes, code: int
) -> None:
    """Malformed JSON, invalid requests, unknown methods, bad params get the standard codes.

    The next request is served as usual.
    """
    wire = Wire(demo_session(MemoryRecord()))
    (response,) = await wire.raw(line)
    assert response["jsonrpc"] == "2.0" and response["error"]["code"] == code
    assert response["id"] in (None, 1)
    assert "result" in (await wire.call("agent.chat.status"))[-1]


@pytest.mark.parametrize(
    ("method", "params", "fragment"),
    [
        ("agent.chat.send", {}, "give `input`, `seed`, or both"),
        ("agent.chat.send", {"input": "  "}, "input must not be empty"),
        ("agent.chat.send", {"input": 5}, "input"),
        ("agent.chat.send", {"input": {"role": "assistant", "parts": []}}, "a user message"),
        ("agent.chat.send", {"input": "hi", "typo": 1}, "unknown parameter(s) ['typo']"),
        ("agent.chat.send", {"seed": "x"}, "seed must be an array of messages"),
        (
            "agent.chat.send",
            {"seed": [{"role": "user"}]},
            "seed: message 0, field 'parts': missing 'parts'",
        ),
        ("agent.chat.send", {"seed": [], "format": "xml"}, "format must be one of"),
        ("agent.chat.send", {"seed": []}, "nothing to answer"),
        ("agent.chat.seed", {}, "messages is required"),
        ("agent.chat.compact", {"now": "yes"}, "now must be a boolean"),
        ("agent.chat.history", {"offset": -1}, "offset must be an integer >= 0"),
        ("agent.chat.history", {"limit": 501}, "limit must be an integer >= 1 and <= 500"),
        ("agent.chat.history", {"limit": True}, "limit must be"),
        ("agent.chat.status", {"verbose": True}, "unknown parameter(s)"),
    ],
)
async def test_bad_params_are_invalid_params_and_write_nothing(
    method: str, params: Json, fragment: str
) -> None:
    """Each method checks its params by name and type before touching the record."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    error = await wire.error(method, params)
    assert error["code"] == INVALID_PARAMS
    assert fragment in error["message"]
    assert len(record) == 0
    assert wire.session.busy is False


async def test_notifications_get_no_response_even_when_unknown() -> None:
    """A request without an id is never answered; a send notification still runs the turn."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    assert await wire.raw('{"jsonrpc": "2.0", "method": "agent.chat.nope"}') == []
    assert await wire.raw('{"jsonrpc": "2.0", "method": "agent.chat.status", "params": 1}') != []
    lines = await wire.raw(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "agent.chat.send",
                "params": {"input": "hi (read 1 files)"},
            }
        )
    )
    assert lines and all(line["method"] == "agent.chat.event" for line in lines)
    assert all(line["params"]["request"] is None for line in lines)
    assert record.message_count == 6  # input, list_files, read_file, their results, reply
    assert await wire.raw("\n") == []
    bad = '{"jsonrpc": "2.0", "method": "agent.chat.history", "params": {"limit": 0}}'
    assert await wire.raw(bad) == []  # bad params in a notification: still no answer


async def test_a_batch_is_answered_with_one_array_in_order() -> None:
    """A batch runs its requests in order; notifications inside it get no entry."""
    wire = Wire(demo_session(MemoryRecord()))
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "agent.chat.send", "params": {"input": "go"}},
        {"jsonrpc": "2.0", "method": "agent.chat.compact"},
        {"jsonrpc": "2.0", "id": "b", "method": "agent.chat.status"},
        {"jsonrpc": "2.0", "id": "c", "method": "agent.chat.nope"},
        "junk",
    ]
    lines = await wire.raw(json.dumps(batch))
    *notes, answer = lines
    assert all(n["method"] == "agent.chat.event" for n in notes)
    assert [r.get("id") for r in answer] == ["a", "b", "c", None]
    assert "result" in answer[0] and answer[1]["result"]["compact_requested"] is True
    assert answer[2]["error"]["code"] == METHOD_NOT_FOUND
    assert answer[3]["error"]["code"] == INVALID_REQUEST


async def test_a_running_turn_keeps_status_and_compact_answering_and_refuses_a_second_turn() -> (
    None
):
    """While a turn runs, status/history/compact answer; send, seed and compact-now get BUSY."""
    gate = Gate()
    provider: Provider = FunctionProvider(gate.answer)
    wire = Wire(Session(MemoryRecord(), provider, window=4096, env={}))
    server = wire.server
    await server.handle_line(
        b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"input":"a"}}'
    )
    await gate.started.wait()
    for request in (
        b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.send","params":{"input":"b"}}',
        b'{"jsonrpc":"2.0","id":3,"method":"agent.chat.compact","params":{"now":true}}',
        b'{"jsonrpc":"2.0","id":4,"method":"agent.chat.seed","params":{"messages":[]}}',
        b'{"jsonrpc":"2.0","id":5,"method":"agent.chat.status"}',
        b'{"jsonrpc":"2.0","id":6,"method":"agent.chat.compact"}',
        b'[{"jsonrpc":"2.0","id":7,"method":"agent.chat.send","params":{"input":"c"}}]',
        b'{"jsonrpc":"2.0","method":"agent.chat.send","params":{"input":"d"}}',
    ):
        await server.handle_line(request)
    await asyncio.sleep(0)  # let the batch task run
    replies = [json.loads(line) for line in wire.lines if line.startswith(b"{")]
    answered = {json.dumps(r.get("id")): r for r in replies if "method" not in r}
    for rid in ("2", "3", "4"):
        assert answered[rid]["error"]["code"] == BUSY
    assert answered["5"]["result"]["busy"] is True
    assert answered["6"]["result"] == {"scheduled": True, "ran": False, "running_turn": True}
    gate.opened.set()
    await server.drain()
    last = json.loads(wire.lines[-1])
    assert last["id"] == 1 and last["result"]["reply"] == "done"
    batch = next(json.loads(line) for line in wire.lines if line.startswith(b"["))
    assert batch[0]["error"]["code"] == BUSY
    assert wire.session.busy is False


@pytest.mark.parametrize("request_id", UNECHOABLE_IDS)
async def test_an_id_a_reply_cannot_echo_is_an_invalid_request(request_id: bytes) -> None:
    """Issue 14: a NaN, infinite or lone-surrogate id is -32600 with a null id, alone or batched."""
    wire = Wire(demo_session(MemoryRecord()))
    line = b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"agent.chat.status"}'
    (response,) = await wire.raw(line)
    assert response["id"] is None and response["error"]["code"] == INVALID_REQUEST
    assert "id must be" in response["error"]["message"]
    (batch,) = await wire.raw(b"[" + line + b"]")
    assert batch == [response]
    assert "result" in (await wire.call("agent.chat.status"))[-1]


async def test_lone_surrogates_in_a_method_or_param_name_get_an_encodable_error() -> None:
    """Issue 14: names echoed in an error have each lone surrogate replaced by U+FFFD."""
    wire = Wire(demo_session(MemoryRecord()))
    (missing,) = await wire.raw(b'{"jsonrpc":"2.0","id":1,"method":"a\\ud800"}')
    assert missing["error"]["code"] == METHOD_NOT_FOUND
    assert missing["error"]["data"] == {"method": "a\ufffd"}
    (unknown,) = await wire.raw(
        b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.status","params":{"\\udc00x":1}}'
    )
    assert unknown["id"] == 2 and unknown["error"]["code"] == INVALID_PARAMS
    assert unknown["error"]["data"] == {"unknown": ["\ufffdx"]}


async def test_a_record_value_json_cannot_carry_still_reaches_the_host_replaced() -> None:
    """Issue 14: an event holding a lone surrogate (a memory record keeps it) is sent scrubbed.

    Input cannot carry one (issue 26: -32602); a provider's reply can.
    """
    provider = FunctionProvider(lambda request: Message.assistant("hi \ud800 there"))
    wire = Wire(Session(MemoryRecord(), provider, window=4096, env={}))
    lines = await wire.call("agent.chat.send", {"input": "hi"})
    assert events(lines)[-1]["message"]["parts"][0]["text"] == "hi \ufffd there"
    assert lines[-1]["result"]["stop"] == "answered"
    assert lines[-1]["result"]["reply"] == "hi \ufffd there"


SURROGATE_PARAMS = [
    # (method, params, the field named)
    ("agent.chat.send", {"input": "hi \ud800"}, "input"),
    (
        "agent.chat.send",
        {"input": {"role": "user", "parts": [{"type": "text", "text": "\udc00"}]}},
        "input.parts[0].text",
    ),
    (
        "agent.chat.send",
        {"input": "hi", "seed": [{"role": "user", "content": "a\udfff"}], "format": "openai"},
        "seed[0].content",
    ),
    (
        "agent.chat.seed",
        {
            "messages": [
                {"role": "user", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "x", "\ud801": 1}]},
            ],
            "format": "openai",
        },
        "messages[1].content[0].\ufffd",
    ),
    ("agent.chat.history", {"session": "s\ud800"}, "session"),
]


@pytest.mark.parametrize(("method", "params", "field"), SURROGATE_PARAMS)
async def test_text_no_record_can_store_is_invalid_params_naming_the_field(
    tmp_path: Path, method: str, params: Json, field: str
) -> None:
    """Issue 26: a lone surrogate anywhere in a param is -32602 naming it; nothing changes."""
    record = JsonlRecord(tmp_path / "r.jsonl")
    wire = Wire(demo_session(record, system="Be brief."))
    before = (tmp_path / "r.jsonl").read_bytes()
    error = await wire.error(method, params)
    assert error["code"] == INVALID_PARAMS, error
    assert error["data"]["field"] == field and error["message"].startswith(field)
    assert "lone surrogate" in error["message"]
    assert (tmp_path / "r.jsonl").read_bytes() == before and len(record) == 1
    status = await wire.result("agent.chat.status")
    assert status["turn"] == 0 and status["messages"] == 1
    record.close()


async def test_a_seed_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """Issue 26: a seed whose third message cannot be stored writes none of the first two."""
    record = SqliteRecord(tmp_path / "r.db")
    wire = Wire(demo_session(record))
    seed = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "third \ud800"},
    ]
    error = await wire.error("agent.chat.seed", {"messages": seed, "format": "openai"})
    assert error["code"] == INVALID_PARAMS and error["data"]["field"] == "messages[2].content"
    assert record.message_count == 0
    seed[2]["content"] = "third"
    result = await wire.result("agent.chat.seed", {"messages": seed, "format": "openai"})
    assert result["appended"] == 3
    record.close()
    with SqliteRecord(tmp_path / "r.db", readonly=True) as again:
        assert [m.text for m in again.messages()] == ["first", "second", "third"]


async def test_session_null_is_refused_and_only_omission_means_the_default() -> None:
    """Issue 26: `session` must be a string where given; `null` is not the default session."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    for method, params in (
        ("agent.chat.status", {"session": None}),
        ("agent.chat.send", {"input": "hi", "session": None}),
        ("agent.session.close", {"session": None}),
    ):
        error = await wire.error(method, params)
        assert error["code"] == INVALID_PARAMS and error["data"] == {"param": "session"}
        assert "session must be a string" in error["message"]
    assert len(record) == 0
    assert (await wire.result("agent.chat.status"))["turn"] == 0


async def test_hostile_lines_while_a_turn_runs_leave_the_turn_to_answer() -> None:
    """Issue 14: every hostile line gets its error at once, and the turn in flight still answers."""
    gate = Gate()
    wire = Wire(Session(MemoryRecord(), FunctionProvider(gate.answer), window=4096, env={}))
    server = wire.server
    await server.handle_line(
        b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"input":"a"}}'
    )
    await gate.started.wait()
    start = len(wire.lines)
    hostile = [
        b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"agent.chat.status"}'
        for request_id in UNECHOABLE_IDS
    ]
    hostile += [
        b'{"jsonrpc":"2.0","id":2,"method":"\\ud800"}',
        b'{"jsonrpc":"2.0","id":3,"method":"agent.chat.history","params":{"\\ud800":1}}',
    ]
    for line in hostile:
        await server.handle_line(line)
    replies = [strict_json(line) for line in wire.lines[start:]]
    assert len(replies) == len(hostile) and all("error" in r for r in replies)
    gate.opened.set()
    await server.drain()
    last = strict_json(wire.lines[-1])
    assert last["id"] == 1 and last["result"]["reply"] == "done"


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","id":1}', b'[{"jsonrpc":"2.0","id":1}]'])
async def test_a_bug_in_the_framing_is_an_internal_error_and_the_server_goes_on(
    line: bytes, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A request or batch that trips a bug outside any method still gets -32603 (id null)."""
    wire = Wire(demo_session(MemoryRecord()))

    def broken(payload: object) -> object:
        raise KeyError("boom")

    monkeypatch.setattr(wire.server, "_prepare", broken)
    (response,) = await wire.raw(line)
    assert response == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": INTERNAL_ERROR, "message": "internal error"},
    }
    assert "KeyError: 'boom'" in caplog.text
    monkeypatch.undo()
    assert "result" in (await wire.call("agent.chat.status"))[-1]


async def test_a_failing_provider_is_a_turn_failed_error_and_the_server_goes_on() -> None:
    """A provider error ends the turn with TURN_FAILED (naming it); the next turn works."""
    provider = ScriptedProvider(
        [ProviderError("invalid key", provider="openai", status_code=401), "fine"]
    )
    wire = Wire(Session(MemoryRecord(), provider, window=4096, env={}))
    error = await wire.error("agent.chat.send", {"input": "hello"})
    assert error["code"] == TURN_FAILED
    assert error["data"] == {
        "error": "ProviderError",
        "provider": "openai",
        "status_code": 401,
        "retryable": False,
    }
    assert "invalid key" in error["message"]
    assert (await wire.result("agent.chat.send", {"input": "again"}))["reply"] == "fine"


async def test_an_unexpected_exception_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug inside a method becomes -32603 and is logged; the server stays up."""
    wire = Wire(demo_session(MemoryRecord()))

    def broken() -> Json:
        raise KeyError("boom")

    monkeypatch.setattr(wire.session, "status", broken)
    error = await wire.error("agent.chat.status")
    assert error["code"] == INTERNAL_ERROR and "KeyError" in error["message"]
    monkeypatch.undo()
    assert "result" in (await wire.call("agent.chat.status"))[-1]


async def test_r1_send_with_a_seed_appends_only_what_is_new_and_answers_its_last_input() -> None:
    """A host that keeps its own history sends all of it; the record takes only the new tail."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    lines = await wire.call("agent.chat.send", {"input": "Map it (read 12 files)."})
    host = [e["message"] for e in events(lines) if "message" in e]
    visible = len(record.projection)
    raw = record.message_count
    seed = [*host, message_to_dict(Message.user("And now? (read 1 files)"))]
    result = await wire.result("agent.chat.send", {"seed": seed})
    assert result["seed"]["appended"] == 1 and result["seed"]["matched_raw"] == raw
    assert record.message_count == raw + 4  # the input, a call, its result and the reply
    # The compacted projection was kept (not re-expanded from the seed): it grew by at most
    # the four new messages (less if this turn compacted again), all four still at its end.
    assert len(record.projection) <= visible + 4 < record.message_count
    new = [e.event.message for e in record.history()][-4:]  # type: ignore[union-attr]
    assert list(record.messages()[-4:]) == new


async def test_r1_seed_with_openai_messages_and_an_input() -> None:
    """Seeds may come as Chat Completions messages; `input` then starts the turn."""
    record = MemoryRecord()
    wire = Wire(demo_session(record, system="Be brief."))
    seed = [
        {"role": "user", "content": "Earlier question"},
        {"role": "assistant", "content": "Earlier answer"},
    ]
    result = await wire.result(
        "agent.chat.send", {"seed": seed, "format": "openai", "input": "hi (read 1 files)"}
    )
    assert result["seed"]["appended"] == 2 and result["seed"]["skipped_system"] == 1
    assert [m.text for m in record.messages()[:4]] == [
        "Be brief.",
        "Earlier question",
        "Earlier answer",
        "hi (read 1 files)",
    ]
    again = {"input": {"role": "user", "content": "and? (read 1 files)"}, "format": "openai"}
    assert (await wire.result("agent.chat.send", again))["stop"] == "answered"
    assert record.history()[-4].event == MessageAppended(
        message=Message.user("and? (read 1 files)")
    )
    bad = await wire.error("agent.chat.seed", {"messages": [{"role": "x"}], "format": "openai"})
    assert bad["code"] == INVALID_PARAMS


async def test_r1_a_contradicting_seed_is_refused_and_the_record_file_keeps_its_bytes(
    tmp_path: Path,
) -> None:
    """SEED_CONFLICT names where the seed departs; the record file is byte for byte unchanged."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        wire = Wire(demo_session(record))
        lines = await wire.call("agent.chat.send", {"input": "Look (read 2 files)."})
        host = [e["message"] for e in events(lines) if "message" in e]
        before = path.read_bytes()
        edited = [*host]
        edited[1] = message_to_dict(Message.assistant("something else"))
        for params in (
            {"seed": [*edited, message_to_dict(Message.user("more"))]},
            {"seed": edited, "input": "more"},
        ):
            error = await wire.error("agent.chat.send", params)
            assert error["code"] == SEED_CONFLICT
            assert error["data"]["kind"] == "mismatch"
            assert error["data"]["seed_index"] == 1 and error["data"]["seq"] == 1
            assert error["message"].startswith("seed refused, the record is unchanged:")
        behind = await wire.error("agent.chat.seed", {"messages": host[:3]})
        assert behind["code"] == SEED_CONFLICT and behind["data"]["kind"] == "behind"
        assert behind["data"]["matched"] == 3
        assert path.read_bytes() == before
        same = await wire.result("agent.chat.seed", {"messages": host})
        assert same["appended"] == 0
        assert path.read_bytes() == before


async def test_other_library_errors_are_turn_failures_named_by_type() -> None:
    """A non-provider library error still ends only the turn, named in `data.error`."""
    provider = ScriptedProvider([OverflowRetriesExhaustedError(2, "prompt is too long")])
    wire = Wire(Session(MemoryRecord(), provider, window=4096, env={}))
    error = await wire.error("agent.chat.send", {"input": "hello"})
    assert error["code"] == TURN_FAILED
    assert error["data"] == {"error": "OverflowRetriesExhaustedError"}
    openai_input = {"input": {"role": "assistant", "content": "x"}, "format": "openai"}
    bad = await wire.error("agent.chat.send", openai_input)
    assert bad["code"] == INVALID_PARAMS and "text or a user message" in bad["message"]


async def test_a_batch_of_notifications_gets_no_reply() -> None:
    """Only requests with an id get an entry; an all-notification batch writes nothing."""
    wire = Wire(demo_session(MemoryRecord()))
    batch = [
        {"jsonrpc": "2.0", "method": "agent.chat.nope"},
        {"jsonrpc": "2.0", "method": "agent.chat.compact"},
    ]
    assert await wire.raw(json.dumps(batch)) == []
    assert wire.session.status()["compact_requested"] is True


async def test_send_with_pinned_records_the_input_pinned_and_keeps_it_through_compaction() -> None:
    """`pinned: true` pins the input: recorded pinned, never folded or summarized away."""
    record = MemoryRecord()
    wire = Wire(demo_session(record, system="Be brief."))
    text = "Constraint: the billing module is frozen (read 6 files)."
    await wire.result("agent.chat.send", {"input": text, "pinned": True})
    first = [e.event.message for e in record.history() if isinstance(e.event, MessageAppended)]
    assert [m for m in first if m.text == text and m.pinned]
    for n in range(4):
        await wire.result("agent.chat.send", {"input": f"More work {n} (read 12 files)."})
    assert record.compactions(), "the session never compacted"
    assert any(m.text == text and m.pinned for m in record.messages())


async def test_send_with_cache_cold_tells_the_engine_before_the_turn() -> None:
    """`cache_cold: true` reaches `report_cache_cold` before the turn's first step (issue 28)."""
    wire = Wire(demo_session(MemoryRecord()))
    compaction = wire.session.harness.compaction
    assert compaction is not None
    seen: list[bool] = []
    real = compaction.pre_step

    async def spy(ctx: StepContext) -> PreStepAction:
        seen.append(compaction.state.cache_reported_cold)
        return await real(ctx)

    compaction.pre_step = spy  # type: ignore[method-assign]
    await wire.result("agent.chat.send", {"input": "Look around (read 1 file)."})
    assert seen and not any(seen)
    seen.clear()
    await wire.result("agent.chat.send", {"input": "Back after lunch.", "cache_cold": True})
    assert seen[0] is True and not compaction.state.cache_reported_cold
    error = await wire.error("agent.chat.send", {"input": "hi", "cache_cold": "yes"})
    assert error["code"] == -32602 and "cache_cold must be a boolean" in error["message"]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"input": "hi", "pinned": "yes"}, "pinned must be a boolean"),
        ({"input": "hi", "pinned": 1}, "pinned must be a boolean"),
        ({"seed": [], "pinned": True}, "pinned applies to `input`"),
    ],
)
async def test_a_malformed_pinned_value_is_invalid_params_and_writes_nothing(
    params: Json, needle: str
) -> None:
    """A bad `pinned` is -32602 naming the parameter; the record is unchanged."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    before = len(record)
    error = await wire.error("agent.chat.send", params)
    assert error["code"] == -32602 and needle in error["message"]
    assert len(record) == before


async def test_a_host_names_the_goal_with_send_or_seed() -> None:
    """`goal: true` on `send` marks the input the session's goal; `seed` takes its index.

    Issue 25 item 5: the goal is the task, whatever demonstration came before it; a host that
    knows which message it is says so.
    """
    record = MemoryRecord()
    wire = Wire(demo_session(record, system="Be brief."))
    await wire.result("agent.chat.send", {"input": "Fix the parser (read 2 files).", "goal": True})
    (goal,) = [m for m in record.messages() if m.goal]
    assert goal.text == "Fix the parser (read 2 files)."
    seeded = MemoryRecord()
    wire = Wire(demo_session(seeded))
    messages = [
        {"role": "user", "content": "Here is a demonstration of another task."},
        {"role": "user", "content": "The real task: make the build green."},
    ]
    await wire.result("agent.chat.seed", {"messages": messages, "format": "openai", "goal": 1})
    assert [m.text for m in seeded.messages() if m.goal] == ["The real task: make the build green."]


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        ("agent.chat.send", {"input": "hi", "goal": "yes"}, "goal must be a boolean"),
        ("agent.chat.send", {"seed": [], "goal": True}, "goal applies to `input`"),
        ("agent.chat.seed", {"messages": [], "goal": 0}, "goal must be an integer"),
        (
            "agent.chat.seed",
            {"messages": [{"role": "assistant", "content": "hi"}], "format": "openai", "goal": 0},
            "goal must name a user message",
        ),
    ],
)
async def test_a_bad_goal_is_invalid_params_and_writes_nothing(
    method: str, params: Json, needle: str
) -> None:
    """A bad `goal` is -32602 naming the parameter; the record is unchanged."""
    record = MemoryRecord()
    wire = Wire(demo_session(record))
    error = await wire.error(method, params)
    assert error["code"] == INVALID_PARAMS and needle in error["message"]
    assert len(record) == 0


async def test_compact_takes_a_focus_that_the_record_keeps_with_the_compaction() -> None:
    """`agent.chat.compact {"focus": ...}` steers the summary; scheduled or now (issue 27)."""
    from steerable_compaction.record import CompactionStart

    for now in (False, True):
        record = MemoryRecord()
        wire = Wire(demo_session(record))
        await wire.result("agent.chat.send", {"input": "Warm up (read 6 files)."})
        await wire.result("agent.chat.compact", {"now": now, "focus": "the billing module"})
        if not now:
            await wire.result("agent.chat.send", {"input": "Go on (read 1 files)."})
        starts = [e.event for e in record.entries if isinstance(e.event, CompactionStart)]
        assert [s.focus for s in starts if s.trigger == "manual"] == ["the billing module"]


@pytest.mark.parametrize(
    ("focus", "needle"),
    [(42, "focus must be a string"), ("x" * 2_001, "at most 2,000 characters")],
)
async def test_a_bad_focus_is_invalid_params(focus: object, needle: str) -> None:
    """A focus that is no string, or too long, is -32602 naming the parameter."""
    wire = Wire(demo_session(MemoryRecord()))
    error = await wire.error("agent.chat.compact", {"focus": focus})
    assert error["code"] == INVALID_PARAMS and needle in error["message"]
    assert error["data"]["param"] == "focus"
