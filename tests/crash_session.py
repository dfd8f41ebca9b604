"""A child process for the crash-injection tests: one session that compacts once.

`python -m tests.crash_session RECORD PAID_LOG CRASH_POINT` builds (or reopens) a JSONL record,
attaches `CompactionHooks` (which recovers an interrupted bracket on open) and runs one
`pre_step`. CRASH_POINT kills the process with SIGKILL right after the named event is written
(`after_start`, `after_summary`, `after_boundary`), halfway through writing a line
(`torn_start`, `torn_boundary`), or never (`none`). The summarizer appends a line to PAID_LOG
each time it is paid.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from steerable_compaction import Message, resolve_compaction_policy
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import Entry, JsonlRecord
from steerable_compaction.record.codec import encode_line

from .compaction_helpers import tool_round

SUMMARY = "## Primary Request\nFix the parser.\n## Current Work\nRead every module."
POLICY = resolve_compaction_policy(
    None, 10_000, reserved_output_tokens=0, headroom_tokens=0, keep_last_tool_results=20
)


def build(record: JsonlRecord) -> None:
    record.append_message(Message.system("You are a careful coding agent."))
    record.append_message(Message.user("Find why the parser loses token positions."))
    for i in range(14):
        for message in tool_round(i, f"[needle-{i}] " + "the parser reads each token " * 100):
            record.append_message(message)


def arm(record: JsonlRecord, point: str) -> None:
    """Make the record kill this process at `point`."""
    if point == "none":
        return
    kind = {
        "start": "compaction_start",
        "summary": "compaction_summary",
        "boundary": "compaction_boundary",
    }[point.split("_", 1)[1]]
    persist = record._persist

    def crashing(entry: Entry, *, durable: bool) -> None:
        if entry.event.kind == kind and point.startswith("torn_"):
            line = encode_line(entry)
            assert record._fd is not None
            os.write(record._fd, line[: len(line) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        persist(entry, durable=durable)
        if entry.event.kind == kind:
            os.kill(os.getpid(), signal.SIGKILL)

    record._persist = crashing  # type: ignore[method-assign]


def pay(paid_log: str, request: SummaryRequest) -> None:
    with open(paid_log, "a", encoding="utf-8") as fh:
        fh.write(f"paid for {len(request.messages)} messages\n")


def main(path: str, paid_log: str, point: str) -> None:
    async def summarize(request: SummaryRequest) -> str:
        pay(paid_log, request)
        return SUMMARY

    record = JsonlRecord(path, fsync="every_event")
    if len(record) == 0:
        build(record)
    hooks = CompactionHooks(record, POLICY, summarizer=summarize)
    arm(record, point)
    asyncio.run(hooks.pre_step(StepContext(record=record, round=1, turn=1)))
    record.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
    Path(sys.argv[2] + ".done").write_text("ok", encoding="utf-8")
