"""Record throughput: appends per second by store and fsync policy, and open + project time.

Run: `python benchmarks/record.py [--events N] [--open-events N]`. Prints events/s for each
store and fsync policy (a compaction boundary every 50 events, as a busy agent session would
write), the ratio against a bare `os.write` of the same bytes (the floor any JSONL store pays),
and the time to open and project a 100k-event record (goal: < 1 s) against `json.loads` of the
same lines alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from steerable_compaction import Message, ToolCall
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    Entry,
    Event,
    JsonlRecord,
    MessageAppended,
    Record,
    SqliteRecord,
)
from steerable_compaction.record.codec import encode_line

BOUNDARY_EVERY = 50


def session_events(count: int) -> list[Event]:
    """A deterministic agent session: tool rounds of realistic size, a fold every 50 events."""
    events: list[Event] = [
        MessageAppended(message=Message.system("You are a coding agent. " * 8)),
        MessageAppended(message=Message.user("Fix the failing test in src/app/models.py")),
    ]
    i = 0
    while len(events) < count:
        i += 1
        if len(events) % BOUNDARY_EVERY == 0:
            events.append(
                CompactionBoundary(
                    action="compact",
                    pre_tokens=90_000,
                    post_tokens=60_000,
                    replacement_count=1,
                    edits=(Edit(index=3, message=Message.tool(f"c{i}", "[folded]")),),
                )
            )
            continue
        call = ToolCall(id=f"c{i}", name="read_file", arguments=json.dumps({"path": f"f{i}.py"}))
        events.append(MessageAppended(message=Message.assistant("Reading.", [call])))
        body = f"def handler_{i}(request):\n    return render(request, 'page.html')\n" * 4
        events.append(MessageAppended(message=Message.tool(f"c{i}", body)))
    return events[:count]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def append_all(make: Callable[[], Record], events: list[Event]) -> float:
    record = make()
    try:
        return timed(lambda: [record.append(e) for e in events])
    finally:
        record.close()


def raw_write_floor(path: Path, events: list[Event]) -> float:
    lines = [encode_line(Entry(i, e)) for i, e in enumerate(events)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return timed(lambda: [os.write(fd, line) for line in lines])
    finally:
        os.close(fd)


_OPEN = """
import sys, time
from steerable_compaction import record
start = time.perf_counter()
r = getattr(record, sys.argv[1])(sys.argv[2], readonly=True)
print(time.perf_counter() - start, len(r.projection))
"""

_FLOOR = """
import json, sys, time
lines = open(sys.argv[1], "rb").read().splitlines()
start = time.perf_counter()
for line in lines:
    json.loads(line)
print(time.perf_counter() - start)
"""


def open_in_fresh_process(store: str, path: Path) -> tuple[float, int]:
    """Open a record read-only in a new interpreter, as a recovering process would."""
    out = subprocess.run(
        [sys.executable, "-c", _OPEN, store, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1])


def json_floor_in_fresh_process(path: Path) -> float:
    """Time `json.loads` of every line alone, in a new interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _FLOOR, str(path)], capture_output=True, text=True, check=True
    ).stdout
    return float(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000, help="events per append run")
    parser.add_argument("--open-events", type=int, default=100_000, help="events in the open run")
    args = parser.parse_args()
    events = session_events(args.events)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        floor = raw_write_floor(root / "floor.jsonl", events)
        print(f"append throughput, {len(events):,} events, a boundary every {BOUNDARY_EVERY}")
        print(f"{'store':<8} {'fsync':<15} {'events/s':>12} {'x raw write':>12}")
        print(f"{'raw':<8} {'(os.write)':<15} {len(events) / floor:>12,.0f} {1.0:>12.2f}")
        stores: list[tuple[str, type[JsonlRecord] | type[SqliteRecord], str]] = [
            ("jsonl", JsonlRecord, "jsonl"),
            ("sqlite", SqliteRecord, "db"),
        ]
        for name, cls, suffix in stores:
            for policy in ("every_event", "every_boundary", "never"):
                # fsync per event is slow by nature: time a tenth of the events.
                n = events if policy != "every_event" else events[: max(len(events) // 10, 200)]
                path = root / f"{name}-{policy}.{suffix}"
                secs = append_all(partial(cls, path, fsync=policy), n)
                slowdown = (secs / len(n)) / (floor / len(events))
                print(f"{name:<8} {policy:<15} {len(n) / secs:>12,.0f} {slowdown:>12.2f}")

        big = session_events(args.open_events)
        print(f"\nopen + project, {len(big):,} events")
        for name, cls, suffix in stores:
            path = root / f"big.{suffix}"
            append_all(partial(cls, path, fsync="never"), big)
            secs, visible = open_in_fresh_process(cls.__name__, path)
            print(
                f"{name:<8} {secs * 1000:>8.0f} ms  "
                f"({len(big) / secs:,.0f} events/s, {visible:,} visible)"
            )
        secs = json_floor_in_fresh_process(root / "big.jsonl")
        print(f"{'json.loads alone':<17}{secs * 1000:>8.0f} ms  (a per-line decode floor)")


if __name__ == "__main__":
    main()
