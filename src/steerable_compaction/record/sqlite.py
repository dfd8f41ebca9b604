"""`SqliteRecord`: a record in an SQLite database, one row per event."""

from __future__ import annotations

import json
import os
import sqlite3

from ..errors import RecordError
from .codec import decode_entry, encode_entry
from .events import Entry
from .files import FileRecord, lock_writer

__all__ = ["SqliteRecord"]


class SqliteRecord(FileRecord):
    """A record in an SQLite database (WAL mode): one row per event, `seq` as the primary key.

    A second writer is refused through an exclusive `flock` on `<path>.writer-lock`; readers
    open the database read-only and never take that lock.
    """

    _lock_fd: int | None = None
    _conn: sqlite3.Connection | None = None

    def _open_reader(self) -> None:
        try:
            self._conn = sqlite3.connect(
                f"{self.file.resolve().as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None

    def _open_writer(self) -> None:
        lock_path = self.file.with_name(self.file.name + ".writer-lock")
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        lock_writer(self._lock_fd, self.file)
        try:
            self._conn = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
            os.chmod(self.file, 0o600)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)"
            )
            self._set_sync(durable=False)
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: sqlite3.DatabaseError) -> RecordError:
        return RecordError(f"not a readable SQLite record: {exc}", path=self.file)

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
        assert self._conn is not None
        try:
            rows = self._conn.execute(
                "SELECT seq, body FROM events WHERE seq >= ? ORDER BY seq", (len(self._entries),)
            )
            count = 0
            for seq, body in rows:
                try:
                    entry = decode_entry(json.loads(body), projection_len=len(self._projection))
                except json.JSONDecodeError as exc:
                    raise RecordError(f"not valid JSON: {exc}", path=self.file, line=seq) from None
                except RecordError as exc:
                    raise RecordError(exc.reason, path=self.file, line=seq) from None
                self._load(entry, line=seq)
                count += 1
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None
        return count

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        assert self._conn is not None
        body = json.dumps(encode_entry(entry), ensure_ascii=False, separators=(",", ":"))
        if durable and self._fsync == "every_boundary":
            self._set_sync(durable=True)
            try:
                self._conn.execute(
                    "INSERT INTO events (seq, body) VALUES (?, ?)", (entry.seq, body)
                )
            finally:
                self._set_sync(durable=False)
        else:
            self._conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (entry.seq, body))

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)
