"""Opening a record by what it names, and the stores under their historical import path.

What each fsync policy makes durable, and what a crash can lose, is told in `record.base`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .base import CompactionInfo, FsyncPolicy, Record
from .jsonl import SQLITE_MAGIC, JsonlRecord
from .memory import MemoryRecord
from .sqlite import SqliteRecord
from .urls import is_postgres_url

__all__ = [
    "CompactionInfo",
    "FsyncPolicy",
    "JsonlRecord",
    "MemoryRecord",
    "Record",
    "SqliteRecord",
    "is_postgres_url",
    "open_record",
]


def open_record(
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    fsync: FsyncPolicy = "every_boundary",
    full: bool = False,
) -> Record:
    """Open a JSONL or SQLite record, chosen by the file's first bytes (or, if new, its suffix).

    A `postgresql://` URL opens a `PostgresRecord` (the `postgres` extra), its session named by
    the URL's `session=` parameter (default `"default"`). The record resumes from its newest
    projection checkpoint unless `full=True` (`record.base`, "Resuming").
    """
    if is_postgres_url(path):
        from .postgres import PostgresRecord

        return PostgresRecord(str(path), readonly=readonly, fsync=fsync, full=full)
    p = Path(path)
    kind = "jsonl"
    if p.exists():
        with contextlib.suppress(OSError), open(p, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                kind = "sqlite"
    elif p.suffix.lower() in {".sqlite", ".sqlite3", ".db"}:
        kind = "sqlite"
    if kind == "sqlite":
        return SqliteRecord(p, readonly=readonly, fsync=fsync, full=full)
    return JsonlRecord(p, readonly=readonly, fsync=fsync, full=full)
