from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from steerable_compaction import Message
from steerable_compaction.demo import ScriptedAgent, Workspace, build_provider
from steerable_compaction.errors import OverflowRetriesExhaustedError, ProviderError
from steerable_compaction.messages import message_from_dict, message_to_dict
from steerable_compaction.providers.base import CompletionRequest, Provider, StreamDone
from steerable_compaction.record import JsonlRecord, MemoryRecord, MessageAppended, Record, Reminder
from steerable_compaction.sidecar import (
    BUSY,
    COMPACTION_DISABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SEED_CONFLICT,
    TURN_FAILED,
    JsonRpcServer,
    Session,
    entry_event,
    serve_stdio,
)
from steerable_compaction.testing import FunctionProvider, ScriptedProvider

Json = dict[str, Any]


class Wire:
    """An in-process client: feeds lines to a server and parses what it wrote."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.lines: list[bytes] = []
        self.server = JsonRpcServer(session, self.lines.append)
        self._next_id = 0

    async def raw(self, data: str | bytes) -> list[Any]:
        start = len(self.lines)
        await self.server.handle_line(data.encode() if isinstance(data, str) else data)
        await self.server.drain()
        return [json.loads(line) for line in self.lines[start:]]

    async def call(self, method: str, params: Any = None, **extra: Any) -> list[Json]:
        self._next_id += 1
        request: Json = {"jsonrpc": "2.0", "id": self._next_id, "method": method, **extra}
        if params is not None:
            request["params"] = params
        return await self.raw(json.dumps(request))

    async def result(self, method: str, params: Any = None) -> Json:
        *_, response = await self.call(method, params)
        assert "result" in response, response
        result: Json = response["result"]
        return result

    async def error(self, method: str, params: Any = None) -> Json:
        *_, response = await self.call(method, params)
        assert "error" in response, response
        error: Json = response["error"]
        return error


def demo_session(record: Record, *, window: int = 4096, **kwargs: Any) -> Session:
    workspace = Workspace()
    provider = build_provider("demo", window=window, agent=ScriptedAgent(workspace))
    return Session(record, provider, window=window, tools=workspace.tools(), env={}, **kwargs)


def events(lines: list[Json]) -> list[Json]:
    return [line["params"] for line in lines if line.get("method") == "agent.chat.event"]


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
    folds = len(boundaries) - 1  # how many depends on the meter's calibration from usage
    assert folds >= 2 and [b["action"] for b in boundaries] == ["compact"] * folds + ["summarize"]
    start = kinds.index("compaction_start")
    assert kinds[start : start + 2] == ["compaction_start", "compaction_summary"]
    summary = boundaries[-1]
    assert summary["compaction_id"] == streamed[start]["compaction_id"]
    assert summary["replacement_count"] == summary["span"][1] - summary["span"][0]
    assert summary["summarizer"]["cached_tokens"] / summary["summarizer"]["prompt_tokens"] > 0.8
    assert boundaries[0]["edits"] > 0 and "summarizer" not in boundaries[0]
    compactions = lines[-1]["result"]["compactions"]
    assert [c["action"] for c in compactions] == ["compact"] * folds + ["summarize"]
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


class Gate:
    """A provider whose first request waits until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.started = asyncio.Event()

    async def answer(self, request: CompletionRequest) -> str:
        self.started.set()
        await self.opened.wait()
        return "done"


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
    assert len(record.projection) == visible + 4  # the compacted projection was kept


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


async def test_serve_stdio_reads_lines_until_eof_and_finishes_the_running_turn() -> None:
    """The stdio loop serves a pipe until it closes, then waits for the turn in flight."""
    read_fd, write_fd = os.pipe()
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "agent.chat.send", "params": {"input": "hi"}},
        {"jsonrpc": "2.0", "id": 2, "method": "agent.chat.status"},
    ]
    with os.fdopen(write_fd, "wb") as writer:
        writer.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))

    class Sink:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> int:
            self.data += data
            return len(data)

        def flush(self) -> None:
            pass

    out = Sink()
    with os.fdopen(read_fd, "rb") as reader:
        session = demo_session(MemoryRecord())
        await asyncio.wait_for(serve_stdio(session, reader, out), 30)  # type: ignore[arg-type]
    replies = [json.loads(line) for line in out.data.splitlines()]
    ids = [r["id"] for r in replies if "id" in r]
    assert sorted(ids) == [1, 2]


async def test_serve_stdio_stops_when_the_host_stops_reading() -> None:
    """A broken stdout ends the loop quietly instead of raising."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "wb") as writer:
        writer.write(
            b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"input":"x"}}\n'
        )
        writer.write(b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.status"}\n' * 3)

    class Broken:
        writes = 0

        def write(self, data: bytes) -> int:
            self.writes += 1
            raise BrokenPipeError

        def flush(self) -> None:
            pass

    out = Broken()
    with os.fdopen(read_fd, "rb") as reader:
        session = demo_session(MemoryRecord())
        await asyncio.wait_for(serve_stdio(session, reader, out), 30)  # type: ignore[arg-type]
    assert out.writes == 1  # nothing more is written once the pipe broke


# -- the real process --------------------------------------------------------------------------


class Process:
    """`steerable-compaction serve` as a subprocess, read line by line with a deadline."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "steerable_compaction", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "STEERABLE_SUMMARIZER": "1"},
        )
        self.out: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            self.out.put(line)
        self.out.put(b"")

    def send(self, data: str | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((data.encode() if isinstance(data, str) else data) + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 30.0) -> Json:
        line = self.out.get(timeout=timeout)
        assert line, f"the sidecar closed its output: {self.stderr()}"
        value: Json = json.loads(line)
        return value

    def until_response(self, request_id: object) -> tuple[list[Json], Json]:
        notes: list[Json] = []
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return notes, message
            notes.append(message)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Process]:
    process = Process("--record", str(tmp_path / "session.jsonl"), "--window", "4096")
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.proc.kill()
        process.proc.wait(timeout=30)
        for stream in (process.proc.stdin, process.proc.stdout, process.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.slow
def test_the_serve_process_speaks_json_rpc_over_pipes(sidecar: Process, tmp_path: Path) -> None:
    """A real `serve` process over pipes, end to end.

    A turn with compactions, a manual compaction, history, status, bad input survived, a refused
    seed leaving the record's bytes alone, and a clean exit when stdin closes.
    """
    sidecar.send(
        '{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":'
        '{"input":"Map it (read 12 files)."}}'
    )
    notes, done = sidecar.until_response(1)
    kinds = [n["params"]["type"] for n in notes]
    assert kinds[0] == "user" and kinds[-1] == "reply" and "compaction" in kinds
    assert done["result"]["stop"] == "answered"
    host = [n["params"]["message"] for n in notes if "message" in n["params"]]

    sidecar.send("this is not JSON")
    assert sidecar.read()["error"]["code"] == PARSE_ERROR
    sidecar.send('{"jsonrpc":"2.0","id":2,"method":"agent.chat.launch"}')
    assert sidecar.read()["error"]["code"] == METHOD_NOT_FOUND
    sidecar.send('{"jsonrpc":"2.0","id":3,"method":"agent.chat.history","params":{"limit":"9"}}')
    assert sidecar.read()["error"]["code"] == INVALID_PARAMS

    sidecar.send('{"jsonrpc":"2.0","id":4,"method":"agent.chat.compact"}')
    assert sidecar.read()["result"]["scheduled"] is True
    sidecar.send(
        '{"jsonrpc":"2.0","id":5,"method":"agent.chat.send","params":'
        '{"input":"One more (read 1 files)."}}'
    )
    notes, done = sidecar.until_response(5)
    first = next(n["params"] for n in notes if n["params"]["type"] == "compaction")
    assert first["trigger"] == "manual"
    host += [n["params"]["message"] for n in notes if "message" in n["params"]]

    sidecar.send(
        '{"jsonrpc":"2.0","id":6,"method":"agent.chat.history","params":{"offset":0,"limit":500}}'
    )
    history = sidecar.read()["result"]
    assert [m["message"] for m in history["messages"]] == host

    record = tmp_path / "session.jsonl"
    before = record.read_bytes()
    edited = [*host]
    edited[0] = message_to_dict(Message.user("A different goal."))
    sidecar.send(
        json.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": "agent.chat.seed", "params": {"messages": edited}}
        )
    )
    refused = sidecar.read()
    assert refused["error"]["code"] == SEED_CONFLICT
    assert refused["error"]["data"]["seed_index"] == 0
    assert record.read_bytes() == before

    sidecar.send('{"jsonrpc":"2.0","id":8,"method":"agent.chat.status"}')
    status = sidecar.read()["result"]
    assert status["last_boundary"]["trigger"] == "manual" or status["last_boundary"] is not None
    assert status["circuit"]["open"] is False and status["threshold"] < status["window"]

    assert sidecar.proc.stdin is not None
    sidecar.proc.stdin.close()
    assert sidecar.proc.wait(timeout=30) == 0
    assert "JSON-RPC 2.0 on stdin/stdout" in sidecar.stderr()


@pytest.mark.slow
def test_the_serve_process_refuses_a_second_writer(sidecar: Process, tmp_path: Path) -> None:
    """A second `serve` on the same record exits 1 with a clear error (one writer)."""
    sidecar.send('{"jsonrpc":"2.0","id":1,"method":"agent.chat.status"}')
    assert "result" in sidecar.read()  # the first process holds the record now
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "steerable_compaction",
            "serve",
            "--record",
            str(tmp_path / "session.jsonl"),
        ],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert b"another writer holds this record" in done.stderr


async def test_without_an_llm_summarizer_compactions_are_excerpts_without_usage() -> None:
    """`STEERABLE_SUMMARIZER=0`: summaries are deterministic excerpts; no summarizer usage rides."""
    workspace = Workspace()
    provider = build_provider("demo", window=4096, agent=ScriptedAgent(workspace))
    session = Session(
        MemoryRecord(),
        provider,
        window=4096,
        tools=workspace.tools(),
        env={"STEERABLE_SUMMARIZER": "0"},
    )
    wire = Wire(session)
    lines = await wire.call("agent.chat.send", {"input": "Map it (read 30 files)."})
    boundaries = [e for e in events(lines) if e["type"] == "compaction"]
    assert "excerpt" in [b["action"] for b in boundaries]
    assert all("summarizer" not in b for b in boundaries)


def test_entry_event_covers_reminders() -> None:
    """A reminder reaches the host with its reason and message."""
    record = MemoryRecord()
    record.append(Reminder(reason="compaction_thrashing", message=Message.user("slow down")))
    assert entry_event(record.entries[0]) == {
        "seq": 0,
        "type": "reminder",
        "reason": "compaction_thrashing",
        "message": message_to_dict(Message.user("slow down")),
    }


async def test_the_session_provider_streams_and_keeps_the_summarizer_usage() -> None:
    """The tapped provider streams like the real one and remembers a summary call's usage."""
    session = demo_session(MemoryRecord())
    provider = session.harness.loop.provider
    assert provider.name == "caching"
    request = CompletionRequest(messages=(Message.user("hi"),), cache_retention="none")
    streamed = [e async for e in provider.stream(request)]
    assert isinstance(streamed[-1], StreamDone)
    assert session.tap.summarizer_usage == streamed[-1].completion.usage
    with pytest.raises(ValueError, match="must be a user message"):
        await session.send(Message.assistant("no"))


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


async def test_the_stdin_reader_ends_on_a_failing_stream() -> None:
    """A stream that errors ends the line source like EOF, instead of crashing the server."""
    from steerable_compaction.sidecar import _lines

    class Failing:
        def readline(self) -> bytes:
            raise OSError("gone")

    assert [line async for line in _lines(Failing())] == []  # type: ignore[arg-type]
