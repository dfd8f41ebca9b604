"""The spill file format: what recall reads behind a spill pointer, and what it refuses."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steerable_compaction import Message, TextPart, ToolCall, ToolResult
from steerable_compaction.hooks import ToolResultContext
from steerable_compaction.loop import CoreLoop
from steerable_compaction.recall import (
    execute_history_tool,
    prepare_index,
    read_history,
    search_history,
)
from steerable_compaction.record import CompactionBoundary, MemoryRecord, Record, SqliteRecord
from steerable_compaction.spill import SpillHooks
from steerable_compaction.spillfile import SPILL_PREFIX, read_spilled, spill_name
from steerable_compaction.testing import ScriptedProvider

TEXT = "line of log output\n" * 3000 + "note: the support contract number is SC-825-899\n"
NUL_POINTER = (
    "[tool output spilled: 1 chars from x saved to /nonexistent/a\x00b/"
    "0000000007-0123456789abcdef-deadbeef.txt; read that file for the rest]"
)


async def spilled_record(tmp_path: Path) -> tuple[MemoryRecord, str]:
    """A record whose one tool result was spilled; returns the record and the pointer."""
    record = MemoryRecord()
    record.append_message(Message.user("Read the logs."))
    hooks = SpillHooks(tmp_path / "spill")
    result = await hooks.post_tool_result(
        ToolResultContext(
            record=record,
            tool_name="read_logs",
            result=ToolResult(call_id="c1", content=(TextPart(text=TEXT),)),
        )
    )
    record.append_message(Message.assistant(None, [ToolCall(id="c1", name="read_logs")]))
    record.append_message(Message(role="tool", parts=(result,)))
    return record, result.text


def pointer_to(path: str | os.PathLike[str]) -> str:
    return f"{SPILL_PREFIX}9 chars from cat saved to {path}; read that file for the rest]\nhead"


def with_result(record: Record, text: str, call_id: str = "c9") -> int:
    """Append a call and its result holding `text`; returns the result's seq."""
    record.append_message(Message.assistant(None, [ToolCall(id=call_id, name="cat")]))
    entry = record.append_message(Message.tool(call_id, text))
    return entry.seq


def compacted(record: Record) -> None:
    """Summarize everything after the first message: the rest is hidden, for recall to find."""
    summary = (Message.user("[summary of earlier work]"),)
    record.append(
        CompactionBoundary(
            action="summarize",
            pre_tokens=1000,
            post_tokens=100,
            replacement_count=1,
            span=(1, len(record.projection)),
            replacement=summary,
        )
    )


async def test_recall_searches_and_reads_the_whole_spilled_output(tmp_path: Path) -> None:
    """A fact inside a spilled output (not in the pointer's excerpt) is found and read whole."""
    record, pointer = await spilled_record(tmp_path)
    assert pointer.startswith(SPILL_PREFIX) and "SC-825-899" not in pointer.split("\n…\n")[0]
    assert record.spill_directory == tmp_path / "spill"  # the first spill set it
    hits = search_history(record, '"support contract number"')
    assert [h.seq for h in hits] == [2] and "SC-825-899" in hits[0].snippet
    page = read_history(record, 2, offset=len(TEXT) - 60, max_tokens=500)
    assert "SC-825-899" in page.text


async def test_a_pointer_to_anything_else_is_not_read(tmp_path: Path) -> None:
    """A forged pointer: a file of another name, a changed file, or a symlink read nothing."""
    _, pointer = await spilled_record(tmp_path)
    spill = tmp_path / "spill"
    path = pointer.split(" saved to ")[1].split("; ")[0]
    assert read_spilled(pointer, spill).text == TEXT
    secret = tmp_path / "secret.txt"
    secret.write_text("private", encoding="utf-8")
    forged = read_spilled(pointer.replace(path, str(secret)), spill)
    assert forged.text is None and forged.reason == "the pointer does not name a spill file"
    link = spill / spill_name(7, "private", "abcdef12")
    link.symlink_to(secret)
    assert read_spilled(pointer_to(link), spill).reason == "the file is a symbolic link"
    fifo = spill / spill_name(8, "x", "abcdef13")
    os.mkfifo(fifo)
    assert read_spilled(pointer_to(fifo), spill).reason == (
        "the file cannot be read (it is not a regular file)"
    )
    Path(path).write_text(TEXT + "tampered", encoding="utf-8")  # noqa: ASYNC240
    assert "digest differs" in read_spilled(pointer, spill).reason
    assert (
        read_spilled("no pointer at all", spill).reason == "the pointer is not in the spill format"
    )


def spill_file(directory: Path, text: str, seq: int = 3) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / spill_name(seq, text, "0badc0de")
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_happen_only_inside_the_records_spill_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: absolute paths, `../`, `spill/../`, a symlinked subdirectory: all refused.

    A valid spill file outside the spill directory is never read, however the pointer reaches
    it; the same file name inside the directory reads.
    """
    spill = tmp_path / "spill"
    inside = spill_file(spill, "inside")
    outside = spill_file(tmp_path / "outside", "secret", seq=4)
    (spill / "sub").symlink_to(tmp_path / "outside")
    outside_name = outside.name
    refused: list[str | Path] = [
        outside,  # absolute, elsewhere
        f"{spill}/../outside/{outside_name}",
        f"{spill}/sub/{outside_name}",  # a symlinked directory inside the spill directory
    ]
    for path in refused:
        read = read_spilled(pointer_to(path), spill)
        assert read.text is None, path
        assert read.reason == "the file is outside this record's spill directory", path
    monkeypatch.chdir(tmp_path)
    relative = read_spilled(pointer_to(f"spill/../outside/{outside_name}"), "spill")
    assert relative.reason == "the file is outside this record's spill directory"
    assert read_spilled(pointer_to(inside), spill).text == "inside"
    assert read_spilled(pointer_to(f"spill/{inside.name}"), "spill").text == "inside"
    assert read_spilled(pointer_to(inside), None).reason == (
        "no spill directory is known for this record"
    )


def test_a_hard_link_to_a_file_elsewhere_is_refused(tmp_path: Path) -> None:
    """Issue 26: a hard link inside the spill directory has a second name: it is not read."""
    spill = tmp_path / "spill"
    spill.mkdir()
    outside = spill_file(tmp_path / "outside", "secret")
    linked = spill / outside.name
    os.link(outside, linked)
    read = read_spilled(pointer_to(linked), spill)
    assert read.text is None and read.reason == "the file cannot be read (it has other hard links)"


def test_malformed_and_unreadable_pointers_give_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NUL bytes, a missing file or directory, bad bytes, a huge file: a reason, no exception."""
    spill = tmp_path / "spill"
    assert read_spilled(NUL_POINTER, spill).reason == "the pointer's path holds a NUL character"
    missing = spill / spill_name(1, "gone", "00000000")
    assert read_spilled(pointer_to(missing), spill).reason.startswith(
        "the spill directory cannot be opened"
    )
    spill_file(spill, "x")
    assert read_spilled(pointer_to(missing), spill).reason == "the file no longer exists"
    raw = spill / spill_name(2, "x", "00000001")
    raw.write_bytes(b"\xff\xfe")
    assert read_spilled(pointer_to(raw), spill).reason == "the file is not UTF-8 text"
    assert "cannot be resolved" in read_spilled(pointer_to(raw), "a\x00b").reason
    monkeypatch.setattr("steerable_compaction.spillfile._MAX_BYTES", 1)
    assert read_spilled(pointer_to(raw), spill).reason == (
        "the file cannot be read (it is larger than any spill file)"
    )


def test_a_nul_pointer_never_breaks_search_or_read_of_the_rest(tmp_path: Path) -> None:
    """Issue 26: the pointer reads as not available, and every other message stays searchable.

    Both indexes: the in-memory word index and SQLite's FTS5 table, built while that pointer is
    in the record.
    """
    for record in (MemoryRecord(), SqliteRecord(tmp_path / "r.db")):
        record.spill_directory = tmp_path / "spill"
        record.append_message(Message.user("Read the logs."))
        poisoned = with_result(record, NUL_POINTER, "c1")
        fact = with_result(record, "the deploy key rotates on Fridays", "c2")
        compacted(record)
        prepare_index(record)
        page = read_history(record, poisoned)
        assert page.text.startswith(NUL_POINTER)
        assert page.text.endswith(
            "[the full output is not available: the pointer's path holds a NUL character]"
        )
        assert [h.seq for h in search_history(record, "deploy key")] == [fact]
        assert [h.seq for h in search_history(record, "deadbeef")] == [poisoned]
        answer = execute_history_tool(record, "history_read", {"seq": poisoned}, max_tokens=800)
        assert "not available" in answer and "could not be read" not in answer
        record.close()


async def test_a_nul_pointer_does_not_fail_the_turn_that_first_compacts(tmp_path: Path) -> None:
    """Issue 26: offering the history tools indexes the record; the poisoned pointer is indexed."""
    record = SqliteRecord(tmp_path / "r.db")
    record.append_message(Message.user("Read the logs."))
    with_result(record, NUL_POINTER)
    compacted(record)
    loop = CoreLoop(
        ScriptedProvider([Message.assistant("Done.")]), record, tools=(), history_tokens=800
    )
    result = await loop.run_turn("Go on.")
    assert result.reply is not None and result.reply.text == "Done."
    assert loop.history_offered
    record.close()


# -- fuzz ----------------------------------------------------------------------------------------

NAMES = st.one_of(
    st.from_regex(r"\A\d{10}-[0-9a-f]{16}-[0-9a-f]{8}\.txt\Z"),
    st.sampled_from(["target.txt", "link.txt", "hard.txt", "fifo.txt", "raw.txt"]),
    st.text(max_size=40),
)
DIRECTORIES = st.one_of(
    st.sampled_from(["SPILL", "SPILL/..", "SPILL/sub", "OUTSIDE", "/nonexistent/a\x00b", "", "."]),
    st.text(max_size=40),
)
POINTERS = st.one_of(
    st.builds(
        lambda size, tool, directory, name, rest: (
            f"{SPILL_PREFIX}{size} chars from {tool} saved to {directory}/{name}; {rest}"
        ),
        st.from_regex(r"\A[\d,]{1,12}\Z"),
        st.text(max_size=20),
        DIRECTORIES,
        NAMES,
        st.text(max_size=40),
    ),
    st.text(max_size=200).map(lambda tail: SPILL_PREFIX + tail),
)


@pytest.mark.slow
def test_fuzz_pointer_shaped_text_never_raises_out_of_recall() -> None:
    """Issue 26: `read_spilled`, `history_read` and `history_search` answer any pointer text.

    Pointers name real spill files, symlinks, hard links, FIFOs, files outside the directory,
    NUL bytes and random text; each reads as the file's text or "not available" with a reason,
    and the tools never answer that the history could not be read.
    """
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        spill = root / "spill"
        target = spill_file(spill, "target text")
        outside = spill_file(root / "outside", "outside text", seq=9)
        (spill / "sub").symlink_to(root / "outside")
        (spill / "link.txt").symlink_to(target)
        os.link(outside, spill / "hard.txt")
        os.mkfifo(spill / "fifo.txt")
        (spill / "raw.txt").write_bytes(b"\xff")
        examples = 0

        @settings(max_examples=300, deadline=None, database=None)
        @given(POINTERS)
        def check(pointer: str) -> None:
            nonlocal examples
            examples += 1
            pointer = pointer.replace("SPILL", str(spill)).replace("OUTSIDE", str(root / "outside"))
            read = read_spilled(pointer, spill)
            assert (read.text is None) == bool(read.reason)
            record = MemoryRecord()
            record.spill_directory = spill
            record.append_message(Message.user("Read it."))
            seq = with_result(record, pointer)
            compacted(record)
            assert read_history(record, seq).total_chars >= len(pointer)
            search_history(record, "spilled")
            for name, arguments in (
                ("history_read", {"seq": seq}),
                ("history_search", {"query": "tool output spilled"}),
            ):
                answer = execute_history_tool(record, name, arguments, max_tokens=400)
                assert "could not be read" not in answer, answer

        check()
        assert examples == 300
