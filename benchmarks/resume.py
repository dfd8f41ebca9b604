"""Resuming a long session: open + project from the newest checkpoint, against the full read.

Run: `python benchmarks/resume.py [--events N] [--after N] [--repeat N] [--url URL] [--summary]`.

The record: the agent session of `benchmarks/record.py` (tool rounds, a fold every 50 events)
with one summarizing compaction (start, summary, boundary over all but the opening and the last
20 messages) `--after` events before its end; `--events` in all (100k). Each store (JSONL,
SQLite, and PostgreSQL when `--url` or `STEERABLE_TEST_POSTGRES` names a database where a
schema may be created, dropped at the end) opens it read-only in a fresh interpreter and
projects it, on the wall clock (a resuming process waits for the disk and the server too):
resumed from the checkpoint (the default open), and with `full=True`, which reads every entry.
Both are timed in turns, `--repeat` times each (at least 5), so a busy moment favours neither;
each figure is the median resume, with the spread (min-max) of both, against the median full
read. `--summary` prints the figures as JSON lines for `run_all.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _figures
from record import append_batched, fresh, session_events
from steerable_compaction import Message
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Event,
    JsonlRecord,
    MessageAppended,
    Record,
    SqliteRecord,
)

TARGET = 0.050  # seconds: open + project with a recent boundary
MIN_REPEAT = 5
KEEP = 20  # messages the compaction leaves after its summary

_OPEN = """
import sys, time
start = time.perf_counter()
store, where, session, full = sys.argv[1:5]
if store == "postgres":
    from steerable_compaction.record.postgres import PostgresRecord
    start = time.perf_counter()
    r = PostgresRecord(where, session=session, readonly=True, full=full == "1")
else:
    from steerable_compaction import record
    start = time.perf_counter()
    r = getattr(record, store)(where, readonly=True, full=full == "1")
visible = len(r.projection)
print(time.perf_counter() - start, visible, r.resumed_at or 0, len(r))
"""


def resumable_session(count: int, after: int) -> list[Event]:
    """`count` events: the benchmark session, compacted by one summary `after` events from its end.

    The events before the compaction are the session's own, whose folds never shrink the
    projection: it holds each of their messages when the compaction spans them.
    """
    head = session_events(count - after - 3)
    visible = sum(isinstance(e, MessageAppended) for e in head)
    span = (2, visible - KEEP)
    bracket: list[Event] = [
        CompactionStart(compaction_id="k1", span=span, pre_tokens=900_000, action="summarize"),
        CompactionSummary(compaction_id="k1", summary="The agent read the handlers; " * 40),
        CompactionBoundary(
            action="summarize",
            pre_tokens=900_000,
            post_tokens=8_000,
            replacement_count=1,
            compaction_id="k1",
            span=span,
            replacement=(
                Message.user("<summary>" + "The agent read the handlers; " * 40 + "</summary>"),
            ),
        ),
    ]
    tail = [e for e in session_events(2 * after + 4)[2:] if isinstance(e, MessageAppended)]
    return [*head, *bracket, *tail[:after]]


def open_in_fresh_process(
    store: str, where: str, session: str, full: bool
) -> tuple[float, int, int]:
    """Open read-only and project in a new interpreter: (seconds, visible, resumed_at)."""
    out = subprocess.run(
        [sys.executable, "-c", _OPEN, store, where, session, "1" if full else "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


figure = partial(_figures.figure, "resume")


def _ms(values: list[float]) -> str:
    return f"{min(values) * 1000:.1f}-{max(values) * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="events in the record")
    parser.add_argument("--after", type=int, default=1_000, help="events after the compaction")
    parser.add_argument("--repeat", type=int, default=MIN_REPEAT, help="opens per store and mode")
    parser.add_argument("--url", default=os.environ.get("STEERABLE_TEST_POSTGRES"))
    parser.add_argument("--summary", action="store_true", help="headline figures as JSON lines")
    args = parser.parse_args()
    repeat = max(args.repeat, MIN_REPEAT)

    def say(line: str) -> None:
        if not args.summary:
            print(line, flush=True)

    events = resumable_session(args.events, args.after)
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stores: list[tuple[str, str, str, str]] = []  # name, class, where, session
        makers: dict[str, Callable[[], Record]] = {}
        for name, cls, suffix in (("jsonl", JsonlRecord, "jsonl"), ("sqlite", SqliteRecord, "db")):
            path = fresh(root / f"resume.{suffix}")
            makers[name] = partial(cls, path, fsync="never")
            stores.append((name, cls.__name__, str(path), ""))
        schema = None
        if args.url:
            schema = "steerable_bench_" + uuid.uuid4().hex[:8]
            where = _create_schema(args.url, schema)
            from steerable_compaction.record.postgres import PostgresRecord

            makers["postgres"] = partial(PostgresRecord, where, session="resume", fsync="never")
            stores.append(("postgres", "postgres", where, "resume"))
        else:
            print("resume: no PostgreSQL (set --url or STEERABLE_TEST_POSTGRES)", file=sys.stderr)
        try:
            for name, _, _, _ in stores:
                append_batched(makers[name], events)
            times: dict[tuple[str, bool], list[float]] = {}
            seen: dict[str, tuple[int, int]] = {}
            for _ in range(repeat):  # in turns: stores and modes interleaved
                for name, store, where, session in stores:
                    for whole in (False, True):
                        secs, visible, at = open_in_fresh_process(store, where, session, whole)
                        times.setdefault((name, whole), []).append(secs)
                        if not whole:
                            seen[name] = (visible, at)
            say(
                f"open + project, {len(events):,} events, a compaction {args.after:,} events "
                f"before the end; a fresh interpreter, wall clock, {repeat} turns"
            )
            header = ("store", "resume median", "spread", "full median", "spread")
            say("{:<9} {:>13} {:>12} {:>12} {:>14}".format(*header))
            for name, _, _, _ in stores:
                resumed, full = times[(name, False)], times[(name, True)]
                mid, full_mid = statistics.median(resumed), statistics.median(full)
                visible, at = seen[name]
                say(
                    f"{name:<9} {mid * 1000:>10.1f} ms {_ms(resumed):>12} "
                    f"{full_mid * 1000:>9.0f} ms {_ms(full):>14}   ({visible:,} visible, "
                    f"resumed at seq {at:,})"
                )
                figures.append(
                    figure(
                        f"{name}_resume_open_project_{args.events // 1000}k",
                        mid,
                        f"the full read of the same record (median {full_mid:.3f} s, "
                        f"{_ms(full)}; resume {_ms(resumed)}, {repeat} interleaved turns)",
                        mid / full_mid,
                        f"<= {TARGET * 1000:.0f} ms",
                        mid <= TARGET and at > 0,
                    )
                )
        finally:
            if schema is not None:
                _drop_schema(args.url, schema)
    _figures.print_figures(figures, summary=args.summary)


def _create_schema(url: str, schema: str) -> str:
    """Create `schema`; `url` with its search path set there."""
    from urllib.parse import quote

    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
