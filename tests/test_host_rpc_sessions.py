"""Several sessions over one JSON-RPC server (issue 19 item 3): ids, isolation, limits, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction.host.protocol import (
    BUSY,
    INVALID_PARAMS,
    SESSION_UNAVAILABLE,
    TOO_MANY_SESSIONS,
    UNKNOWN_SESSION,
)
from steerable_compaction.host.session import Session
from steerable_compaction.host.sessions import Sessions
from steerable_compaction.record import JsonlRecord, MemoryRecord, Record
from steerable_compaction.testing import FunctionProvider

from .host_helpers import Gate, Json, Wire, demo_session, events, strict_json


def files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def wire(tmp_path: Path, *, max_sessions: int = 16, **kwargs: Any) -> Wire:
    sessions = Sessions(
        demo_session(MemoryRecord(), **kwargs),
        directory=tmp_path,
        open_session=lambda record: demo_session(record, **kwargs),
        max_sessions=max_sessions,
    )
    return Wire(sessions)


async def test_named_sessions_keep_separate_records_and_say_whose_each_event_is(
    tmp_path: Path,
) -> None:
    """Each id has its own record; its results and events carry `session` (the default's do not)."""
    w = wire(tmp_path)
    a = await w.call("agent.chat.send", {"session": "a", "input": "Look (read 2 files)."})
    b = await w.call("agent.chat.send", {"session": "b", "input": "Look (read 1 files)."})
    plain = await w.call("agent.chat.send", {"input": "hi (read 1 files)"})
    assert a[-1]["result"]["session"] == "a" and b[-1]["result"]["session"] == "b"
    assert all(e["session"] == "a" for e in events(a)) and events(a)
    assert all(e["session"] == "b" for e in events(b))
    assert all("session" not in e for e in events(plain)) and "session" not in plain[-1]["result"]
    with JsonlRecord(tmp_path / "a.jsonl", readonly=True) as record_a:
        assert record_a.message_count == 8  # input, 3 calls and results, reply
    assert (await w.result("agent.chat.status", {"session": "b"}))["messages"] == 6
    assert (await w.result("agent.chat.status"))["messages"] == 6
    listed = await w.result("agent.session.list")
    assert listed == {"open": ["a", "b"], "max_sessions": 16, "record_dir": str(tmp_path)}


async def test_every_chat_method_takes_a_session(tmp_path: Path) -> None:
    """seed, compact, history and status address the named session, not the default one."""
    w = wire(tmp_path)
    seeded = await w.result(
        "agent.chat.seed",
        {"session": "s", "messages": [{"role": "user", "content": "x"}], "format": "openai"},
    )
    assert seeded["session"] == "s" and seeded["appended"] == 1
    history = await w.result("agent.chat.history", {"session": "s"})
    assert history["total"] == 1 and history["messages"][0]["message"]["parts"][0]["text"] == "x"
    compact = await w.result("agent.chat.compact", {"session": "s"})
    assert compact["scheduled"] is True
    status = await w.result("agent.chat.status", {"session": "s"})
    assert status["session"] == "s" and status["compact_requested"] is True
    assert (await w.result("agent.chat.status"))["compact_requested"] is False


async def test_turns_of_different_sessions_run_side_by_side(tmp_path: Path) -> None:
    """While session a's turn waits on its model, b's turn runs and answers; a stays BUSY."""
    gate = Gate()

    def open_session(record: Record) -> Session:
        provider = (
            FunctionProvider(gate.answer)
            if record.path == tmp_path / "a.jsonl"
            else (FunctionProvider(lambda request: "b done"))
        )
        return Session(record, provider, window=4096, env={})

    sessions = Sessions(demo_session(MemoryRecord()), directory=tmp_path, open_session=open_session)
    w = Wire(sessions)
    server = w.server
    await server.handle_line(
        b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"session":"a","input":"x"}}'
    )
    await gate.started.wait()
    start = len(w.lines)
    await server.handle_line(
        b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.send","params":{"session":"b","input":"y"}}'
    )
    await server.handle_line(
        b'{"jsonrpc":"2.0","id":3,"method":"agent.chat.send","params":{"session":"a","input":"z"}}'
    )
    for _ in range(10_000):  # b's turn finishes in a few loop passes; a bound, not a timer
        if any(strict_json(line).get("id") == 2 for line in w.lines[start:]):
            break
        await asyncio.sleep(0)
    replies = {r["id"]: r for r in map(strict_json, w.lines[start:]) if "id" in r}
    assert replies[2]["result"]["reply"] == "b done"
    assert replies[3]["error"]["code"] == BUSY
    assert 1 not in replies
    gate.opened.set()
    await server.drain()
    assert strict_json(w.lines[-1])["result"]["reply"] == "done"


@pytest.mark.parametrize(
    "method", ["agent.chat.status", "agent.chat.history", "agent.chat.compact"]
)
async def test_a_session_that_does_not_exist_is_unknown_to_readers(
    method: str, tmp_path: Path
) -> None:
    """Only send and seed create a session; the others get UNKNOWN_SESSION and create nothing."""
    w = wire(tmp_path)
    error = await w.error(method, {"session": "ghost"})
    assert error["code"] == UNKNOWN_SESSION and error["data"] == {"session": "ghost"}
    assert "no such session" in error["message"]
    assert files(tmp_path) == []


async def test_without_a_record_dir_only_the_default_session_exists() -> None:
    """A server over one session answers any session id with UNKNOWN_SESSION naming the flag."""
    w = Wire(demo_session(MemoryRecord()))
    error = await w.error("agent.chat.send", {"session": "a", "input": "hi"})
    assert error["code"] == UNKNOWN_SESSION and "--record-dir" in error["message"]
    assert (await w.result("agent.session.list"))["record_dir"] is None


@pytest.mark.parametrize(
    ("session", "fragment"),
    [
        ("../escape", "1 to 64 characters"),
        ("a.jsonl", "1 to 64 characters"),
        ("", "1 to 64 characters"),
        ("x" * 65, "1 to 64 characters"),
        (5, "session must be a string"),
        (["a"], "session must be a string"),
    ],
)
async def test_a_malformed_session_id_is_invalid_params(
    session: object, fragment: str, tmp_path: Path
) -> None:
    """A session id that is not a plain name is INVALID_PARAMS naming `session`; no file appears."""
    w = wire(tmp_path)
    for method in ("agent.chat.send", "agent.chat.status", "agent.session.close"):
        params: Json = {"session": session}
        if method == "agent.chat.send":
            params["input"] = "hi"
        error = await w.error(method, params)
        assert error["code"] == INVALID_PARAMS and fragment in error["message"]
        assert error["data"] == {"param": "session"}
    assert files(tmp_path) == []


async def test_bad_params_for_a_new_session_create_nothing(tmp_path: Path) -> None:
    """Params are checked before a session is opened, so a refused request leaves no record."""
    w = wire(tmp_path)
    error = await w.error("agent.chat.send", {"session": "new", "input": "  "})
    assert error["code"] == INVALID_PARAMS and "input must not be empty" in error["message"]
    assert files(tmp_path) == []


async def test_too_many_sessions_is_a_named_error_until_one_closes(tmp_path: Path) -> None:
    """Past `max_sessions` (default one included) a new session gets TOO_MANY_SESSIONS."""
    w = wire(tmp_path, max_sessions=2)
    await w.result("agent.chat.seed", {"session": "a", "messages": []})
    error = await w.error("agent.chat.seed", {"session": "b", "messages": []})
    assert error["code"] == TOO_MANY_SESSIONS
    assert error["data"] == {"session": "b", "limit": 2}
    assert "agent.session.close" in error["message"]
    assert await w.result("agent.session.close", {"session": "a"}) == {
        "session": "a",
        "closed": True,
    }
    assert (await w.result("agent.chat.seed", {"session": "b", "messages": []}))["appended"] == 0


async def test_closing_a_session_is_refused_while_it_runs_and_for_unknown_ids(
    tmp_path: Path,
) -> None:
    """close: BUSY during a turn, UNKNOWN_SESSION for no record, `closed: false` when stored."""
    gate = Gate()
    sessions = Sessions(
        demo_session(MemoryRecord()),
        directory=tmp_path,
        open_session=lambda record: Session(
            record, FunctionProvider(gate.answer), window=4096, env={}
        ),
    )
    w = Wire(sessions)
    await w.server.handle_line(
        b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"session":"a","input":"x"}}'
    )
    await gate.started.wait()
    busy = await w.now("agent.session.close", {"session": "a"})
    assert busy["error"]["code"] == BUSY
    gate.opened.set()
    await w.server.drain()
    assert (await w.result("agent.session.close", {"session": "a"}))["closed"] is True
    assert (await w.result("agent.session.close", {"session": "a"}))["closed"] is False
    unknown = await w.error("agent.session.close", {"session": "zz"})
    assert unknown["code"] == UNKNOWN_SESSION
    default = await w.error("agent.session.close", {})
    assert default["code"] == INVALID_PARAMS and "default session" in default["message"]


async def test_a_session_whose_record_is_held_elsewhere_is_unavailable(tmp_path: Path) -> None:
    """Another writer on the session's record: SESSION_UNAVAILABLE naming RecordLockedError."""
    w = wire(tmp_path)
    with JsonlRecord(tmp_path / "a.jsonl"):
        error = await w.error("agent.chat.status", {"session": "a"})
    assert error["code"] == SESSION_UNAVAILABLE
    assert error["data"] == {"session": "a", "error": "RecordLockedError"}
    assert (await w.result("agent.chat.status", {"session": "a"}))["messages"] == 0


async def test_a_batch_addresses_each_request_to_its_own_session(tmp_path: Path) -> None:
    """Inside a batch each item resolves its own session; an unknown one fails alone."""
    w = wire(tmp_path)
    (answer,) = await w.raw(
        b'[{"jsonrpc":"2.0","id":1,"method":"agent.chat.seed",'
        b'"params":{"session":"a","messages":[]}},'
        b'{"jsonrpc":"2.0","id":2,"method":"agent.chat.status","params":{"session":"nope"}},'
        b'{"jsonrpc":"2.0","id":3,"method":"agent.chat.status","params":{"session":"a"}}]'
    )
    assert [r["id"] for r in answer] == [1, 2, 3]
    assert answer[0]["result"]["session"] == "a"
    assert answer[1]["error"]["code"] == UNKNOWN_SESSION
    assert answer[2]["result"]["session"] == "a"
