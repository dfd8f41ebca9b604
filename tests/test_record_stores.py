from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerable_compaction import Message, RecordError, RecordLockedError
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    Edit,
    Event,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
    SqliteRecord,
    Usage,
    open_record,
    project,
)
from steerable_compaction.record.codec import encode_line

from .record_sessions import event_sequences, small_session

FIXTURES = Path(__file__).parent / "fixtures"
Factory = Callable[..., Record]
STORES: dict[str, tuple[Factory, str]] = {
    "jsonl": (JsonlRecord, "record.jsonl"),
    "sqlite": (SqliteRecord, "record.db"),
}
_tmp = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Factory, Path]]:
    factory, name = STORES[request.param]
    yield factory, tmp_path / name


def write(factory: Factory, path: Path, events: list[Event], **kw: object) -> None:
    with factory(path, **kw) as record:
        for event in events:
            record.append(event)


# -- durability and reopening ---------------------------------------------------------------------


def test_reopened_record_has_the_same_entries_and_projection(store: tuple[Factory, Path]) -> None:
    """R34: what was appended reads back identical, and projects identically."""
    factory, path = store
    events = small_session()
    with factory(path) as live:
        for e in events:
            live.append(e)
        live_projection = live.messages()
        live_entries = list(live.entries)
    with factory(path, readonly=True) as again:
        assert list(again.entries) == live_entries
        assert again.messages() == live_projection == project(live_entries)


@_tmp
@given(events=event_sequences(max_ops=25))
def test_reopening_any_valid_session_yields_the_live_projection(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event]
) -> None:
    """Property: for every valid event sequence, reopen(record).projection == live projection."""
    root = tmp_path_factory.mktemp("prop")
    for factory, name in STORES.values():
        path = root / name
        with factory(path) as live:
            for e in events:
                live.append(e)
            expected = live.messages()
        with factory(path, readonly=True) as again:
            assert again.messages() == expected
            assert len(again) == len(events)


@_tmp
@given(events=event_sequences(max_ops=15), more=event_sequences(max_ops=15))
def test_appending_never_changes_existing_bytes(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], more: list[Event]
) -> None:
    """Property: a JSONL record's existing bytes are a prefix of the file after any append."""
    path = tmp_path_factory.mktemp("prefix") / "r.jsonl"
    write(JsonlRecord, path, events)
    before = path.read_bytes()
    with JsonlRecord(path) as record:
        for e in more:
            if isinstance(e, MessageAppended):
                record.append(e)
    assert path.read_bytes().startswith(before)


@_tmp
@given(events=event_sequences(max_ops=20), cut=st.floats(0, 1))
def test_truncating_at_any_byte_loses_at_most_the_last_event(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], cut: float
) -> None:
    """Property: a JSONL file cut at any byte reopens with all but at most its last event."""
    path = tmp_path_factory.mktemp("cut") / "r.jsonl"
    with JsonlRecord(path) as live:
        written = [live.append(e) for e in events]
    data = path.read_bytes()
    at = int(len(data) * cut)
    path.write_bytes(data[:at])
    # Every event whose JSON ends before the cut survives (a missing final newline does not
    # lose it); only the one being cut is lost.
    ends = [i for i, byte in enumerate(data) if byte == ord("\n")]
    complete_lines = sum(1 for end in ends if end <= at)
    with JsonlRecord(path, readonly=True) as reader:
        assert list(reader.entries) == written[:complete_lines]
        assert reader.messages() == project(written[:complete_lines])
    with JsonlRecord(path) as writer:
        assert len(writer) == complete_lines
        writer.append(MessageAppended(message=Message.user("after the crash")))
    with JsonlRecord(path, readonly=True) as reader:
        assert len(reader) == complete_lines + 1


def test_torn_final_line_is_dropped_with_a_warning_and_truncated_only_by_a_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn final line: readers ignore it (file untouched); a writer truncates it, logged."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session())
    intact = path.read_bytes()
    path.write_bytes(intact + b'{"v":3,"seq":14,"kind":"mess')
    torn = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        with JsonlRecord(path, readonly=True) as reader:
            assert len(reader) == len(small_session())
        assert "incomplete final line" in caplog.text
        assert path.read_bytes() == torn
        caplog.clear()
        with JsonlRecord(path) as writer:
            assert len(writer) == len(small_session())
        assert "dropping a torn final line" in caplog.text
        assert f"{path}:15" in caplog.text
    assert path.read_bytes() == intact


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (b"this is not json", "not valid JSON"),
        (b'{"v":3,"seq":2,"kind":"telepathy"}', "unknown kind 'telepathy'"),
        (b'{"v":9,"seq":2,"kind":"message"}', "newer steerable-compaction"),
        (b'{"v":1,"seq":2,"kind":"message"}', "unsupported schema version"),
        (b'{"v":3,"seq":7,"kind":"message","message":{"role":"user","parts":[]}}', "out of order"),
        (b'{"v":3,"seq":2,"kind":"message","message":{"role":"robot","parts":[]}}', "role"),
        (b'{"v":3,"seq":2,"kind":"message"}', "missing field 'message'"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"v":3,"seq":2,"kind":"compaction_boundary","action":"compact"}', "pre_tokens"),
        (b'{"v":2,"seq":2,"kind":"compaction_start"}', "schema v2 has no"),
        (
            b'{"v":3,"seq":2,"kind":"compaction_start","compaction_id":"k","span":[0,2],'
            b'"pre_tokens":9,"action":"summarize","kept":"0"}',
            "field 'kept' should be list",
        ),
        (
            b'{"v":3,"seq":2,"kind":"compaction_start","compaction_id":"k","span":[0,2],'
            b'"pre_tokens":9,"action":"summarize","kept":[1,0]}',
            "kept must be increasing indices",
        ),
        (
            b'{"v":3,"seq":2,"kind":"compaction_start","compaction_id":"k","span":[0,2],'
            b'"pre_tokens":9,"action":"summarize","kept":["a",1]}',
            "kept must be increasing indices",
        ),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
@pytest.mark.parametrize("readonly", [True, False])
def test_a_corrupt_line_raises_record_error_naming_file_and_line_and_never_modifies_it(
    tmp_path: Path, bad_line: bytes, reason: str, readonly: bool
) -> None:
    """A bad line anywhere but a torn tail raises `RecordError` (file, line); the file is kept."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])
    data = path.read_bytes() + bad_line + b"\n" + encode_line_at(3)
    path.write_bytes(data)
    with pytest.raises(RecordError, match=reason) as info:
        JsonlRecord(path, readonly=readonly)
    assert info.value.path == path
    assert info.value.line == 3
    assert f"{path}:3" in str(info.value)
    assert path.read_bytes() == data


def encode_line_at(seq: int) -> bytes:
    from steerable_compaction.record import Entry

    return encode_line(Entry(seq, MessageAppended(message=Message.user("tail"))))


def test_a_corrupt_complete_last_line_is_an_error_not_a_torn_write(tmp_path: Path) -> None:
    """A final line that ends in a newline is complete: if it is bad, that is corruption."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])
    data = path.read_bytes() + b'{"v":3,"seq":2,"kind":"mess\n'
    path.write_bytes(data)
    with pytest.raises(RecordError) as info:
        JsonlRecord(path)
    assert info.value.line == 3
    assert path.read_bytes() == data


def test_an_invalid_event_is_refused_before_it_reaches_the_disk(
    store: tuple[Factory, Path],
) -> None:
    """A bad event raises `RecordError` and writes nothing; the record stays usable."""
    factory, path = store
    with factory(path) as record:
        for e in small_session():
            record.append(e)
        size = len(record)
        with pytest.raises(RecordError, match="unknown bracket"):
            record.append(
                CompactionBoundary(
                    action="summarize",
                    pre_tokens=1,
                    post_tokens=1,
                    replacement_count=1,
                    compaction_id="ghost",
                    span=(0, 1),
                )
            )
        assert len(record) == size
        record.append(MessageAppended(message=Message.user("still fine")))
    with factory(path, readonly=True) as again:
        assert len(again) == size + 1


def test_readonly_and_closed_records_refuse_appends(store: tuple[Factory, Path]) -> None:
    """Appending to a read-only or closed handle raises `RecordError`."""
    factory, path = store
    write(factory, path, small_session()[:1])
    with factory(path, readonly=True) as reader, pytest.raises(RecordError, match="read-only"):
        reader.append(MessageAppended(message=Message.user("x")))
    record = factory(path)
    record.close()
    record.close()  # idempotent
    assert record.closed
    with pytest.raises(RecordError, match="closed"):
        record.append(MessageAppended(message=Message.user("x")))


def test_opening_a_missing_record_read_only_is_an_error(store: tuple[Factory, Path]) -> None:
    """A reader cannot open a record that does not exist, and creates nothing."""
    factory, path = store
    with pytest.raises(RecordError, match="no such record"):
        factory(path, readonly=True)
    assert not path.exists()


def test_record_files_are_private_to_their_owner(store: tuple[Factory, Path]) -> None:
    """Records hold conversations: files are created with mode 0600."""
    factory, path = store
    write(factory, path, small_session()[:1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- one writer -----------------------------------------------------------------------------------


def test_a_second_writer_is_refused_and_readers_are_always_allowed(
    store: tuple[Factory, Path],
) -> None:
    """One writer at a time (`RecordLockedError`); readers open alongside; close releases."""
    factory, path = store
    with factory(path) as writer:
        writer.append(MessageAppended(message=Message.user("hello")))
        with pytest.raises(RecordLockedError, match="another writer"):
            factory(path)
        with factory(path, readonly=True) as reader:
            assert reader.messages() == [Message.user("hello")]
        writer.append(MessageAppended(message=Message.user("again")))
        with factory(path, readonly=True) as reader:
            assert len(reader) == 2
    with factory(path) as second:
        assert len(second) == 2


def test_a_writer_in_another_process_locks_out_this_one_until_it_dies(tmp_path: Path) -> None:
    """The lock holds across processes and is released when the holder is killed."""
    path = tmp_path / "r.jsonl"
    script = textwrap.dedent(
        f"""
        import sys, time
        from steerable_compaction.record import JsonlRecord
        r = JsonlRecord({str(path)!r})
        print("locked", flush=True)
        sys.stdin.read()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "locked"
            with pytest.raises(RecordLockedError):
                JsonlRecord(path)
            with JsonlRecord(path, readonly=True) as reader:
                assert len(reader) == 0
        finally:
            proc.kill()
    with JsonlRecord(path) as writer:
        writer.append(MessageAppended(message=Message.user("mine now")))


def test_a_reader_refreshes_to_see_what_the_writer_appended(store: tuple[Factory, Path]) -> None:
    """`refresh()` on a read-only handle loads entries appended since it opened."""
    factory, path = store
    with factory(path) as writer:
        writer.append(MessageAppended(message=Message.user("one")))
        with factory(path, readonly=True) as reader:
            writer.append(MessageAppended(message=Message.user("two")))
            writer.append(MessageAppended(message=Message.user("three")))
            assert reader.refresh() == 2
            assert [m.text for m in reader.messages()] == ["one", "two", "three"]
            assert reader.refresh() == 0
        assert writer.refresh() == 0


# -- fsync policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("every_event", [True] * 5),
        ("every_boundary", [False, False, True, False, True]),
        ("never", [False] * 5),
    ],
)
def test_fsync_policy_decides_which_appends_are_flushed(
    store: tuple[Factory, Path],
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    expected: list[bool],
) -> None:
    """every_event flushes each append, every_boundary only compaction events, never none."""
    factory, path = store
    seen: list[bool] = []
    original = factory._persist  # type: ignore[attr-defined]

    def spy(self: Record, entry: object, *, durable: bool) -> None:
        seen.append(durable)
        original(self, entry, durable=durable)

    monkeypatch.setattr(factory, "_persist", spy)
    with factory(path, fsync=policy) as record:
        record.append(MessageAppended(message=Message.user("a")))
        record.append(MessageAppended(message=Message.user("b")))
        record.append(
            CompactionStart(compaction_id="k", span=(0, 1), pre_tokens=9, action="summarize")
        )
        record.append(MessageAppended(message=Message.user("c")))
        record.append(
            CompactionBoundary(
                action="compact",
                pre_tokens=9,
                post_tokens=5,
                replacement_count=1,
                edits=(Edit(index=0, message=Message.user("A")),),
            )
        )
    assert seen == expected


@pytest.mark.parametrize(
    ("policy", "fsyncs"), [("every_event", 2), ("every_boundary", 1), ("never", 0)]
)
def test_jsonl_flushes_with_os_fsync_per_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, fsyncs: int
) -> None:
    """A JSONL writer calls `os.fsync` exactly where its policy says (and once on close)."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, [])
    calls: list[int] = []
    real = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    record = JsonlRecord(path, fsync=policy)  # type: ignore[arg-type]
    record.append(MessageAppended(message=Message.user("a")))
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=9,
            post_tokens=5,
            replacement_count=1,
            edits=(Edit(index=0, message=Message.user("A")),),
        )
    )
    assert len(calls) == fsyncs
    record.close()
    assert len(calls) == fsyncs + (policy != "never")


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


def test_unknown_fsync_policy_is_rejected(tmp_path: Path) -> None:
    """A misspelt fsync policy is a `ValueError`, not a silent default."""
    with pytest.raises(ValueError, match="fsync must be one of"):
        JsonlRecord(tmp_path / "r.jsonl", fsync="sometimes")  # type: ignore[arg-type]
    assert not (tmp_path / "r.jsonl").exists()


# -- SQLite specifics -----------------------------------------------------------------------------


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


# -- queries --------------------------------------------------------------------------------------


def test_r40_history_pages_through_raw_messages_untouched_by_compaction(
    store: tuple[Factory, Path],
) -> None:
    """R40/R34: `history` pages the raw, pre-compaction messages, with their seqs."""
    factory, path = store
    write(factory, path, small_session())
    with factory(path, readonly=True) as record:
        everything = record.history()
        assert record.message_count == len(everything) == 9
        assert [e.seq for e in everything] == [0, 1, 2, 3, 4, 5, 7, 8, 12]
        assert everything[3].event == MessageAppended(
            message=Message.tool("c0", "print('zero')\n" * 20)
        )
        assert record.history(offset=2, limit=3) == everything[2:5]
        assert record.history(offset=50) == []
        assert record.history(limit=0) == []
        with pytest.raises(ValueError, match="non-negative"):
            record.history(offset=-1)


def test_compactions_lists_closed_open_and_fold_rewrites_with_tokens() -> None:
    """`compactions()` reports every bracket and boundary with pre/post tokens and status."""
    record = MemoryRecord(small_session())
    infos = record.compactions()
    assert [(c.status, c.compaction_id, c.action) for c in infos] == [
        ("fold", None, "compact"),
        ("closed", "k1", "summarize"),
        ("open", "k2", "summarize"),
    ]
    fold, closed, unclosed = infos
    assert (fold.pre_tokens, fold.post_tokens, fold.replacement_count) == (900, 700, 1)
    assert (closed.start_seq, closed.summary_seq, closed.boundary_seq) == (9, 10, 11)
    assert (closed.pre_tokens, closed.post_tokens, closed.span) == (1200, 400, (2, 6))
    assert unclosed.post_tokens is None
    assert unclosed.boundary_seq is None


def test_usage_survives_the_round_trip(store: tuple[Factory, Path]) -> None:
    """Provider usage recorded on a reply reads back exactly."""
    factory, path = store
    usage = Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=8, cache_write_tokens=1)
    write(factory, path, [MessageAppended(message=Message.assistant("hi"), usage=usage)])
    with factory(path, readonly=True) as record:
        event = record.entries[0].event
        assert isinstance(event, MessageAppended)
        assert event.usage == usage


# -- schema v2 ------------------------------------------------------------------------------------


def test_r39_v2_record_loads_and_upgrades_in_memory_losslessly(tmp_path: Path) -> None:
    """R39: a v2 boundary hides everything before it; fields survive; the file is untouched."""
    path = tmp_path / "v2.jsonl"
    shutil.copy(FIXTURES / "record_v2.jsonl", path)
    original = path.read_bytes()
    raw = [json.loads(line) for line in original.splitlines()]
    with JsonlRecord(path) as record:
        expected = [
            Message.system("You are a coding agent."),
            Message.user("Rename the config loader and keep the tests green."),
        ]
        visible = record.messages()
        assert visible[:2] == expected
        assert visible[2].text.startswith("<compacted-summary>")
        assert len(visible) == 6
        assert visible == [
            e.event.message for e in record.entries[9:] if isinstance(e.event, MessageAppended)
        ]
        boundary = record.entries[8].event
        assert isinstance(boundary, CompactionBoundary)
        assert (boundary.action, boundary.pre_tokens, boundary.post_tokens) == (
            raw[8]["action"],
            raw[8]["pre_tokens"],
            raw[8]["post_tokens"],
        )
        assert boundary.replacement_count == raw[8]["replacement_count"]
        assert boundary.span == (0, 8)
        assert record.message_count == 14
        assert path.read_bytes() == original
        record.append(MessageAppended(message=Message.user("written as v3")))
    assert path.read_bytes().startswith(original)
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert (last["v"], last["seq"]) == (3, 15)
    with JsonlRecord(path, readonly=True) as again:
        assert again.messages()[-1] == Message.user("written as v3")


# -- open_record and errors -----------------------------------------------------------------------


def test_open_record_picks_the_store_by_content_then_suffix(tmp_path: Path) -> None:
    """`open_record` reads SQLite's magic bytes; new files go by suffix."""
    db = tmp_path / "plain-name"
    write(SqliteRecord, db, small_session()[:1])
    with open_record(db, readonly=True) as r:
        assert isinstance(r, SqliteRecord)
    with open_record(tmp_path / "new.sqlite") as r:
        assert isinstance(r, SqliteRecord)
    with open_record(tmp_path / "new.jsonl") as r:
        assert isinstance(r, JsonlRecord)
        assert "JsonlRecord" in repr(r)


def test_record_errors_pickle_with_their_location() -> None:
    """`RecordError` and `RecordLockedError` survive pickling with path and line."""
    for cls in (RecordError, RecordLockedError):
        err = cls("bad", path="/x/r.jsonl", line=7)
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is cls
        assert (back.reason, back.path, back.line, str(back)) == (
            "bad",
            Path("/x/r.jsonl"),
            7,
            "/x/r.jsonl:7: bad",
        )


def test_memory_record_behaves_like_the_file_stores() -> None:
    """A `MemoryRecord` holds the same entries and projection as a file store would."""
    record = MemoryRecord(small_session())
    assert record.path is None
    assert record.messages() == project(list(record.entries))
    assert [e.seq for e in record] == list(range(len(small_session())))
    assert "memory" in repr(record)


@pytest.mark.parametrize("readonly", [True, False])
def test_a_file_that_is_not_a_record_is_refused_and_left_whole(
    tmp_path: Path, readonly: bool
) -> None:
    """Regression: a file without newlines (a JSON config, a database) is never 'torn' to 0."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": "gpt-4o", "tools": list(range(100))}))
    db = tmp_path / "session.db"
    write(SqliteRecord, db, small_session()[:3])
    for path, reason in ((config, "not a record"), (db, "SQLite database")):
        before = path.read_bytes()
        with pytest.raises(RecordError, match=reason):
            JsonlRecord(path, readonly=readonly)
        assert path.read_bytes() == before


def test_a_complete_final_entry_without_its_newline_is_kept(tmp_path: Path) -> None:
    """An entry whose newline never reached the disk loads; the next append adds the newline."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:3])
    path.write_bytes(path.read_bytes()[:-1])
    with JsonlRecord(path, readonly=True) as reader:
        assert len(reader) == 3
        with JsonlRecord(path) as writer:
            assert len(writer) == 3
            writer.append(MessageAppended(message=Message.user("next")))
        assert reader.refresh() == 1
        assert reader.messages()[-1] == Message.user("next")
    assert path.read_bytes().count(b"\n") == 4
    with JsonlRecord(path, readonly=True) as again:
        assert len(again) == 4


def test_text_that_is_not_valid_unicode_is_a_named_error_and_nothing_is_written(
    store: tuple[Factory, Path],
) -> None:
    """A lone surrogate raises `RecordError` (not a bare UnicodeEncodeError); nothing is written."""
    factory, path = store
    with factory(path) as record:
        record.append(MessageAppended(message=Message.user("fine")))
        with pytest.raises(RecordError, match="not valid Unicode"):
            record.append(MessageAppended(message=Message.tool("c1", "bad \udcff")))
        assert len(record) == 1
    with factory(path, readonly=True) as again:
        assert len(again) == 1
