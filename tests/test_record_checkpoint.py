"""Resuming from a projection checkpoint (issue 28, item 5): the same record, read less."""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from steerable_compaction import Message, RecordError, RecordLossError
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Event,
    JsonlRecord,
    MessageAppended,
    Record,
    SqliteRecord,
    Usage,
)
from steerable_compaction.record.checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
)
from steerable_compaction.record.jsonl import checkpoint_path

from .record_sessions import (
    NO_POSTGRES,
    POSTGRES_URL,
    Store,
    event_sequences,
    make_store,
    with_crc,
    write_summarized_jsonl,
)

_postgres = pytest.param(
    "postgres", marks=pytest.mark.skipif(POSTGRES_URL is None, reason=NO_POSTGRES)
)
_examples = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)


@pytest.fixture(params=["jsonl", "sqlite", _postgres])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The stores that keep checkpoints: JSONL, SQLite and PostgreSQL (skipped without one)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    return make_store(request.param, tmp_path, url)


def _fresh(store: Store) -> Store:
    """A new record in the same store (a Hypothesis example each)."""
    name = uuid.uuid4().hex[:8]
    if store.path is not None:
        return replace(store, path=store.path.with_name(f"{name}-{store.path.name}"))
    return replace(store, session=f"{store.session}-{name}")


def _bracket(cid: str, record: Record, keep_last: int = 1) -> list[Event]:
    """A summarizing compaction of all but the first and the last `keep_last` messages."""
    span = (1, len(record.projection) - keep_last)
    return [
        CompactionStart(compaction_id=cid, span=span, pre_tokens=900, action="summarize"),
        CompactionSummary(compaction_id=cid, summary=f"summary {cid}"),
        CompactionBoundary(
            action="summarize",
            pre_tokens=900,
            post_tokens=100,
            replacement_count=1,
            compaction_id=cid,
            span=span,
            replacement=(Message.user(f"<summary>{cid}</summary>"),),
        ),
    ]


def _session(record: Record, rounds: int = 3, per_round: int = 6) -> list[int]:
    """Messages with a compaction after each round; the seqs the boundaries took."""
    boundaries = []
    if not len(record):
        record.append_message(Message.system("You are an agent."))
    for r in range(rounds):
        for i in range(per_round):
            record.append_message(Message.user(f"round {r} message {i}"))
        for event in _bracket(f"k{r}-{len(record)}", record):
            boundaries.append(record.append(event).seq)
        record.append_message(Message.user(f"after round {r}"))
    return boundaries


def _same(resumed: Record, full: Record) -> None:
    """Everything a caller reads agrees, before and after the older entries load."""
    assert len(resumed) == len(full)
    assert resumed.messages() == full.messages()
    assert list(resumed.projection.seqs) == list(full.projection.seqs)
    assert resumed.projection.open_brackets == full.projection.open_brackets
    assert resumed.message_count == full.message_count
    assert resumed.reply_count == full.reply_count
    assert resumed.newest_boundary == full.newest_boundary
    assert resumed._newest_usage == full._newest_usage
    assert resumed.entries[len(full) - 1 :] == list(full.entries)[len(full) - 1 :]
    assert list(resumed.entries) == list(full.entries)
    assert resumed.resumed_at is None  # the older entries are loaded now
    assert resumed.reply_count == full.reply_count
    assert resumed.history() == full.history()
    assert resumed.compactions() == full.compactions()
    assert resumed.messages() == full.messages()


def test_an_open_resumes_at_the_newest_boundary_and_reads_the_same(store: Store) -> None:
    """The projection comes from the newest checkpoint; every read agrees with a full read."""
    with store.open() as writer:
        boundaries = _session(writer)
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at == boundaries[-1] + 1
        assert full.resumed_at is None
        _same(resumed, full)


@_examples
@given(events=event_sequences(max_ops=60))
def test_any_session_resumes_to_its_full_read(store: Store, events: list[Event]) -> None:
    """Random sessions (folds, brackets open and closed, reminders, usage) resume exactly."""
    case = _fresh(store)
    with case.open() as writer:
        for event in events:
            writer.append(event)
    with case.open(readonly=True) as resumed, case.open(readonly=True, full=True) as full:
        _same(resumed, full)


def test_a_writer_resumes_appends_and_checkpoints_again(store: Store) -> None:
    """Appends after a resume take the next seqs; the next open resumes at the newer boundary."""
    with store.open() as writer:
        _session(writer, rounds=2)
    with store.open() as writer:
        assert writer.resumed_at is not None
        before = len(writer)
        assert writer.append_message(Message.user("more")).seq == before
        boundaries = _session(writer, rounds=1)
        assert writer.resumed_at is not None  # nothing needed the older entries
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at == boundaries[-1] + 1
        _same(resumed, full)


def test_a_boundary_in_a_batch_is_checkpointed_when_the_batch_commits(store: Store) -> None:
    """A checkpoint never describes entries that are not committed."""
    with store.open() as writer:
        writer.append_message(Message.system("s"))
        for i in range(4):
            writer.append_message(Message.user(f"m{i}"))
        with writer.batch():
            for event in _bracket("k", writer):
                writer.append(event)
            writer.append_message(Message.user("in the batch"))
        end = len(writer)
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at == end
        _same(resumed, full)


def test_no_checkpoint_is_written_while_a_bracket_is_open(store: Store) -> None:
    """A boundary that leaves another bracket open is not checkpointed (its start is older)."""
    with store.open() as writer:
        writer.append_message(Message.system("s"))
        for i in range(6):
            writer.append_message(Message.user(f"m{i}"))
        writer.append(
            CompactionStart(compaction_id="open", span=(5, 6), pre_tokens=1, action="compact")
        )
        for event in _bracket("k", writer, keep_last=2):
            writer.append(event)
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at is None
        _same(resumed, full)


def test_reading_from_the_checkpoint_on_loads_nothing_older(store: Store) -> None:
    """Indexes and slices from the checkpoint on come from the tail; an older one loads all."""
    with store.open() as writer:
        _session(writer)
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        at = resumed.resumed_at
        assert at is not None
        entries = resumed.entries
        assert len(entries) == len(full)
        assert entries[at:] == list(full.entries)[at:]
        assert entries[-1] == full.entries[-1]
        assert resumed.resumed_at == at
        assert entries[at - 1] == full.entries[at - 1]
        assert resumed.resumed_at is None
        assert entries == full.entries


def test_the_reply_count_and_newest_boundary_need_no_older_entries(store: Store) -> None:
    """`reply_count` (the rounds a session ran) comes from the checkpoint, then the tail.

    Replies with billed usage and without are counted alike, on open and as appended.
    """
    with store.open() as writer:
        writer.append_message(Message.system("s"))
        for r in range(3):
            writer.append_message(Message.user(f"question {r}"))
            writer.append(
                MessageAppended(message=Message.assistant(f"a{r}"), usage=Usage(prompt_tokens=9))
            )
            writer.append_message(Message.assistant(f"more {r}"))
            boundary = [writer.append(e).seq for e in _bracket(f"k{r}", writer)][-1]
        writer.append_message(Message.assistant("after"))
        assert (writer.reply_count, writer.newest_boundary) == (7, boundary)
    with store.open(readonly=True) as resumed:
        assert resumed.resumed_at is not None
        assert (resumed.reply_count, resumed.newest_boundary) == (7, boundary)
        resumed.history()  # the older entries load, and agree
        assert resumed.resumed_at is None and resumed.reply_count == 7


def test_a_reader_refreshes_from_where_it_resumed(store: Store) -> None:
    """Entries appended after a resumed reader opened are read on `refresh()`."""
    with store.open() as writer:
        _session(writer, rounds=2)
        with store.open(readonly=True) as reader:
            assert reader.resumed_at is not None
            writer.append_message(Message.user("new"))
            assert reader.refresh() == 1
            assert reader.messages() == writer.messages()


# -- what can go wrong ---------------------------------------------------------------------------


def _checkpoint_fails(monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    def fail(self: Record, checkpoint: Checkpoint) -> None:
        raise OSError("killed before the checkpoint was written")

    monkeypatch.setattr(store.cls, "_store_checkpoint", fail)


def test_a_crash_before_the_checkpoint_resumes_from_the_one_before(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The boundary is committed, its checkpoint is not: the older checkpoint still holds."""
    with store.open() as writer:
        first = _session(writer, rounds=1)
        with monkeypatch.context() as patch:
            _checkpoint_fails(patch, store)
            with caplog.at_level(logging.WARNING):
                _session(writer, rounds=1)  # its append succeeds all the same
    assert "no checkpoint kept" in caplog.text
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at == first[-1] + 1
        _same(resumed, full)


def test_a_crash_before_the_first_checkpoint_reads_everything(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no checkpoint at all (or a record from an older build) the open reads it whole."""
    with store.open() as writer:
        _checkpoint_fails(monkeypatch, store)
        _session(writer)
    monkeypatch.undo()
    with store.open(readonly=True) as resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at is None
        _same(resumed, full)


def _damage_checkpoint(store: Store, change: Callable[[bytes], bytes]) -> None:
    """Overwrite the stored checkpoint's bytes with `change(old)`."""
    if store.name == "jsonl":
        assert store.path is not None
        path = checkpoint_path(store.path)
        path.write_bytes(change(path.read_bytes()))
    elif store.name == "sqlite":
        assert store.path is not None
        with sqlite3.connect(store.path) as conn:
            (body,) = conn.execute("SELECT body FROM projection_checkpoint").fetchone()
            conn.execute("UPDATE projection_checkpoint SET body = ?", (change(body),))
        conn.close()
    else:
        import psycopg

        assert store.url is not None
        with psycopg.connect(store.url, autocommit=True) as pg:
            row = pg.execute(
                "SELECT body FROM steerable_checkpoints WHERE session = %s", (store.session,)
            ).fetchone()
            assert row is not None
            pg.execute(
                "UPDATE steerable_checkpoints SET body = %s WHERE session = %s",
                (change(bytes(row[0])), store.session),
            )


def _layout(line: bytes, version: int) -> bytes:
    """A checkpoint line relabelled as layout `version`, its checksum made right again."""
    head = line[: line.rfind(b',"crc":')]
    old = b'{"checkpoint":%d,' % CHECKPOINT_VERSION
    return with_crc(head.replace(old, b'{"checkpoint":%d,' % version, 1) + b"}") + b"\n"


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.replace(b"round 2", b"round 9"),  # a changed byte: its checksum fails
        lambda b: b[: len(b) // 2],  # torn
        lambda b: b"",
        lambda b: _layout(b, CHECKPOINT_VERSION + 1),
        lambda b: _layout(b, 1),  # before `replies`
    ],
    ids=["byte", "torn", "empty", "newer", "older"],
)
def test_a_damaged_checkpoint_falls_back_to_the_full_read(
    store: Store, change: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """Bad checkpoint bytes are never trusted: a warning, and the whole record is read."""
    with store.open() as writer:
        _session(writer)
    _damage_checkpoint(store, change)
    with caplog.at_level(logging.WARNING):
        resumed = store.open(readonly=True)
    with resumed, store.open(readonly=True, full=True) as full:
        assert resumed.resumed_at is None
        assert "reading the whole record" in caplog.text
        _same(resumed, full)


def test_a_checkpoint_that_lies_is_found_when_the_older_entries_load(store: Store) -> None:
    """A well-formed checkpoint whose projection is not the record's fails on first use."""

    def lie(data: bytes) -> bytes:
        checkpoint = decode_checkpoint(data)
        wrong = (*checkpoint.messages[:-1], Message.user("not what the record says"))
        return encode_checkpoint(replace(checkpoint, messages=wrong))

    with store.open() as writer:
        _session(writer)
    _damage_checkpoint(store, lie)
    with store.open(readonly=True) as resumed:
        assert resumed.resumed_at is not None
        with pytest.raises(RecordError, match="do not fold into the checkpoint"):
            resumed.history()
        assert resumed.resumed_at is not None  # the handle stays as it was
    with store.open(readonly=True, full=True) as full:
        assert full.messages()[-1] != Message.user("not what the record says")


def test_a_record_shorter_than_its_checkpoint_is_read_whole_and_its_loss_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSONL file cut before its checkpoint's line: full read, and the mark still refuses."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as writer:
        boundaries = _session(writer)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: boundaries[-1]]))  # cut at a line boundary: no torn line
    with pytest.raises(RecordLossError):
        JsonlRecord(path)
    with caplog.at_level(logging.WARNING):
        resumed = JsonlRecord(path, readonly=True)
    with resumed, JsonlRecord(path, readonly=True, full=True) as full:
        assert resumed.resumed_at is None
        assert "does not match" in caplog.text
        _same(resumed, full)


def test_a_changed_row_under_the_checkpoint_unbinds_it_and_is_found(tmp_path: Path) -> None:
    """The row a checkpoint is bound to changed: the open reads every row, and finds it."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        boundaries = _session(writer)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE events SET body = replace(body, 'summary>', 'SUMMARY>') WHERE seq = ?",
            (boundaries[-1],),
        )
    conn.close()
    with pytest.raises(RecordError, match="checksum mismatch") as info:
        SqliteRecord(path, readonly=True)
    assert info.value.line == boundaries[-1]


def test_a_new_record_removes_a_checkpoint_left_at_its_path(tmp_path: Path) -> None:
    """A JSONL writer creating its file drops the checkpoint of a record that was there."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as writer:
        _session(writer)
    assert checkpoint_path(path).exists()
    path.unlink()
    with JsonlRecord(path) as writer:
        writer.append(MessageAppended(message=Message.user("new")))
    assert not checkpoint_path(path).exists()
    with JsonlRecord(path, readonly=True) as reader:
        assert reader.resumed_at is None and len(reader) == 1


def test_a_torn_final_line_after_the_checkpoint_is_dropped_as_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Torn-line recovery is unchanged on the tail a resumed writer reads."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as writer:
        _session(writer)
        n = len(writer)
    with open(path, "ab") as fh:
        fh.write(b'{"v":4,"seq":%d,"kind":"message","mess' % n)
    with caplog.at_level(logging.WARNING), JsonlRecord(path) as writer:
        assert writer.resumed_at is not None and len(writer) == n
    assert "dropping a torn final line" in caplog.text
    with (
        JsonlRecord(path, readonly=True) as resumed,
        JsonlRecord(path, readonly=True, full=True) as full,
    ):
        _same(resumed, full)


# -- the checkpoint line ---------------------------------------------------------------------------


def _checkpoint() -> Checkpoint:
    return Checkpoint(
        seq=5,
        last_crc=123,
        last_size=40,
        offset=300,
        message_count=3,
        replies=0,
        newest_usage=-1,
        newest_boundary=4,
        seqs=(0, 4),
        messages=(Message.system("s"), Message.user("summary")),
    )


def test_a_checkpoint_line_round_trips() -> None:
    """What `encode_checkpoint` writes, `decode_checkpoint` reads back equal."""
    checkpoint = _checkpoint()
    assert decode_checkpoint(encode_checkpoint(checkpoint)) == checkpoint


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda b: b.replace(b'"seq":5', b'"seq":6'), "checksum mismatch"),
        (lambda b: b[:-1], "no checksum"),
        (lambda b: b'{"a":1,"crc":2}\n', "checksum mismatch"),
    ],
)
def test_a_bad_checkpoint_line_is_refused(edit: Callable[[bytes], bytes], match: str) -> None:
    """A changed, torn or foreign line raises `RecordError` (the store then reads in full)."""
    with pytest.raises(RecordError, match=match):
        decode_checkpoint(edit(encode_checkpoint(_checkpoint())))


def test_a_record_from_before_checksums_resumes_once_a_new_build_compacts_it(
    tmp_path: Path,
) -> None:
    """v3 lines (no checksum) before a checkpoint load on first use, unchecked, as on open."""
    path = tmp_path / "r.jsonl"
    lines = [
        json.dumps(
            {
                "v": 3,
                "seq": i,
                "kind": "message",
                "message": {"role": "user", "parts": [{"type": "text", "text": f"old {i}"}]},
            },
            separators=(",", ":"),
        )
        for i in range(6)
    ]
    path.write_text("".join(line + "\n" for line in lines))
    with JsonlRecord(path) as writer:
        assert writer.resumed_at is None
        _session(writer, rounds=2)
    with (
        JsonlRecord(path, readonly=True) as resumed,
        JsonlRecord(path, readonly=True, full=True) as full,
    ):
        assert resumed.resumed_at is not None
        _same(resumed, full)


@pytest.mark.parametrize("name", ["jsonl", "sqlite"])
async def test_a_resumed_loop_turn_reads_no_older_entries_and_asks_the_same(
    tmp_path: Path, name: str
) -> None:
    """A turn on a resumed record sends what a full read sends, and leaves older entries unread.

    The history tools are offered (a checkpoint follows a boundary); their index catches up
    at the first search instead of at the first step.
    """
    from steerable_compaction.loop import CoreLoop
    from steerable_compaction.testing import ScriptedProvider

    requests = []
    for full in (False, True):
        store = make_store(name, tmp_path / ("full" if full else "resumed"))
        store.path.parent.mkdir()  # type: ignore[union-attr]
        with store.open() as writer:
            _session(writer)  # the same session in both
        with store.open(full=full) as record:
            provider = ScriptedProvider([Message.assistant("done")])
            loop = CoreLoop(provider, record, history_tokens=1000)
            result = await loop.run_turn("next")
            assert result.stop == "answered"
            assert loop.history_offered
            assert (record.resumed_at is not None) is not full
            requests.append(provider.requests[0])
    assert requests[0].messages == requests[1].messages
    assert [t.name for t in requests[0].tools] == [t.name for t in requests[1].tools]


def test_append_messages_numbers_each_entry_when_older_entries_load_midway(
    tmp_path: Path,
) -> None:
    """An iterable that reads a resumed record's history between messages: seqs stay in order."""
    path = tmp_path / "s.jsonl"
    write_summarized_jsonl(path)
    record = JsonlRecord(path)
    assert record.resumed_at is not None

    def messages() -> Iterator[Message]:
        yield Message.user("a")
        record.history()  # loads the older entries
        yield Message.user("b")
        yield Message.user("c")

    assert [e.seq for e in record.append_messages(messages())] == [6, 7, 8]
    record.close()
    with JsonlRecord(path) as again:
        assert [e.seq for e in again] == list(range(9))


def test_append_messages_of_nothing_is_no_write(tmp_path: Path) -> None:
    """An empty `append_messages` returns nothing, even on a handle that may not write."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        writer.append_message(Message.system("s"))
    with SqliteRecord(path, readonly=True) as reader:
        assert reader.append_messages([]) == []
        with pytest.raises(RecordError, match="read-only"):
            reader.append_messages([Message.user("x")])
