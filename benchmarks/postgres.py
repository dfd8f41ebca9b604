"""`PostgresRecord` against `SqliteRecord` in the same run: appends, open + project, many writers.

Run: `python benchmarks/postgres.py [--url URL] [--events N] [--open-events N] [--writers N]
[--repeat N] [--summary]`, with `--url` or `STEERABLE_TEST_POSTGRES` naming a database where a
schema may be created (it is dropped at the end).

Appends: the agent session of `benchmarks/record.py` (a boundary every 50 events), appended
one by one and in batches of 50, under `fsync="every_boundary"`, by each store; the SQLite
figure is the in-run baseline. Open: a fresh interpreter opens a record of `--open-events`
events read-only and projects it, on the wall clock (the server's work is not in the client's
CPU time). Writers: `--writers` processes append to sessions of their own at once; their
combined rate is set against one writer alone, and SQLite writers (one file each) are shown
beside them. Each figure is the best of `--repeat` runs. `--summary` prints the headline
figures as JSON lines (`benchmark`, `figure`, `value`, `baseline`, `ratio`, `target`, `ok`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _figures
from record import BOUNDARY_EVERY, append_all, append_batched, best, fresh, session_events
from steerable_compaction.record import Event, FsyncPolicy, Record, SqliteRecord
from steerable_compaction.record.postgres import PostgresRecord

APPEND_TARGET = 2_000.0  # events/s, every_boundary, one append per transaction
BATCH_TARGET = 10_000.0  # events/s, every_boundary, 50 appends per transaction
OPEN_TARGET = 3.0  # open + project time over SQLite's
WRITERS_TARGET = 1.0  # combined rate of the writers over one writer alone

_WRITER = """
import sys, time
sys.path.insert(0, sys.argv[5])
from record import session_events
from steerable_compaction.record import SqliteRecord
from steerable_compaction.record.postgres import PostgresRecord
events = session_events(int(sys.argv[4]))
if sys.argv[1] == "postgres":
    record = PostgresRecord(sys.argv[2], session=sys.argv[3])
else:
    record = SqliteRecord(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
for event in events:
    record.append(event)
print(time.perf_counter() - start, flush=True)
record.close()
"""

_OPEN = """
import sys, time
start = time.perf_counter()
from steerable_compaction.record import SqliteRecord
from steerable_compaction.record.postgres import PostgresRecord
imported = time.perf_counter()
if sys.argv[1] == "postgres":
    record = PostgresRecord(sys.argv[2], session=sys.argv[3], readonly=True)
else:
    record = SqliteRecord(sys.argv[2], readonly=True)
visible = len(record.projection)
print(time.perf_counter() - imported, visible)
"""


figure = partial(_figures.figure, "postgres")


class Bench:
    """One run: a schema of its own in the database, and a directory for SQLite files."""

    def __init__(self, url: str, root: Path, repeat: int, say: Callable[[str], None]) -> None:
        self.url, self.root, self.repeat, self.say = url, root, repeat, say
        self.schema = "steerable_bench_" + uuid.uuid4().hex[:8]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.schema}")
        sep = "&" if "?" in url else "?"
        self.in_schema = f"{url}{sep}options=-csearch_path%3D{self.schema}"

    def drop(self) -> None:
        """Drop the schema and everything the run wrote in it."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {self.schema} CASCADE")

    def postgres(self, session: str, fsync: FsyncPolicy = "every_boundary") -> Callable[[], Record]:
        """Opens the writer of a new session."""
        return partial(PostgresRecord, self.in_schema, session=session, fsync=fsync)

    def sqlite(self, name: str, fsync: FsyncPolicy = "every_boundary") -> Callable[[], Record]:
        """Opens the writer of a new database file."""
        path = self.root / f"{name}.db"
        return lambda: SqliteRecord(fresh(path), fsync=fsync)

    def appends(self, events: int) -> list[dict[str, object]]:
        """Appends per second, one by one and in batches, against SQLite."""
        work = session_events(events)
        self.say(
            f"appends: {events:,} events, a boundary every {BOUNDARY_EVERY}, "
            f"fsync=every_boundary, best of {self.repeat}"
        )
        figures = []
        for batched in (False, True):
            run = append_batched if batched else append_all
            label = "batches of 50" if batched else "one by one"
            sqlite = best(self.repeat, partial(self._append, run, "sqlite", work))
            postgres = best(self.repeat, partial(self._append, run, "postgres", work))
            pg_rate, sq_rate = events / postgres, events / sqlite
            target = BATCH_TARGET if batched else APPEND_TARGET
            self.say(f"  {label:<14} sqlite {sq_rate:>9,.0f} ev/s   postgres {pg_rate:>9,.0f} ev/s")
            figures.append(
                figure(
                    "postgres_appends_fsync_per_boundary" + ("_batched" if batched else ""),
                    pg_rate,
                    f"SqliteRecord, the same events and policy ({sq_rate:,.0f} ev/s)",
                    pg_rate / sq_rate,
                    f">= {target / 1000:g}k ev/s",
                    pg_rate >= target,
                )
            )
        return figures

    def _append(self, run: Callable[..., float], store: str, work: list[Event]) -> float:
        name = "append-" + uuid.uuid4().hex[:8]
        return run(self.postgres(name) if store == "postgres" else self.sqlite(name), work)

    def open_project(self, events: int) -> list[dict[str, object]]:
        """Open + project time in a fresh interpreter, against SQLite."""
        work = session_events(events)
        session = "open-" + uuid.uuid4().hex[:8]
        append_batched(self.postgres(session, fsync="never"), work)
        append_batched(self.sqlite("open", fsync="never"), work)
        path = self.root / "open.db"
        repeat = max(self.repeat, 5)
        times: dict[str, list[float]] = {"sqlite": [], "postgres": []}
        visible = 0
        for _ in range(repeat):  # in turns, so that a busy moment does not favour one side
            for store, where in (("sqlite", str(path)), ("postgres", self.in_schema)):
                out = subprocess.run(
                    [sys.executable, "-c", _OPEN, store, where, session],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                times[store].append(float(out[0]))
                visible = int(out[1])
        sqlite, postgres = min(times["sqlite"]), min(times["postgres"])
        self.say(
            f"open + project: {events:,} events ({visible:,} visible), a fresh interpreter, "
            f"wall clock, best of {repeat}"
        )
        self.say(f"  sqlite {sqlite * 1000:>7.0f} ms   postgres {postgres * 1000:>7.0f} ms")
        return [
            figure(
                f"postgres_open_project_{events // 1000}k",
                postgres,
                f"SqliteRecord, the same {events:,} events ({sqlite:.3f} s)",
                postgres / sqlite,
                f"<= {OPEN_TARGET:g}x SQLite",
                postgres / sqlite <= OPEN_TARGET,
            )
        ]

    def writers(self, count: int, events: int) -> list[dict[str, object]]:
        """Writers of sessions of their own at once, against one writer alone."""
        one = best(self.repeat, lambda: self._at_once("postgres", 1, events))
        many = best(self.repeat, lambda: self._at_once("postgres", count, events))
        sqlite = best(self.repeat, lambda: self._at_once("sqlite", count, events))
        alone, together = events / one, count * events / many
        self.say(
            f"writers at once, {events:,} events each, sessions (or files) of their own, "
            f"best of {self.repeat}"
        )
        self.say(f"  postgres, 1 writer  {alone:>9,.0f} ev/s")
        self.say(f"  postgres, {count} writers {together:>9,.0f} ev/s combined")
        self.say(f"  sqlite,   {count} writers {count * events / sqlite:>9,.0f} ev/s combined")
        return [
            figure(
                f"postgres_{count}_writers_combined",
                together,
                f"one PostgresRecord writer alone ({alone:,.0f} ev/s)",
                together / alone,
                f">= {WRITERS_TARGET:g}x one writer",
                together / alone >= WRITERS_TARGET,
            )
        ]

    def _at_once(self, store: str, count: int, events: int) -> float:
        """Start `count` writers, let them go together; the slowest one's seconds."""
        here = str(Path(__file__).resolve().parent)
        procs = []
        for i in range(count):
            name = f"w{i}-{uuid.uuid4().hex[:8]}"
            where = self.in_schema if store == "postgres" else str(fresh(self.root / f"{name}.db"))
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _WRITER, store, where, name, str(events), here],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        try:
            for proc in procs:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            seconds = [float(proc.communicate()[0]) for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
        return max(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("STEERABLE_TEST_POSTGRES"))
    parser.add_argument("--events", type=int, default=5_000, help="events per append run")
    parser.add_argument("--open-events", type=int, default=100_000, help="events in the open run")
    parser.add_argument("--writers", type=int, default=4, help="writers at once")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    parser.add_argument("--summary", action="store_true", help="headline figures as JSON lines")
    args = parser.parse_args()
    if not args.url:
        parser.error("no database: pass --url or set STEERABLE_TEST_POSTGRES")

    def say(line: str) -> None:
        if not args.summary:
            print(line, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.url, Path(tmp), args.repeat, say)
        try:
            with psycopg.connect(args.url) as conn:
                say(f"server: {conn.info.server_version // 10000}.{conn.info.server_version % 100}")
            figures = bench.appends(args.events)
            figures += bench.open_project(args.open_events)
            figures += bench.writers(args.writers, args.events // 2)
        finally:
            bench.drop()
    _figures.print_figures(figures, summary=args.summary)


if __name__ == "__main__":
    main()
