"""The spill file format, shared by the spill stage that writes it and recall that reads it.

A spilled tool result is replaced in the transcript by a pointer, `SPILL_PREFIX` + `N chars
from TOOL saved to PATH; ...]`, and its full text goes to `PATH`, named
`<seq:010d>-<sha256 prefix>-<random>.txt`. `read_spilled` gives the full text back for a
pointer, and only when the file is a regular file (not a link), named in that format, and holds
exactly the text its name's digest says: a pointer a tool forged cannot read anything else.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

__all__ = ["SPILL_PREFIX", "digest", "read_spilled", "spill_name"]

SPILL_PREFIX = "[tool output spilled: "

_POINTER = re.compile(r"\A\[tool output spilled: [\d,]+ chars from .*? saved to (?P<path>.+?); ")
_NAME = re.compile(r"\A\d{10}-(?P<digest>[0-9a-f]{16})-[0-9a-f]{8}\.txt\Z")
_MAX_BYTES = 256 * 1024 * 1024  # larger than any spill: a pointer to it is not ours


def digest(text: str) -> str:
    """The 16 hex digits of the text's SHA-256 that a spill file's name carries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def spill_name(seq: int, text: str, token: str) -> str:
    """The file name for `text` spilled at record `seq` (`token`: 8 random hex digits)."""
    return f"{seq:010d}-{digest(text)}-{token}.txt"


def read_spilled(pointer: str) -> str | None:
    """The full text behind a spill pointer, or `None` if it cannot be read and verified."""
    found = _POINTER.match(pointer)
    if found is None:
        return None
    path = found.group("path")
    name = _NAME.match(os.path.basename(path))
    if name is None:
        return None
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    return text if digest(text) == name.group("digest") else None
