"""The SQLite index: an FTS5 table with the `trigram` tokenizer inside the record's database.

The table `recall_fts_v1` is contentless: row `rowid = seq` holds the normalized text of the
message at that seq (`normalize(searchable(message, record.spill_directory))`), and no copy of
it is kept, since the record holds the messages. Appends never touch it (the trigram tokenizer
costs about 0.4 ms per 1.5k-character message, eight times the append itself): a writer's
search first catches the table up, oldest first, a chunk of entries per transaction, for at
most `CATCH_UP_SECONDS`, and checks the messages still beyond it one by one. The table holds
every message up to its largest rowid, and none after, so that rowid is the index's watermark
and crash recovery needs no other bookkeeping.

The tokenizer is case-sensitive over text that is already case-folded, so a quoted term matches
exactly its substrings; terms are passed as quoted strings, so no query text is FTS5 syntax.
"""

from __future__ import annotations

import bisect
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..messages import Message
from ..record import MessageAppended, SqliteRecord
from .memory import CATCH_UP_CHUNK, Catalog
from .text import normalize, searchable

__all__ = ["TABLE", "FtsIndex", "match_expression"]

logger = logging.getLogger("steerable_compaction.recall")

TABLE = "recall_fts_v1"
"""A change to what is indexed (`searchable`, `normalize`) takes a new table name."""

_CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5"
    "(text, content='', tokenize='trigram case_sensitive 1')"
)
_INSERT = f"INSERT INTO {TABLE} (rowid, text) VALUES (?, ?)"
_MAX_TAIL = 4096  # unindexed messages a reader checks one by one before it prefers memory
_PAGE = 512  # candidate rows read at a time (the newest few hundred usually settle a search)


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 query for rows holding every term: each a quoted string, joined by `AND`."""
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _connection(record: SqliteRecord) -> sqlite3.Connection | None:
    return record._conn  # the index lives in the store's own database, on its connection


class FtsIndex:
    """The FTS5 index of one `SqliteRecord` handle."""

    __slots__ = ("_created", "_watermark")

    def __init__(self) -> None:
        self._created = False
        self._watermark = -1  # every message with seq <= this is indexed

    def usable(
        self, record: SqliteRecord, catalog: Catalog, *, deadline: float | None = None
    ) -> bool:
        """Catch the index up on a writer (until `deadline`); whether it can answer now.

        A writer answers from the table for the messages it holds and leaves the newer ones,
        which `candidates` proposes unfiltered, to be checked one by one. A reader uses the
        table a writer keeps the same way; with no table, or too many newer messages, it
        cannot answer.
        """
        conn = _connection(record)
        if conn is None or record.closed:
            return False
        try:
            if not record.readonly:
                return self._catch_up(record, conn, deadline)
            self._watermark = _read_watermark(conn)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return False
        unindexed = len(catalog.seqs) - bisect.bisect_right(catalog.seqs, self._watermark)
        return unindexed <= _MAX_TAIL

    def _catch_up(
        self, record: SqliteRecord, conn: sqlite3.Connection, deadline: float | None
    ) -> bool:
        """Create the table and index what it lacks, a chunk per transaction, until `deadline`.

        Oldest first, at least one chunk; False inside a batch before the table exists.
        The table is created only outside a transaction: inside `Record.batch()` a failed
        group would take it back while this handle went on using it. Each chunk is indexed
        under the store's lock in a savepoint: its own transaction, or a part of an open
        batch's (an entry of a batch is in the database, uncommitted, once appended: indexing
        it there keeps the index from running ahead of the record if the batch is lost).
        Between chunks the lock is free, so appends from other threads wait one chunk at most.
        """
        spill = record.spill_directory
        indexed, fresh = 0, True
        if record._broken is not None:
            return False  # a lost group commit: what the table holds is not what this handle has
        while True:
            with record._lock:
                if not self._created:
                    if conn.in_transaction:
                        return False
                    conn.execute(_CREATE)
                    self._created = True
                if fresh and not conn.in_transaction:
                    # What is committed: rows a lost batch took with it are not counted.
                    self._watermark = _read_watermark(conn)
                fresh = False
                entries = record.entries
                first = self._watermark + 1
                stop = min(len(entries), first + CATCH_UP_CHUNK)
                rows = [
                    (entry.seq, _row_text(entry.event.message, spill))
                    for entry in entries[first:stop]
                    if isinstance(entry.event, MessageAppended)
                ]
                if rows:
                    conn.execute("SAVEPOINT recall_catch_up")
                    try:
                        conn.executemany(_INSERT, rows)
                    except BaseException:
                        conn.execute("ROLLBACK TO recall_catch_up")
                        raise
                    finally:
                        conn.execute("RELEASE recall_catch_up")
                    indexed += len(rows)
                self._watermark = stop - 1
                done = stop >= len(entries)
            if done or (deadline is not None and time.monotonic() >= deadline):
                break
        if indexed:
            logger.info(
                "indexed %d messages for history search (%s)",
                indexed,
                "up to date" if done else f"{len(record.entries) - stop} entries left",
            )
        return True

    def candidates(
        self, record: SqliteRecord, terms: Sequence[str], catalog: Catalog
    ) -> Iterator[int]:
        """Seqs, newest first, of messages that may hold every term (a superset).

        Messages after the watermark (a reader's view of a writer's newest appends) come
        first, unfiltered.
        """
        loaded = len(record.entries)
        for seq in catalog.newest_first(loaded):
            if seq <= self._watermark:
                break
            yield seq
        query = (
            f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH ? AND rowid <= ? "
            f"ORDER BY rowid DESC LIMIT {_PAGE}"
        )
        expression = match_expression(terms)
        newest = min(loaded - 1, self._watermark)  # a reader may not have loaded every row
        while newest >= 0:
            # A page at a time, each read whole under the store's lock: no statement stays open
            # on the shared connection while another thread's append commits.
            with record._lock:
                conn = _connection(record)
                if conn is None:
                    return
                rows = conn.execute(query, (expression, newest)).fetchall()
            for (seq,) in rows:
                yield seq
            if len(rows) < _PAGE:
                return
            newest = rows[-1][0] - 1


def _row_text(message: Message, spill_directory: Path | None) -> str:
    """What a message's row holds: its normalized text, each NUL as a space.

    FTS5 reads a text only up to its first NUL, and no query term holds one (`parse_query`), so
    a space in its place proposes the same candidates. Rows written before this was so hold
    their text up to its first NUL.
    """
    return normalize(searchable(message, spill_directory)).replace("\x00", " ")


def _read_watermark(conn: sqlite3.Connection) -> int:
    row = conn.execute(f"SELECT rowid FROM {TABLE} ORDER BY rowid DESC LIMIT 1").fetchone()
    return -1 if row is None else int(row[0])
