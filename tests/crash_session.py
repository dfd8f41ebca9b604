"""Child processes for the crash tests: sessions killed with SIGKILL, then reopened.

`python -m tests.crash_session RECORD PAID_LOG CRASH_POINT` builds (or reopens) a JSONL record,
attaches `CompactionHooks` (which recovers interrupted brackets on open) and runs one
`pre_step`. CRASH_POINT kills the process with SIGKILL right after the named event is written
(`after_start`, `after_summary`, `after_boundary`), halfway through writing a line
(`torn_start`, `torn_boundary`), or never (`none`). The summarizer appends a line to PAID_LOG
each time it is paid.

`python -m tests.crash_session drive STORE KILLS SEED DIR [batched]` runs a longer session
(several compactions) once cleanly, then KILLS times from an empty record, each time killed at
a random moment: before or after any append, in the middle of one (a torn JSONL line, or inside
the SQLite or PostgreSQL transaction), or right after the summarizer was paid. STORE `postgres`
keeps its sessions in the database `STEERABLE_TEST_POSTGRES` names. After each kill it reopens the
record, checks it, recovers it, finishes the session, and prints one JSON report (see `drive`).
`batched` appends each tool round (call and result) in one `Record.batch()`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steerable_compaction import Message, resolve_compaction_policy
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import (
    CompactionAbandoned,
    Entry,
    JsonlRecord,
    Record,
    SqliteRecord,
    project,
)
from steerable_compaction.record.codec import encode_line
from steerable_compaction.testing import fake_summary

from .compaction_helpers import tool_round

SUMMARY = "## Primary Request\nFix the parser.\n## Current Work\nRead every module."
POLICY = resolve_compaction_policy(
    None, 10_000, reserved_output_tokens=0, headroom_tokens=0, keep_last_tool_results=20
)


def build(record: Record) -> None:
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
        return fake_summary(request.messages)  # a summary the engine accepts

    record = JsonlRecord(path, fsync="every_event")
    if len(record) == 0:
        build(record)
    hooks = CompactionHooks(record, POLICY, summarizer=summarize)
    arm(record, point)
    asyncio.run(hooks.pre_step(StepContext(record=record, round=1, turn=1)))
    record.close()


# -- random kills ----------------------------------------------------------------------------------

ROUNDS = 40


def _postgres(path: Path, *, readonly: bool = False) -> Record:
    """The session named by `path` in the database `STEERABLE_TEST_POSTGRES` names."""
    from steerable_compaction.record.postgres import PostgresRecord

    url = os.environ["STEERABLE_TEST_POSTGRES"]
    # A killed writer's server session ends a moment after its process: wait for it to let go.
    return PostgresRecord(url, session=str(path), readonly=readonly, lock_timeout=30)


STORES: dict[str, Callable[..., Record]] = {
    "jsonl": JsonlRecord,
    "sqlite": SqliteRecord,
    "postgres": _postgres,
}


def script() -> list[Message | None]:
    """The session: messages in order, `None` where the loop runs `pre_step` (a new round)."""
    out: list[Message | None] = [
        Message.system("You are a careful coding agent."),
        Message.user("Find why the parser loses token positions."),
    ]
    for i in range(ROUNDS):
        out.append(None)
        out += tool_round(i, f"[needle-{i}] " + f"the parser reads token {i} " * 60)
    return out


class Killer:
    """Counts the moments a session passes through and SIGKILLs the process at one of them."""

    def __init__(self, kill_at: int, rng: random.Random) -> None:
        self.kill_at = kill_at
        self.moments = 0
        self.rng = rng

    def tick(self) -> bool:
        """Whether this moment is the chosen one (the caller then does its part and dies)."""
        hit = self.moments == self.kill_at
        self.moments += 1
        return hit

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def arm(self, record: Record) -> None:
        """Give the record's writes their kill points: before, torn or mid-transaction, after."""
        persist = record._persist

        def crashing(entry: Entry, *, durable: bool) -> None:
            if self.tick():
                self.die()  # before anything of the entry is written
            persist(entry, durable=durable)
            if self.tick():
                self.die()  # written (or, in a batch, queued), not yet in memory

        record._persist = crashing  # type: ignore[method-assign]
        if isinstance(record, JsonlRecord):
            write = record._write

            def tearing(*, durable: bool) -> None:
                if self.tick():
                    data = b"".join(record._pending)
                    assert record._fd is not None
                    os.write(record._fd, data[: self.rng.randrange(1, len(data))])
                    self.die()  # a torn write (of one line, or of a batch's lines)
                write(durable=durable)

            record._write = tearing  # type: ignore[method-assign]
        if not isinstance(record, JsonlRecord):  # SQLite and PostgreSQL

            def in_transaction(entry: Entry) -> None:
                if self.tick():
                    self.die()  # inserted, not committed

            record._on_append = in_transaction  # type: ignore[method-assign]


def request_key(request: SummaryRequest) -> str:
    """What identifies a summary request: the exact messages it replays."""
    text = "\n".join(f"{m.role}:{m.text}" for m in request.messages)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pay_once(paid_log: Path, request: SummaryRequest) -> None:
    with open(paid_log, "a", encoding="utf-8") as fh:
        fh.write(request_key(request) + "\n")


def run(
    path: Path, store: str, paid_log: Path, killer: Killer | None, *, batched: bool = False
) -> None:
    """Open (recovering), then play the script from where the record stands, to the end.

    `batched` appends each round's call and result in one `batch()`, as a loop may.
    """

    async def summarize(request: SummaryRequest) -> str:
        pay_once(paid_log, request)
        if killer is not None and killer.tick():
            killer.die()  # paid, and the summary not yet written
        return fake_summary(request.messages)

    async def play(record: Record, hooks: CompactionHooks) -> None:
        steps = script()
        done, at = record.message_count, 0
        while done:  # skip the messages the record already holds
            done -= steps[at] is not None
            at += 1
        while at < len(steps):
            step, after = steps[at], steps[at + 1] if at + 1 < len(steps) else None
            if step is None:
                await hooks.pre_step(StepContext(record=record, round=at, turn=1))
            elif batched and step.role == "assistant" and after is not None:
                with record.batch():
                    record.append_message(step)
                    record.append_message(after)
                at += 1
            else:
                record.append_message(step)
            at += 1

    with STORES[store](path) as record:
        hooks = CompactionHooks(record, POLICY, summarizer=summarize)
        if killer is not None:
            killer.arm(record)
        asyncio.run(play(record, hooks))


def messages_of(record: Record) -> list[Message]:
    return [e.event.message for e in record.history()]  # type: ignore[union-attr]


def drive(store: str, kills: int, seed: int, root: Path, *, batched: bool) -> dict[str, Any]:
    """Kill `kills` sessions at random moments and check each reopen; returns the report.

    `failures` lists every check that failed (empty when all held); the counts say what the
    kills hit: torn lines dropped, brackets recovery closed by reusing a paid summary or
    abandoned, and summaries paid twice (the kill fell after the summarizer was paid and
    before its summary was written).
    """
    torn = Counter[str]()

    class CountTorn(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "torn final line" in record.getMessage():
                torn["dropped"] += 1

    logging.getLogger("steerable_compaction").addHandler(CountTorn())
    logging.getLogger("steerable_compaction").setLevel(logging.INFO)
    suffix = ".jsonl" if store == "jsonl" else ".db"
    clean_path, clean_paid = root / f"clean{suffix}", root / "clean.paid"
    counter = Killer(-1, random.Random(seed))
    run(clean_path, store, clean_paid, counter, batched=batched)
    with STORES[store](clean_path, readonly=True) as clean:
        clean_entries = list(clean.entries)
        clean_messages = messages_of(clean)
        compactions = sum(c.status == "closed" for c in clean.compactions())
    rng = random.Random(seed)
    report: dict[str, Any] = {
        "store": store,
        "batched": batched,
        "moments": counter.moments,
        "compactions": compactions,
        "kills": 0,
        "clean_reopens": 0,
        "torn_dropped": 0,
        "reused": 0,
        "abandoned": 0,
        "paid_twice": 0,
        "failures": [],
    }
    for trial in range(kills):
        path, paid = root / f"t{trial}{suffix}", root / f"t{trial}.paid"
        kill_at = rng.randrange(counter.moments)
        pid = os.fork()
        if pid == 0:  # the child: play until killed
            try:
                killer = Killer(kill_at, random.Random(seed + trial))
                run(path, store, paid, killer, batched=batched)
            finally:
                os._exit(3)  # reached only if the kill point was never hit
        _, status = os.waitpid(pid, 0)
        fail = report["failures"].append
        if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
            fail(f"trial {trial}: the child was not killed (status {status})")
            continue
        report["kills"] += 1
        try:
            with STORES[store](path, readonly=True) as crashed:
                entries = list(crashed.entries)
                visible = crashed.messages()
        except Exception as exc:  # any error at all is a failed reopen
            fail(f"trial {trial} (moment {kill_at}): reopen raised {exc!r}")
            continue
        report["clean_reopens"] += 1
        if entries != clean_entries[: len(entries)]:
            fail(f"trial {trial} (moment {kill_at}): entries are not a prefix of the clean run's")
        elif visible != project(clean_entries[: len(entries)]):
            fail(f"trial {trial} (moment {kill_at}): projection differs from the clean run's")
        before = len(entries)
        with STORES[store](path) as recovering:
            CompactionHooks(recovering, POLICY).recover()
            if recovering.projection.open_brackets:
                fail(f"trial {trial} (moment {kill_at}): a bracket stayed open after recovery")
            for entry in recovering.entries[before:]:
                if isinstance(entry.event, CompactionAbandoned):
                    report["abandoned"] += 1
                else:
                    report["reused"] += entry.event.kind == "compaction_boundary"
        run(path, store, paid, None, batched=batched)
        with STORES[store](path, readonly=True) as finished:
            if messages_of(finished) != clean_messages:
                fail(f"trial {trial} (moment {kill_at}): finished history differs from clean")
            if finished.projection.open_brackets:
                fail(f"trial {trial} (moment {kill_at}): a bracket is open after finishing")
        keys = Counter(paid.read_text().split()) if paid.exists() else Counter[str]()
        report["paid_twice"] += sum(n - 1 for n in keys.values() if n > 1)
    report["torn_dropped"] = torn["dropped"]
    return report


def _drive_main(args: list[str]) -> None:
    store, kills, seed, root = args[0], int(args[1]), int(args[2]), Path(args[3])
    print(json.dumps(drive(store, kills, seed, root, batched=args[4:] == ["batched"])))


ENTRY: dict[str, Callable[[list[str]], None]] = {"drive": _drive_main}

if __name__ == "__main__":
    if sys.argv[1] in ENTRY:
        ENTRY[sys.argv[1]](sys.argv[2:])
    else:
        main(*sys.argv[1:4])
        Path(sys.argv[2] + ".done").write_text("ok", encoding="utf-8")
