"""`JsonlRecord`: a record in a JSON Lines file, one event a line.

Its projection checkpoint is a file of its own beside it, `<record>.checkpoint` (one line,
`record.checkpoint`), replaced whole (written to `<record>.checkpoint.tmp`, then renamed) after
each boundary that replaced a span, never synced: a lost or torn one only makes the next open
read the whole file. It is trusted only when the line that ends at its `offset` is, byte for
byte, the entry it names (CRC-32 and size); a writer that creates the record removes any left
from a record that had the path before.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from ..errors import RecordError
from .checkpoint import Checkpoint, bound_to, decode_checkpoint, encode_checkpoint
from .codec import encode_line, iter_lines, parse_line
from .events import Entry
from .files import FileRecord, fsync_dir, identity, lock_writer, sync

__all__ = ["CHECKPOINT_SUFFIX", "JsonlRecord", "checkpoint_path"]

logger = logging.getLogger("steerable_compaction.record")

SQLITE_MAGIC = b"SQLite format 3\x00"
_LINE_START = b'{"v":'  # every line the JSONL store writes starts so
_scan = json.JSONDecoder().raw_decode
_BLOCK = 1 << 20  # bytes read at a time on open and refresh

CHECKPOINT_SUFFIX = ".checkpoint"
"""Appended to the record's file name: `s.jsonl` keeps its checkpoint in `s.jsonl.checkpoint`."""


def checkpoint_path(record: Path) -> Path:
    """Where the projection checkpoint of the JSONL record `record` lives."""
    return record.with_name(record.name + CHECKPOINT_SUFFIX)


def _is_torn(tail: bytes) -> bool:
    """Whether bytes after the last newline can be an entry line cut short by a crash.

    A torn write is a prefix of a line: an entry's start and JSON that has not ended yet. JSON
    that ends (even with bytes after it, as when a final newline was overwritten) is complete:
    it must decode, or the record is corrupt.
    """
    if not (tail.startswith(_LINE_START) or _LINE_START.startswith(tail)):
        return False
    try:
        _scan(tail.decode("utf-8", "replace"))
    except RecursionError:
        return False
    except ValueError:
        return True
    return False


class JsonlRecord(FileRecord):
    """A record in a JSON Lines file: one event a line, one `write` an append (or a batch).

    On open, an incomplete final line (a write torn by a crash) is dropped with a warning that
    reports the last seq found against the writer's high-water mark (`mark`), and a writer
    truncates it away before appending, once the file is known to hold every committed line.
    Any other bad line, a complete final one included, raises `RecordError` naming the file and
    line, and the file is left as it was.
    """

    _fd: int | None = None
    _pending: list[bytes]  # encoded lines not written yet (a batch)
    _offset = 0
    _line = 0
    _needs_newline = False
    _torn: tuple[int, int] | None = None  # a writer's torn final line: (line, bytes), to drop
    _keeps_checkpoints = True

    def _open_reader(self) -> None:
        """Nothing to hold open: each read opens the file afresh."""
        self._pending = []

    def _open_writer(self) -> None:
        self._pending = []
        created = not self.file.exists()
        try:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise RecordError(f"cannot open: {exc.strerror}", path=self.file) from None
        try:
            lock_writer(fd, self.file)
            if created:
                fsync_dir(self.file)
                # A checkpoint left by a record that had this path before is not this one's.
                checkpoint_path(self.file).unlink(missing_ok=True)
            self._identity = identity(os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _find_checkpoint(self) -> Checkpoint | None:
        """The checkpoint file's checkpoint, if the line ending at its offset is the one named."""
        path = checkpoint_path(self.file)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("%s: cannot read (%s); reading the whole record", path, exc.strerror)
            return None
        try:
            checkpoint = decode_checkpoint(data)
        except RecordError as exc:
            logger.warning("%s: %s; reading the whole record", path, exc.reason)
            return None
        size = checkpoint.last_size + 1  # and its newline
        with open(self.file, "rb") as fh:
            fh.seek(max(checkpoint.offset - size, 0))
            line = fh.read(size) if checkpoint.offset >= size else b""
        if line[-1:] != b"\n" or not bound_to(checkpoint, line[:-1]):
            logger.warning(
                "%s: the checkpoint at seq %d does not match the record's line before byte %d "
                "(left by another file, or the record lost lines); reading the whole record",
                path,
                checkpoint.seq,
                checkpoint.offset,
            )
            return None
        return checkpoint

    def _resume_from(self, checkpoint: Checkpoint) -> None:
        super()._resume_from(checkpoint)
        self._offset, self._line = checkpoint.offset, checkpoint.seq

    def _read_before(self, checkpoint: Checkpoint) -> None:
        """Load the lines before the checkpoint's offset, a block at a time, as `_read_new`."""
        position = (self._offset, self._line, self._needs_newline)
        self._offset = self._line = 0
        try:
            with open(self.file, "rb") as fh:
                data, left = b"", checkpoint.offset
                while left:
                    more = fh.read(min(max(_BLOCK, len(data)), left))
                    if not more:
                        break
                    left -= len(more)
                    data += more
                    complete = data.rfind(b"\n") + 1
                    if complete:
                        self._load_lines(data[:complete])
                        data = data[complete:]
            if left or data:
                raise RecordError(
                    f"the lines before seq {checkpoint.seq} do not end at byte "
                    f"{checkpoint.offset}, where its checkpoint says",
                    path=self.file,
                )
        finally:
            self._offset, self._line, self._needs_newline = position

    def _store_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Replace the checkpoint file (written aside, then renamed; not synced)."""
        path = checkpoint_path(self.file)
        aside = path.with_name(path.name + ".tmp")
        data = encode_checkpoint(replace(checkpoint, offset=self._offset))
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(aside, path)

    def _read_new(self) -> int:
        """Load the lines past those loaded, a block of about `_BLOCK` bytes at a time.

        Small blocks keep the buffers small and reused (a large file loads faster than read
        whole, in a fraction of the memory). Bytes after the last newline are `_final_line`'s.
        """
        loaded = 0
        with open(self.file, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read(max(_BLOCK, len(SQLITE_MAGIC)))
            if self._needs_newline and data.startswith(b"\n"):
                # The newline a writer added after an entry this handle loaded unterminated.
                data = data[1:]
                self._offset += 1
                self._needs_newline = False
            if self._offset == 0 and data.startswith(SQLITE_MAGIC):
                raise RecordError(
                    "this is an SQLite database: open it with SqliteRecord", path=self.file
                )
            while True:
                complete = data.rfind(b"\n") + 1
                if complete:
                    loaded += self._load_lines(data[:complete])
                    data = data[complete:]
                more = fh.read(max(_BLOCK, len(data)))  # a line longer than a block: double
                if not more:
                    break
                data += more
        if data:
            return loaded + self._final_line(data)
        return loaded

    def _load_lines(self, lines: bytes) -> int:
        """Load newline-terminated `lines`; the position moves past each line loaded."""
        first, before = self._line + 1, len(self._entries)
        try:
            self._load_objects(iter_lines(lines), lambda i: first + i)
        finally:
            # Keep the position after the last loaded line, so a refresh never reloads it.
            loaded = len(self._entries) - before
            if loaded == lines.count(b"\n"):
                self._offset += len(lines)
            else:
                end = 0
                for _ in range(loaded):
                    end = lines.index(b"\n", end) + 1
                self._offset += end
            self._line += loaded
        return loaded

    def _final_line(self, tail: bytes) -> int:
        """Handle bytes after the last newline: a complete entry, a torn write, or corruption.

        A complete entry whose newline never reached the disk is kept (a writer adds the
        newline before its next append). A torn write is dropped with a warning, and cut off
        by a writer. Anything else raises `RecordError`, and the file is kept as it is.
        """
        line = self._line + 1
        where = f"{self.file}:{line}"
        if _is_torn(tail):
            if self._readonly:
                logger.warning(
                    "%s: ignoring an incomplete final line (%d bytes, no newline)%s",
                    where,
                    len(tail),
                    self._recovery(),
                )
                return 0
            self._torn = (line, len(tail))  # dropped in `_loaded`, once checked against the mark
            return 0
        if not tail.startswith(_LINE_START):
            raise RecordError(
                "not a record: the final line is neither an entry nor a torn one",
                path=self.file,
                line=line,
            )
        try:
            obj = parse_line(tail)
        except RecordError as exc:
            raise RecordError(exc.reason, path=self.file, line=line) from None
        self._load_objects(iter([obj]), lambda _: line)
        self._line += 1
        self._needs_newline = True
        self._offset += len(tail)
        return 1

    def _recovery(self) -> str:
        """How far the file goes against how far its writer got, where a mark says so."""
        found = len(self)
        mark = self._seen_mark
        if mark is None:
            return f"; the last seq found is {found - 1} (no high-water mark to compare with)"
        return (
            f"; the last seq found is {found - 1}, the writer had committed up to seq "
            f"{mark.written - 1}, synced up to seq {mark.synced - 1}"
        )

    def _loaded(self) -> None:
        """Drop a torn final line now that the file is known to hold every committed line."""
        if self._torn is None:
            return
        (line, size), self._torn = self._torn, None
        assert self._fd is not None
        logger.warning(
            "%s:%d: dropping a torn final line (%d bytes, no newline) left by an interrupted "
            "write; truncating the file to %d bytes%s",
            self.file,
            line,
            size,
            self._offset,
            self._recovery(),
        )
        os.ftruncate(self._fd, self._offset)
        sync(self._fd)

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        newline = self._needs_newline
        self._pending.append((b"\n" if newline else b"") + encode_line(entry))
        self._needs_newline = False
        self._line += 1
        if not self._batching:
            self._write(durable=durable)
        try:
            self._on_append(entry)
        except BaseException:
            if self._batching:  # still queued: take it back
                self._pending.pop()
                self._needs_newline, self._line = newline, self._line - 1
            else:  # on disk, and not in memory: appending on would repeat its seq
                self._broken = "an append hook failed after its line was written: reopen"
            raise

    def _commit_batch(self, *, durable: bool) -> None:
        if self._pending:
            self._write(durable=durable)

    def _write(self, *, durable: bool) -> None:
        """Write the pending lines with one `write` (and sync them if `durable`)."""
        assert self._fd is not None
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if durable:
                sync(self._fd)
        except OSError as exc:  # part of it may be on disk: appending on could corrupt the file
            self._broken = f"a write failed ({exc.strerror}): reopen the record"
            raise RecordError(f"cannot append: {exc.strerror}", path=self.file) from None
        self._offset += len(data)
        self._check_identity()
        self._advance_mark(self._line, synced=durable)

    def _close(self) -> None:
        if self._fd is None:
            self._close_mark(synced=False)  # a reader, or a writer that never opened
            return
        fd, self._fd = self._fd, None
        synced = False
        try:
            if self._fsync != "never":
                sync(fd)
                synced = True
        finally:
            try:
                self._close_mark(synced=synced)  # while the lock still keeps other writers out
            finally:
                os.close(fd)  # also releases the flock
