"""`SpillHooks` (R2): an oversized tool result goes to a file; the transcript gets a pointer.

The file is named from the record seq the result will take and a hash of its text, never from
anything the tool produced (no path traversal), and created with mode 0600 in a 0700 directory.
The pointer keeps a head and tail excerpt so the model still sees what kind of output it was.
Spill runs before compaction ever sees the result; compaction can still fold the pointer later.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import ConfigError
from .hooks import PreStepAction, RequestErrorContext, RetryAction, StepContext, ToolResultContext
from .messages import ContentPart, ImagePart, TextPart, ToolResult

__all__ = ["SPILL_PREFIX", "SpillHooks"]

SPILL_PREFIX = "[tool output spilled: "


class SpillHooks:
    """Spill tool results whose text exceeds `max_chars` into `directory`."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_chars: int = 40_000,
        excerpt_chars: int = 2_000,
    ) -> None:
        for key, value, low in (
            ("spill.max_chars", max_chars, 1),
            ("spill.excerpt_chars", excerpt_chars, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(key, value, f"an integer >= {low}")
        if excerpt_chars >= max_chars:
            raise ConfigError(
                "spill.excerpt_chars", excerpt_chars, f"less than max_chars ({max_chars})"
            )
        self.directory = Path(directory)
        self.max_chars = max_chars
        self.excerpt_chars = excerpt_chars

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
        if len(text) <= self.max_chars:
            return result
        seq = len(ctx.record)  # the seq this result's message will get
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        path = self._write(f"{seq:010d}-{digest}.txt", text)
        head = self.excerpt_chars - self.excerpt_chars // 2
        tail = self.excerpt_chars // 2
        ending = text[len(text) - tail :] if tail else ""
        pointer = (
            f"{SPILL_PREFIX}{len(text):,} chars from {ctx.tool_name} saved to {path}; "
            f"read that file for the rest]\n{text[:head]}\n…\n{ending}"
        )
        images: tuple[ContentPart, ...] = tuple(
            p for p in result.content if isinstance(p, ImagePart)
        )
        return ToolResult(
            call_id=result.call_id,
            content=(TextPart(text=pointer), *images),
            is_error=result.is_error,
        )

    def _write(self, name: str, text: str) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path
