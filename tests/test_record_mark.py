"""The high-water mark: a record shorter than what its writer committed is noticed on open.

Issue 26: a damaged SQLite write-ahead log and a JSONL file cut at a line boundary used to open
shorter without a word. A crash is simulated by copying a live writer's files (its database,
`-wal`, `-shm` and mark) while it holds them: what a killed writer leaves.
"""

from __future__ import annotations

import logging
import pickle
import shutil
from pathlib import Path

import pytest

from steerable_compaction import Message, RecordError, RecordLossError
from steerable_compaction.record import (
    CompactionBoundary,
    JsonlRecord,
    MessageAppended,
    Record,
    SqliteRecord,
)
from steerable_compaction.record.mark import MARK_SUFFIX, Mark, MarkWriter, mark_path, read_mark

DURABLE = CompactionBoundary(action="compact", pre_tokens=9, post_tokens=5, replacement_count=0)


def messages(record: Record, count: int, *, size: int = 40) -> None:
    for i in range(count):
        record.append_message(Message.user(f"message {i} " + "x" * size))


def crash_image(path: Path, into: Path) -> Path:
    """Copy the files a writer of `path` has open right now, as a kill would leave them."""
    into.mkdir()
    for suffix in ("", "-wal", "-shm", MARK_SUFFIX):
        source = path.with_name(path.name + suffix)
        if source.exists():
            shutil.copyfile(source, into / source.name)
    return into / path.name


def test_the_mark_counts_commits_and_syncs_under_each_policy(tmp_path: Path) -> None:
    """`written` follows every commit; `synced` durable events, synced batches and the close."""
    for store, name in ((JsonlRecord, "r.jsonl"), (SqliteRecord, "r.db")):
        path = tmp_path / name
        with store(path) as record:
            assert read_mark(path) == Mark(0, 0)  # a new record starts its mark
            messages(record, 3)
            assert read_mark(path) == Mark(3, 0)  # handed to the OS, not synced
            record.append(DURABLE)
            assert read_mark(path) == Mark(4, 4)
            with record.batch():
                messages(record, 2)
                assert read_mark(path) == Mark(4, 4)  # nothing committed yet
            assert read_mark(path) == Mark(6, 4)
            with record.batch():
                record.append_message(Message.user("then"))
                record.append(DURABLE)
            assert read_mark(path) == Mark(8, 8)
            messages(record, 1)
        assert read_mark(path) == Mark(9, 9)  # a clean close syncs
        with store(path, fsync="every_event") as record:
            messages(record, 1)
            assert read_mark(path) == Mark(10, 10)
        with store(path, fsync="never") as record:
            record.append(DURABLE)
        assert read_mark(path) == Mark(11, 10)


def test_a_jsonl_file_cut_at_a_line_boundary_is_refused_to_a_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: the lines are intact, only fewer: a writer is refused, a reader warned.

    Nothing is changed; removing the mark is how to continue from what is left.
    """
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        messages(record, 5)
        record.append(DURABLE)
        messages(record, 4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:7]))  # cut after seq 6
    before = (path.read_bytes(), mark_path(path).read_bytes())
    with pytest.raises(RecordLossError) as refused:
        JsonlRecord(path)
    error = refused.value
    assert (error.found, error.written, error.synced) == (7, 10, 10)
    assert "seqs 7 to 9 are missing" in str(error) and "synced to disk are gone" in str(error)
    assert "remove 'r.jsonl.mark' to continue from seq 7" in str(error)
    assert (path.read_bytes(), mark_path(path).read_bytes()) == before
    back = pickle.loads(pickle.dumps(error))
    assert vars(back) == vars(error) and str(back) == str(error)
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        with JsonlRecord(path, readonly=True) as reader:
            assert len(reader) == 7
    assert "seqs 7 to 9 are missing" in caplog.text and "(reading what is left)" in caplog.text
    mark_path(path).unlink()
    with JsonlRecord(path) as writer:
        assert len(writer) == 7
    assert read_mark(path) == Mark(7, 7)


def test_a_torn_line_is_reported_against_the_mark_and_dropped_only_after_the_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: recovery names the last seq found and the writer's last synced boundary.

    A torn line after every committed one is dropped (logged); a torn line with committed lines
    missing before it is not touched: the writer is refused first.
    """
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(DURABLE)
        messages(record, 2)
        image = crash_image(path, tmp_path / "crash")  # the mark says 3 written, 1 synced
    image.write_bytes(image.read_bytes() + b'{"v":4,"seq":3,"kind":"mess')
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        with JsonlRecord(image) as writer:
            assert len(writer) == 3
    assert "dropping a torn final line" in caplog.text
    assert (
        "the last seq found is 2, the writer had committed up to seq 2, synced up to seq 0"
    ) in caplog.text
    shortened = image.read_bytes().splitlines(keepends=True)[:2]
    torn = b"".join(shortened) + b'{"v":4,"seq":2,"ki'
    image.write_bytes(torn)
    with pytest.raises(RecordLossError):
        JsonlRecord(image)
    assert image.read_bytes() == torn  # not truncated


def test_a_damaged_sqlite_log_is_refused_before_any_writable_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: a cut or flipped `-wal` loses committed rows and their count alike.

    The writer compares through a read-only connection and leaves the log byte for byte (a
    writable connection's close would checkpoint it away); a reader opens what is left, warned.
    """
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        messages(record, 30, size=400)
        record.append(DURABLE)
        messages(record, 30, size=400)
        image = crash_image(path, tmp_path / "crash")
    wal = image.with_name(image.name + "-wal")
    data = wal.read_bytes()
    damaged = {
        "cut": data[: len(data) // 2],
        "flipped": data[: len(data) // 3]
        + bytes([data[len(data) // 3] ^ 0xFF])
        + data[1 + len(data) // 3 :],
    }
    for kind, wal_bytes in damaged.items():
        wal.write_bytes(wal_bytes)
        with pytest.raises(RecordLossError) as refused:
            SqliteRecord(image)
        assert refused.value.written == 61 and refused.value.found < 61, kind
        assert wal.read_bytes() == wal_bytes, kind
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
            with SqliteRecord(image, readonly=True) as reader:
                assert len(reader) == refused.value.found
        assert "are missing" in caplog.text, kind
        assert wal.read_bytes() == wal_bytes, kind
    wal.write_bytes(data)
    with SqliteRecord(image) as whole:  # the undamaged crash image loses nothing
        assert len(whole) == 61


def test_a_reader_compares_with_the_mark_from_before_it_read(tmp_path: Path) -> None:
    """A live writer may commit (and move its mark) while a reader loads: that is no loss."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as writer:
        messages(writer, 2)
        original = JsonlRecord._read_new

        def racing(self: JsonlRecord) -> int:
            if self.readonly:
                messages(writer, 3)  # the writer runs ahead between the mark and the rows
            return original(self)

        JsonlRecord._read_new = racing  # type: ignore[method-assign]
        try:
            with JsonlRecord(path, readonly=True) as reader:
                assert len(reader) == 5
        finally:
            JsonlRecord._read_new = original  # type: ignore[method-assign]


def test_a_missing_damaged_or_stale_mark_checks_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No mark: nothing to compare. A damaged one is ignored (logged) and replaced by a writer.

    A writer that creates its record starts a new mark over one a deleted record left.
    """
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        messages(record, 3)
    mark_path(path).write_bytes(b"steerable-compaction mark v1 written=9")
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        with JsonlRecord(path) as record:
            assert len(record) == 3
    assert "the high-water mark is damaged; not checked" in caplog.text
    assert read_mark(path) == Mark(3, 3)
    flipped = bytearray(mark_path(path).read_bytes())
    flipped[45] ^= 1  # a digit changed: the CRC no longer matches
    mark_path(path).write_bytes(bytes(flipped))
    assert read_mark(path) is None
    path.unlink()
    MarkWriter(path, 50, reset=True).close()
    with JsonlRecord(path) as record:
        record.append_message(Message.user("new"))
    assert read_mark(path) == Mark(1, 1)


def test_a_mark_that_cannot_be_written_never_fails_an_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit it counts has happened: the mark stops (logged) and lags, the append stands."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        messages(record, 1)

        def full(*args: object) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("steerable_compaction.record.mark.os.pwrite", full)
        with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
            record.append(MessageAppended(message=Message.user("still recorded")))
        monkeypatch.undo()
        messages(record, 1)
    assert "the high-water mark stops here (" in caplog.text
    assert read_mark(path) == Mark(1, 0)  # lags: never ahead
    with JsonlRecord(path, readonly=True) as reader:
        assert len(reader) == 3


def test_a_mark_file_that_cannot_be_opened_leaves_the_writer_without_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Logged; the record works as before marks existed."""
    path = tmp_path / "r.jsonl"
    mark_path(path).mkdir()  # a directory where the mark would go
    with caplog.at_level(logging.WARNING, logger="steerable_compaction.record"):
        with JsonlRecord(path) as record:
            messages(record, 2)
    assert "no high-water mark is kept" in caplog.text
    assert "the high-water mark cannot be read" not in caplog.text
    with JsonlRecord(path, readonly=True) as reader:
        assert len(reader) == 2
    assert "the high-water mark cannot be read" in caplog.text


def test_an_emptied_or_foreign_database_under_a_mark_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    """An SQLite file emptied under its mark lost every row; one that is no database says so."""
    path = tmp_path / "r.db"
    with SqliteRecord(path) as record:
        messages(record, 5)
    path.write_bytes(b"")
    with pytest.raises(RecordLossError) as refused:
        SqliteRecord(path)
    assert (refused.value.found, refused.value.written) == (0, 5)
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(RecordError, match="not a readable SQLite record"):
        SqliteRecord(path)


def test_a_loss_of_events_not_yet_synced_is_told_apart(tmp_path: Path) -> None:
    """Missing events past the last sync: what a power cut may take, or a cut file."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(DURABLE)
        messages(record, 4)
        image = crash_image(path, tmp_path / "crash")  # 5 committed, 1 synced
    lines = image.read_bytes().splitlines(keepends=True)
    image.write_bytes(b"".join(lines[:3]))
    with pytest.raises(RecordLossError) as refused:
        JsonlRecord(image)
    assert (refused.value.found, refused.value.written, refused.value.synced) == (3, 5, 1)
    assert "Events not yet synced are gone: a power cut" in str(refused.value)
