"""Append-only record stores: JSONL file, SQLite database, memory.

Every store keeps the entries and the projection in memory and appends each new event to its
medium before it becomes visible. Invariants are checked before anything is written, so a bad
event never reaches the disk. One writer at a time: a writer holds an exclusive `flock` for its
lifetime (released by the OS if the process dies); readers never lock and never write.

Durability (`fsync`):
- `"every_event"`: each append is flushed to stable storage before `append` returns.
- `"every_boundary"` (default): compaction events (start, summary, boundary) and reminders are
  flushed, which also makes every message written before them durable. Messages in between reach
  the OS at once, so they survive a killed process, not necessarily a power cut.
- `"never"`: the OS decides (fastest; survives a killed process).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import logging
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeAlias, get_args

from ..errors import RecordError, RecordLockedError
from ..messages import Message
from .codec import decode_entry, decode_line, encode_entry, encode_line
from .events import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    Event,
    MessageAppended,
)
from .projection import Projection

__all__ = [
    "CompactionInfo",
    "FsyncPolicy",
    "JsonlRecord",
    "MemoryRecord",
    "Record",
    "SqliteRecord",
    "open_record",
]

logger = logging.getLogger("steerable_compaction.record")

FsyncPolicy: TypeAlias = Literal["every_event", "every_boundary", "never"]
_FSYNC_POLICIES = frozenset(get_args(FsyncPolicy))
_SQLITE_MAGIC = b"SQLite format 3\x00"
_LINE_START = b'{"v":'  # every line the JSONL store writes starts so


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """One compaction as the record tells it.

    `status` is `"closed"` for a bracket closed by its boundary, `"open"` for a bracket without
    a boundary (a crash or a failed summarizer), `"fold"` for a boundary without a bracket.
    """

    status: Literal["closed", "open", "fold"]
    compaction_id: str | None
    action: str
    trigger: str
    pre_tokens: int
    post_tokens: int | None
    replacement_count: int | None
    span: tuple[int, int] | None
    start_seq: int | None
    summary_seq: int | None
    boundary_seq: int | None


def _durable_kind(event: Event) -> bool:
    return not isinstance(event, MessageAppended)


class Record(ABC):
    """An append-only event log with its projection kept up to date.

    Use as a context manager, or call `close()`. Not safe to append from several threads at
    once without the internal lock; appends from one thread at a time are ordered.
    """

    def __init__(self, *, path: Path | None, readonly: bool, fsync: FsyncPolicy) -> None:
        if fsync not in _FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {sorted(_FSYNC_POLICIES)}, got {fsync!r}")
        self._path = path
        self._readonly = readonly
        self._fsync: FsyncPolicy = fsync
        self._entries: list[Entry] = []
        self._message_entries: list[Entry] = []
        self._projection = Projection()
        self._lock = threading.Lock()
        self._closed = False

    # -- reading -------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """Where the record lives (`None` for a memory record)."""
        return self._path

    @property
    def readonly(self) -> bool:
        """Whether this handle may append."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """Whether `close()` has run."""
        return self._closed

    @property
    def entries(self) -> Sequence[Entry]:
        """Every entry in order (a read-only view)."""
        return self._entries

    @property
    def projection(self) -> Projection:
        """The live projection; do not mutate it (append events instead)."""
        return self._projection

    def messages(self) -> list[Message]:
        """A copy of the projected transcript: what the model sees next."""
        return list(self._projection.messages)

    @property
    def message_count(self) -> int:
        """How many raw messages the record holds (compaction never lowers this)."""
        return len(self._message_entries)

    def history(self, offset: int = 0, limit: int | None = None) -> list[Entry]:
        """A page of the raw message history, oldest first, as it was before any compaction.

        Entries are `MessageAppended` events with their seqs; `offset` counts messages.
        """
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError(f"offset and limit must be non-negative, got {offset!r}, {limit!r}")
        end = None if limit is None else offset + limit
        return self._message_entries[offset:end]

    def compactions(self) -> list[CompactionInfo]:
        """Every compaction in record order: closed and open brackets, and fold-only rewrites."""
        starts: dict[str, tuple[int, CompactionStart]] = {}
        summaries: dict[str, int] = {}
        out: list[CompactionInfo] = []
        closed: set[str] = set()
        for entry in self._entries:
            event = entry.event
            if isinstance(event, CompactionStart):
                starts[event.compaction_id] = (entry.seq, event)
            elif isinstance(event, CompactionSummary):
                summaries[event.compaction_id] = entry.seq
            elif isinstance(event, CompactionBoundary):
                cid = event.compaction_id
                if cid is not None:
                    closed.add(cid)
                out.append(
                    CompactionInfo(
                        status="fold" if cid is None else "closed",
                        compaction_id=cid,
                        action=event.action,
                        trigger=event.trigger,
                        pre_tokens=event.pre_tokens,
                        post_tokens=event.post_tokens,
                        replacement_count=event.replacement_count,
                        span=event.span,
                        start_seq=None if cid is None else starts[cid][0],
                        summary_seq=None if cid is None else summaries.get(cid),
                        boundary_seq=entry.seq,
                    )
                )
        for cid, (seq, start) in starts.items():
            if cid not in closed:
                out.append(
                    CompactionInfo(
                        status="open",
                        compaction_id=cid,
                        action=start.action,
                        trigger=start.trigger,
                        pre_tokens=start.pre_tokens,
                        post_tokens=None,
                        replacement_count=None,
                        span=start.span,
                        start_seq=seq,
                        summary_seq=summaries.get(cid),
                        boundary_seq=None,
                    )
                )
        out.sort(key=lambda c: c.start_seq if c.start_seq is not None else c.boundary_seq or 0)
        return out

    # -- writing -------------------------------------------------------------------------------

    def append(self, event: Event) -> Entry:
        """Write `event` and fold it into the projection; returns it with its seq.

        Raises `RecordError` (writing nothing) if the event breaks a record invariant.
        """
        with self._lock:
            if self._closed:
                raise RecordError("the record is closed", path=self._path)
            if self._readonly:
                raise RecordError("the record was opened read-only", path=self._path)
            entry = Entry(len(self._entries), event)
            try:
                self._projection.check(entry)
            except RecordError as exc:
                raise RecordError(exc.reason, path=self._path) from None
            try:
                self._persist(entry, durable=self._should_sync(event))
            except UnicodeEncodeError as exc:
                # A lone surrogate (e.g. from undecodable tool output) cannot be stored as
                # UTF-8; nothing was written.
                raise RecordError(
                    f"the {event.kind} event holds text that is not valid Unicode "
                    f"({exc.reason} at position {exc.start}); nothing was written",
                    path=self._path,
                ) from None
            self._accept(entry)
            return entry

    def append_message(self, message: Message) -> Entry:
        """Shorthand for `append(MessageAppended(message=message))`."""
        return self.append(MessageAppended(message=message))

    def _should_sync(self, event: Event) -> bool:
        if self._fsync == "every_event":
            return True
        if self._fsync == "every_boundary":
            return _durable_kind(event)
        return False

    def _accept(self, entry: Entry) -> None:
        self._projection.apply(entry)
        self._entries.append(entry)
        if isinstance(entry.event, MessageAppended):
            self._message_entries.append(entry)

    def _load(self, entry: Entry, *, line: int) -> None:
        if entry.seq != len(self._entries):
            raise RecordError(
                f"seq {entry.seq} out of order: expected {len(self._entries)}",
                path=self._path,
                line=line,
            )
        try:
            self._accept(entry)
        except RecordError as exc:
            raise RecordError(exc.reason, path=self._path, line=line) from None

    @abstractmethod
    def _persist(self, entry: Entry, *, durable: bool) -> None:
        """Write one entry to the medium (called with the lock held)."""

    def refresh(self) -> int:
        """Read entries another writer appended since this handle loaded; returns how many."""
        return 0

    def close(self) -> None:
        """Flush (unless `fsync="never"`), release the writer lock and close the medium."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close()

    @abstractmethod
    def _close(self) -> None:
        """Release the medium (called once, with the lock held)."""

    def __enter__(self) -> Record:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        where = "memory" if self._path is None else str(self._path)
        mode = "r" if self._readonly else "a"
        return f"<{type(self).__name__} {where} mode={mode} entries={len(self._entries)}>"


class MemoryRecord(Record):
    """A record that lives only in this process (tests, simulations, throwaway sessions)."""

    def __init__(self, entries: Sequence[Event] = ()) -> None:
        super().__init__(path=None, readonly=False, fsync="never")
        for event in entries:
            self.append(event)

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        """Nothing to write: the entry lives in memory only."""

    def _close(self) -> None:
        """Nothing to release."""


class _WriterLock:
    """An exclusive `flock` on an open file descriptor, for the writer's lifetime."""

    def __init__(self, fd: int, path: Path) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RecordLockedError(
                "another writer holds this record; open it with readonly=True to read", path=path
            ) from None


@contextlib.contextmanager
def _bulk_load() -> Iterator[None]:
    """Pause the cyclic GC while decoding a batch of entries.

    Loading builds no cycles, and the collector's repeated passes over hundreds of thousands of
    new objects would cost more than the decode itself.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonlRecord(Record):
    """A record in a JSON Lines file: one event a line, appended with one `write` each.

    On open, an incomplete final line (a write torn by a crash) is dropped with a warning, and a
    writer truncates it away before appending; any other bad line raises `RecordError` naming
    the file and line, and the file is left exactly as it was.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        fsync: FsyncPolicy = "every_boundary",
    ) -> None:
        super().__init__(path=Path(path), readonly=readonly, fsync=fsync)
        assert self._path is not None
        self._fd: int | None = None
        self._offset = 0
        self._line = 0
        self._needs_newline = False
        if readonly:
            if not self._path.exists():
                raise RecordError("no such record", path=self._path)
            self._read_new(truncate=False)
            return
        created = not self._path.exists()
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            _WriterLock(fd, self._path)
            if created:
                _fsync_dir(self._path)
            self._fd = fd
            self._read_new(truncate=True)
        except BaseException:
            self._fd = None
            os.close(fd)
            raise

    def _read_new(self, *, truncate: bool) -> int:
        with _bulk_load():
            return self._read_new_lines(truncate=truncate)

    def _read_new_lines(self, *, truncate: bool) -> int:
        assert self._path is not None
        with open(self._path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        if self._needs_newline and data.startswith(b"\n"):
            # The newline a writer added after an entry this handle loaded unterminated.
            data = data[1:]
            self._offset += 1
            self._needs_newline = False
        if self._offset == 0 and data.startswith(_SQLITE_MAGIC):
            raise RecordError(
                "this is an SQLite database: open it with SqliteRecord", path=self._path
            )
        complete = data.rfind(b"\n") + 1
        count = 0
        start = 0
        while start < complete:
            end = data.index(b"\n", start)
            self._load_line(data[start:end])
            count += 1
            start = end + 1
        self._offset += complete
        tail = data[complete:]
        if tail:
            count += self._final_line(tail, truncate=truncate)
        return count

    def _load_line(self, line: bytes) -> None:
        self._line += 1
        try:
            entry = decode_line(line, projection_len=len(self._projection))
        except RecordError as exc:
            raise RecordError(exc.reason, path=self._path, line=self._line) from None
        self._load(entry, line=self._line)

    def _final_line(self, tail: bytes, *, truncate: bool) -> int:
        """Handle bytes after the last newline: a complete entry, a torn write, or not a record.

        A complete entry whose newline never reached the disk is kept (a writer adds the
        newline before its next append). A prefix of an entry line (`{"v":...`, as every line
        this library writes begins) is a write torn by a crash: dropped with a warning, and cut
        off by a writer. Anything else means this is not a record: `RecordError`, file kept.
        """
        try:
            entry = decode_line(tail, projection_len=len(self._projection))
        except RecordError:
            entry = None
        if entry is not None and entry.seq == len(self._entries):
            self._line += 1
            self._load(entry, line=self._line)
            self._needs_newline = True
            self._offset += len(tail)
            return 1
        prefix = _LINE_START[: len(tail)]
        if not tail.startswith(_LINE_START) and tail != prefix:
            raise RecordError(
                "not a record: the final line is neither an entry nor a torn one",
                path=self._path,
                line=self._line + 1,
            )
        where = f"{self._path}:{self._line + 1}"
        if truncate:
            assert self._fd is not None
            logger.warning(
                "%s: dropping a torn final line (%d bytes, no newline) left by an interrupted "
                "write; truncating the file to %d bytes",
                where,
                len(tail),
                self._offset,
            )
            os.ftruncate(self._fd, self._offset)
            os.fsync(self._fd)
        else:
            logger.warning(
                "%s: ignoring an incomplete final line (%d bytes, no newline)", where, len(tail)
            )
        return 0

    def refresh(self) -> int:
        """Read lines another writer appended since this (read-only) handle loaded."""
        with self._lock:
            if self._readonly and not self._closed:
                return self._read_new(truncate=False)
            return 0

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        assert self._fd is not None
        data = encode_line(entry)
        if self._needs_newline:
            data = b"\n" + data
            self._needs_newline = False
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._offset += len(data)
        self._line += 1
        if durable:
            os.fsync(self._fd)

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if self._fsync != "never":
                    os.fsync(fd)
            finally:
                os.close(fd)  # also releases the flock


class SqliteRecord(Record):
    """A record in an SQLite database (WAL mode): one row per event, `seq` as the primary key.

    A second writer is refused through an exclusive `flock` on `<path>.writer-lock`; readers
    open the database read-only and never take that lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        fsync: FsyncPolicy = "every_boundary",
    ) -> None:
        super().__init__(path=Path(path), readonly=readonly, fsync=fsync)
        assert self._path is not None
        self._lock_fd: int | None = None
        self._conn: sqlite3.Connection | None = None
        try:
            if readonly:
                if not self._path.exists():
                    raise RecordError("no such record", path=self._path)
                self._conn = sqlite3.connect(
                    f"{self._path.resolve().as_uri()}?mode=ro",
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                lock_path = self._path.with_name(self._path.name + ".writer-lock")
                self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                _WriterLock(self._lock_fd, self._path)
                self._conn = sqlite3.connect(
                    self._path, isolation_level=None, check_same_thread=False
                )
                os.chmod(self._path, 0o600)
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS events "
                    "(seq INTEGER PRIMARY KEY, body TEXT NOT NULL)"
                )
                self._set_sync(durable=False)
            self._read_new()
        except sqlite3.DatabaseError as exc:
            self._close()
            raise RecordError(f"not a readable SQLite record: {exc}", path=self._path) from None
        except BaseException:
            self._close()
            raise

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
        with _bulk_load():
            return self._read_new_rows()

    def _read_new_rows(self) -> int:
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT seq, body FROM events WHERE seq >= ? ORDER BY seq", (len(self._entries),)
        )
        count = 0
        for seq, body in rows:
            try:
                entry = decode_entry(json.loads(body), projection_len=len(self._projection))
            except json.JSONDecodeError as exc:
                raise RecordError(f"not valid JSON: {exc}", path=self._path, line=seq) from None
            except RecordError as exc:
                raise RecordError(exc.reason, path=self._path, line=seq) from None
            self._load(entry, line=seq)
            count += 1
        return count

    def refresh(self) -> int:
        """Read rows another writer committed since this (read-only) handle loaded."""
        with self._lock:
            if self._readonly and not self._closed:
                return self._read_new()
            return 0

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


def open_record(
    path: str | os.PathLike[str], *, readonly: bool = False, fsync: FsyncPolicy = "every_boundary"
) -> Record:
    """Open a JSONL or SQLite record, chosen by the file's first bytes (or, if new, its suffix)."""
    p = Path(path)
    kind = "jsonl"
    if p.exists():
        with contextlib.suppress(OSError), open(p, "rb") as fh:
            if fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
                kind = "sqlite"
    elif p.suffix.lower() in {".sqlite", ".sqlite3", ".db"}:
        kind = "sqlite"
    if kind == "sqlite":
        return SqliteRecord(p, readonly=readonly, fsync=fsync)
    return JsonlRecord(p, readonly=readonly, fsync=fsync)
