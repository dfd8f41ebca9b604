from __future__ import annotations

import os
import pickle
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from steerable_compaction import Message, RecordError, RecordLockedError, cli
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Entry,
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

from .record_sessions import (
    NO_POSTGRES,
    POSTGRES_URL,
    STORES,
    Factory,
    Store,
    event_sequences,
    make_store,
    small_session,
    write,
)

_tmp = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
_postgres = pytest.param(
    "postgres", marks=pytest.mark.skipif(POSTGRES_URL is None, reason=NO_POSTGRES)
)


def _store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    return make_store(request.param, tmp_path, url)


@pytest.fixture(params=["memory", "jsonl", "sqlite", _postgres])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Every store: memory, JSONL, SQLite and PostgreSQL (skipped without a server)."""
    return _store(request, tmp_path)


@pytest.fixture(params=["jsonl", "sqlite", _postgres])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The stores whose records outlive their handle: readers, a second writer, reopening."""
    return _store(request, tmp_path)


def _append_all(record: Record, events: list[Event]) -> None:
    for event in events:
        record.append(event)


# -- durability and reopening ---------------------------------------------------------------------


def test_reopened_record_has_the_same_entries_and_projection(store: Store) -> None:
    """R34: what was appended reads back identical, and projects identically."""
    events = small_session()
    with store.open() as live:
        _append_all(live, events)
        live_projection = live.messages()
        live_entries = list(live.entries)
    with store.open(readonly=True) as again:
        assert list(again.entries) == live_entries
        assert again.messages() == live_projection == project(live_entries)


@_tmp
@given(events=event_sequences(max_ops=25))
def test_reopening_any_valid_session_yields_the_live_projection(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, events: list[Event]
) -> None:
    """Property: for every valid event sequence, reopen(record).projection == live projection."""
    root = tmp_path_factory.mktemp("prop")
    names = ["jsonl", "sqlite"]
    url = None
    if POSTGRES_URL is not None:
        names.append("postgres")
        url = request.getfixturevalue("postgres_url")
    for name in names:
        store = make_store(name, root, url)
        with store.open() as live:
            _append_all(live, events)
            expected = live.messages()
        with store.open(readonly=True) as again:
            assert again.messages() == expected
            assert len(again) == len(events)


def test_an_invalid_event_is_refused_before_it_reaches_the_disk(store: Store) -> None:
    """A bad event raises `RecordError` and writes nothing; the record stays usable."""
    with store.open() as record:
        _append_all(record, small_session())
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
    with store.open(readonly=True) as again:
        assert len(again) == size + 1


def test_readonly_and_closed_records_refuse_appends(durable_store: Store) -> None:
    """Appending to a read-only or closed handle raises `RecordError`."""
    store = durable_store
    with store.open() as record:
        _append_all(record, small_session()[:1])
    with store.open(readonly=True) as reader, pytest.raises(RecordError, match="read-only"):
        reader.append(MessageAppended(message=Message.user("x")))
    record = store.open()
    record.close()
    record.close()  # idempotent
    assert record.closed
    with pytest.raises(RecordError, match="closed"):
        record.append(MessageAppended(message=Message.user("x")))


def test_opening_a_missing_record_read_only_is_an_error(durable_store: Store) -> None:
    """A reader cannot open a record that does not exist, and creates nothing."""
    store = durable_store
    with pytest.raises(RecordError, match="no such record"):
        store.open(readonly=True)
    if store.path is not None:
        assert not store.path.exists()
    else:
        from steerable_compaction.record.postgres import sessions

        assert store.url is not None
        assert store.session not in sessions(store.url)


@pytest.mark.parametrize("name", sorted(STORES))
def test_record_files_are_private_to_their_owner(tmp_path: Path, name: str) -> None:
    """Records hold conversations: files are created with mode 0600."""
    factory, filename = STORES[name]
    path = tmp_path / filename
    write(factory, path, small_session()[:1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- one writer -----------------------------------------------------------------------------------


def test_a_second_writer_is_refused_and_readers_are_always_allowed(durable_store: Store) -> None:
    """One writer at a time (`RecordLockedError`); readers open alongside; close releases."""
    store = durable_store
    with store.open() as writer:
        writer.append(MessageAppended(message=Message.user("hello")))
        with pytest.raises(RecordLockedError, match="another writer"):
            store.open()
        with store.open(readonly=True) as reader:
            assert reader.messages() == [Message.user("hello")]
        writer.append(MessageAppended(message=Message.user("again")))
        with store.open(readonly=True) as reader:
            assert len(reader) == 2
    with store.open() as second:
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


def test_a_reader_refreshes_to_see_what_the_writer_appended(durable_store: Store) -> None:
    """`refresh()` on a read-only handle loads entries appended since it opened."""
    store = durable_store
    with store.open() as writer:
        writer.append(MessageAppended(message=Message.user("one")))
        with store.open(readonly=True) as reader:
            writer.append(MessageAppended(message=Message.user("two")))
            writer.append(MessageAppended(message=Message.user("three")))
            assert reader.refresh() == 2
            assert [m.text for m in reader.messages()] == ["one", "two", "three"]
            assert reader.refresh() == 0
        assert writer.refresh() == 0


# -- fsync policy ---------------------------------------------------------------------------------


def _spy_flushes(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The `durable` flag of every `_persist` the store's records make from now on, in order."""
    seen: list[bool] = []
    original = store.cls._persist

    def spy(self: Record, entry: Entry, *, durable: bool) -> None:
        seen.append(durable)
        original(self, entry, durable=durable)

    monkeypatch.setattr(store.cls, "_persist", spy)
    return seen


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("every_event", [True] * 5),
        ("every_boundary", [False, False, True, False, True]),
        ("never", [False] * 5),
    ],
)
def test_fsync_policy_decides_which_appends_are_flushed(
    durable_store: Store,
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    expected: list[bool],
) -> None:
    """every_event flushes each append, every_boundary only compaction events, never none."""
    store = durable_store
    seen = _spy_flushes(store, monkeypatch)
    with store.open(fsync=policy) as record:
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


def test_unknown_fsync_policy_is_rejected(tmp_path: Path) -> None:
    """A misspelt fsync policy is a `ValueError`, not a silent default."""
    with pytest.raises(ValueError, match="fsync must be one of"):
        JsonlRecord(tmp_path / "r.jsonl", fsync="sometimes")  # type: ignore[arg-type]
    assert not (tmp_path / "r.jsonl").exists()


# -- queries --------------------------------------------------------------------------------------


def test_r40_history_pages_through_raw_messages_untouched_by_compaction(
    store: Store,
) -> None:
    """R40/R34: `history` pages the raw, pre-compaction messages, with their seqs."""
    with store.open() as record:
        _append_all(record, small_session())
    with store.open(readonly=True) as record:
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


def test_usage_survives_the_round_trip(store: Store) -> None:
    """Provider usage recorded on a reply reads back exactly."""
    usage = Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=8, cache_write_tokens=1)
    with store.open() as record:
        record.append(MessageAppended(message=Message.assistant("hi"), usage=usage))
    with store.open(readonly=True) as record:
        event = record.entries[0].event
        assert isinstance(event, MessageAppended)
        assert event.usage == usage


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


def test_text_that_is_not_valid_unicode_is_a_named_error_and_nothing_is_written(
    durable_store: Store,
) -> None:
    """A lone surrogate raises `RecordError` (not a bare UnicodeEncodeError); nothing is written.

    (A memory record keeps its values as they are, and writes no text.)
    """
    store = durable_store
    with store.open() as record:
        record.append(MessageAppended(message=Message.user("fine")))
        with pytest.raises(RecordError, match="not valid Unicode"):
            record.append(MessageAppended(message=Message.tool("c1", "bad \udcff")))
        assert len(record) == 1
    with store.open(readonly=True) as again:
        assert len(again) == 1


def _messages_of(events: list[Event]) -> list[Message]:
    return [e.message for e in events if isinstance(e, MessageAppended) and e.usage is None]


@pytest.mark.parametrize("fsync", ["every_event", "every_boundary", "never"])
def test_append_messages_writes_what_one_append_each_writes(
    durable_store: Store, monkeypatch: pytest.MonkeyPatch, fsync: str
) -> None:
    """Same entries, same flushes, same record on reopening as `append_message` of each."""
    store = durable_store
    messages = _messages_of(small_session())
    seen = _spy_flushes(store, monkeypatch)
    with store.open(fsync=fsync) as record:
        record.append_message(messages[0])
        written = record.append_messages(iter(messages[1:]))
        assert written == list(record.entries)[1:]
        assert record.append_messages([]) == []
        with record.batch():
            record.append_messages(messages[:2])
    assert seen == [fsync == "every_event"] * len(messages) + [False, False]
    with store.open(readonly=True) as again:
        assert [e.event for e in again] == [MessageAppended(message=m) for m in messages] + [
            MessageAppended(message=m) for m in messages[:2]
        ]
        assert [e.seq for e in again] == list(range(len(messages) + 2))
        with pytest.raises(RecordError, match="read-only"):
            again.append_messages(messages[:1])
    closed = store.open()
    closed.close()
    with pytest.raises(RecordError, match="closed"):
        closed.append_messages(messages[:1])


def test_append_messages_stops_at_text_that_is_not_valid_unicode(durable_store: Store) -> None:
    """The messages before the bad one are appended; it and those after it are not."""
    store = durable_store
    good = [Message.user("one"), Message.user("two")]
    with store.open() as record:
        with pytest.raises(RecordError, match="not valid Unicode"):
            record.append_messages([*good, Message.tool("c1", "bad \udcff"), Message.user("x")])
        assert record.messages() == good
    with store.open(readonly=True) as again:
        assert again.messages() == good


# -- corruption and hostile files (issue 14) ------------------------------------------------------


def _open_flipped(
    factory: Factory, path: Path, data: bytes, at: int, mask: int, *, readonly: bool
) -> list[Entry] | None:
    """Open `path` (holding `data`) with byte `at` XOR `mask`: its entries, or `None` if refused.

    The byte is flipped in place and restored after, because rewriting a whole file makes ext4
    flush it to disk on every trial.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes([data[at] ^ mask]), at)
        try:
            with factory(path, readonly=readonly, fsync="never") as record:
                return list(record.entries)
        except RecordError:
            if factory is JsonlRecord:  # a refused JSONL file is never touched
                assert (
                    os.pread(fd, len(data) + 1, 0)
                    == data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]
                )
            return None
        finally:
            os.pwrite(fd, data[at : at + 1], at)
    finally:
        os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STORES))
def test_every_single_byte_flip_either_raises_or_loads_the_original_events(
    tmp_path: Path, name: str
) -> None:
    """Flip each byte of a small record in turn: `RecordError`, or exactly the original events.

    Nothing else may come out: no other exception and no silently changed, lost or added
    entry (checksums catch changed entries; SQLite's row count catches lost final rows).
    """
    factory, filename = STORES[name]
    original = tmp_path / filename
    write(factory, original, small_session())
    with factory(original, readonly=True) as record:
        expected = list(record.entries)
    data = original.read_bytes()
    trial = tmp_path / "trial" / filename
    trial.parent.mkdir()
    trial.write_bytes(data)
    outcomes = {"raised": 0, "original": 0}
    for at in range(len(data)):
        # A low-bit flip everywhere (the subtle kind: a count off by one, 4 -> 5); a full flip
        # too where the byte carries content (SQLite pages are mostly zero padding).
        for mask in (0x01, 0xFF) if data[at] or name == "jsonl" else (0x01,):
            for readonly in (True, False) if name == "jsonl" else (True,):
                got = _open_flipped(factory, trial, data, at, mask, readonly=readonly)
                assert got is None or got == expected, (at, mask, readonly)
                outcomes["raised" if got is None else "original"] += 1
    print(f"{name}: {len(data)} bytes, {sum(outcomes.values())} opens: {outcomes}")
    assert outcomes["raised"] > 0


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data.replace(b"Fix the bug", b"Fix the bog"),
        lambda data: b"[" * 50_000 + data,
        lambda data: data + b"not json at all\n",
    ],
)
def test_inspect_reports_a_damaged_record_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[bytes], bytes]
) -> None:
    """`steerable-compaction inspect` on a damaged record: one error line, no traceback."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session())
    path.write_bytes(damage(path.read_bytes()))
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"steerable-compaction: error: {path}:")


class _FailingIndex(SqliteRecord):
    """A store whose derived data fails for one entry (stands in for a search index)."""

    def _on_append(self, entry: Entry) -> None:
        assert self._conn is not None
        self._conn.execute("CREATE TABLE IF NOT EXISTS words (seq INTEGER)")
        self._conn.execute("INSERT INTO words VALUES (?)", (entry.seq,))
        if isinstance(entry.event, MessageAppended) and entry.event.message.text == "c":
            raise RecordError("the index refused it")


def test_the_append_hook_runs_inside_the_entrys_transaction(tmp_path: Path) -> None:
    """What `_on_append` writes commits with its entry, and a failing hook rolls both back."""
    path = tmp_path / "r.db"
    with _FailingIndex(path) as record:
        record.append(MessageAppended(message=Message.user("a")))
        record.append(MessageAppended(message=Message.user("b")))
        with pytest.raises(RecordError, match="the index refused it"):
            record.append(MessageAppended(message=Message.user("c")))
        assert len(record) == 2
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT seq FROM words").fetchall() == [(0,), (1,)]
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (2,)
    conn.close()
    with SqliteRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["a", "b"]


# -- group commit (issue 15, item 4) --------------------------------------------------------------


def test_a_batch_reaches_readers_only_when_it_ends(durable_store: Store) -> None:
    """Appends in `batch()` are in the handle at once and on the medium when the block ends."""
    store = durable_store
    with store.open() as writer, store.open(readonly=True) as reader:
        writer.append(MessageAppended(message=Message.user("before")))
        assert reader.refresh() == 1
        with writer.batch():
            for text in ("a", "b", "c"):
                writer.append(MessageAppended(message=Message.user(text)))
            assert len(writer) == 4
            assert reader.refresh() == 0
        assert reader.refresh() == 3
        assert [m.text for m in reader.messages()] == ["before", "a", "b", "c"]


@pytest.mark.parametrize("policy", ["every_event", "every_boundary"])
def test_a_batch_is_synced_once_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """A JSONL batch is one `write` and at most one sync, whatever it holds."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path, fsync=policy) as record:  # type: ignore[arg-type]
        calls: list[str] = []
        for name in ("write", "fsync", "fdatasync"):
            real = getattr(os, name)

            def spy(*args: object, real: Callable[..., object] = real, name: str = name) -> object:
                calls.append(name)
                return real(*args)

            monkeypatch.setattr(os, name, spy)
        with record.batch():
            for event in small_session()[:8]:  # seven messages and a fold boundary
                record.append(event)
        monkeypatch.undo()
    assert calls in (["write", "fdatasync"], ["write", "fsync"])


def test_a_batch_left_by_an_exception_is_still_committed(store: Store) -> None:
    """The appends made before the block raised are in the handle, so they are written too."""
    with store.open() as record:
        with pytest.raises(ZeroDivisionError), record.batch():
            record.append(MessageAppended(message=Message.user("kept")))
            _ = 1 / 0
    with store.open(readonly=True) as again:
        assert [m.text for m in again.messages()] == ["kept"]


def test_a_refused_append_in_a_batch_leaves_the_others(store: Store) -> None:
    """An invalid event inside a batch raises and writes nothing; the rest of the batch stays."""
    with store.open() as record, record.batch():
        record.append(MessageAppended(message=Message.user("one")))
        with pytest.raises(RecordError, match="unknown bracket"):
            record.append(CompactionSummary(compaction_id="ghost", summary="s"))
        with record.batch():  # nested: joins the outer group
            record.append(MessageAppended(message=Message.user("two")))
    with store.open(readonly=True) as again:
        assert [m.text for m in again.messages()] == ["one", "two"]


def test_closing_inside_a_batch_commits_it(store: Store) -> None:
    """`close()` in the middle of a batch writes the group before it lets go."""
    record = store.open()
    with record.batch():
        record.append(MessageAppended(message=Message.user("in the batch")))
        record.close()
    with store.open(readonly=True) as again:
        assert len(again) == 1


def test_a_hook_failing_in_a_batch_takes_back_only_its_entry(tmp_path: Path) -> None:
    """SQLite: inside a batch each append is a savepoint, so one failure undoes only itself."""
    path = tmp_path / "r.db"
    with _FailingIndex(path) as record:
        with record.batch():
            record.append(MessageAppended(message=Message.user("a")))
            record.append(MessageAppended(message=Message.user("b")))
            with pytest.raises(RecordError, match="the index refused it"):
                record.append(MessageAppended(message=Message.user("c")))
            record.append(MessageAppended(message=Message.user("c again")))
    with SqliteRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["a", "b", "c again"]


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_group_commit_to_a_deleted_file_fails_and_stops_the_writer(
    tmp_path: Path, name: str
) -> None:
    """The file went away during a batch: its end raises, and later appends are refused."""
    factory, filename = STORES[name]
    path = tmp_path / filename
    with factory(path) as record:
        with pytest.raises(RecordError, match="deleted or replaced"), record.batch():
            record.append(MessageAppended(message=Message.user("lost")))
            path.unlink()
        with pytest.raises(RecordError, match="a group commit failed"):
            record.append(MessageAppended(message=Message.user("refused")))


def test_a_large_load_files_its_entries_in_the_oldest_gc_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries of a big load go straight to generation 2, and the collector is back on."""
    import gc

    from steerable_compaction.record import files

    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session())
    monkeypatch.setattr(files, "_PROMOTE_AFTER", 10)  # a small record counts as large here
    assert gc.isenabled()
    with JsonlRecord(path, readonly=True, full=True) as record:
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(entry) in oldest for entry in record.entries)
    assert gc.isenabled()
