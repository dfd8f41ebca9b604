"""Tests for `steerable_compaction.recall.fts`: the SQLite FTS5 index against the in-memory one.

The two index kinds must return the same hits on the same record (a Hypothesis property over
records in English, code, Chinese and Japanese), and the FTS5 table must always agree with the
record it lives in.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as label
from hypothesis import strategies as st

from steerable_compaction.errors import RecallError, RecordError
from steerable_compaction.messages import Message
from steerable_compaction.recall import hidden_seqs, prepare_index, search, search_history
from steerable_compaction.recall.fts import TABLE, FtsIndex, match_expression
from steerable_compaction.recall.text import matches, normalize, parse_query, searchable
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    Event,
    MemoryRecord,
    MessageAppended,
    Record,
    SqliteRecord,
)
from tests.test_recall import call, session, summarize

FRAGMENTS = [
    # English and code
    "ConnectionRefusedError",
    "port",
    "5432",
    "Port",
    "def",
    "connect():",
    "db/pool.py",
    "status=500",
    "the",
    "retry",
    "RETRY",
    "timeout",
    "it is",
    "a",
    "->",
    "x",
    '"quoted"',
    "AND",
    "OR",
    "(c*)",
    "Straße",
    "STRASSE",
    "ﬁle",
    "İstanbul",
    # Chinese
    "数据库",
    "连接",
    "失败",
    "错误",
    "数据库连接失败",
    "的",
    "配置文件",
    # Japanese
    "ログ",
    "エラー",
    "接続",
    "です",
    "確認してください",
    "を",
    "データベース",
]


def indexed_rows(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute(f"SELECT rowid FROM {TABLE} ORDER BY rowid")]
    finally:
        conn.close()


def message_seqs(record: Record) -> list[int]:
    return [entry.seq for entry in record.history()]


# -- random records ------------------------------------------------------------------------------

texts = st.lists(
    st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from([" ", "", "\n", "  ", "\t", "。"])),
    min_size=1,
    max_size=12,
).map(lambda pieces: "".join(f + sep for f, sep in pieces))


@st.composite
def sessions(draw: st.DrawFn) -> list[Event]:
    """Messages with folds and summaries in between, valid against their projection."""
    record = MemoryRecord()
    events: list[Event] = []
    call_id = 0
    for _ in range(draw(st.integers(3, 24))):
        kind = draw(st.sampled_from(["user", "assistant", "tool", "fold", "summary"]))
        projection = len(record.projection)
        if kind == "fold" and projection:
            index = draw(st.integers(0, projection - 1))
            event: Event = CompactionBoundary(
                action="compact",
                pre_tokens=10,
                post_tokens=9,
                replacement_count=0,
                edits=(Edit(index=index, message=Message.user("[folded]")),),
            )
        elif kind == "summary" and projection >= 2:
            start = draw(st.integers(0, projection - 2))
            end = draw(st.integers(start + 1, projection))
            keep = tuple(m for m in record.projection.messages[start:end] if m.role == "user")[
                : draw(st.integers(0, 1))
            ]
            replacement = (Message.user("[summary]"), *keep)
            event = CompactionBoundary(
                action="summarize",
                pre_tokens=10,
                post_tokens=5,
                replacement_count=len(replacement),
                span=(start, end),
                replacement=replacement,
            )
        elif kind == "tool":
            call_id += 1
            name = draw(st.sampled_from(["read_file", "bash", "history_search"]))
            record.append(
                MessageAppended(message=Message.assistant("", [call(f"c{call_id}", name)]))
            )
            events.append(record.entries[-1].event)
            event = MessageAppended(message=Message.tool(f"c{call_id}", draw(texts)))
        else:
            role = "assistant" if kind == "assistant" else "user"
            text = draw(texts)
            event = MessageAppended(
                message=Message.assistant(text) if role == "assistant" else Message.user(text)
            )
        record.append(event)
        events.append(event)
    return events


@st.composite
def queries(draw: st.DrawFn, events: Sequence[Event]) -> str:
    """A query made of fragments, slices of the messages' text, phrases and short terms."""
    bodies = [searchable(e.message) for e in events if isinstance(e, MessageAppended)]
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.sampled_from(["fragment", "slice", "phrase", "short"]))
        body = draw(st.sampled_from(bodies)) or "x"
        if choice == "fragment":
            parts.append(draw(st.sampled_from(FRAGMENTS)))
        else:
            start = draw(st.integers(0, len(body) - 1))
            size = {"slice": draw(st.integers(3, 12)), "phrase": 9, "short": 2}[choice]
            piece = body[start : start + size].replace('"', "")
            if choice == "phrase":
                piece = '"' + piece + '"'
            parts.append(draw(st.sampled_from([piece, piece.upper()])))
    return " ".join(parts)


def reference(record: Record, query: str) -> set[int]:
    """Every hidden message that matches, by brute force."""
    terms = parse_query(query)
    excluded = search._state(record).catalog.excluded
    return {
        seq
        for seq in hidden_seqs(record)
        if seq not in excluded
        and matches(normalize(searchable(record.entries[seq].event.message)), terms)  # type: ignore[union-attr]
    }


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=sessions())
def test_fts5_and_memory_return_the_same_hits(data: st.DataObject, events: list[Event]) -> None:
    """On the same record, FTS5 and the in-memory index return identical hits, and all of them."""
    memory = MemoryRecord(events)
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteRecord(Path(tmp) / "r.db", fsync="never") as sqlite,
    ):
        for event in events:
            sqlite.append(event)
        for _ in range(4):
            query = data.draw(queries(events))
            try:
                expected = search_history(memory, query, limit=50)
            except RecallError:
                with pytest.raises(RecallError):
                    search_history(sqlite, query, limit=50)
                continue
            assert search_history(sqlite, query, limit=50) == expected
            assert {hit.seq for hit in expected} == reference(memory, query)
            label(f"hits={min(len(expected), 3)}")
        search_history(sqlite, "port")  # whatever was drawn, the table is in use now
        assert search._state(sqlite).fts is not None and search._state(sqlite).words is None
        assert indexed_rows(Path(tmp) / "r.db") == message_seqs(sqlite)


@settings(max_examples=40)
@given(query=st.text(max_size=60))
def test_no_query_text_is_fts5_syntax(query: str) -> None:
    """Any text, operators and quotes included, either searches or raises `RecallError`."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteRecord(Path(tmp) / "r.db", fsync="never") as record,
    ):
        session(record)
        try:
            search_history(record, query)
        except RecallError:
            pass


def test_match_expression_quotes_every_term() -> None:
    """Terms become quoted strings with inner quotes doubled, joined by AND."""
    assert match_expression(["a b", 'say "hi"', "NOT"]) == '"a b" AND "say ""hi""" AND "NOT"'


# -- the table and the record agree ---------------------------------------------------------------


def test_a_writer_indexes_every_message_in_its_database(tmp_path: Path) -> None:
    """After a search the table holds exactly the record's messages, by seq."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        session(record)
        assert search_history(record, "5432") != []
        assert indexed_rows(path) == message_seqs(record)
        record.append_message(Message.user("later 778899"))
        summarize(record, 4, 6)
        assert [h.seq for h in search_history(record, "778899")] == [9]
        assert indexed_rows(path) == message_seqs(record)


def test_prepare_index_indexes_without_a_search(tmp_path: Path) -> None:
    """`prepare_index` brings the table up to date at once, on a writer."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        session(record)
        prepare_index(record)
        assert indexed_rows(path) == message_seqs(record)
        assert search._state(record).words is None


def test_a_reopened_writer_catches_up_what_it_missed(tmp_path: Path) -> None:
    """Messages appended while no index was attached are indexed when a writer next searches."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        session(record)
        search_history(record, "port")
    with SqliteRecord(path) as record:
        record.append_message(Message.user("appended unindexed 424242"))
        summarize(record, 4, 6)
        assert [h.seq for h in search_history(record, "424242")] == [9]
        assert indexed_rows(path) == message_seqs(record)


def test_a_reader_uses_the_writers_table_and_checks_newer_messages(tmp_path: Path) -> None:
    """A read-only handle answers from the writer's table plus the messages after its watermark."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        session(writer)
        search_history(writer, "port")
    with SqliteRecord(path) as writer:  # appends without searching: not indexed by this process
        writer.append_message(Message.user("fresh 5432 note"))
        summarize(writer, 4, 6)
    with SqliteRecord(path, readonly=True) as reader:
        hits = search_history(reader, "5432")
        assert search._state(reader).words is None  # answered by FTS5 and the tail
        assert [h.seq for h in hits] == [
            h.seq for h in search_history(MemoryRecord([e.event for e in reader]), "5432")
        ]
        assert 9 in {h.seq for h in hits}


def test_a_reader_without_a_table_uses_memory(tmp_path: Path) -> None:
    """A database whose writer never searched is searched in memory by a reader."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        session(writer)
    with SqliteRecord(path, readonly=True) as reader:
        assert {h.seq for h in search_history(reader, "5432")} == {3, 4}
        assert search._state(reader).words is not None


def test_a_reader_with_a_long_unindexed_tail_uses_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `_MAX_TAIL` unindexed messages, checking them one by one is slower than memory."""
    from steerable_compaction.recall import fts

    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        session(writer)
        search_history(writer, "port")
    with SqliteRecord(path) as writer:
        for i in range(3):
            writer.append_message(Message.user(f"tail {i}"))
    monkeypatch.setattr(fts, "_MAX_TAIL", 2)
    with SqliteRecord(path, readonly=True) as reader:
        assert {h.seq for h in search_history(reader, "5432")} == {3, 4}
        assert search._state(reader).words is not None


def test_a_closed_record_is_searched_in_memory(tmp_path: Path) -> None:
    """Once closed, a record still answers from what it loaded."""
    record = SqliteRecord(tmp_path / "r.db")
    session(record)
    record.close()
    assert {h.seq for h in search_history(record, "5432")} == {3, 4}


def _deny_index_writes(conn: sqlite3.Connection) -> None:
    def authorize(action: int, table: str | None, *_: object) -> int:
        writes = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE)
        if action in writes and table is not None and table.startswith(TABLE):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(authorize)


def test_a_failed_catch_up_indexes_nothing(tmp_path: Path) -> None:
    """A chunk is one transaction: when it fails, the table is as it was, and it retries."""
    path = tmp_path / "r.db"
    record = SqliteRecord(path)
    with record:
        session(record)
        prepare_index(record)
        record.append_message(Message.user("unindexed 31337"))
        summarize(record, 4, 6)
        conn = record._conn
        assert conn is not None
        _deny_index_writes(conn)
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            search_history(record, "31337")
        assert indexed_rows(path) == [0, 1, 2, 3, 4, 5, 6, 7]
        assert not conn.in_transaction
        conn.set_authorizer(None)
        assert [h.seq for h in search_history(record, "31337")] == [9]
        assert indexed_rows(path) == message_seqs(record)


def test_a_broken_table_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    """Only a missing table sends a reader to memory; any other database error is raised."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        session(writer)
        prepare_index(writer)
    reader = SqliteRecord(path, readonly=True)
    with reader:
        conn = reader._conn
        assert conn is not None

        def deny_reads(action: int, table: str | None, *_: object) -> int:
            denied = action == sqlite3.SQLITE_READ and (table or "").startswith(TABLE)
            return sqlite3.SQLITE_DENY if denied else sqlite3.SQLITE_OK

        conn.set_authorizer(deny_reads)
        with pytest.raises(sqlite3.DatabaseError, match=TABLE):
            search_history(reader, "5432")


_CRASH_CHILD = """
import os, sys
from steerable_compaction.recall import fts, search_history
from steerable_compaction.record import SqliteRecord
from tests.test_recall import session

record = SqliteRecord(sys.argv[1])
session(record)
fts.CATCH_UP_CHUNK = 3  # entries 0-2, 3-5, 6-8: killed while indexing the second chunk
row_text, calls = fts._row_text, []

def crash(message, spill):
    calls.append(message)
    if len(calls) == 5:
        os._exit(9)
    return row_text(message, spill)

fts._row_text = crash
search_history(record, "5432")
"""


def test_a_crash_inside_a_catch_up_leaves_a_prefix_indexed(tmp_path: Path) -> None:
    """Killed indexing its second chunk: the first stays, the next search indexes the rest."""
    path = tmp_path / "r.db"
    done = subprocess.run(
        [sys.executable, "-c", _CRASH_CHILD, str(path)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    assert indexed_rows(path) == [0, 1, 2]
    with SqliteRecord(path) as writer:
        assert {h.seq for h in search_history(writer, "5432")} == {3, 4}
        assert indexed_rows(path) == message_seqs(writer)


def test_appends_never_index(tmp_path: Path) -> None:
    """The append path does no index work: the next search indexes what came since."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        session(record)
        prepare_index(record)
        before = indexed_rows(path)
        assert before == message_seqs(record)
        for i in range(4):
            record.append_message(Message.user(f"appended {i} 909{i}"))
        assert indexed_rows(path) == before
        summarize(record, 4, 7)  # the first three appended (seqs 9-11) leave the projection
        assert [h.seq for h in search_history(record, "9091")] == [10]
        assert indexed_rows(path) == message_seqs(record)


def test_inside_a_batch_the_first_search_does_not_attach(tmp_path: Path) -> None:
    """In `Record.batch()`, an unattached writer answers from memory and creates no table."""
    path = tmp_path / "r.db"
    record = SqliteRecord(path)
    with record:
        with record.batch():
            session(record)
            assert {h.seq for h in search_history(record, "5432")} == {3, 4}
            assert search._state(record).words is not None
        assert record._conn is not None
        assert record._conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = ?", (TABLE,)
        ).fetchone() == (0,)
        assert {h.seq for h in search_history(record, "5432")} == {3, 4}
        assert indexed_rows(path) == message_seqs(record)


def test_a_batch_indexes_its_messages_in_its_transaction(tmp_path: Path) -> None:
    """A search inside a batch indexes its messages in its transaction: committed with it."""
    path = tmp_path / "r.db"
    record = SqliteRecord(path)
    with record:
        session(record)
        prepare_index(record)
        with record.batch():
            record.append_message(Message.user("batched 880088"))
            summarize(record, 3, 6)
            assert [h.seq for h in search_history(record, "880088")] == [9]
            assert record._conn is not None  # the batch's own connection sees its rows
            newest = f"SELECT rowid FROM {TABLE} ORDER BY rowid DESC LIMIT 1"
            assert record._conn.execute(newest).fetchone() == (9,)
            assert indexed_rows(path) == [0, 1, 2, 3, 4, 5, 6, 7]  # not committed yet
        assert indexed_rows(path) == message_seqs(record)


_BATCH_CRASH_CHILD = """
import os, sys
from steerable_compaction.messages import Message
from steerable_compaction.recall import prepare_index
from steerable_compaction.record import SqliteRecord
from tests.test_recall import session

record = SqliteRecord(sys.argv[1])
session(record)
prepare_index(record)
with record.batch():
    record.append_message(Message.user("lost with its batch 5151"))
    record.append_message(Message.user("also lost"))
    prepare_index(record)  # indexed inside the batch's transaction
    os._exit(9)
"""


def test_a_batch_lost_to_a_crash_leaves_no_index_rows(tmp_path: Path) -> None:
    """A process killed inside a batch loses its entries and their index rows together."""
    path = tmp_path / "r.db"
    done = subprocess.run(
        [sys.executable, "-c", _BATCH_CRASH_CHILD, str(path)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    with SqliteRecord(path, readonly=True) as reader:
        assert len(reader) == 9
        assert indexed_rows(path) == message_seqs(reader) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_candidates_are_read_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of candidate rows join up: the same hits as memory, across page ends."""
    from steerable_compaction.recall import fts

    monkeypatch.setattr(fts, "_PAGE", 2)
    events: list[Event] = [MessageAppended(message=Message.user(f"needle {i}")) for i in range(7)]
    events.append(MessageAppended(message=Message.user("tail")))
    memory = MemoryRecord(events)
    summarize(memory, 0, 7)
    with SqliteRecord(tmp_path / "r.db") as sqlite:
        for entry in memory:
            sqlite.append(entry.event)
        hits = search_history(sqlite, "needle", limit=10)
        assert [h.seq for h in hits] == [6, 5, 4, 3, 2, 1, 0]
        assert hits == search_history(memory, "needle", limit=10)


def test_text_after_a_nul_character_is_indexed(tmp_path: Path) -> None:
    """FTS5 reads a row's text only up to a NUL: rows hold a space there, so the rest is found."""
    with SqliteRecord(tmp_path / "r.db") as record:
        record.append_message(Message.user("Dump the file."))
        record.append_message(Message.assistant("binary \x00 then the magic word is xyzzy"))
        summarize(record, 1, 2)
        prepare_index(record)
        state = search._state(record)
        assert isinstance(state.index(record, None), FtsIndex)  # answered by the table
        assert [h.seq for h in search_history(record, "xyzzy")] == [1]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_hits_do_not_depend_on_how_far_the_index_got(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one chunk of 4 entries indexed per search, each search returns a full index's hits."""
    from steerable_compaction.recall import fts, memory

    monkeypatch.setattr(memory, "CATCH_UP_CHUNK", 4)
    monkeypatch.setattr(fts, "CATCH_UP_CHUNK", 4)
    monkeypatch.setattr(search, "CATCH_UP_SECONDS", 0.0)
    events: list[Event] = [MessageAppended(message=Message.system("agent"))]
    events += [
        MessageAppended(message=Message.user(f"note {i} token{i % 7} {'数据库' if i % 5 else ''}"))
        for i in range(40)
    ]
    full = MemoryRecord(events)
    summarize(full, 1, 38)
    prepare_index(full)
    record: Record = MemoryRecord() if kind == "memory" else SqliteRecord(tmp_path / "r.db")
    for entry in full:
        record.append(entry.event)
    queries = ["token3", "note 1", "token6 数据库", "no such word", "数据库"]
    state = search._state(record)
    progress = []
    for _ in range(12):
        for query in queries:
            assert search_history(record, query, limit=50) == search_history(
                full, query, limit=50
            ), query
        index = state.fts if kind == "sqlite" else state.words
        assert index is not None
        progress.append(index._watermark + 1 if isinstance(index, FtsIndex) else index.done)
    # Each search read one chunk (5 searches a round), until the 42 entries were all indexed.
    assert progress == [20, 40, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42]
    record.close()


class _FailingCommit:
    """A connection whose next COMMIT fails, as a full disk would make it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.fail = False

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if self.fail and sql.strip().upper() == "COMMIT":
            self.fail = False
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


def test_rows_a_lost_batch_took_with_it_are_indexed_again(tmp_path: Path) -> None:
    """A batch whose commit fails takes its catch-up rows: the messages are still found.

    A reopened writer then indexes a new message at a seq the lost batch had used.
    """
    path = tmp_path / "r.db"
    writer = SqliteRecord(path, fsync="never")
    writer.append_message(Message.user("warm up"))
    assert search_history(writer, "zzzz") == []  # the table exists, seq 0 indexed
    for i in range(5):
        writer.append_message(Message.user(f"committed needle {i}"))  # seqs 1-5, unindexed
    summarize(writer, 0, 6)  # seq 6 hides them
    assert writer._conn is not None
    conn = writer._conn
    failing = _FailingCommit(conn)
    writer._conn = failing  # type: ignore[assignment]
    with pytest.raises(RecordError):
        with writer.batch():
            writer.append_message(Message.user("batched"))
            assert [h.seq for h in search_history(writer, "needle")] == [5, 4, 3, 2, 1]
            failing.fail = True
    assert indexed_rows(path) == [0]  # the catch-up went with the batch
    assert [h.seq for h in search_history(writer, "needle")] == [5, 4, 3, 2, 1]
    assert indexed_rows(path) == [0]  # a broken handle writes no rows
    writer._conn = conn
    writer.close()
    with SqliteRecord(path) as reopened:
        assert [h.seq for h in search_history(reopened, "needle")] == [5, 4, 3, 2, 1]
        reopened.append_message(Message.user("fresh after the loss"))
        summarize(reopened, 0, 2)
        assert [h.seq for h in search_history(reopened, "fresh")] == [len(reopened) - 2]
        assert indexed_rows(path) == message_seqs(reopened)
