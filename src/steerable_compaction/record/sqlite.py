"""`SqliteRecord`: a record in an SQLite database, one row per event.

A record database is marked by its `application_id` and holds `events (seq, body)`, one
checksummed entry per row, and `meta`, whose `events` row counts the rows. The count is brought
up to date in the transaction of every durable event (compaction events, reminders), of every
batch, and on close, so it never runs ahead of the rows: fewer rows than it counts means rows
were lost, which no checksum could show. A database written before checksums (one `events`
table, no mark) still opens; a writer adds the mark and the count. Any other database, or any
other file, is refused and left untouched.

The count lives in the database, so it goes through the write-ahead log with the rows it
counts: a log cut or damaged after a crash loses both, and SQLite replays its valid prefix
without a word. The writer's high-water mark (`record.mark`, a file beside the database) is
what notices that; a writer checks it through a read-only connection before it opens a
writable one, because closing the last writable connection checkpoints the log into the
database and deletes it, which would destroy what a refused open must leave untouched.

The projection checkpoint (`record.checkpoint`) is the one row of `projection_checkpoint
(key, body)`, a table a writer creates with its first checkpoint (older builds open the
database as before: they look for `events` and `meta` only). It is replaced in a transaction of
its own after each boundary that replaced a span is committed, and trusted only when row
`seq - 1` holds, byte for byte, the entry it names.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from typing import Any, Literal

from ..errors import RecordError, RecordLockedError
from .checkpoint import Checkpoint, bound_to, decode_checkpoint, encode_checkpoint
from .codec import encode_body, iter_lines, iter_rows
from .events import Entry
from .files import FileRecord, identity, lock_writer, sync
from .mark import check_mark

__all__ = ["APPLICATION_ID", "SqliteRecord"]

logger = logging.getLogger("steerable_compaction.record")

APPLICATION_ID = int.from_bytes(b"StCp", "big")
"""SQLite's `PRAGMA application_id` of a record database (schema v4 on)."""

_EVENTS = "CREATE TABLE events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)"
_META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
_V3_SCHEMA = [(b"table", b"events", _EVENTS.encode())]
Format = Literal["empty", "v3", "v4"]
# What the sqlite3 module raises on a damaged file: its own errors, and UnicodeDecodeError when
# an error message or a text value holds bytes that are not UTF-8.
_ERRORS = (sqlite3.Error, UnicodeDecodeError)
_CHUNK_ROWS = 2_000  # rows read as one blob (of 2k-1M tried, 2k read 100k rows fastest)
_NO_STOP = 1 << 62  # no seq reaches it: read to the end
_CHECKPOINT = (
    "CREATE TABLE IF NOT EXISTS projection_checkpoint "
    "(key INTEGER PRIMARY KEY CHECK (key = 0), body BLOB NOT NULL)"
)


class SqliteRecord(FileRecord):
    """A record in an SQLite database (WAL mode): one row per event, `seq` as the primary key.

    A second writer is refused through an exclusive `flock` on `<path>.writer-lock`, which the
    writer removes when it closes; readers open the database read-only and never take that
    lock. Each append (or batch) is one transaction.
    """

    _lock_fd: int | None = None
    _lock_identity: tuple[int, int] | None = None
    _conn: sqlite3.Connection | None = None
    _counted = False  # the database keeps a row count (schema v4 on)
    _count: int | None = None  # the row count a writer last committed
    _stop = _NO_STOP  # loading reads rows before this seq (the entries before a checkpoint)
    _keeps_checkpoints = True

    @property
    def _lock_path(self) -> str:
        return str(self.file) + ".writer-lock"

    def _open_reader(self) -> None:
        self._conn = self._connect(f"{self.file.resolve().as_uri()}?mode=ro", uri=True)
        kind = self._identify()
        if kind == "empty":
            raise RecordError("not a record: an empty database", path=self.file)
        self._counted = kind == "v4"

    def _open_writer(self) -> None:
        self._take_lock()
        if not self.file.exists():
            # Created here so that it is private from the start; an existing file keeps its mode.
            os.close(os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        elif self._seen_mark is not None:
            self._check_before_writing()
        self._conn = self._connect(str(self.file))
        kind = self._identify()
        conn = self._conn
        try:
            if kind != "v4":
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if kind == "empty":
                        conn.execute(_EVENTS)
                    conn.execute(_META)
                    conn.execute(
                        "INSERT INTO meta (key, value) SELECT 'events', count(*) FROM events"
                    )
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            conn.execute("PRAGMA journal_mode=WAL")
            self._set_sync(durable=False)
        except _ERRORS as exc:
            raise self._error(exc) from None
        self._counted = True
        self._identity = identity(os.stat(self.file))

    def _check_before_writing(self) -> None:
        """Compare the rows with the mark through a read-only connection (see the module)."""
        conn = self._connect(f"{self.file.resolve().as_uri()}?mode=ro", uri=True)
        try:
            newest = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
        except _ERRORS as exc:
            if "no such table" not in str(exc):
                raise self._error(exc) from None
            newest = None  # an empty database
        finally:
            conn.close()
        found = 0 if type(newest) is not int else newest + 1
        check_mark(self._seen_mark, found, record=self.file, readonly=False)

    def _connect(self, where: str, *, uri: bool = False) -> sqlite3.Connection:
        try:
            return sqlite3.connect(where, uri=uri, isolation_level=None, check_same_thread=False)
        except _ERRORS as exc:
            raise self._error(exc) from None

    def _error(self, exc: Exception) -> RecordError:
        return RecordError(f"not a readable SQLite record: {exc}", path=self.file)

    def _identify(self) -> Format:
        """What the database holds, read without writing; `RecordError` if it is not a record."""
        assert self._conn is not None
        try:
            app = self._conn.execute("PRAGMA application_id").fetchone()[0]
            # As bytes: a damaged schema need not be valid UTF-8.
            objects = self._conn.execute(
                "SELECT CAST(type AS BLOB), CAST(name AS BLOB), CAST(sql AS BLOB) "
                "FROM sqlite_master"
            ).fetchall()
        except _ERRORS as exc:
            raise self._error(exc) from None
        names = {name for _, name, _ in objects}
        if app == APPLICATION_ID and {b"events", b"meta"} <= names:
            return "v4"
        if app == 0 and not objects:
            return "empty"
        if app == 0 and objects == _V3_SCHEMA:
            return "v3"
        shown = sorted(name.decode("utf-8", "replace") for name in names if type(name) is bytes)
        raise RecordError(
            "not a record: an SQLite database that steerable-compaction did not write "
            f"(application_id {app}, tables {shown})",
            path=self.file,
        )

    def _set_sync(self, *, durable: bool) -> None:
        assert self._conn is not None
        if self._fsync == "every_event" or durable:
            level = "FULL"
        elif self._fsync == "every_boundary":
            level = "NORMAL"
        else:
            level = "OFF"
        self._conn.execute(f"PRAGMA synchronous={level}")

    def _read_new(self) -> int:
        """Load the rows past those loaded, and check them against the row count.

        Rows come in chunks of `_CHUNK_ROWS`, each as one blob joined by SQLite when its rows
        are contiguous and hold no newline (a third of the time of fetching them one by one;
        in chunks, the buffers stay small and are reused, so reading a large record takes half
        the time of one blob and a fraction of its memory). Otherwise, and to name the row at
        fault when a blob does not load, the rest come one by one. All in one read snapshot.
        """
        assert self._conn is not None
        conn, before = self._conn, len(self._entries)
        try:
            conn.execute("BEGIN")  # one snapshot for the rows and their count
        except _ERRORS as exc:
            raise self._error(exc) from None
        try:
            count = None
            if self._counted:
                found = self._fetch("SELECT value FROM meta WHERE key = 'events'")
                count = found[0][0] if found else None
            while self._load_chunk():
                pass
        except BaseException:
            # SQLite may have ended the transaction itself (a busy or I/O error, no memory):
            # end it if it is still open, and never let that hide the error on its way out.
            if conn.in_transaction:
                with contextlib.suppress(*_ERRORS):
                    conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except _ERRORS as exc:
            raise self._error(exc) from None
        if self._counted and (type(count) is not int or count > len(self)):
            raise RecordError(
                f"the database holds {len(self)} events but counted {count!r}: rows were lost",
                path=self.file,
            )
        if not self._readonly:
            self._count = count if type(count) is int else None
        return len(self._entries) - before

    def _find_checkpoint(self) -> Checkpoint | None:
        """The checkpoint row, if row `seq - 1` holds the entry it names."""
        try:
            found = self._fetch("SELECT CAST(body AS BLOB) FROM projection_checkpoint")
        except RecordError as exc:
            if "no such table" in exc.reason:
                return None  # written by an older build, or never compacted
            raise
        if not found or type(found[0][0]) is not bytes:
            return None
        try:
            checkpoint = decode_checkpoint(found[0][0])
        except RecordError as exc:
            logger.warning("%s: %s; reading the whole record", self.file, exc.reason)
            return None
        row = self._fetch("SELECT CAST(body AS BLOB) FROM events WHERE seq = ?", checkpoint.seq - 1)
        if not row or not bound_to(checkpoint, row[0][0]):
            logger.warning(
                "%s: the checkpoint at seq %d does not match row %d (the rows were lost or "
                "changed); reading the whole record",
                self.file,
                checkpoint.seq,
                checkpoint.seq - 1,
            )
            return None
        return checkpoint

    def _read_before(self, checkpoint: Checkpoint) -> None:
        """Load rows `[0, checkpoint.seq)` in one read snapshot (inside an open batch: its own)."""
        assert self._conn is not None
        conn = self._conn
        own = not conn.in_transaction
        self._stop = checkpoint.seq
        try:
            if own:
                conn.execute("BEGIN")
            while self._load_chunk():
                pass
            if own:
                conn.execute("COMMIT")
        except _ERRORS as exc:
            raise self._error(exc) from None
        finally:
            self._stop = _NO_STOP
            if own and conn.in_transaction:
                with contextlib.suppress(*_ERRORS):
                    conn.execute("ROLLBACK")
        if len(self._entries) != checkpoint.seq:
            raise RecordError(
                f"the database holds {len(self._entries)} rows before its checkpoint at seq "
                f"{checkpoint.seq}: rows were lost",
                path=self.file,
            )

    def _store_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Replace the checkpoint row in a transaction of its own (synced as any commit)."""
        assert self._conn is not None
        conn = self._conn
        body = encode_checkpoint(checkpoint)
        try:
            self._check_lock()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_CHECKPOINT)
                conn.execute(
                    "INSERT OR REPLACE INTO projection_checkpoint (key, body) VALUES (0, ?)",
                    (body,),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except _ERRORS as exc:
            raise RecordError(f"cannot keep a checkpoint: {exc}", path=self.file) from None

    def _load_chunk(self) -> bool:
        """Load the next chunk of rows; False once every row is loaded."""
        first = len(self)
        joined = self._joined(first)
        if joined is None:
            self._load_rows(self._rows(first))
            return False
        if not joined:
            return False
        try:
            self._load_objects(iter_lines(joined), lambda i: first + i)
        except RecordError:
            self._load_rows(self._rows(len(self)))  # raises naming the row
            raise
        return True

    def _fetch(self, sql: str, *args: object) -> list[Any]:
        """The rows of one query; `RecordError` if the database cannot be read."""
        assert self._conn is not None
        try:
            return self._conn.execute(sql, args).fetchall()
        except _ERRORS as exc:
            raise self._error(exc) from None

    def _joined(self, first: int) -> bytes | None:
        """Rows `first`... (a chunk) as newline-terminated lines; `None` if not so readable."""
        assert self._conn is not None
        try:
            rows, bodies, low, high, joined = self._conn.execute(
                "SELECT count(*), count(body), min(seq), max(seq), "
                "CAST(group_concat(body, char(10)) AS BLOB) "
                "FROM (SELECT seq, body FROM events WHERE seq >= ? AND seq < ? ORDER BY seq)",
                (first, min(first + _CHUNK_ROWS, self._stop)),
            ).fetchone()
        except sqlite3.DataError:  # more than SQLite's largest string: one by one
            return None
        except _ERRORS as exc:
            raise self._error(exc) from None
        if not rows:  # the end, or a gap in seq (read one by one, that names the row after it)
            found = self._fetch(
                "SELECT 1 FROM events WHERE seq >= ? AND seq < ? LIMIT 1", first, self._stop
            )
            return None if found else b""
        if low != first or high - low + 1 != rows or bodies != rows or type(joined) is not bytes:
            return None  # a gap, or a NULL body (left out of the join)
        if joined.count(b"\n") != rows - 1:
            return None  # a body holding a newline
        return joined + b"\n"

    def _rows(self, first: int) -> list[tuple[int, object]]:
        return self._fetch(
            "SELECT seq, CAST(body AS BLOB) FROM events WHERE seq >= ? AND seq < ? ORDER BY seq",
            first,
            self._stop,
        )

    def _load_rows(self, rows: list[tuple[int, object]]) -> None:
        bodies = []
        for seq, body in rows:
            if type(body) is not bytes:
                raise RecordError("the row has no body", path=self.file, line=seq)
            bodies.append(body)
        self._load_objects(iter_rows(bodies), lambda i: rows[i][0])

    def _take_lock(self) -> None:
        """Hold the exclusive `flock` on the lock file that `_lock_path` names right now.

        A writer removes its lock file when it closes (nothing is left behind), so the file a
        newcomer opened may be unlinked before its lock is granted: it then tries again on the
        file now at the path.
        """
        for _ in range(8):
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                lock_writer(fd, self.file)
                mine = identity(os.fstat(fd))
                try:
                    current = identity(os.stat(self._lock_path))
                except FileNotFoundError:
                    current = None
            except BaseException:
                os.close(fd)
                raise
            if current == mine:
                self._lock_fd, self._lock_identity = fd, mine
                return
            os.close(fd)  # the previous writer removed it as we waited: take the new one
        raise RecordLockedError("the writer lock file keeps changing", path=self.file)

    def _check_lock(self) -> None:
        """Raise `RecordError` if the writer lock file was removed or replaced under us."""
        try:
            now = identity(os.stat(self._lock_path))
        except FileNotFoundError:
            now = None
        if now != self._lock_identity:
            raise RecordError(
                "the writer lock file was deleted or replaced while this writer held it: "
                "another writer may be appending, so this one stops; reopen the record",
                path=self.file,
            )

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        assert self._conn is not None
        synced = durable  # `every_event` syncs each commit (FULL), `every_boundary` this one
        body = encode_body(entry).decode("utf-8")
        try:
            if self._batching:
                self._insert_in_batch(entry, body)
                return
            self._check_lock()
            durable = durable and self._fsync == "every_boundary"
            if durable:
                self._set_sync(durable=True)
            try:
                self._transaction(entry, body, count=durable)
            finally:
                if durable:
                    self._set_sync(durable=False)
        except sqlite3.IntegrityError:
            raise RecordError(
                f"row {entry.seq} already exists: something else appended to this record",
                path=self.file,
                line=entry.seq,
            ) from None
        except _ERRORS as exc:
            raise RecordError(f"cannot append: {exc}", path=self.file, line=entry.seq) from None
        self._check_identity()
        self._advance_mark(entry.seq + 1, synced=synced)

    def _transaction(self, entry: Entry, body: str, *, count: bool) -> None:
        """Insert one entry in its own transaction (with the row count, if `count`)."""
        assert self._conn is not None
        conn = self._conn
        if not count and not self._hooked():  # one statement is its own transaction
            conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (entry.seq, body))
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (entry.seq, body))
            self._on_append(entry)
            if count:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'events'", (entry.seq + 1,))
                self._count = entry.seq + 1
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _insert_in_batch(self, entry: Entry, body: str) -> None:
        """Insert one entry into the batch's transaction; a failure takes back only this one."""
        assert self._conn is not None
        conn = self._conn
        if not conn.in_transaction:
            self._check_lock()
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT entry")
        try:
            conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (entry.seq, body))
            self._on_append(entry)
        except BaseException:
            conn.execute("ROLLBACK TO entry")
            raise
        finally:
            conn.execute("RELEASE entry")

    def _commit_batch(self, *, durable: bool) -> None:
        """Commit the batch's transaction with the row count, synced if `durable`.

        The safety level cannot change inside a transaction, and the batch began before it
        knew it would hold a durable event: the write-ahead log is synced after the commit
        instead, which is what `synchronous=FULL` would have done.
        """
        assert self._conn is not None
        conn = self._conn
        if not conn.in_transaction:
            return
        try:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'events'", (len(self),))
            conn.execute("COMMIT")
            if durable and self._fsync == "every_boundary":
                fd = os.open(f"{self.file}-wal", os.O_RDONLY)
                try:
                    sync(fd)
                finally:
                    os.close(fd)
        except (*_ERRORS, OSError) as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise RecordError(f"cannot commit: {exc}", path=self.file) from None
        self._count = len(self)
        self._check_identity()
        self._advance_mark(len(self), synced=durable)

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            lagging = self._count is not None and self._count < len(self)
            if not self._readonly and self._broken is None and lagging:
                try:  # the count only ever lags behind the rows; a failure leaves it so
                    conn.execute("UPDATE meta SET value = ? WHERE key = 'events'", (len(self),))
                except _ERRORS as exc:
                    logger.warning("%s: the row count stays behind: %s", self.file, exc)
            conn.close()  # the last connection checkpoints the log: synced, unless `never`
        self._close_mark(synced=self._fsync != "never")
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            try:  # leave nothing behind: remove the lock file while still holding it
                if identity(os.stat(self._lock_path)) == self._lock_identity:
                    os.unlink(self._lock_path)
            except OSError:
                pass  # already gone or replaced: another writer's now, not ours to remove
            os.close(fd)
