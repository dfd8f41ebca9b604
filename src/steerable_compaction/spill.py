"""`SpillHooks` (R2): an oversized tool result goes to a file; the transcript gets a pointer.

The file is named from the record seq the result will take, a hash of its text and a random
part, never from anything the tool produced (no path traversal, no name to plant a file at). It
is created new (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600): a hard link, symlink, FIFO or
directory already at that name is never opened, another name is tried. The directory is created
0700; an existing one must be a real directory (not a symlink) owned by this user and writable by
no one else, else `SpillHooks` refuses it with a `ConfigError`. When a result cannot be spilled
after all (a full disk, a directory that changed), the call is still answered: the result keeps
its head and tail in the transcript and says it could not be saved.

The pointer keeps a head and tail excerpt so the model still sees what kind of output it was,
and between them the lines of the middle that state facts (`excerpt`), so a value said once
deep in a long log is not hidden behind the ellipsis.
Spill runs before compaction ever sees the result; compaction can still fold the pointer later.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from .compaction.atoms import salient_lines
from .errors import ConfigError
from .hooks import PreStepAction, RequestErrorContext, RetryAction, StepContext, ToolResultContext
from .messages import ContentPart, ImagePart, TextPart, ToolResult
from .record import Record
from .spillfile import SPILL_PREFIX, spill_name
from .tokens import estimate_tokens

__all__ = ["SPILL_PREFIX", "UNSPILLED_PREFIX", "SpillHooks", "excerpt"]

UNSPILLED_PREFIX = "[tool output too large to keep whole: "

logger = logging.getLogger("steerable_compaction.spill")
_ATTEMPTS = 8  # fresh random names tried before giving up on a directory
_TOKEN = re.compile(r"[0-9a-f]{8}")


def random_token() -> str:
    """8 random hex digits: the part of a spill file's name no one can guess."""
    return secrets.token_hex(4)


def excerpt(text: str, keep: int, noted_chars: int | None = None) -> str:
    """What the transcript shows of a spilled `text`: its head and tail, and lines of note.

    `keep` characters go to the head and the tail, `noted_chars` (default: as many again) to
    the lines of the middle that state facts (`salient_lines`: error names, stated values;
    not code, data rows or a log's repeated template), each after its line number, so a
    value stated once in the middle of a long log is not hidden behind the ellipsis.
    """
    head = text[: keep - keep // 2]
    tail = text[len(text) - keep // 2 :] if keep // 2 else ""
    # The middle holds the lines wholly between the two: not the one the head cuts or the one
    # the tail starts in.
    start = text.find("\n", max(len(head) - 1, 0)) + 1
    end = text.rfind("\n", 0, len(text) - len(tail) + 1)
    budget = keep if noted_chars is None else noted_chars
    noted = salient_lines(text[start:end], budget) if 0 < start <= end else []
    if not noted:
        return f"{head}\n…\n{tail}"
    first = text.count("\n", 0, start)  # the line number before the middle's first
    lines = "\n".join(f"{first + n}: {line}" for n, line in noted)
    return f"{head}\n… [lines of note in the part not shown, by line number]\n{lines}\n…\n{tail}"


class SpillHooks:
    """Spill tool results whose text exceeds `max_chars`, or `max_tokens`, into `directory`.

    `max_tokens` (estimated tokens, `None`: no token bound) makes "oversized" follow the
    window: the harness sets it to half of what a request may carry, so a result that a small
    window could never hold is spilled however few characters it has; the excerpt kept then
    shrinks with it (head, tail and lines of note: at most `max_tokens // 2` characters).

    `name_token` gives the 8 hex digits of each file name (`random_token` by default). Pass a
    deterministic one only where reproducible names matter more than unguessable ones (the
    simulator does, so its token counts do not vary from run to run).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_chars: int = 40_000,
        excerpt_chars: int = 2_000,
        name_token: Callable[[], str] = random_token,
        max_tokens: int | None = None,
    ) -> None:
        for key, value, low in (
            ("spill.max_chars", max_chars, 1),
            ("spill.excerpt_chars", excerpt_chars, 0),
            *((("spill.max_tokens", max_tokens, 1),) if max_tokens is not None else ()),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(key, value, f"an integer >= {low}")
        if excerpt_chars >= max_chars:
            raise ConfigError(
                "spill.excerpt_chars", excerpt_chars, f"less than max_chars ({max_chars})"
            )
        self.directory = Path(directory)
        self.name_token = name_token
        self.max_chars = max_chars
        self.excerpt_chars = excerpt_chars
        self.max_tokens = max_tokens
        _check_resolved(self.directory)
        if os.path.lexists(self.directory):
            _check_directory(self.directory)

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Nothing to do before a request."""
        return PreStepAction()

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """Errors are not spill's business."""
        return None

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Return `ctx.result`, or a pointer to the file its text was spilled into."""
        result = ctx.result
        text = result.text
        by_tokens = (
            self.max_tokens is not None
            and len(text) > self.max_tokens  # a token is at least a character: cheap filter
            and estimate_tokens(text) > self.max_tokens
        )
        if len(text) <= self.max_chars and not by_tokens:
            return result
        seq = len(ctx.record)  # the seq this result's message will get
        keep = noted = self.excerpt_chars
        if self.max_tokens is not None:
            # Head, tail and lines of note together stay within `max_tokens // 2` characters.
            keep = min(keep, self.max_tokens // 2)
            noted = min(noted, self.max_tokens // 2 - keep)
        shown = excerpt(text, keep, noted)
        try:
            self._bind(ctx.record)
            path = self._write(seq, text)
        except (OSError, ConfigError) as exc:
            # Answer the call anyway: a lossy result beats a call left without one.
            logger.warning(
                "could not spill a %d-char result of %s: %s", len(text), ctx.tool_name, exc
            )
            pointer = (
                f"{UNSPILLED_PREFIX}{len(text):,} chars from {ctx.tool_name}; it could not be "
                f"saved ({exc}), so only its head, tail and lines of note are shown]\n{shown}"
            )
        else:
            pointer = (
                f"{SPILL_PREFIX}{len(text):,} chars from {ctx.tool_name} saved to {path}; "
                f"read that file for the rest]\n{shown}"
            )
        images: tuple[ContentPart, ...] = tuple(
            p for p in result.content if isinstance(p, ImagePart)
        )
        return ToolResult(
            call_id=result.call_id,
            content=(TextPart(text=pointer), *images),
            is_error=result.is_error,
        )

    def _bind(self, record: Record) -> None:
        """Make `record` read its spill files from this directory; refuse one set elsewhere."""
        bound = record.spill_directory
        if bound is None:
            record.spill_directory = self.directory
        elif os.path.realpath(bound) != os.path.realpath(self.directory):
            raise ConfigError(
                "spill.directory",
                str(self.directory),
                f"the record's own spill directory {str(bound)!r} (recall reads only there)",
            )

    def _write(self, seq: int, text: str) -> Path:
        """Write `text` to a new file in the spill directory (`spillfile.spill_name`)."""
        _check_resolved(self.directory)  # before `mkdir`, which would follow a symlinked parent
        if not os.path.lexists(self.directory):
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_directory(self.directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
        for _ in range(_ATTEMPTS):
            token = self.name_token()
            if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
                raise ConfigError("spill.name_token", token, "8 lowercase hex digits")
            path = self.directory / spill_name(seq, text, token)
            try:
                fd = os.open(path, flags, 0o600)
            except FileExistsError:
                continue  # something sits at that name: never open it, take another
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # pragma: no cover - O_EXCL
                    raise OSError(f"{path} is not a regular file")
                fh.write(text)
            return path
        raise OSError(f"no free file name in {self.directory} after {_ATTEMPTS} tries")


def _check_directory(directory: Path) -> None:
    """Refuse a spill directory others could tamper with (`ConfigError` naming it)."""
    try:
        info = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(
            "spill.directory", str(directory), f"a readable directory ({exc})"
        ) from exc
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "it is a symlink"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "it is not a directory"
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        problem = "another user owns it"
    elif info.st_mode & 0o022:
        problem = f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        raise ConfigError(
            "spill.directory",
            str(directory),
            f"a real directory owned by you that no one else may write to ({problem})",
        )


def _check_resolved(directory: Path) -> None:
    """Refuse a spill directory whose path leads through a symlink (`ConfigError` naming both)."""
    given = os.path.abspath(directory)
    try:
        resolved = os.path.realpath(directory)
    except ValueError as exc:  # a NUL character
        raise ConfigError("spill.directory", str(directory), f"a directory path ({exc})") from None
    if resolved != given:
        raise ConfigError(
            "spill.directory",
            str(directory),
            f"a path that resolves to itself (it leads through a symlink to {resolved!r}: "
            "give that path)",
        )
