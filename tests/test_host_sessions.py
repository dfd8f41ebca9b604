from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from steerable_compaction import Message
from steerable_compaction.errors import ConfigError, RecordLockedError
from steerable_compaction.host.session import Session
from steerable_compaction.host.sessions import (
    SessionError,
    Sessions,
    check_session_id,
    record_location,
)
from steerable_compaction.record import JsonlRecord, MemoryRecord, Record

from .host_helpers import demo_session


def pool(tmp_path: Path, *, max_sessions: int = 16) -> Sessions:
    return Sessions(
        demo_session(MemoryRecord()),
        directory=tmp_path / "sessions",
        open_session=demo_session,
        max_sessions=max_sessions,
    )


@pytest.mark.parametrize(
    "session_id", ["a", "A-b_9", "0" * 64, "550e8400-e29b-41d4-a716-446655440000"]
)
def test_a_session_id_is_a_plain_file_name(session_id: str, tmp_path: Path) -> None:
    """Ids of 1-64 characters from `A-Z a-z 0-9 _ -` pass and map to `<dir>/<id>.jsonl`."""
    assert check_session_id(session_id) == session_id
    assert record_location(tmp_path, session_id) == tmp_path / f"{session_id}.jsonl"


@pytest.mark.parametrize(
    "session_id", ["", "a/b", "..", ".", "a.b", "a b", "0" * 65, "é", "\ud800", "a\n", "/etc"]
)
def test_a_malformed_session_id_is_refused_before_any_path_is_built(
    session_id: str, tmp_path: Path
) -> None:
    """Anything else (paths, dots, spaces, non-ASCII, too long) is a `malformed` SessionError."""
    with pytest.raises(SessionError) as caught:
        record_location(tmp_path, session_id)
    assert caught.value.kind == "malformed" and caught.value.session == session_id
    with pytest.raises(SessionError, match="1 to 64 characters"):
        pool(tmp_path).get(session_id, create=True)
    assert not any((tmp_path / "sessions").iterdir())


def test_no_id_is_the_default_session(tmp_path: Path) -> None:
    """`get(None)` is the default session, whatever `create` says; it is never counted as named."""
    sessions = pool(tmp_path)
    assert sessions.get(None) is sessions.default
    assert sessions.get(None, create=True) is sessions.default
    assert sessions.open_ids == []


def test_without_a_directory_every_named_session_is_unknown() -> None:
    """A sidecar without `--record-dir` hosts only its default session."""
    sessions = Sessions(demo_session(MemoryRecord()))
    with pytest.raises(SessionError, match="--record-dir") as caught:
        sessions.get("a", create=True)
    assert caught.value.kind == "unknown"
    with pytest.raises(SessionError, match="no such session"):
        sessions.close("a")


def test_a_named_session_is_created_only_when_asked_and_then_reused(tmp_path: Path) -> None:
    """Without `create` a missing session is unknown (no file appears); with it, it is opened."""
    sessions = pool(tmp_path)
    with pytest.raises(SessionError, match="no such session") as caught:
        sessions.get("a")
    assert caught.value.kind == "unknown"
    assert not (tmp_path / "sessions" / "a.jsonl").exists()
    a = sessions.get("a", create=True)
    assert a.record.path == tmp_path / "sessions" / "a.jsonl"
    assert sessions.get("a") is a and sessions.find("a") is a and sessions.open_ids == ["a"]
    assert sessions.find("b") is None


def test_a_stored_session_opens_again_with_what_it_recorded(tmp_path: Path) -> None:
    """Closing keeps the record; the next `get` (no `create` needed) reopens it as it was."""
    sessions = pool(tmp_path)
    sessions.get("a", create=True).record.append_message(Message.user("kept"))
    assert sessions.close("a") is True
    assert sessions.find("a") is None
    assert sessions.close("a") is False  # stored, not open
    again = sessions.get("a")
    assert [m.text for m in again.record.messages()] == ["kept"]
    sessions.close_all()


def test_the_open_session_limit_counts_the_default_one(tmp_path: Path) -> None:
    """With `max_sessions=3`, two named sessions open beside the default; a third is `too_many`."""
    sessions = pool(tmp_path, max_sessions=3)
    sessions.get("a", create=True)
    sessions.get("b", create=True)
    with pytest.raises(SessionError, match="3 sessions are open") as caught:
        sessions.get("c", create=True)
    assert caught.value.kind == "too_many"
    assert not (tmp_path / "sessions" / "c.jsonl").exists()
    sessions.close("a")
    assert sessions.get("c", create=True) is sessions.find("c")
    sessions.close_all()


def test_a_record_another_writer_holds_is_unavailable(tmp_path: Path) -> None:
    """A session whose record is locked elsewhere is `unavailable`, caused by RecordLockedError."""
    sessions = pool(tmp_path)
    with JsonlRecord(record_location(tmp_path / "sessions", "a")):
        with pytest.raises(SessionError) as caught:
            sessions.get("a", create=True)
    assert caught.value.kind == "unavailable"
    assert isinstance(caught.value.__cause__, RecordLockedError)
    assert sessions.open_ids == []


def test_a_failing_session_factory_releases_the_record(tmp_path: Path) -> None:
    """If assembling the session fails, its record is closed (its lock released) and not kept."""
    opened: list[Record] = []

    def broken(record: Record) -> Session:
        opened.append(record)
        raise ConfigError("harness", "x", "a harness that loads")

    sessions = Sessions(
        demo_session(MemoryRecord()), directory=tmp_path, open_session=broken, max_sessions=4
    )
    with pytest.raises(ConfigError):
        sessions.get("a", create=True)
    assert opened[0].closed and sessions.open_ids == []
    with JsonlRecord(tmp_path / "a.jsonl"):  # the lock is free again
        pass


def test_close_all_closes_every_named_record(tmp_path: Path) -> None:
    """Leaving the `with` block closes the named sessions' records, not the default one."""
    with pool(tmp_path) as sessions:
        records = [sessions.get(name, create=True).record for name in ("a", "b")]
    assert all(record.closed for record in records)
    assert sessions.open_ids == [] and not sessions.default.record.closed


def test_bad_configuration_is_a_config_error(tmp_path: Path) -> None:
    """A limit below 1, a directory without a factory, or a file as directory: ConfigError."""
    default = demo_session(MemoryRecord())
    with pytest.raises(ConfigError, match="max_sessions=0"):
        Sessions(default, max_sessions=0)
    with pytest.raises(ConfigError, match="open_session"):
        Sessions(default, directory=tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="record_dir"):
        Sessions(default, directory=tmp_path / "file", open_session=demo_session)


def test_session_error_pickles_with_its_attributes() -> None:
    """A SessionError crosses process boundaries whole."""
    error = pickle.loads(pickle.dumps(SessionError("too_many", "a", "limit")))
    assert (error.kind, error.session, error.reason) == ("too_many", "a", "limit")
    assert str(error) == "session 'a': limit"
