"""`PostgresRecord` against a real server (`STEERABLE_TEST_POSTGRES`).

The store-neutral cases run in test_record_stores.py. Tests that need no server (URLs, session
ids) always run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from steerable_compaction import Message, RecordError, RecordLockedError, cli
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.errors import RecordConnectionError
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionStart,
    CompactionSummary,
    Entry,
    Event,
    MessageAppended,
    Record,
    open_record,
)
from steerable_compaction.record.codec import encode_body
from steerable_compaction.record.postgres import (
    FORMAT,
    PostgresRecord,
    sessions,
    split_session,
)

from .conftest import fresh_schema
from .crash_session import POLICY, build
from .record_sessions import NO_POSTGRES, POSTGRES_URL, in_schema, small_session

ROOT = Path(__file__).parent.parent


@pytest.fixture
def url(postgres_url: str) -> str:
    """The shared test schema (skips without a server)."""
    return postgres_url


@pytest.fixture
def empty() -> Iterator[str]:
    """A URL whose schema is new and empty (skips without a server)."""
    if POSTGRES_URL is None:
        pytest.skip(NO_POSTGRES)
    with fresh_schema(POSTGRES_URL) as url:
        yield url


def sql(url: str, *statements: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `statements` on a connection of their own (as another client would); the last's rows."""
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            cur = conn.execute(statement, params or None)
            rows = cur.fetchall() if cur.description else []
    return rows


def session() -> str:
    return "s-" + uuid.uuid4().hex[:10]


def texts(record: Record) -> list[str]:
    return [m.text for m in record.messages()]


# -- URLs and session ids (no server needed) ------------------------------------------------------


def test_the_session_rides_in_the_url_and_the_rest_goes_to_libpq() -> None:
    """`?session=` is ours: it is taken out of the URL; other parameters stay as they were."""
    assert split_session("postgresql://u@h/db?sslmode=disable&session=a%20b") == (
        "postgresql://u@h/db?sslmode=disable",
        "a b",
    )
    assert split_session("postgres://h/db") == ("postgres://h/db", None)
    assert split_session("host=h dbname=db") == ("host=h dbname=db", None)


@pytest.mark.parametrize(
    ("session", "match"),
    [("", "non-empty"), ("a\0b", "without NUL"), ("x" * 201, "at most 200")],
)
def test_a_bad_session_id_is_a_record_error_before_any_connection(session: str, match: str) -> None:
    """An empty, over-long or NUL-holding session id is refused by name."""
    with pytest.raises(RecordError, match=match):
        PostgresRecord("postgresql://127.0.0.1:1/db", session=session)


def test_two_different_sessions_named_at_once_are_refused() -> None:
    """The URL's `session=` and the `session` argument must agree."""
    with pytest.raises(RecordError, match="two sessions named"):
        PostgresRecord("postgresql://127.0.0.1:1/db?session=a", session="b")


def test_a_malformed_url_is_a_connection_error_that_hides_the_password() -> None:
    """What libpq cannot parse is a `RecordConnectionError`; no password reaches the message."""
    with pytest.raises(RecordConnectionError, match="not a PostgreSQL URL") as info:
        PostgresRecord("postgresql://me:s3cret@h/db?bogus=1")
    assert "s3cret" not in str(info.value)
    with pytest.raises(RecordConnectionError, match="not a PostgreSQL URL") as info:
        PostgresRecord("host=h password=s3cret nonsense")
    assert "s3cret" not in str(info.value)


def test_a_refused_connection_is_a_connection_error_naming_the_database() -> None:
    """Nothing listening: `RecordConnectionError` naming host, port and database, no password."""
    with pytest.raises(RecordConnectionError, match="cannot connect") as info:
        PostgresRecord("postgresql://me:s3cret@127.0.0.1:1/records", connect_timeout=2)
    assert "postgresql://me@127.0.0.1:1/records" in str(info.value)
    assert "s3cret" not in str(info.value)
    with pytest.raises(RecordConnectionError, match="cannot connect"):
        sessions("postgresql://127.0.0.1:1/records?connect_timeout=2")


def test_without_psycopg_the_import_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module needs the `postgres` extra, and says so when psycopg is missing."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "steerable_compaction.record.postgres")
    with pytest.raises(ImportError, match=r"steerable-compaction\[postgres\]"):
        importlib.import_module("steerable_compaction.record.postgres")


# -- many sessions, one database -----------------------------------------------------------------


def test_sessions_in_one_database_are_separate_records(url: str) -> None:
    """Each session has its own seqs, projection and count; `sessions()` lists them."""
    a, b = session(), session()
    with PostgresRecord(url, session=a) as first, PostgresRecord(url, session=b) as second:
        first.append_message(Message.user("for a"))
        second.append_message(Message.user("for b"))
        first.append_message(Message.user("a again"))
    with PostgresRecord(url, session=a, readonly=True) as ra:
        assert texts(ra) == ["for a", "a again"]
        assert [e.seq for e in ra.entries] == [0, 1]
    with PostgresRecord(url, session=b, readonly=True) as rb:
        assert texts(rb) == ["for b"]
    listed = sessions(url)
    assert (listed[a], listed[b]) == (2, 1)


def test_reopening_resumes_where_the_record_ends(url: str) -> None:
    """A new writer continues the seqs; the projection carries on as if never closed."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        for event in small_session()[:9]:
            record.append(event)
    with PostgresRecord(url, session=name) as record:
        assert len(record) == 9
        entry = record.append_message(Message.assistant("resumed"))
        assert entry.seq == 9
        live = record.messages()
    with PostgresRecord(url, session=name, readonly=True) as again:
        assert again.messages() == live


def test_open_record_takes_a_postgres_url_and_location_round_trips(url: str) -> None:
    """`open_record("postgresql://...?session=x")` opens that session; `location` reopens it."""
    name = session()
    with open_record(f"{url}&session={name}") as record:
        assert isinstance(record, PostgresRecord)
        assert record.session == name
        record.append_message(Message.user("via open_record"))
        where = record.location
    assert "password" not in where and where.endswith(f"?session={name}")
    assert repr(record).startswith(f"<PostgresRecord {where} mode=a")
    # `location` keeps no options (the test's search path): name the schema again to reopen.
    schema = url.split("options=", 1)[1]
    with open_record(f"{where}&options={schema}", readonly=True) as again:
        assert texts(again) == ["via open_record"]


def test_an_empty_database_is_no_record_to_read_and_the_reader_creates_nothing(empty: str) -> None:
    """A reader of a schema without records refuses it and writes nothing; a writer creates them."""
    with pytest.raises(RecordError, match="no such record: the database holds no records"):
        PostgresRecord(empty, session="x", readonly=True)
    assert sql(empty, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == [
        (0,)
    ]
    assert sessions(empty) == {}
    with PostgresRecord(empty, session="x") as record:
        record.append_message(Message.user("first"))
    tables = sql(empty, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    assert sorted(t for (t,) in tables) == [
        "steerable_events",
        "steerable_meta",
        "steerable_sessions",
    ]
    assert sql(empty, "SELECT value FROM steerable_meta WHERE key = 'format'") == [(FORMAT,)]


def test_a_search_path_naming_no_schema_is_an_error(url: str) -> None:
    """With no schema to hold the tables, opening says so instead of failing on a CREATE."""
    assert POSTGRES_URL is not None
    nowhere = in_schema(POSTGRES_URL, "no_such_schema_here")
    with pytest.raises(RecordError, match="no schema to hold the record"):
        PostgresRecord(nowhere, session="x")


# -- a database that is not a record --------------------------------------------------------------


FOREIGN = [
    "CREATE TABLE steerable_events (id serial PRIMARY KEY, payload json)",
    "CREATE TABLE steerable_meta (key text PRIMARY KEY, value text NOT NULL); "
    "CREATE TABLE steerable_sessions (session text PRIMARY KEY, events bigint NOT NULL); "
    "CREATE TABLE steerable_events (session text NOT NULL, seq bigint NOT NULL, body text)",
    "CREATE TABLE steerable_meta (key text PRIMARY KEY, value text NOT NULL); "
    "CREATE TABLE steerable_sessions (session text PRIMARY KEY, events bigint NOT NULL); "
    "CREATE TABLE steerable_events (session text NOT NULL, seq bigint NOT NULL, "
    "body bytea NOT NULL); INSERT INTO steerable_meta VALUES ('format', 'someone else')",
    "CREATE TABLE steerable_meta (key text PRIMARY KEY, value text NOT NULL); "
    "CREATE TABLE steerable_sessions (session text PRIMARY KEY, events bigint NOT NULL); "
    "CREATE TABLE steerable_events (session text NOT NULL, seq bigint NOT NULL, body text); "
    f"INSERT INTO steerable_meta VALUES ('format', '{FORMAT}'), ('version', '1')",
    "CREATE TABLE steerable_meta (key text PRIMARY KEY, value text NOT NULL); "
    "CREATE TABLE steerable_sessions (session text PRIMARY KEY, events bigint NOT NULL); "
    "CREATE VIEW steerable_events AS SELECT session, 0::bigint AS seq, ''::bytea AS body "
    "FROM steerable_sessions",
]


@pytest.mark.parametrize("foreign", FOREIGN, ids=["other", "shape", "format", "columns", "view"])
@pytest.mark.parametrize("readonly", [True, False])
def test_a_database_that_is_not_a_record_is_refused_before_anything_is_written(
    empty: str, foreign: str, readonly: bool
) -> None:
    """Tables of our names in another shape: `RecordError` naming the table, nothing changed."""
    sql(empty, foreign)
    snapshot = (
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
        "WHERE n.nspname = current_schema() AND a.attnum > 0 ORDER BY 1, 2"
    )
    before = sql(empty, snapshot)
    with pytest.raises(RecordError, match="not a record"):
        PostgresRecord(empty, session="x", readonly=readonly)
    assert sql(empty, snapshot) == before


def test_tables_of_a_newer_version_are_refused(empty: str) -> None:
    """A layout this version does not know is named, not misread."""
    with PostgresRecord(empty, session="x"):
        pass
    sql(empty, "UPDATE steerable_meta SET value = '2' WHERE key = 'version'")
    with pytest.raises(RecordError, match="newer steerable-compaction"):
        PostgresRecord(empty, session="x", readonly=True)


# -- checksums and the count ----------------------------------------------------------------------


@pytest.mark.slow
def test_every_flipped_byte_of_a_row_is_found(url: str) -> None:
    """Flip each byte of a row in turn (low bit, or all bits, alternately): always refused."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        for event in small_session():
            record.append(event)
        expected = list(record.entries)
    select = "SELECT body FROM steerable_events WHERE session = %s AND seq = 3"
    body = bytes(sql(url, select, params=(name,))[0][0])
    refused = 0
    update = "UPDATE steerable_events SET body = %s WHERE session = %s AND seq = 3"
    with psycopg.connect(url, autocommit=True) as conn:
        for at in range(len(body)):
            mask = 0x01 if at % 2 else 0xFF
            flipped = body[:at] + bytes([body[at] ^ mask]) + body[at + 1 :]
            conn.execute(update, (flipped, name))
            try:
                with PostgresRecord(url, session=name, readonly=True) as again:
                    assert list(again.entries) == expected, (at, mask)
            except RecordError as exc:
                assert exc.line == 3, (at, mask, str(exc))
                refused += 1
        conn.execute(update, (body, name))
    assert refused == len(body)  # every flip of a checksummed row changes what it says


def test_a_changed_row_names_its_seq(url: str) -> None:
    """A body edited in place (still valid JSON) fails its checksum, naming the row."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        for event in small_session():
            record.append(event)
    sql(
        url,
        "UPDATE steerable_events SET body = convert_to(replace(convert_from(body, 'UTF8'), "
        "'f2.py', 'f3.py'), 'UTF8') WHERE session = %s AND seq = 1",
        params=(name,),
    )
    with pytest.raises(RecordError, match="checksum mismatch") as info:
        PostgresRecord(url, session=name, readonly=True, full=True)
    assert info.value.line == 1
    with PostgresRecord(url, session=name, readonly=True) as resumed:  # checked on first use
        assert resumed.resumed_at is not None
        with pytest.raises(RecordError, match="checksum mismatch") as info:
            resumed.history()
        assert info.value.line == 1


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (
            "DELETE FROM steerable_events WHERE session = %(s)s AND seq = 13",  # the last
            "rows were lost",
        ),
        ("UPDATE steerable_sessions SET events = events + 1 WHERE session = %(s)s", "were lost"),
        ("UPDATE steerable_sessions SET events = 3 WHERE session = %(s)s", "added uncounted"),
        ("DELETE FROM steerable_events WHERE session = %(s)s AND seq = 4", "row 4 is missing"),
        (
            "UPDATE steerable_events SET body = body || decode('0a', 'hex') "
            "WHERE session = %(s)s AND seq = 5",
            "row|line|JSON|checksum",
        ),
        (
            'UPDATE steerable_events SET body = convert_to(\'{"v":3,"seq":6,"kind":"message",'
            '"message":{"role":"user","parts":[]}}\', \'UTF8\') WHERE session = %(s)s '
            "AND seq = 6",
            "v3 entry",
        ),
        (
            "UPDATE steerable_events e SET body = o.body FROM steerable_events o "
            "WHERE e.session = %(s)s AND o.session = e.session AND o.seq + e.seq = 15 "
            "AND e.seq IN (7, 8)",
            "seq 8 out of order: expected 7",
        ),
    ],
    ids=["last-row", "count-up", "count-down", "gap", "newline", "unchecked", "swapped"],
)
def test_rows_lost_added_or_altered_are_found_on_open(url: str, damage: str, match: str) -> None:
    """The count taken in the rows' snapshot catches what checksums cannot: rows gone or added.

    Resumed from the checkpoint, rows before it are checked on first use (issue 28).
    """
    name = session()
    with PostgresRecord(url, session=name) as record:
        for event in small_session():
            record.append(event)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(damage, {"s": name})
    with pytest.raises(RecordError, match=match):
        PostgresRecord(url, session=name, readonly=True, full=True)
    with pytest.raises(RecordError, match=match), contextlib.ExitStack() as stack:
        resumed = stack.enter_context(PostgresRecord(url, session=name, readonly=True))
        list(resumed.entries)


# -- one writer, and writers that went astray -----------------------------------------------------


def test_a_count_moved_by_someone_else_stops_the_writer_and_writes_nothing(url: str) -> None:
    """The count is the writer's claim: moved under it, the append writes nothing and stops it."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        record.append_message(Message.user("mine"))
        sql(url, "UPDATE steerable_sessions SET events = 5 WHERE session = %s", params=(name,))
        with pytest.raises(RecordError, match="count moved"):
            record.append_message(Message.user("refused"))
        with pytest.raises(RecordError, match="another writer appended"):
            record.append_message(Message.user("still refused"))
        assert len(record) == 1
    rows = sql(url, "SELECT seq FROM steerable_events WHERE session = %s", params=(name,))
    assert rows == [(0,)]


def test_a_count_moved_during_a_batch_or_a_hooked_append_stops_the_writer(url: str) -> None:
    """The batch's commit and a hooked append check the count too, and take back their rows."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        with record.batch():
            pass  # nothing to commit
        with pytest.raises(RecordError, match="count moved"), record.batch():
            record.append_message(Message.user("batched"))
            sql(url, "UPDATE steerable_sessions SET events = 9 WHERE session = %s", params=(name,))
    other = session()
    sql(url, "CREATE TABLE IF NOT EXISTS words (session text, seq bigint)")
    with _Hooked(url, session=other) as hooked:
        sql(url, "UPDATE steerable_sessions SET events = 9 WHERE session = %s", params=(other,))
        with pytest.raises(RecordError, match="count moved"):
            hooked.append_message(Message.user("hooked"))
    for who in (name, other):
        rows = sql(url, "SELECT count(*) FROM steerable_events WHERE session = %s", params=(who,))
        assert rows == [(0,)]


def test_a_table_dropped_under_the_writer_is_a_record_error(empty: str) -> None:
    """What the server refuses (not a broken connection) is named; nothing is kept."""
    with PostgresRecord(empty, session="x") as record:
        record.append_message(Message.user("one"))
        sql(empty, "DROP TABLE steerable_events")
        with pytest.raises(RecordError, match="the database refused") as info:
            record.append_message(Message.user("two"))
        assert (info.value.line, len(record)) == (1, 1)
    with pytest.raises(RecordError, match="not a record"):
        sessions(empty)


def test_a_row_someone_else_inserted_is_named_and_stops_the_writer(url: str) -> None:
    """An insert colliding with a row written behind the writer's back names that row."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        record.append_message(Message.user("mine"))
        sql(
            url,
            "INSERT INTO steerable_events VALUES (%s, 1, 'x'::bytea)",
            params=(name,),
        )
        with pytest.raises(RecordError, match="row 1 already exists") as info:
            record.append_message(Message.user("collides"))
        assert (info.value.line, len(record)) == (1, 1)


def test_the_lock_is_per_session_and_per_schema(url: str, empty: str) -> None:
    """Same session name in another schema is another record: its writer is not refused."""
    name = session()
    with PostgresRecord(url, session=name), PostgresRecord(empty, session=name) as other:
        other.append_message(Message.user("elsewhere"))
        with pytest.raises(RecordLockedError):
            PostgresRecord(url, session=name)


_HOLDER = """
import sys
from steerable_compaction import Message
from steerable_compaction.record.postgres import PostgresRecord
record = PostgresRecord(sys.argv[1], session=sys.argv[2])
print("locked", flush=True)
for line in sys.stdin:
    record.append_message(Message.user(line.strip()))
    print("appended", flush=True)
"""


def test_two_processes_one_session_the_second_is_refused_another_session_is_not(
    url: str,
) -> None:
    """Across processes: a second writer of a session is refused, one of another is not.

    Once the first writer is killed, a new writer of its session takes over.
    """
    name, other = session(), session()
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "locked"
            with pytest.raises(RecordLockedError, match="another writer holds this session"):
                PostgresRecord(url, session=name)
            with PostgresRecord(url, session=other) as mine:
                mine.append_message(Message.user("mine"))
                proc.stdin.write("theirs\n")
                proc.stdin.flush()
                assert proc.stdout.readline().strip() == "appended"
                mine.append_message(Message.user("mine again"))
            with PostgresRecord(url, session=name, readonly=True) as reader:
                assert texts(reader) == ["theirs"]
            with pytest.raises(RecordLockedError):  # waiting gives up when its time is over
                PostgresRecord(url, session=name, lock_timeout=0.05)
        finally:
            proc.kill()
    with PostgresRecord(url, session=name, lock_timeout=30) as successor:
        successor.append_message(Message.user("taken over"))
        assert texts(successor) == ["theirs", "taken over"]
    with PostgresRecord(url, session=other, readonly=True) as reader:
        assert texts(reader) == ["mine", "mine again"]


_WRITER = """
import sys
from steerable_compaction import Message
from steerable_compaction.record.postgres import PostgresRecord
with PostgresRecord(sys.argv[1], session=sys.argv[2]) as record:
    print("open", flush=True)
    sys.stdin.readline()
    for i in range(int(sys.argv[3])):
        if i % 10 == 9:
            with record.batch():
                record.append_message(Message.user(f"{sys.argv[2]} {i}"))
        else:
            record.append_message(Message.user(f"{sys.argv[2]} {i}"))
"""


def test_two_processes_writing_different_sessions_at_once_both_succeed(url: str) -> None:
    """Both writers hold their locks at once and interleave appends; each record is whole."""
    names, count = [session(), session()], 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, name, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    try:
        for proc in procs:  # both are open (and locked) before either writes
            assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    for name in names:
        with PostgresRecord(url, session=name, readonly=True) as reader:
            assert texts(reader) == [f"{name} {i}" for i in range(count)]


# -- broken connections ---------------------------------------------------------------------------


def _terminate(url: str, record: PostgresRecord) -> None:
    """End the record's server-side session, as a dropped network or a server restart would."""
    assert record._conn is not None  # the connection is what the test breaks
    pid = record._conn.info.backend_pid
    assert sql(url, "SELECT pg_terminate_backend(%s)", params=(pid,)) == [(True,)]


def test_a_connection_dropped_mid_compaction_is_named_and_a_reconnect_recovers(url: str) -> None:
    """Start written, connection gone: the summary raises `RecordConnectionError`.

    The writer stops, nothing half-written is visible, and a new writer resumes and recovers.
    """
    name = session()
    with PostgresRecord(url, session=name) as record:
        build(record)
        record.append(
            CompactionStart(compaction_id="k1", span=(2, 20), pre_tokens=9_000, action="summarize")
        )
        _terminate(url, record)
        with pytest.raises(RecordConnectionError, match="the connection broke"):
            record.append(CompactionSummary(compaction_id="k1", summary="paid"))
        with pytest.raises(RecordError, match="reopen the record"):
            record.append(CompactionSummary(compaction_id="k1", summary="paid"))
        ends = len(record)
    with PostgresRecord(url, session=name, readonly=True) as reader:
        assert len(reader) == ends
        assert [b.start.compaction_id for b in reader.projection.open_brackets] == ["k1"]
    with PostgresRecord(url, session=name, lock_timeout=30) as again:
        assert len(again) == ends
        CompactionHooks(again, POLICY).recover()
        assert not again.projection.open_brackets
        assert isinstance(again.entries[-1].event, CompactionAbandoned)


def test_a_connection_dropped_in_a_batch_loses_the_whole_batch(url: str) -> None:
    """A batch is one transaction: a break before its end leaves none of it visible."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        record.append_message(Message.user("before"))
        with pytest.raises(RecordConnectionError), record.batch():
            record.append_message(Message.user("in the batch"))
            _terminate(url, record)
            record.append_message(Message.user("after the break"))
        with pytest.raises(RecordError, match=r"group commit failed.*the connection broke"):
            record.append_message(Message.user("refused"))
    with PostgresRecord(url, session=name, readonly=True) as reader:
        assert texts(reader) == ["before"]


class _Hooked(PostgresRecord):
    """A store whose derived data lives in the same database (stands in for a search index)."""

    def _on_append(self, entry: Entry) -> None:
        assert self._conn is not None
        self._conn.execute(
            "INSERT INTO words (session, seq) VALUES (%s, %s)", (self.session, entry.seq)
        )
        text = entry.event.message.text if isinstance(entry.event, MessageAppended) else ""
        if text == "c":
            raise RecordError("the index refused it")
        if text == "drop":
            self._conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def test_the_append_hook_runs_inside_the_entrys_transaction(url: str) -> None:
    """What `_on_append` writes commits with its entry; a failing hook takes back both.

    In a batch it takes back only its own entry; a connection lost inside the transaction
    leaves nothing.
    """
    name = session()
    sql(url, "CREATE TABLE IF NOT EXISTS words (session text, seq bigint)")
    with _Hooked(url, session=name) as record:
        record.append_message(Message.user("a"))
        with pytest.raises(RecordError, match="the index refused it"):
            record.append_message(Message.user("c"))
        with record.batch():
            record.append_message(Message.user("b"))
            with pytest.raises(RecordError, match="the index refused it"):
                record.append_message(Message.user("c"))
            record.append_message(Message.user("c again"))
        with pytest.raises(RecordConnectionError):
            record.append_message(Message.user("drop"))
        assert len(record) == 3
    words = sql(url, "SELECT seq FROM words WHERE session = %s ORDER BY seq", params=(name,))
    assert words == [(0,), (1,), (2,)]
    with PostgresRecord(url, session=name, readonly=True) as reader:
        assert texts(reader) == ["a", "b", "c again"]


# -- durability ------------------------------------------------------------------------------------


def test_a_batch_holding_a_durable_event_commits_synchronously(url: str) -> None:
    """every_boundary: a batch with a boundary in it commits with `synchronous_commit = on`."""
    seen: list[str] = []
    with PostgresRecord(url, session=session()) as record:
        conn = record._conn
        assert conn is not None
        real = conn.execute

        def spy(query: Any, *args: Any, **kw: Any) -> Any:
            seen.append(str(query))
            return real(query, *args, **kw)

        conn.execute = spy  # type: ignore[method-assign]
        with record.batch():
            for event in small_session()[:8]:  # seven messages and a fold boundary
                record.append(event)
        assert "SET LOCAL synchronous_commit = on" in seen
        seen.clear()
        with record.batch():
            record.append_message(Message.user("no boundary"))
        assert "SET LOCAL synchronous_commit = on" not in seen
    with PostgresRecord(url, session=record.session, readonly=True) as again:
        assert len(again) == 9


@pytest.mark.parametrize(
    ("policy", "session_level", "synced"),
    [
        ("every_event", "on", [True, True, True]),
        ("every_boundary", "off", [False, True, False]),
        ("never", "off", [False, False, False]),
    ],
)
def test_the_fsync_policy_sets_synchronous_commit(
    url: str, policy: str, session_level: str, synced: list[bool]
) -> None:
    """Messages commit synchronously under every_event, durable events under every_boundary.

    Closing after asynchronous commits flushes the server's log (unless `never`).
    """
    seen: list[str] = []
    with PostgresRecord(url, session=session(), fsync=policy) as record:  # type: ignore[arg-type]
        conn = record._conn
        assert conn is not None
        assert conn.execute("SHOW synchronous_commit").fetchone() == (session_level,)
        real = conn.execute

        def spy(query: Any, *args: Any, **kw: Any) -> Any:
            seen.append(str(query))
            return real(query, *args, **kw)

        conn.execute = spy  # type: ignore[method-assign]
        marks = []
        events: list[Event] = [
            MessageAppended(message=Message.user("a")),
            CompactionStart(compaction_id="k", span=(0, 1), pre_tokens=9, action="summarize"),
            MessageAppended(message=Message.user("b")),
        ]
        for event in events:
            seen.clear()
            record.append(event)
            marks.append(any("synchronous_commit = on" in q for q in seen))
        assert [m or policy == "every_event" for m in marks] == synced
        seen.clear()
    flushed = any("synchronous_commit = on" in q for q in seen)
    assert flushed == (policy == "every_boundary")


def test_a_failed_flush_on_close_is_logged(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """If the closing flush cannot run, closing still lets go, and says the tail may be unsynced."""
    record = PostgresRecord(url, session=session())
    record.append_message(Message.user("asynchronous"))
    sql(url, f"SELECT pg_terminate_backend({record._conn.info.backend_pid})")  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        record.close()
    assert "may not be flushed" in caplog.text


# -- the CLI --------------------------------------------------------------------------


def test_inspect_reads_a_postgres_session(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`steerable-compaction inspect postgresql://...?session=ID` prints that session."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        for event in small_session():
            record.append(event)
    assert cli.main(["inspect", f"{url}&session={name}"]) == 0
    out = capsys.readouterr().out
    assert f"?session={name}  (PostgresRecord, 14 events" in out
    assert "UNCLOSED" in out


def test_serve_keeps_its_session_in_postgres(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --record postgresql://...` answers, and the conversation lands in that session."""
    import io

    request = {"jsonrpc": "2.0", "id": 1, "method": "agent.chat.send", "params": {"input": "hi"}}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(request).encode())))
    name = session()
    where = f"{url.split('?')[0]}?session={name}"  # the URL less its options and password
    argv = [
        "serve",
        "--record",
        f"{url}&session={name}",
        "--system",
        "Be brief.",
        "--tools",
        "none",
    ]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert f"serve: {where} (1 messages)" in captured.err
    with PostgresRecord(url, session=name, readonly=True) as again:
        assert again.messages()[0] == Message.system("Be brief.")
        assert texts(again)[1] == "hi"


def test_encode_body_is_what_a_row_holds(url: str) -> None:
    """Rows hold the codec's bytes exactly (the JSONL line without its newline)."""
    name = session()
    with PostgresRecord(url, session=name) as record:
        entry = record.append_message(Message.user("exact"))
    rows = sql(url, "SELECT body FROM steerable_events WHERE session = %s", params=(name,))
    assert bytes(rows[0][0]) == encode_body(entry)


def test_the_docs_example_runs_against_a_server(
    empty: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/postgres.md's Python block runs as written, its URL pointed at the test server."""
    text = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    doc_url = 'url = "postgresql://agent:secret@db.internal:5432/agents"'
    assert doc_url in blocks[0]
    exec(blocks[0].replace(doc_url, f"url = {empty!r}"), {})  # the docs are ours to run
    out = capsys.readouterr().out.splitlines()
    assert "Fix the failing test." in out[0]
    assert out[1] == "{'user-42/ticket-7': 1}"
