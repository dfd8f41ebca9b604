from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import Message, RecordError
from steerable_compaction.messages import message_to_dict
from steerable_compaction.record import Entry, MessageAppended, SqliteRecord
from steerable_compaction.record.sqlite import APPLICATION_ID

from .record_sessions import small_session, write


@pytest.mark.parametrize(
    ("policy", "level"), [("every_event", 2), ("every_boundary", 1), ("never", 0)]
)
def test_sqlite_synchronous_level_follows_the_policy(
    tmp_path: Path, policy: str, level: int
) -> None:
    """SQLite commits with synchronous FULL/NORMAL/OFF for every_event/every_boundary/never."""
    record = SqliteRecord(tmp_path / "r.db", fsync=policy)  # type: ignore[arg-type]
    with record:
        conn = record._conn  # the pragma is the behaviour under test
        assert conn is not None
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sqlite_rejects_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    """Opening garbage as SQLite raises `RecordError` and leaves the file as it was."""
    path = tmp_path / "r.db"
    path.write_bytes(b"definitely not sqlite" * 100)
    for readonly in (True, False):
        with pytest.raises(RecordError, match="not a readable SQLite record"):
            SqliteRecord(path, readonly=readonly)
    assert path.read_bytes() == b"definitely not sqlite" * 100


def test_sqlite_corrupt_row_names_its_seq(tmp_path: Path) -> None:
    """A bad row raises `RecordError` whose `line` is the row's seq."""
    path = tmp_path / "r.db"
    write(SqliteRecord, path, small_session()[:3])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET body = '{broken' WHERE seq = 1")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="not valid JSON") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == 1
    conn = sqlite3.connect(path)
    conn.execute("""UPDATE events SET body = '{"v":3,"seq":1,"kind":"nope"}' WHERE seq = 1""")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="unknown kind") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == 1


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def _v3_database(path: Path, count: int) -> Path:
    """A record as schema v3 wrote it: one `events` table, no checksums, no mark."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    for i in range(count):
        body = {
            "v": 3,
            "seq": i,
            "kind": "message",
            "message": message_to_dict(Message.user(f"{i}")),
        }
        conn.execute("INSERT INTO events VALUES (?, ?)", (i, json.dumps(body)))
    conn.commit()
    conn.close()
    return path


# -- every failure is a RecordError (issue 14, item 4) --------------------------------------------


def test_a_null_or_non_text_body_is_a_record_error_naming_the_row(tmp_path: Path) -> None:
    """A row whose body is NULL (or a number) raises `RecordError` with its seq, not TypeError."""
    path = tmp_path / "r.db"
    write(SqliteRecord, path, small_session()[:3])
    _sql(
        path,
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'body TEXT NOT NULL', 'body TEXT') "
        "WHERE name = 'events'",
    )
    _sql(path, "UPDATE events SET body = NULL WHERE seq = 1")
    with pytest.raises(RecordError, match="no body") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == 1
    _sql(path, "UPDATE events SET body = 7 WHERE seq = 1")
    with pytest.raises(RecordError, match="must be a JSON object") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == 1


def test_a_row_someone_else_appended_is_a_record_error_naming_it(tmp_path: Path) -> None:
    """An insert that collides with a row written behind the writer's back names that row."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        record.append(MessageAppended(message=Message.user("mine")))
        _sql(path, "INSERT INTO events (seq, body) VALUES (1, '{}')")
        with pytest.raises(RecordError, match="row 1 already exists") as info:
            record.append(MessageAppended(message=Message.user("collides")))
        assert info.value.line == 1
        assert len(record) == 1


def test_a_deleted_lock_file_stops_the_first_writer_before_it_collides(tmp_path: Path) -> None:
    """Deleting `.writer-lock` lets a second writer in: the first one stops at its next append."""
    path = tmp_path / "r.db"
    first = SqliteRecord(path)
    try:
        first.append(MessageAppended(message=Message.user("one")))
        (tmp_path / "r.db.writer-lock").unlink()
        with SqliteRecord(path) as second:
            second.append(MessageAppended(message=Message.user("two")))
            with pytest.raises(RecordError, match="writer lock file was deleted or replaced"):
                first.append(MessageAppended(message=Message.user("would collide")))
            second.append(MessageAppended(message=Message.user("three")))
    finally:
        first.close()
    with SqliteRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["one", "two", "three"]


def test_appending_after_the_database_was_deleted_is_an_error(tmp_path: Path) -> None:
    """A deleted (or replaced) database: the next append raises instead of writing nowhere."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        record.append(MessageAppended(message=Message.user("kept")))
        path.unlink()
        with pytest.raises(RecordError, match="deleted or replaced"):
            record.append(MessageAppended(message=Message.user("lost")))
        assert len(record) == 1


# -- checksums and the row count (issue 14, item 5) -----------------------------------------------


def test_a_changed_body_fails_its_checksum_naming_the_row(tmp_path: Path) -> None:
    """A body edited in place (still valid JSON) is found on a full open, or on first use.

    Rows before the checkpoint are checked when they are first read (issue 28).
    """
    path = tmp_path / "r.db"
    write(SqliteRecord, path, small_session())
    _sql(path, "UPDATE events SET body = replace(body, 'f2.py', 'f3.py') WHERE seq = 1")
    with pytest.raises(RecordError, match="checksum mismatch") as info:
        SqliteRecord(path, readonly=True, full=True)
    assert info.value.line == 1
    with SqliteRecord(path, readonly=True) as resumed:
        assert resumed.resumed_at is not None
        with pytest.raises(RecordError, match="checksum mismatch") as info:
            resumed.entries[0]
        assert info.value.line == 1


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)",
        "UPDATE meta SET value = value + 1",
        "DELETE FROM meta",
    ],
)
def test_rows_lost_or_a_wrong_count_are_found_on_open(tmp_path: Path, damage: str) -> None:
    """The count kept with the rows catches a lost final row (no gap to see otherwise)."""
    path = tmp_path / "r.db"
    write(SqliteRecord, path, small_session())
    _sql(path, damage)
    with pytest.raises(RecordError, match="rows were lost"):
        SqliteRecord(path, readonly=True)


@pytest.mark.parametrize("policy", ["every_event", "every_boundary", "never"])
def test_the_count_never_runs_ahead_of_the_rows(tmp_path: Path, policy: str) -> None:
    """The count is written with durable events, batches and on close: never above the rows.

    Rows past it are messages appended since (a crash before the next boundary leaves them so),
    and load; a count of 0 with rows present loads them all.
    """
    path = tmp_path / "r.db"
    with SqliteRecord(path, fsync=policy) as record:  # type: ignore[arg-type]
        for event in small_session()[:3]:
            record.append(event)
        assert _count(path) <= 3
    assert _count(path) == 3
    _sql(path, "UPDATE meta SET value = 0")
    with SqliteRecord(path, readonly=True) as again:
        assert len(again) == 3


def _count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT value FROM meta WHERE key = 'events'").fetchone()[0])
    finally:
        conn.close()


def test_a_database_written_before_checksums_loads_and_a_writer_marks_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A v3 database loads unchecked (logged); a writer adds the mark and the row count."""
    path = tmp_path / "r.db"
    _v3_database(path, 3)
    with caplog.at_level(logging.INFO, logger="steerable_compaction.record"):
        with SqliteRecord(path, readonly=True) as reader:
            assert [m.text for m in reader.messages()] == ["0", "1", "2"]
        assert "3 entries predate checksums" in caplog.text
        with SqliteRecord(path) as writer:
            writer.append(MessageAppended(message=Message.user("3")))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("SELECT value FROM meta WHERE key = 'events'").fetchone()[0] == 4
    conn.close()
    with SqliteRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["0", "1", "2", "3"]


# -- databases that are not records (issue 14, item 6) --------------------------------------------


def _foreign(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('keep me')")
    conn.commit()
    conn.close()
    os.chmod(path, 0o644)


@pytest.mark.parametrize(
    "make",
    [
        _foreign,
        lambda path: _sql(path, "CREATE TABLE events (seq INTEGER PRIMARY KEY, body BLOB)"),
        lambda path: _sql(_v3_database(path, 1), "CREATE TABLE extra (x)"),
        lambda path: _sql(path, "PRAGMA application_id = 7", "CREATE TABLE events (x)"),
    ],
)
@pytest.mark.parametrize("readonly", [True, False])
def test_a_database_that_is_not_a_record_is_refused_and_left_exactly_as_it_was(
    tmp_path: Path, make: Callable[[Path], object], readonly: bool
) -> None:
    """No table added, no WAL switch, no chmod: the file's bytes and mode stay as they were."""
    path = tmp_path / "other.db"
    make(path)
    os.chmod(path, 0o644)
    before = path.read_bytes()
    with pytest.raises(RecordError, match="not a record") as info:
        SqliteRecord(path, readonly=readonly)
    assert info.value.path == path
    assert path.read_bytes() == before
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert not (tmp_path / "other.db-wal").exists()


def test_an_empty_file_is_no_record_to_read_but_a_writer_may_start_one(tmp_path: Path) -> None:
    """A zero-byte file holds no record: readers refuse it, a writer creates the record in it."""
    path = tmp_path / "new.db"
    path.touch()
    with pytest.raises(RecordError, match="not a record"):
        SqliteRecord(path, readonly=True)
    write(SqliteRecord, path, small_session()[:2])
    with SqliteRecord(path, readonly=True) as again:
        assert len(again) == 2


def test_an_append_sqlite_refuses_is_a_record_error_naming_the_row(tmp_path: Path) -> None:
    """A table dropped under the writer: the append raises `RecordError`, nothing is kept."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        record.append(MessageAppended(message=Message.user("one")))
        _sql(path, "DROP TABLE events")
        with pytest.raises(RecordError, match="cannot append: no such table") as info:
            record.append(MessageAppended(message=Message.user("two")))
        assert (info.value.line, len(record)) == (1, 1)


def test_a_batch_with_a_durable_event_syncs_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """every_boundary: a batch holding a boundary syncs the write-ahead log after its commit."""
    synced: list[int] = []

    def spy(fd: int) -> None:
        synced.append(fd)
        os.fsync(fd)

    monkeypatch.setattr("steerable_compaction.record.sqlite.sync", spy)
    with SqliteRecord(tmp_path / "r.db") as record:
        with record.batch():
            pass  # nothing to commit
        with record.batch():
            record.append(MessageAppended(message=Message.user("no sync")))
        assert synced == []
        with record.batch():
            for event in small_session()[:8]:  # seven messages and a fold boundary
                record.append(event)
        assert len(synced) == 1
    with SqliteRecord(tmp_path / "r.db", readonly=True) as again:
        assert len(again) == 9


class _DropsItsCount(SqliteRecord):
    """A store whose hook removes the row count inside the transaction (a broken extension)."""

    def _on_append(self, entry: Entry) -> None:
        assert self._conn is not None
        self._conn.execute("DROP TABLE IF EXISTS meta")


def test_a_batch_that_cannot_commit_fails_and_stops_the_writer(tmp_path: Path) -> None:
    """A failed group commit rolls back, raises and refuses later appends.

    Closing does not bring the count up to the lost rows either.
    """
    path = tmp_path / "r.db"
    record = _DropsItsCount(path)
    with pytest.raises(RecordError, match="cannot commit: no such table: meta"), record.batch():
        record.append(MessageAppended(message=Message.user("lost")))
    with pytest.raises(RecordError, match="a group commit failed"):
        record.append(MessageAppended(message=Message.user("refused")))
    record.close()
    with SqliteRecord(path, readonly=True) as again:
        assert len(again) == 0


def test_a_count_that_cannot_be_written_on_close_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing brings the count up to date; if that fails the count stays behind (logged)."""
    path = tmp_path / "r.db"
    record = SqliteRecord(path, fsync="never")
    record.append(MessageAppended(message=Message.user("counted on close")))
    _sql(path, "DROP TABLE meta")
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        record.close()
    assert "the row count stays behind" in caplog.text


def test_a_closed_writer_leaves_no_lock_file_and_the_next_writer_opens(tmp_path: Path) -> None:
    """Nothing is left behind: the lock file goes with its writer; a new writer takes a new one."""
    from steerable_compaction import Message
    from steerable_compaction.record import SqliteRecord

    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        writer.append_message(Message.user("one"))
        assert (tmp_path / "r.db.writer-lock").exists()
    assert not (tmp_path / "r.db.writer-lock").exists()
    with SqliteRecord(path) as again:
        again.append_message(Message.user("two"))
        assert [m.text for m in again.messages()] == ["one", "two"]
    assert sorted(p.name for p in tmp_path.iterdir() if "lock" in p.name) == []


# -- reading in chunks (issue 15) ----------------------------------------------------------------


@pytest.fixture
def chunks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are read two at a time, so a small session spans many chunks."""
    from steerable_compaction.record import sqlite

    monkeypatch.setattr(sqlite, "_CHUNK_ROWS", 2)


@pytest.mark.usefixtures("chunks_of_two")
def test_a_record_read_in_chunks_is_the_record_read_whole(tmp_path: Path) -> None:
    """Chunk by chunk, an open and a reader's refresh load every entry, in order."""
    path = tmp_path / "r.db"
    events = small_session()
    write(SqliteRecord, path, events[:7])
    with SqliteRecord(path, readonly=True) as reader:
        assert [entry.event for entry in reader] == events[:7]
        write(SqliteRecord, path, events[7:])
        assert reader.refresh() == len(events) - 7
        assert [entry.event for entry in reader] == events
        assert reader.projection.messages == SqliteRecord(path, readonly=True).projection.messages


@pytest.mark.usefixtures("chunks_of_two")
@pytest.mark.parametrize(
    ("damage", "match", "line"),
    [
        ("UPDATE events SET body = '{broken' WHERE seq = 5", "not valid JSON", 5),
        ("DELETE FROM events WHERE seq = 4", "seq 5 out of order: expected 4", 5),  # chunk start
        ("DELETE FROM events WHERE seq = 5", "seq 6 out of order: expected 5", 6),  # chunk end
        ("DELETE FROM events WHERE seq IN (4, 5)", "seq 6 out of order: expected 4", 6),
    ],
    ids=["broken-json", "gap-at-chunk-start", "gap-at-chunk-end", "chunk-missing"],
)
def test_damage_in_a_later_chunk_names_its_row(
    tmp_path: Path, damage: str, match: str, line: int
) -> None:
    """An old (uncounted) database, so only the rows themselves can show what is wrong."""
    path = _v3_database(tmp_path / "r.db", 9)
    _sql(path, damage)
    with pytest.raises(RecordError, match=match) as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == line


@pytest.mark.usefixtures("chunks_of_two")
def test_a_body_holding_a_newline_in_a_later_chunk_still_loads(tmp_path: Path) -> None:
    """JSON may hold a newline as whitespace: from that chunk on rows are read one by one."""
    path = _v3_database(tmp_path / "r.db", 9)
    _sql(
        path,
        "UPDATE events SET body = replace(body, '{\"v\"', '{' || char(10) || '\"v\"') "
        "WHERE seq = 5",
    )
    with SqliteRecord(path, readonly=True) as record:
        assert [m.text for m in record.messages()] == [str(i) for i in range(9)]


@pytest.mark.parametrize("chunk", [2, 2_000])
def test_a_null_body_is_named_even_beside_a_body_that_holds_the_next_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """A NULL row beside a row holding two is found, wherever the chunks fall.

    Row 3 holds rows 3 and 4 (a newline between) and row 4 is NULL: the blob's line count
    matches the rows, so only the count of bodies shows the NULL.
    """
    from steerable_compaction.record import sqlite

    monkeypatch.setattr(sqlite, "_CHUNK_ROWS", chunk)
    path = tmp_path / "r.db"
    write(SqliteRecord, path, [MessageAppended(message=Message.user(f"{i}")) for i in range(9)])
    _sql(
        path,
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'body TEXT NOT NULL', 'body TEXT') "
        "WHERE name = 'events'",
    )
    _sql(
        path,
        "UPDATE events SET body = body || char(10) || (SELECT body FROM events WHERE seq = 4) "
        "WHERE seq = 3",
        "UPDATE events SET body = NULL WHERE seq = 4",
    )
    with pytest.raises(RecordError, match="no body") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == 4


class _EndsItsTransaction(SqliteRecord):
    """A reader whose load fails after SQLite ended the read transaction (busy, I/O, memory)."""

    def _load_chunk(self) -> bool:
        assert self._conn is not None
        self._conn.execute("ROLLBACK")
        raise RecordError("the row at fault", path=self.file, line=3)


def test_an_error_that_ended_the_read_transaction_is_the_error_raised(tmp_path: Path) -> None:
    """Regression: the COMMIT after a failed read no longer replaces the error with its own."""
    path = _v3_database(tmp_path / "r.db", 9)
    with pytest.raises(RecordError, match="the row at fault") as info:
        _EndsItsTransaction(path, readonly=True)
    assert info.value.line == 3


class _Locked(SqliteRecord):
    """A reader whose database stays locked for the rows: every read of `events` fails."""

    statements: list[str]

    def _connect(self, where: str, *, uri: bool = False) -> sqlite3.Connection:
        real = super()._connect(where, uri=uri)
        statements = self.statements = []

        class Locked:
            in_transaction = property(lambda _: real.in_transaction)

            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                statements.append(sql)
                if "FROM events" in sql:
                    raise sqlite3.OperationalError("database is locked")
                return real.execute(sql, *args)

            def close(self) -> None:
                real.close()

        return Locked()  # type: ignore[return-value]


def test_a_locked_database_fails_at_once_without_reading_row_by_row(tmp_path: Path) -> None:
    """A read error is the open's error: it is not retried row by row (nor waited for twice).

    Only a blob larger than SQLite's largest string is read again one row at a time.
    """
    path = _v3_database(tmp_path / "r.db", 9)
    record = _Locked.__new__(_Locked)
    with pytest.raises(RecordError, match="database is locked"):
        record.__init__(path, readonly=True)  # type: ignore[misc]
    assert [sql for sql in record.statements if "FROM events" in sql] == [
        next(sql for sql in record.statements if "group_concat" in sql)
    ]
