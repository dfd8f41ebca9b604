"""Record throughput: appends per second by store and fsync policy, and open + project time.

Run: `python benchmarks/record.py [--events N] [--open-events N] [--repeat N] [--summary]`.

Appends: a deterministic agent session with a compaction boundary after every 49 messages (one
event in 50), as a busy session writes them, timed per store and fsync policy. Two in-run floors
put the numbers in proportion: a bare `os.write` of the same lines (what any JSONL store pays),
and the same writes with an `fdatasync` at every boundary (what durability per boundary costs on
this disk, whatever the store); appends are timed on the wall clock, which includes waiting
for the disk. Open: a fresh interpreter opens a 100k-event record read-only and projects it,
against `json.loads` of the same lines alone in another fresh interpreter, both in CPU seconds
(other work on a shared machine inflates wall time); its folds never replace a span, so no
checkpoint is kept and the open is the full read (`benchmarks/resume.py` times resuming from a
checkpoint against it). Each figure is the best of `--repeat` runs, open and floor taken in
turns. `--summary` prints only the headline figures, one JSON object a line (`benchmark`,
`figure`, `value`, `baseline`, `ratio`, `target`, `ok`).
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

import _figures
from steerable_compaction import Message, ToolCall
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    Entry,
    Event,
    FsyncPolicy,
    JsonlRecord,
    MessageAppended,
    Record,
    SqliteRecord,
)
from steerable_compaction.record.codec import encode_line

BOUNDARY_EVERY = 50
STORES: list[tuple[str, type[JsonlRecord] | type[SqliteRecord], str]] = [
    ("jsonl", JsonlRecord, "jsonl"),
    ("sqlite", SqliteRecord, "db"),
]
TARGETS = {"jsonl": 50_000.0, "sqlite": 30_000.0}  # events/s with an fsync per boundary
OPEN_TARGET = 2.0  # open + project time over json.loads time
OPEN_REPEAT = 5  # opens are short and noisy: at least this many turns


def session_events(count: int) -> list[Event]:
    """A deterministic agent session: tool rounds of realistic size, a fold every 50th event."""
    events: list[Event] = [
        MessageAppended(message=Message.system("You are a coding agent. " * 8)),
        MessageAppended(message=Message.user("Fix the failing test in src/app/models.py")),
    ]
    i = 0
    while len(events) < count:
        i += 1
        call = ToolCall(id=f"c{i}", name="read_file", arguments=json.dumps({"path": f"f{i}.py"}))
        body = f"def handler_{i}(request):\n    return render(request, 'page.html')\n" * 4
        for message in (Message.assistant("Reading.", [call]), Message.tool(f"c{i}", body)):
            if (len(events) + 1) % BOUNDARY_EVERY == 0:
                events.append(
                    CompactionBoundary(
                        action="compact",
                        pre_tokens=90_000,
                        post_tokens=60_000,
                        replacement_count=1,
                        edits=(Edit(index=3, message=Message.tool("c1", "[folded]")),),
                    )
                )
            events.append(MessageAppended(message=message))
    return events[:count]


def best(repeat: int, fn: Callable[[], float]) -> float:
    """The shortest of `repeat` timings (the one least disturbed by other work)."""
    return min(fn() for _ in range(repeat))


def append_all(make: Callable[[], Record], events: list[Event]) -> float:
    record = make()
    try:
        start = time.perf_counter()
        for event in events:
            record.append(event)
        return time.perf_counter() - start
    finally:
        record.close()


def append_batched(make: Callable[[], Record], events: list[Event]) -> float:
    """`append_all`, each run of messages and the boundary that ends it in one `batch()`."""
    record = make()
    try:
        start = time.perf_counter()
        at = 0
        while at < len(events):
            with record.batch():
                for event in events[at : at + BOUNDARY_EVERY]:
                    record.append(event)
            at += BOUNDARY_EVERY
        return time.perf_counter() - start
    finally:
        record.close()


def append_fresh(
    cls: type[JsonlRecord] | type[SqliteRecord],
    path: Path,
    policy: FsyncPolicy,
    events: list[Event],
    batched: bool = False,
) -> float:
    """Append `events` to a new record at `path`; the seconds it took."""
    run = append_batched if batched else append_all
    return run(partial(cls, fresh(path), fsync=policy), events)


def fresh(path: Path) -> Path:
    """`path`, with any earlier run's files removed."""
    for extra in ("", "-wal", "-shm", ".writer-lock"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    return path


def raw_writes(path: Path, events: list[Event], *, sync_every: int | None) -> float:
    """The floor: `os.write` each line, and `fdatasync` after every `sync_every` lines."""
    lines = [encode_line(Entry(i, e)) for i, e in enumerate(events)]
    fd = os.open(fresh(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        start = time.perf_counter()
        for i, line in enumerate(lines, start=1):
            os.write(fd, line)
            if sync_every is not None and i % sync_every == 0:
                os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


# Both time CPU seconds (`time.process_time`): on a shared machine, wall time mostly measures
# how long the process waited for a core.
_OPEN = """
import sys, time
from steerable_compaction import record
start = time.process_time()
r = getattr(record, sys.argv[1])(sys.argv[2], readonly=True)
visible = len(r.projection)
print(time.process_time() - start, visible)
"""

_FLOOR = """
import json, sys, time
lines = open(sys.argv[1], "rb").read().splitlines()
start = time.process_time()
for line in lines:
    json.loads(line)
print(time.process_time() - start)
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


figure = partial(_figures.figure, "record")


def measure_appends(
    root: Path, events: list[Event], repeat: int, say: Callable[[str], None]
) -> list[dict[str, object]]:
    n = len(events)
    floor = best(repeat, lambda: raw_writes(root / "floor.jsonl", events, sync_every=None))
    synced = best(
        repeat, lambda: raw_writes(root / "floor.jsonl", events, sync_every=BOUNDARY_EVERY)
    )
    say(f"append throughput, {n:,} events, a boundary every {BOUNDARY_EVERY}, best of {repeat}")
    say(f"{'store':<8} {'fsync':<21} {'events/s':>12} {'x raw write':>12}")
    say(f"{'raw':<8} {'(os.write)':<21} {n / floor:>12,.0f} {1.0:>12.2f}")
    say(f"{'raw':<8} {'+fdatasync/50':<21} {n / synced:>12,.0f} {synced / floor:>12.2f}")
    figures = []
    runs: list[tuple[FsyncPolicy, bool]] = [
        ("every_event", False),
        ("every_boundary", False),
        ("every_boundary", True),
        ("never", False),
        ("never", True),
    ]
    for name, cls, suffix in STORES:
        for policy, batched in runs:
            # fsync per event is slow by nature: time a tenth of the events.
            part = events if policy != "every_event" else events[: max(n // 10, 200)]
            path = root / f"{name}-{policy}.{suffix}"
            if batched and not hasattr(cls, "batch"):  # an older release, for comparison
                say(f"{name:<8} {policy + ' +batch':<21} {'n/a':>12}")
                continue
            secs = best(repeat, partial(append_fresh, cls, path, policy, part, batched))
            rate = len(part) / secs
            label = policy + (" +batch" if batched else "")
            say(f"{name:<8} {label:<21} {rate:>12,.0f} {(secs / len(part)) / (floor / n):>12.2f}")
            if policy == "every_boundary":
                target = TARGETS[name]
                figures.append(
                    figure(
                        f"{name}_appends_fsync_per_boundary" + ("_batched" if batched else ""),
                        rate,
                        f"os.write + fdatasync every {BOUNDARY_EVERY} lines "
                        f"({n / synced:,.0f} ev/s)",
                        rate / (n / synced),
                        f">= {target / 1000:.0f}k ev/s",
                        rate >= target,
                    )
                )
    return figures


def measure_open(
    root: Path, count: int, repeat: int, say: Callable[[str], None]
) -> list[dict[str, object]]:
    big = session_events(count)
    repeat = max(repeat, OPEN_REPEAT)
    say(f"\nopen + project, {len(big):,} events, each in a fresh interpreter, best of {repeat}")
    paths = {}
    for name, cls, suffix in STORES:
        paths[name] = root / f"big.{suffix}"
        append_all(partial(cls, fresh(paths[name]), fsync="never"), big)
    floors: list[float] = []
    opens: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in STORES}
    for _ in range(repeat):  # in turns, so that a busy moment does not favour one side
        floors.append(json_floor_in_fresh_process(paths["jsonl"]))
        for name, cls, _ in STORES:
            opens[name].append(open_in_fresh_process(cls.__name__, paths[name]))
    floor = min(floors)
    figures = []
    for name, _, _ in STORES:
        secs, visible = min(opens[name])
        say(
            f"{name:<8} {secs * 1000:>8.0f} ms CPU  ({len(big) / secs:,.0f} events/s, "
            f"{visible:,} visible, {secs / floor:.2f}x json.loads)"
        )
        figures.append(
            figure(
                f"{name}_open_project_100k" if count == 100_000 else f"{name}_open_project",
                secs,
                f"json.loads of the same {len(big):,} lines ({floor:.3f} s CPU)",
                secs / floor,
                f"<= {OPEN_TARGET:g}x json.loads",
                secs / floor <= OPEN_TARGET,
            )
        )
    say(f"{'json.loads alone':<17}{floor * 1000:>8.0f} ms CPU  (a per-line decode floor)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000, help="events per append run")
    parser.add_argument("--open-events", type=int, default=100_000, help="events in the open run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    parser.add_argument("--summary", action="store_true", help="headline figures as JSON lines")
    args = parser.parse_args()

    def say(line: str) -> None:
        if not args.summary:
            print(line, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        figures = measure_appends(root, session_events(args.events), args.repeat, say)
        figures += measure_open(root, args.open_events, args.repeat, say)
    _figures.print_figures(figures, summary=args.summary)


if __name__ == "__main__":
    main()
