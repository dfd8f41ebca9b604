"""What the on-disk stores share: opening, the writer lock, loading, and the writer's identity.

One writer at a time: a writer holds an exclusive `flock` for its lifetime (released by the OS
if the process dies); readers never lock and never write. A writer also remembers which file it
opened: if the path is unlinked or replaced while it is open, its next append raises
`RecordError` instead of writing where nobody will ever read. A writer keeps a high-water mark
beside the file (`mark`), and every open checks the record against it: a writer is refused a
record shorter than its mark (`RecordLossError`), a reader warned. Both stores keep a projection
checkpoint (`checkpoint`) and open from it unless `full=True`; the mark is checked against the
length found either way, since the entries after the checkpoint are always read to the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import stat
from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import RecordError, RecordLockedError
from .base import FsyncPolicy, Record
from .checkpoint import Checkpoint
from .codec import CHECKED_SINCE
from .mark import Mark, MarkWriter, check_mark, read_mark

__all__ = ["FileRecord", "bulk_load", "fsync_dir", "identity", "lock_writer", "sync"]

logger = logging.getLogger("steerable_compaction.record")


def sync(fd: int) -> None:
    """Flush `fd`'s data to stable storage.

    `fdatasync` also writes back the file size an append changed, so appended bytes are as
    durable as with `fsync`, without flushing timestamps (a fifth less time per sync here).
    """
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # macOS
        os.fsync(fd)


def lock_writer(fd: int, path: Path) -> None:
    """Take the exclusive writer `flock` on `fd`, or raise `RecordLockedError`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RecordLockedError(
            "another writer holds this record; open it with readonly=True to read", path=path
        ) from None


def identity(st: os.stat_result) -> tuple[int, int]:
    """Which file a stat describes (device and inode)."""
    return (st.st_dev, st.st_ino)


@contextlib.contextmanager
def bulk_load() -> Iterator[None]:
    """Pause the cyclic GC while decoding a batch of entries, then file them as long-lived.

    Loading builds no cycles, and the collector's repeated passes over hundreds of thousands of
    new objects would cost more than the decode itself. Once loaded they live as long as the
    record, so a large batch is moved straight to the oldest generation (`gc.freeze` then
    `gc.unfreeze`, which also ages any other young object) instead of being walked by the next
    young collection: a fifth of the time to open 100k events.
    """
    was_enabled = gc.isenabled()
    before = gc.get_count()[0]
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] - before > _PROMOTE_AFTER:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


_PROMOTE_AFTER = 100_000  # new tracked objects (about 20k entries) worth skipping young passes


def fsync_dir(path: Path) -> None:
    """Make the directory entry of a newly created `path` durable."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileRecord(Record):
    """A record kept in a file: opened as a reader or as the one writer, then loaded.

    Subclasses open their medium (`_open_reader`, `_open_writer`), read what it holds
    (`_read_new`), write (`_persist`) and release it (`_close`, also called after a failed open).
    Every failure to open or read is a `RecordError` naming the file (and line or row).
    The open resumes from the store's projection checkpoint if it has one that fits, reading
    only the entries after it; `full=True` reads and checks every entry on open instead.
    """

    _identity: tuple[int, int] | None = None  # the file a writer opened
    _checked = False  # a checksummed entry was loaded: older ones may no longer follow
    _unchecked = 0  # entries of a schema before checksums
    _told_unchecked = False
    _seen_mark: Mark | None = None  # the mark as it was before the record was read
    _mark: MarkWriter | None = None  # this writer's mark

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        fsync: FsyncPolicy = "every_boundary",
        full: bool = False,
    ) -> None:
        super().__init__(path=Path(path), readonly=readonly, fsync=fsync)
        try:
            created = not self._check_regular()
            self._seen_mark = None if created else read_mark(self.file)
            if readonly:
                self._open_reader()
            else:
                self._open_writer()
            if not full and not created:
                self._resume()
            self._read()
            check_mark(self._seen_mark, len(self), record=self.file, readonly=readonly)
            self._loaded()
            if not readonly:
                self._start_mark(reset=created)
        except BaseException:
            self._close()
            raise

    @property
    def file(self) -> Path:
        """The record's path (never `None` for a file store)."""
        assert self._path is not None
        return self._path

    def _check_regular(self) -> bool:
        """Whether the record file exists (a writer creates it); `RecordError` if not a file."""
        try:
            st = os.stat(self.file)
        except FileNotFoundError:
            if self._readonly:
                raise RecordError("no such record", path=self.file) from None
            return False
        except OSError as exc:
            raise RecordError(f"cannot open: {exc.strerror}", path=self.file) from None
        if not stat.S_ISREG(st.st_mode):
            raise RecordError("not a record: not a regular file", path=self.file)
        return True

    def _loaded(self) -> None:
        """Called once the record is read and checked against its mark, before any write."""

    def _start_mark(self, *, reset: bool) -> None:
        """Keep this writer's high-water mark from the entries loaded (a new one if `reset`)."""
        try:
            self._mark = MarkWriter(self.file, len(self), reset=reset)
        except OSError as exc:
            logger.warning("%s: no high-water mark is kept (%s)", self.file, exc.strerror or exc)

    def _advance_mark(self, written: int, *, synced: bool) -> None:
        """Count `written` entries as committed (`synced`: on stable storage) in the mark."""
        if self._mark is not None:
            self._mark.advance(written, synced=synced)

    def _close_mark(self, *, synced: bool) -> None:
        """Count what a clean close leaves (unless an append failed) and release the mark."""
        if self._mark is not None:
            if self._broken is None:
                self._mark.advance(len(self), synced=synced)
            self._mark.close()

    @abstractmethod
    def _open_reader(self) -> None:
        """Open the medium for reading only."""

    @abstractmethod
    def _open_writer(self) -> None:
        """Take the writer lock and open (or create) the medium for appending."""

    @abstractmethod
    def _read_new(self) -> int:
        """Load entries the medium holds beyond those loaded; returns how many."""

    def _resume(self) -> None:
        """Start from the medium's checkpoint if it has one that fits (else read everything)."""
        checkpoint = self._find_checkpoint()
        if checkpoint is not None:
            self._resume_from(checkpoint)
            self._checked = True  # the entry it is bound to is checksummed: so are later ones

    @abstractmethod
    def _find_checkpoint(self) -> Checkpoint | None:
        """The medium's checkpoint, if it has one bound to what the medium holds."""

    def _read_head(self, checkpoint: Checkpoint) -> None:
        self._checked = False
        try:
            with bulk_load():
                self._read_before(checkpoint)
        except OSError as exc:
            raise RecordError(f"cannot read: {exc.strerror or exc}", path=self.file) from None
        finally:
            self._checked = True

    @abstractmethod
    def _read_before(self, checkpoint: Checkpoint) -> None:
        """Load the entries before `checkpoint` (the record is emptied and `_base` is 0)."""

    def _read(self) -> int:
        try:
            with bulk_load():
                count = self._read_new()
        except OSError as exc:
            raise RecordError(f"cannot read: {exc.strerror or exc}", path=self.file) from None
        if self._unchecked and not self._told_unchecked:
            self._told_unchecked = True
            logger.info(
                "%s: %d entries predate checksums (schema v%d); they load unchecked",
                self.file,
                self._unchecked,
                CHECKED_SINCE - 1,
            )
        return count

    def _load_objects(self, objs: Iterator[Any], where: Callable[[int], int]) -> None:
        """Decode and load parsed entries in order; `where(i)` is the line (or row) of the i-th.

        `objs` may raise `RecordError` whose `line` is a 1-based index into it. Plain messages
        reach the projection in runs (one `extend` each), the rest one by one.
        """
        entries = self._entries
        before, checked, unchecked = len(entries), self._checked, 0

        def check_version(version: int) -> None:
            nonlocal checked, unchecked
            if version >= CHECKED_SINCE:
                checked = True
            elif checked:
                raise RecordError(
                    f"a v{version} entry after checksummed ones: the record was altered"
                )
            else:
                unchecked += 1

        try:
            self._ingest(objs, check_version)
        except RecordError as exc:
            line = where(len(entries) - before if exc.line is None else exc.line - 1)
            raise RecordError(exc.reason, path=self.file, line=line) from None
        except RecursionError:
            raise RecordError(
                "an entry nested too deeply", path=self.file, line=where(len(entries) - before)
            ) from None
        finally:
            self._checked, self._unchecked = checked, self._unchecked + unchecked

    def _check_identity(self) -> None:
        """Raise `RecordError` if the path no longer names the file this writer opened."""
        try:
            now = identity(os.stat(self.file))
        except FileNotFoundError:
            now = None
        if now != self._identity:
            raise RecordError(
                "the record file was deleted or replaced while this writer had it open; "
                "the append went to the old file and is lost: reopen the record",
                path=self.file,
            )

    def refresh(self) -> int:
        """Read entries another writer appended since this (read-only) handle loaded."""
        with self._lock:
            if self._readonly and not self._closed:
                return self._read()
            return 0
