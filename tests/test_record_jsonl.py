from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerable_compaction import Message, RecordError
from steerable_compaction.record import (
    SCHEMA_VERSION,
    CompactionBoundary,
    Edit,
    Entry,
    Event,
    JsonlRecord,
    MessageAppended,
    SqliteRecord,
    project,
)
from steerable_compaction.record.codec import encode_line
from steerable_compaction.record.mark import MarkWriter

from .record_sessions import event_sequences, small_session, with_crc, write

FIXTURES = Path(__file__).parent / "fixtures"
_tmp = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)


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
    # A crash in that write leaves the mark where the last finished write put it.
    MarkWriter(path, complete_lines, reset=True).close()
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


@pytest.mark.parametrize(
    ("policy", "fsyncs"), [("every_event", 2), ("every_boundary", 1), ("never", 0)]
)
def test_jsonl_flushes_with_os_fsync_per_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, fsyncs: int
) -> None:
    """A JSONL writer syncs exactly where its policy says (and once on close).

    It syncs with `os.fdatasync` where the OS has it, else `os.fsync`: both are counted.
    """
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, [])
    calls: list[int] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name, None)
        if real is not None:

            def counting(fd: int, real: Callable[[int], None] = real) -> None:
                calls.append(fd)
                real(fd)

            monkeypatch.setattr(os, name, counting)
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
        (info,) = record.compactions()  # the action as written, marked as a v2 boundary
        assert (info.status, info.action, info.pre_tokens) == ("v2", raw[8]["action"], 5120)
        assert path.read_bytes() == original
        record.append(MessageAppended(message=Message.user("written as v3")))
    assert path.read_bytes().startswith(original)
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert (last["v"], last["seq"]) == (SCHEMA_VERSION, 15)
    with JsonlRecord(path, readonly=True) as again:
        assert again.messages()[-1] == Message.user("written as v3")


@pytest.mark.parametrize("block", [1, 1 << 20])
@pytest.mark.parametrize("readonly", [True, False])
def test_a_file_that_is_not_a_record_is_refused_and_left_whole(
    tmp_path: Path, readonly: bool, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a file without newlines (a JSON config, a database) is never 'torn' to 0.

    An SQLite file is named as one even when blocks are shorter than SQLite's header.
    """
    from steerable_compaction.record import jsonl

    monkeypatch.setattr(jsonl, "_BLOCK", block)
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


# -- a complete final line is never cut (issue 14, item 3) ----------------------------------------


def _checksummed(seq: int, message: dict[str, object]) -> bytes:
    body = json.dumps({"v": 4, "seq": seq, "kind": "message", "message": message})
    return with_crc(body.replace(", ", ",").replace(": ", ":").encode())


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (with_crc(b'{"v":5,"seq":2,"kind":"message"}'), "newer steerable-compaction"),
        (b'{"v":3,"seq":2,"kind":"note","text":"added by hand"}', "unknown kind 'note'"),
        (_checksummed(2, {"role": "robot", "parts": []}), "role"),
        (_checksummed(7, {"role": "user", "parts": []}), "out of order"),
        (_checksummed(2, {"role": "user", "parts": []})[:-3] + b"0}", "checksum mismatch"),
        (_checksummed(2, {"role": "user", "parts": []}) + b"X", "Extra data"),
    ],
)
@pytest.mark.parametrize("readonly", [True, False])
def test_a_complete_final_line_that_does_not_load_is_an_error_and_the_file_is_kept(
    tmp_path: Path, tail: bytes, reason: str, readonly: bool
) -> None:
    """A final line without its newline whose JSON is complete is no torn write: `RecordError`.

    A newer entry, an annotation, a failed validation, a changed byte, a final newline that was
    overwritten: none may be truncated away, by a reader or by a writer.
    """
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])
    data = path.read_bytes() + tail
    path.write_bytes(data)
    with pytest.raises(RecordError, match=reason) as info:
        JsonlRecord(path, readonly=readonly)
    assert (info.value.path, info.value.line) == (path, 3)
    assert path.read_bytes() == data


@pytest.mark.parametrize("newline", [b"X", b"\x8a", b"}", b" ", b"\r"])
def test_an_overwritten_final_newline_is_corruption(tmp_path: Path, newline: bytes) -> None:
    """The last byte of a record changed, even to JSON whitespace: `RecordError`, file kept."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session())
    data = path.read_bytes()[:-1] + newline
    path.write_bytes(data)
    for readonly in (True, False):
        with pytest.raises(RecordError) as info:
            JsonlRecord(path, readonly=readonly)
        assert info.value.line == len(small_session())
        assert path.read_bytes() == data


def test_a_torn_line_of_a_checksummed_entry_is_still_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every prefix of a v4 line (torn mid-checksum too) is a torn write, cut by a writer."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:3])
    intact = path.read_bytes()
    line = encode_line_at(3)
    for cut in range(1, len(line) - 1):
        path.write_bytes(intact + line[:cut])
        with JsonlRecord(path) as writer:
            assert len(writer) == 3
        assert path.read_bytes() == intact
    assert "dropping a torn final line" in caplog.text


# -- checksums (issue 14, item 5) -----------------------------------------------------------------


def test_a_changed_byte_inside_a_line_names_the_line(tmp_path: Path) -> None:
    """A text changed on disk (same length, still valid JSON) fails its checksum on a full open.

    Before the checkpoint the check waits for the first use of those entries (issue 28).
    """
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session())
    data = path.read_bytes()
    changed = data.replace(b"Fix the bug in f2.py", b"Fix the bug in f3.py")
    assert changed != data
    path.write_bytes(changed)
    with pytest.raises(RecordError, match="checksum mismatch") as info:
        JsonlRecord(path, readonly=True, full=True)
    assert info.value.line == 2
    with JsonlRecord(path, readonly=True) as resumed:
        assert resumed.resumed_at is not None
        with pytest.raises(RecordError, match="checksum mismatch") as info:
            resumed.history()
        assert info.value.line == 2


def test_a_record_written_before_checksums_loads_unchecked_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """v3 entries load without a checksum (logged once per open); new appends are v4."""
    path = tmp_path / "r.jsonl"
    lines = [
        json.dumps(
            {"v": 3, "seq": i, "kind": "message", "message": {"role": "user", "parts": []}},
            separators=(",", ":"),
        ).encode()
        for i in range(3)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.INFO, logger="steerable_compaction.record"):
        with JsonlRecord(path) as writer:
            writer.append(MessageAppended(message=Message.user("now checked")))
        with JsonlRecord(path, readonly=True) as reader:
            assert len(reader) == 4
            assert reader.refresh() == 0
    told = [r for r in caplog.records if "predate checksums" in r.getMessage()]
    assert len(told) == 2  # once per open, not once per entry or per refresh
    assert "3 entries" in told[0].getMessage()
    assert json.loads(path.read_bytes().splitlines()[-1])["v"] == SCHEMA_VERSION


def test_an_unchecked_entry_after_checksummed_ones_is_an_error(tmp_path: Path) -> None:
    """No writer puts a v3 entry after a v4 one: such a line was altered."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])
    old = json.dumps(
        {"v": 3, "seq": 2, "kind": "message", "message": {"role": "user", "parts": []}},
        separators=(",", ":"),
    ).encode()
    path.write_bytes(path.read_bytes() + old + b"\n")
    with pytest.raises(RecordError, match="a v3 entry after checksummed ones") as info:
        JsonlRecord(path, readonly=True)
    assert info.value.line == 3


# -- hostile input (issue 14, item 4) and files that are not records (item 6) ----------------------


def test_a_deeply_nested_line_is_a_record_error_naming_it(tmp_path: Path) -> None:
    """JSON nested past the interpreter's recursion limit is a `RecordError`, not a crash."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])
    path.write_bytes(path.read_bytes() + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    for readonly in (True, False):
        with pytest.raises(RecordError, match="nested too deeply") as info:
            JsonlRecord(path, readonly=readonly)
        assert info.value.line == 3


@pytest.mark.parametrize("readonly", [True, False])
def test_a_directory_or_fifo_is_refused_without_blocking(tmp_path: Path, readonly: bool) -> None:
    """Only a regular file can be a record: a directory or a FIFO is a `RecordError`."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        with pytest.raises(RecordError, match="not a regular file"):
            JsonlRecord(path, readonly=readonly)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# -- a writer whose file went away (issue 14, item 7) ---------------------------------------------


def test_appending_after_the_file_was_deleted_is_an_error_not_a_lost_write(
    tmp_path: Path,
) -> None:
    """A deleted record file: the next append raises, and no append is reported as kept."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(MessageAppended(message=Message.user("kept")))
        path.unlink()
        with pytest.raises(RecordError, match="deleted or replaced"):
            record.append(MessageAppended(message=Message.user("would be lost")))
        assert len(record) == 1
        # A second writer can now create the path; the first one still refuses to go on.
        with JsonlRecord(path) as second:
            second.append(MessageAppended(message=Message.user("new file")))
        with pytest.raises(RecordError, match="deleted or replaced"):
            record.append(MessageAppended(message=Message.user("still lost")))
    with JsonlRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["new file"]


def test_appending_after_the_file_was_replaced_is_an_error_and_leaves_the_new_file(
    tmp_path: Path,
) -> None:
    """A record renamed over by another file: the writer stops and the new file stays whole."""
    path = tmp_path / "r.jsonl"
    other = tmp_path / "other.jsonl"
    write(JsonlRecord, other, small_session()[:1])
    replacement = other.read_bytes()
    with JsonlRecord(path) as record:
        record.append(MessageAppended(message=Message.user("mine")))
        os.replace(other, path)
        with pytest.raises(RecordError, match="deleted or replaced") as info:
            record.append(MessageAppended(message=Message.user("lost")))
        assert info.value.path == path
    assert path.read_bytes() == replacement


class _FailingHook(JsonlRecord):
    """A JSONL store whose derived data refuses the message "c"."""

    def _on_append(self, entry: Entry) -> None:
        if isinstance(entry.event, MessageAppended) and entry.event.message.text == "c":
            raise RecordError("the index refused it")


def test_a_failing_append_hook_never_leaves_disk_and_memory_apart(tmp_path: Path) -> None:
    """In a batch the refused line is taken back; outside one, the writer stops for good."""
    path = tmp_path / "r.jsonl"
    with _FailingHook(path) as record:
        with record.batch():
            record.append(MessageAppended(message=Message.user("a")))
            with pytest.raises(RecordError, match="refused"):
                record.append(MessageAppended(message=Message.user("c")))
            record.append(MessageAppended(message=Message.user("b")))
        with pytest.raises(RecordError, match="refused"):
            record.append(MessageAppended(message=Message.user("c")))
        with pytest.raises(RecordError, match="hook failed after its line was written"):
            record.append(MessageAppended(message=Message.user("d")))
    with JsonlRecord(path, readonly=True) as again:
        assert [m.text for m in again.messages()] == ["a", "b", "c"]


def test_a_record_that_cannot_be_opened_or_written_is_a_record_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OS errors become `RecordError`s naming the file; a failed write stops the writer."""
    missing = tmp_path / "no-such-dir" / "r.jsonl"
    with pytest.raises(RecordError, match="cannot open") as info:
        JsonlRecord(missing)
    assert info.value.path == missing
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(MessageAppended(message=Message.user("kept")))

        def full(fd: int, data: object) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "write", full)
        with pytest.raises(RecordError, match="No space left on device"):
            record.append(MessageAppended(message=Message.user("lost")))
        monkeypatch.undo()
        with pytest.raises(RecordError, match="a write failed"):
            record.append(MessageAppended(message=Message.user("refused")))
        assert len(record) == 1


def test_a_read_that_fails_is_a_record_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OS error while reading (an I/O error, say) is a `RecordError` naming the file."""
    path = tmp_path / "r.jsonl"
    write(JsonlRecord, path, small_session()[:2])

    def failing(self: JsonlRecord) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(JsonlRecord, "_read_new", failing)
    with pytest.raises(RecordError, match="cannot read: Input/output error") as info:
        JsonlRecord(path, readonly=True)
    assert info.value.path == path


# -- reading in blocks (issue 15) ----------------------------------------------------------------


def _outcome(path: Path) -> tuple[object, ...]:
    """What opening `path` read-only gives: its entries, or the error and where it names."""
    try:
        with JsonlRecord(path, readonly=True) as record:
            return ("ok", list(record.entries), list(record.projection.messages))
    except RecordError as exc:
        return ("error", exc.reason, exc.line)


@_tmp
@given(
    events=event_sequences(max_ops=20),
    cut=st.floats(0, 1),
    flip=st.none() | st.floats(0, 1),
    block=st.integers(1, 300),
)
def test_reading_in_blocks_of_any_size_is_reading_whole(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[Event],
    cut: float,
    flip: float | None,
    block: int,
) -> None:
    """Cut short or with a byte changed, a file opens alike in blocks of any size and whole."""
    from steerable_compaction.record import jsonl

    path = tmp_path_factory.mktemp("blocks") / "r.jsonl"
    write(JsonlRecord, path, events)
    data = bytearray(path.read_bytes()[: int(len(path.read_bytes()) * cut)])
    if flip is not None and data:
        data[int((len(data) - 1) * flip)] ^= 0x5A
    path.write_bytes(bytes(data))
    whole = _outcome(path)
    saved = jsonl._BLOCK
    jsonl._BLOCK = block
    try:
        assert _outcome(path) == whole
    finally:
        jsonl._BLOCK = saved


def test_a_reader_refreshes_in_blocks_across_a_growing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of 16 bytes: every refresh loads exactly what the writer appended since."""
    from steerable_compaction.record import jsonl

    monkeypatch.setattr(jsonl, "_BLOCK", 16)
    path = tmp_path / "r.jsonl"
    events = small_session()
    write(JsonlRecord, path, events[:4])
    with JsonlRecord(path, readonly=True) as reader:
        assert [e.event for e in reader] == events[:4]
        write(JsonlRecord, path, events[4:9])
        assert reader.refresh() == 5
        write(JsonlRecord, path, events[9:])
        assert reader.refresh() == len(events) - 9
        assert [e.event for e in reader] == events
