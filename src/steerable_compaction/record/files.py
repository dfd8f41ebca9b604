"""What the on-disk stores share: the open sequence, the writer lock and bulk loading.

One writer at a time: a writer holds an exclusive `flock` for its lifetime (released by the OS
if the process dies); readers never lock and never write.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path

from ..errors import RecordError, RecordLockedError
from .base import FsyncPolicy, Record

__all__ = ["FileRecord", "bulk_load", "fsync_dir", "lock_writer"]


def lock_writer(fd: int, path: Path) -> None:
    """Take the exclusive writer `flock` on `fd`, or raise `RecordLockedError`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RecordLockedError(
            "another writer holds this record; open it with readonly=True to read", path=path
        ) from None


@contextlib.contextmanager
def bulk_load() -> Iterator[None]:
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
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        fsync: FsyncPolicy = "every_boundary",
    ) -> None:
        super().__init__(path=Path(path), readonly=readonly, fsync=fsync)
        try:
            if readonly:
                if not self.file.exists():
                    raise RecordError("no such record", path=self.file)
                self._open_reader()
            else:
                self._open_writer()
            with bulk_load():
                self._read_new()
        except BaseException:
            self._close()
            raise

    @property
    def file(self) -> Path:
        """The record's path (never `None` for a file store)."""
        assert self._path is not None
        return self._path

    @abstractmethod
    def _open_reader(self) -> None:
        """Open the medium for reading only."""

    @abstractmethod
    def _open_writer(self) -> None:
        """Take the writer lock and open (or create) the medium for appending."""

    @abstractmethod
    def _read_new(self) -> int:
        """Load entries the medium holds beyond those loaded; returns how many."""

    def refresh(self) -> int:
        """Read entries another writer appended since this (read-only) handle loaded."""
        with self._lock:
            if self._readonly and not self._closed:
                with bulk_load():
                    return self._read_new()
            return 0
