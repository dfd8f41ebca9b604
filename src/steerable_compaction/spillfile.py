"""The spill file format, shared by the spill stage that writes it and recall that reads it.

A spilled tool result is replaced in the transcript by a pointer, `SPILL_PREFIX` + `N chars
from TOOL saved to PATH; ...]`, and its full text goes to `PATH`, named
`<seq:010d>-<sha256 prefix>-<random>.txt`, in the record's spill directory
(`Record.spill_directory`). `read_spilled(pointer, directory)` gives the full text back only when
all of this holds, else the reason it does not (it never raises):

- the pointer names a file of that format whose directory, resolved (`os.path.realpath`), is
  `directory` resolved: an absolute path elsewhere, `../`, or a symlinked directory inside the
  spill directory lead outside it and are refused;
- the file is opened by its bare name inside the opened directory with `O_NOFOLLOW`, so no link
  is followed on the way, and it must be a regular file with one link (a hard link to a file
  elsewhere has two) of at most 256 MiB;
- it holds UTF-8 text whose SHA-256 starts with the digest its name carries.
A pointer a tool forged can therefore read nothing but a spill file of this record.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass

__all__ = ["SPILL_PREFIX", "SpillRead", "digest", "read_spilled", "spill_name"]

SPILL_PREFIX = "[tool output spilled: "

_POINTER = re.compile(r"\A\[tool output spilled: [\d,]+ chars from .*? saved to (?P<path>.+?); ")
_NAME = re.compile(r"\A\d{10}-(?P<digest>[0-9a-f]{16})-[0-9a-f]{8}\.txt\Z")
_MAX_BYTES = 256 * 1024 * 1024  # larger than any spill: a pointer to it is not ours
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class SpillRead:
    """What a spill pointer leads to: the whole `text`, or `None` and the `reason` why not."""

    text: str | None
    reason: str = ""


def digest(text: str) -> str:
    """The 16 hex digits of the text's SHA-256 that a spill file's name carries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def spill_name(seq: int, text: str, token: str) -> str:
    """The file name for `text` spilled at record `seq` (`token`: 8 random hex digits)."""
    return f"{seq:010d}-{digest(text)}-{token}.txt"


def read_spilled(pointer: str, directory: str | os.PathLike[str] | None) -> SpillRead:
    """The full text behind a spill pointer, read only from `directory`; never raises."""
    found = _POINTER.match(pointer)
    if found is None:
        return SpillRead(None, "the pointer is not in the spill format")
    path = found.group("path")
    if "\x00" in path:
        return SpillRead(None, "the pointer's path holds a NUL character")
    name = os.path.basename(path)
    shape = _NAME.match(name)
    if shape is None:
        return SpillRead(None, "the pointer does not name a spill file")
    if directory is None:
        return SpillRead(None, "no spill directory is known for this record")
    try:
        base = os.path.realpath(directory)
        parent = os.path.realpath(os.path.dirname(path) or os.curdir)
    except (OSError, ValueError) as exc:
        return SpillRead(None, f"the path cannot be resolved ({exc})")
    if parent != base:
        return SpillRead(None, "the file is outside this record's spill directory")
    try:
        dir_fd = os.open(base, _OPEN_DIR)
    except OSError as exc:
        return SpillRead(None, f"the spill directory cannot be opened ({exc.strerror or exc})")
    try:
        data = _read_in(dir_fd, name)
    except OSError as exc:
        return SpillRead(None, _why(exc))
    finally:
        os.close(dir_fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return SpillRead(None, "the file is not UTF-8 text")
    if digest(text) != shape.group("digest"):
        return SpillRead(None, "the file no longer holds what was spilled (its digest differs)")
    return SpillRead(text)


def _read_in(dir_fd: int, name: str) -> bytes:
    """The bytes of the regular, singly linked file `name` in the open directory (no links)."""
    fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file")
        if info.st_nlink != 1:
            raise OSError(errno.EMLINK, "it has other hard links")
        if info.st_size > _MAX_BYTES:
            raise OSError(errno.EFBIG, "it is larger than any spill file")
        return fh.read(_MAX_BYTES + 1)  # one more than fits: a file that grew fails its digest


def _why(exc: OSError) -> str:
    """A short reason for a failed read: the file is gone, a link, or unreadable."""
    if exc.errno == errno.ENOENT:
        return "the file no longer exists"
    if exc.errno == errno.ELOOP:
        return "the file is a symbolic link"
    return f"the file cannot be read ({exc.strerror or exc})"
