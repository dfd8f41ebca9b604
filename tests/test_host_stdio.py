from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message
from steerable_compaction.errors import ConfigError
from steerable_compaction.host.protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SEED_CONFLICT,
    TOO_MANY_SESSIONS,
    UNKNOWN_SESSION,
)
from steerable_compaction.host.session import Session
from steerable_compaction.host.stdio import Oversized, _Budget, _lines, serve_stdio, split_lines
from steerable_compaction.messages import message_to_dict
from steerable_compaction.record import MemoryRecord
from steerable_compaction.testing import FunctionProvider

from .host_helpers import UNECHOABLE_IDS, Gate, Json, Process, Wire, demo_session, strict_json


class Sink:
    """A stdout that keeps what is written."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


async def test_serve_stdio_reads_lines_until_eof_and_finishes_the_running_turn() -> None:
    """The stdio loop serves a pipe until it closes, then waits for the turn in flight."""
    read_fd, write_fd = os.pipe()
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "agent.chat.send", "params": {"input": "hi"}},
        {"jsonrpc": "2.0", "id": 2, "method": "agent.chat.status"},
    ]
    with os.fdopen(write_fd, "wb") as writer:
        writer.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))

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


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Process]:
    process = Process("--record", str(tmp_path / "session.jsonl"), "--window", "4096")
    try:
        yield process
    finally:
        process.close()


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
    boundaries = [n["params"] for n in notes if n["params"]["type"] == "compaction"]
    assert boundaries[0]["trigger"] == "manual"
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
    streamed_only = ("type", "replacement", "request", "turn", "summarizer")
    last = {k: v for k, v in boundaries[-1].items() if k not in streamed_only}
    assert status["last_boundary"] == last  # the newest boundary, as it was streamed
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


@pytest.mark.slow
def test_the_serve_process_answers_every_line_json_cannot_echo(sidecar: Process) -> None:
    """Issue 14: unechoable ids and lone surrogates in names get errors; the process lives on."""
    sidecar.send(
        '{"jsonrpc":"2.0","id":"turn","method":"agent.chat.send","params":'
        '{"input":"Map it (read 12 files)."}}'
    )
    for request_id in UNECHOABLE_IDS:
        sidecar.send(b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"agent.chat.status"}')
    sidecar.send(b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}')
    sidecar.send(b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.status","params":{"\\ud800":1}}')
    sidecar.send('{"jsonrpc":"2.0","id":"last","method":"agent.chat.status"}')
    lines: list[Json] = []
    while not any(line.get("id") == "last" for line in lines):  # answered in order read
        lines.append(sidecar.read())
    errors = [line for line in lines if "error" in line]
    assert [e["id"] for e in errors] == [None] * len(UNECHOABLE_IDS) + [1, 2]
    assert [e["error"]["code"] for e in errors] == [INVALID_REQUEST] * len(UNECHOABLE_IDS) + [
        METHOD_NOT_FOUND,
        INVALID_PARAMS,
    ]
    if not any(line.get("id") == "turn" for line in lines):
        sidecar.until_response("turn")
    sidecar.send('{"jsonrpc":"2.0","id":3,"method":"agent.chat.status"}')
    assert sidecar.until_response(3)[1]["result"]["busy"] is False


async def test_the_stdin_reader_ends_on_a_failing_stream() -> None:
    """A stream that errors ends the line source like EOF, instead of crashing the server."""

    class Failing:
        def fileno(self) -> int:
            raise OSError("not a file")

        def read(self, size: int) -> bytes:
            raise OSError("gone")

    assert [line async for line in _lines(Failing())] == []  # type: ignore[arg-type]


# -- bounds (issue 14) ---------------------------------------------------------------------------


def _expected_lines(data: bytes, limit: int) -> list[bytes | Oversized]:
    *complete, last = data.split(b"\n")
    out: list[bytes | Oversized] = [
        line + b"\n" if len(line) <= limit else Oversized(size=len(line)) for line in complete
    ]
    if last:
        out.append(last if len(last) <= limit else Oversized(size=len(last)))
    return out


@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    newline_at_end=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=1000), max_size=30),
    limit=st.integers(min_value=0, max_value=30),
)
def test_split_lines_yields_each_line_whole_or_as_oversized(
    lines: list[bytes], newline_at_end: bool, cuts: list[int], limit: int
) -> None:
    """However stdin is chunked, each line arrives whole, or as `Oversized` past the limit."""
    data = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert list(split_lines(chunks, limit)) == _expected_lines(data, limit)


def test_split_lines_holds_at_most_the_limit_of_an_oversized_line() -> None:
    """A 64 MiB line streams past without being held: peak memory stays near the 1 MiB limit."""
    chunk = b"x" * 65536

    def chunks() -> Iterator[bytes]:
        for _ in range(1024):
            yield chunk
        yield b'\n{"ok":1}\n'

    tracemalloc.start()
    try:
        out = list(split_lines(chunks(), 1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == [Oversized(size=64 << 20), b'{"ok":1}\n']
    assert peak < 3 << 20


async def test_a_line_past_the_limit_is_an_invalid_request_and_the_next_is_served() -> None:
    """Issue 14: an overlong line gets -32600 (id null, naming limit and size); serving goes on."""
    read_fd, write_fd = os.pipe()
    long = b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.status","x":"' + b"y" * 200 + b'"}'
    with os.fdopen(write_fd, "wb") as writer:
        writer.write(long + b'\n{"jsonrpc":"2.0","id":2,"method":"agent.chat.status"}\n')
    out = Sink()
    with os.fdopen(read_fd, "rb") as reader:
        session = demo_session(MemoryRecord())
        await serve_stdio(session, reader, out, max_line_bytes=100)  # type: ignore[arg-type]
    refused, served = (strict_json(line + b"\n") for line in out.data.splitlines())
    assert refused["id"] is None and refused["error"]["code"] == INVALID_REQUEST
    assert refused["error"]["data"] == {"limit": 100, "size": len(long)}
    assert "longer than the limit of 100 bytes" in refused["error"]["message"]
    assert served["id"] == 2 and "result" in served


class Endless:
    """A stream of status requests, one per read, counting the reads."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.reads = 0

    def fileno(self) -> int:
        raise OSError("not a file")

    def read(self, size: int) -> bytes:
        if self.reads == self.count:
            return b""
        self.reads += 1
        return b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.status"}\n'


async def test_the_reader_stops_reading_while_its_budget_of_waiting_lines_is_spent() -> None:
    """Issue 14 backpressure: with 3 lines waiting and none taken, stdin is read no further."""
    stream = Endless(1000)
    budget = _Budget(3, 1 << 20)
    lines = _lines(stream, budget=budget)  # type: ignore[arg-type]
    await anext(lines)  # one line taken (and still being handled): the reader fills the rest
    assert await asyncio.to_thread(budget.stalled.wait, 30)
    assert stream.reads == 4  # three waiting lines and one that waits for room
    rest = [line async for line in lines]
    assert len(rest) == 999 and stream.reads == 1000


def test_the_byte_budget_lets_one_line_through_even_when_it_is_larger() -> None:
    """A line as big as the byte budget passes when nothing waits, so the reader never deadlocks."""
    budget = _Budget(8, 10)
    budget.take(25)
    assert not budget.stalled.is_set()
    budget.give(25)
    budget.take(6)
    budget.take(4)
    assert not budget.stalled.is_set()


async def test_throttle_waits_while_the_running_requests_reach_the_limit() -> None:
    """Issue 14 backpressure: no new line is taken while `limit` requests run."""
    gate = Gate()
    wire = Wire(Session(MemoryRecord(), FunctionProvider(gate.answer), window=4096, env={}))
    await wire.server.handle_line(
        b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"input":"a"}}'
    )
    await wire.server.throttle(2)  # one running: room for another
    waiting = asyncio.ensure_future(wire.server.throttle(1))
    await gate.started.wait()
    assert not waiting.done()
    gate.opened.set()
    await waiting
    assert strict_json(wire.lines[-1])["id"] == 1


@pytest.mark.slow
def test_the_serve_process_exits_cleanly_when_the_host_stops_reading(tmp_path: Path) -> None:
    """Issue 14: a closed stdout ends `serve` with status 0 while stdin is still open (no abort)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "steerable_compaction", "serve", "--record", str(tmp_path / "r")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.status"}\n')
        proc.stdin.flush()
        assert "result" in strict_json(proc.stdout.readline())
        proc.stdout.close()
        proc.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.status"}\n')
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdin.close()
        proc.stderr.close()


@pytest.mark.parametrize("key", ["max_line_bytes", "max_queued_lines", "max_tasks"])
async def test_a_limit_below_one_is_a_config_error(key: str) -> None:
    """Each stdio limit must be at least 1; the error names it."""
    with pytest.raises(ConfigError, match=f"{key}=0 is not allowed"):
        await serve_stdio(demo_session(MemoryRecord()), Sink(), Sink(), **{key: 0})  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_serve_process_hosts_named_sessions_in_its_record_dir(tmp_path: Path) -> None:
    """`--record-dir`: one record per session id, kept across restarts; `--max-sessions` holds."""
    args = ["--record", str(tmp_path / "main.jsonl"), "--record-dir", str(tmp_path / "s")]
    first = Process(*args, "--max-sessions", "2")
    try:
        first.send(
            '{"jsonrpc":"2.0","id":1,"method":"agent.chat.send",'
            '"params":{"session":"a","input":"Look (read 1 files)."}}'
        )
        notes, done = first.until_response(1)
        assert done["result"]["session"] == "a" and done["result"]["stop"] == "answered"
        assert {n["params"]["session"] for n in notes} == {"a"}
        first.send('{"jsonrpc":"2.0","id":2,"method":"agent.chat.status","params":{"session":"b"}}')
        assert first.until_response(2)[1]["error"]["code"] == UNKNOWN_SESSION
        first.send(
            '{"jsonrpc":"2.0","id":3,"method":"agent.chat.seed",'
            '"params":{"session":"b","messages":[]}}'
        )
        assert first.until_response(3)[1]["error"]["code"] == TOO_MANY_SESSIONS
        assert first.proc.stdin is not None
        first.proc.stdin.close()
        assert first.proc.wait(timeout=30) == 0
    finally:
        first.close()
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["a.jsonl", "a.jsonl.mark"]
    second = Process(*args)
    try:
        second.send(
            '{"jsonrpc":"2.0","id":1,"method":"agent.chat.status","params":{"session":"a"}}'
        )
        status = second.until_response(1)[1]["result"]
        assert status["session"] == "a" and status["messages"] == 6
        assert status["record"] == str(tmp_path / "s" / "a.jsonl")
        second.send('{"jsonrpc":"2.0","id":2,"method":"agent.chat.status"}')
        assert second.until_response(2)[1]["result"]["messages"] == 0
    finally:
        second.close()
