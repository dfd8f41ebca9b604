"""The SQLite index: an FTS5 table with the `trigram` tokenizer inside the record's database.

The table `recall_fts_v1` is contentless: row `rowid = seq` holds the normalized text of the
message at that seq (`normalize(searchable(message, record.spill_directory))`), and no copy of
it is kept, since the record holds the messages. Once attached, a writer indexes each message
inside the transaction that appends it, so the index commits or rolls back with its entry.
Messages appended while no index was attached (by an older version, or before the first search)
are indexed in one transaction when a writer next attaches: the table holds every message up to
its largest rowid, and none after, so that rowid is the index's watermark and crash recovery
needs no other bookkeeping.

The tokenizer is case-sensitive over text that is already case-folded, so a quoted term matches
exactly its substrings; terms are passed as quoted strings, so no query text is FTS5 syntax.
"""

from __future__ import annotations

import bisect
import logging
import sqlite3
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..messages import Message
from ..record import Entry, MessageAppended, SqliteRecord
from .memory import Catalog
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

    __slots__ = ("_attached", "_watermark")

    def __init__(self) -> None:
        self._attached = False
        self._watermark = -1  # every message with seq <= this is indexed

    def usable(self, record: SqliteRecord, catalog: Catalog) -> bool:
        """Bring the index up to date if this handle may write; whether it can answer now.

        A reader uses the table a writer keeps, checking the few messages appended after its
        watermark one by one; with no table, or too many such messages, it cannot answer.
        """
        conn = _connection(record)
        if conn is None or record.closed:
            return False
        try:
            if not record.readonly:
                return self._attach(record, conn)
            self._watermark = _read_watermark(conn)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return False
        unindexed = len(catalog.seqs) - bisect.bisect_right(catalog.seqs, self._watermark)
        return unindexed <= _MAX_TAIL

    def _attach(self, record: SqliteRecord, conn: sqlite3.Connection) -> bool:
        """Create the table, index what it lacks and hook the appends; False inside a batch.

        The table is created only outside a transaction: inside `Record.batch()` a failed
        group would take it back while the hook stayed, and every later append would fail.
        """
        with record._lock:  # no append may interleave with the catch-up on this connection
            if not self._attached:
                if conn.in_transaction:
                    return False
                conn.execute(_CREATE)
            watermark = _read_watermark(conn)
            spill = record.spill_directory
            backlog = [
                (entry.seq, _row_text(entry.event.message, spill))
                for entry in record.entries[watermark + 1 :]
                if isinstance(entry.event, MessageAppended)
            ]
            if backlog:
                # A savepoint: its own transaction, or a part of an open batch's (an entry of a
                # batch is in the database, uncommitted, once appended: indexing it there keeps
                # the index from running ahead of the record if the batch is lost).
                conn.execute("SAVEPOINT recall_catch_up")
                try:
                    conn.executemany(_INSERT, backlog)
                except BaseException:
                    conn.execute("ROLLBACK TO recall_catch_up")
                    raise
                finally:
                    conn.execute("RELEASE recall_catch_up")
                logger.info("indexed %d messages for history search", len(backlog))
            self._watermark = len(record.entries) - 1
            if not self._attached:
                _install_hook(record)
                self._attached = True
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


def _install_hook(record: SqliteRecord) -> None:
    """Index each message the handle appends, inside the append's own transaction."""
    ref = weakref.ref(record)

    def index_entry(entry: Entry) -> None:
        owner = ref()
        conn = None if owner is None else _connection(owner)
        if owner is not None and conn is not None and isinstance(entry.event, MessageAppended):
            text = _row_text(entry.event.message, owner.spill_directory)
            conn.execute(_INSERT, (entry.seq, text))

    record._on_append = index_entry  # type: ignore[method-assign]
