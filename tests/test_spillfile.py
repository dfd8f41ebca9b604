"""The spill file format: what recall reads behind a spill pointer, and what it refuses."""

from __future__ import annotations

import os
from pathlib import Path

from steerable_compaction import Message, TextPart, ToolCall, ToolResult
from steerable_compaction.hooks import ToolResultContext
from steerable_compaction.recall import read_history, search_history
from steerable_compaction.record import CompactionBoundary, MemoryRecord
from steerable_compaction.spill import SpillHooks
from steerable_compaction.spillfile import SPILL_PREFIX, read_spilled, spill_name

TEXT = "line of log output\n" * 3000 + "note: the support contract number is SC-825-899\n"


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


async def test_recall_searches_and_reads_the_whole_spilled_output(tmp_path: Path) -> None:
    """A fact inside a spilled output (not in the pointer's excerpt) is found and read whole."""
    record, pointer = await spilled_record(tmp_path)
    assert pointer.startswith(SPILL_PREFIX) and "SC-825-899" not in pointer.split("\n…\n")[0]
    hits = search_history(record, '"support contract number"')
    assert [h.seq for h in hits] == [2] and "SC-825-899" in hits[0].snippet
    page = read_history(record, 2, offset=len(TEXT) - 60, max_tokens=500)
    assert "SC-825-899" in page.text


async def test_a_pointer_to_anything_else_is_not_read(tmp_path: Path) -> None:
    """A forged pointer: a file of another name, a changed file, or a symlink read nothing."""
    _, pointer = await spilled_record(tmp_path)
    path = pointer.split(" saved to ")[1].split("; ")[0]
    assert read_spilled(pointer) == TEXT
    secret = tmp_path / "secret.txt"
    secret.write_text("private", encoding="utf-8")
    forged = pointer.replace(path, str(secret))
    assert read_spilled(forged) is None
    link = Path(path).parent / spill_name(7, "private", "abcdef12")
    link.symlink_to(secret)
    assert read_spilled(pointer.replace(path, str(link))) is None
    Path(path).write_text(TEXT + "tampered", encoding="utf-8")  # noqa: ASYNC240
    assert read_spilled(pointer) is None
    assert read_spilled("no pointer at all") is None
    fifo = Path(path).parent / spill_name(8, "x", "abcdef13")
    os.mkfifo(fifo)
    assert read_spilled(pointer.replace(path, str(fifo))) is None


async def test_a_spilled_result_is_searchable_while_its_pointer_is_visible(tmp_path: Path) -> None:
    """The transcript shows only the pointer, so the whole output counts as out of sight."""
    record, _ = await spilled_record(tmp_path)
    assert len(record.projection) == 3  # nothing compacted: the pointer is in view
    assert search_history(record, "SC-825-899")
    record.append(
        CompactionBoundary(action="compact", pre_tokens=9, post_tokens=5, replacement_count=0)
    )
    assert search_history(record, "SC-825-899")
