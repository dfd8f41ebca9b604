"""`JsonlRecord`: a record in a JSON Lines file, one event a line."""

from __future__ import annotations

import logging
import os

from ..errors import RecordError
from .codec import decode_line, encode_line
from .events import Entry
from .files import FileRecord, fsync_dir, lock_writer

__all__ = ["JsonlRecord"]

logger = logging.getLogger("steerable_compaction.record")

SQLITE_MAGIC = b"SQLite format 3\x00"
_LINE_START = b'{"v":'  # every line the JSONL store writes starts so


class JsonlRecord(FileRecord):
    """A record in a JSON Lines file: one event a line, appended with one `write` each.

    On open, an incomplete final line (a write torn by a crash) is dropped with a warning, and a
    writer truncates it away before appending; any other bad line raises `RecordError` naming
    the file and line, and the file is left exactly as it was.
    """

    _fd: int | None = None
    _offset = 0
    _line = 0
    _needs_newline = False

    def _open_reader(self) -> None:
        """Nothing to hold open: each read opens the file afresh."""

    def _open_writer(self) -> None:
        created = not self.file.exists()
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            lock_writer(fd, self.file)
            if created:
                fsync_dir(self.file)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _read_new(self) -> int:
        with open(self.file, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        if self._needs_newline and data.startswith(b"\n"):
            # The newline a writer added after an entry this handle loaded unterminated.
            data = data[1:]
            self._offset += 1
            self._needs_newline = False
        if self._offset == 0 and data.startswith(SQLITE_MAGIC):
            raise RecordError(
                "this is an SQLite database: open it with SqliteRecord", path=self.file
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
            count += self._final_line(tail)
        return count

    def _load_line(self, line: bytes) -> None:
        self._line += 1
        try:
            entry = decode_line(line, projection_len=len(self._projection))
        except RecordError as exc:
            raise RecordError(exc.reason, path=self.file, line=self._line) from None
        self._load(entry, line=self._line)

    def _final_line(self, tail: bytes) -> int:
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
                path=self.file,
                line=self._line + 1,
            )
        where = f"{self.file}:{self._line + 1}"
        if not self._readonly:
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
