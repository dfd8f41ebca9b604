"""`CompactionWriter`: the one place that writes compaction records.

A fold-like rewrite is one boundary with edits and no bracket; a summary is a bracket:
`compaction_start` (written before anyone is asked for the summary, R38), `compaction_summary`,
then the boundary that closes it and splices the replacement in (R36); a bracket that can never
close (its run ended before its summary, or the projection moved on) gets
`compaction_abandoned`. Each write keeps the meter continuous (R9, R10): the rewrite is priced
in billed units before it is appended, and the meter is moved onto the new projection after.
The engine and every simulator arm write through this class, so the record reads the same
whoever compacted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from .hooks import CompactionOutcome
from .messages import Message
from .record import (
    CompactionAbandoned,
    CompactionAction,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    CompactionTrigger,
    Edit,
    Record,
    SummarySource,
)
from .tokens import TokenMeter

__all__ = ["CompactionWriter"]


class CompactionWriter:
    """Writes folds and summary brackets to `record`, keeping `meter` on the projection.

    `threshold_tokens` decides `effective` in the outcomes (post estimate under it);
    `id_prefix` starts every compaction id (ids are `<prefix><record length>`).
    """

    def __init__(
        self, record: Record, meter: TokenMeter, *, threshold_tokens: int, id_prefix: str = "k"
    ) -> None:
        self.record = record
        self.meter = meter
        self.threshold_tokens = threshold_tokens
        self.id_prefix = id_prefix

    def fold(
        self,
        edits: Sequence[Edit],
        *,
        action: CompactionAction,
        trigger: CompactionTrigger,
        pre_tokens: int,
        reason: str = "",
        summarizer_called: bool = False,
    ) -> CompactionOutcome:
        """Write a fold-like rewrite: a boundary with `edits`, no bracket (R36)."""
        before = list(self.record.projection.messages)
        after = list(before)
        for edit in edits:
            after[edit.index] = edit.message
        return self._rewrite(
            before,
            after,
            lambda post: CompactionBoundary(
                action=action,
                trigger=trigger,
                pre_tokens=pre_tokens,
                post_tokens=post,
                replacement_count=len(edits),
                edits=tuple(edits),
            ),
            reason=reason,
            summarizer_called=summarizer_called,
        )

    def open(
        self,
        *,
        span: tuple[int, int],
        pre_tokens: int,
        action: CompactionAction,
        trigger: CompactionTrigger,
        kept: Sequence[int] = (),
        focus: str | None = None,
    ) -> str:
        """Write `compaction_start` for `span` and return the new bracket's id."""
        cid = f"{self.id_prefix}{len(self.record)}"
        self.record.append(
            CompactionStart(
                compaction_id=cid,
                span=span,
                pre_tokens=pre_tokens,
                action=action,
                trigger=trigger,
                kept=tuple(kept),
                focus=focus,
            )
        )
        return cid

    def summary(
        self,
        cid: str,
        text: str,
        source: SummarySource = "summarizer",
        *,
        retention_budget: int | None = None,
        refused: str | None = None,
    ) -> None:
        """Write the paid-for summary of bracket `cid` (what recovery reuses, R38).

        `retention_budget` and `refused` go on the event as they are (`CompactionSummary`).
        """
        self.record.append(
            CompactionSummary(
                compaction_id=cid,
                summary=text,
                source=source,
                retention_budget=retention_budget,
                refused=refused,
            )
        )

    def abandon(
        self, cid: str, reason: str, cause: Literal["recovery", "refused"] = "recovery"
    ) -> None:
        """Close bracket `cid` without a rewrite: its span stays as it is (`reason` says why)."""
        self.record.append(CompactionAbandoned(compaction_id=cid, reason=reason, cause=cause))

    def close(
        self,
        cid: str,
        *,
        span: tuple[int, int],
        replacement: Sequence[Message],
        action: CompactionAction,
        trigger: CompactionTrigger,
        pre_tokens: int,
        reason: str = "",
        summarizer_called: bool = False,
        history: tuple[int, int] | None = None,
        retained: tuple[int, int] | None = None,
    ) -> CompactionOutcome:
        """Write the boundary closing `cid`: `replacement` takes the place of `span`.

        `history` (first and last record seq replaced) and `retained` (atoms found, kept) go on
        the boundary as they are.
        """
        start, end = span
        before = list(self.record.projection.messages)
        new = tuple(replacement)
        after = [*before[:start], *new, *before[end:]]
        return self._rewrite(
            before,
            after,
            lambda post: CompactionBoundary(
                action=action,
                trigger=trigger,
                pre_tokens=pre_tokens,
                post_tokens=post,
                replacement_count=end - start,
                compaction_id=cid,
                span=span,
                replacement=new,
                history=history,
                retained=retained,
            ),
            reason=reason or f"replaced {end - start} messages",
            summarizer_called=summarizer_called,
        )

    def _rewrite(
        self,
        before: list[Message],
        after: list[Message],
        boundary: Callable[[int], CompactionBoundary],
        *,
        reason: str,
        summarizer_called: bool,
    ) -> CompactionOutcome:
        """Price `after` in billed units, append `boundary(post)`, move the meter onto it."""
        post = self.meter.preview_rewrite(before, after)
        event = boundary(post)
        self.record.append(event)
        self.meter.rewrite(before, after)
        return CompactionOutcome(
            trigger=event.trigger,
            written=True,
            effective=post < self.threshold_tokens,
            pre_tokens=event.pre_tokens,
            post_tokens=post,
            action=event.action,
            compaction_id=event.compaction_id,
            summarizer_called=summarizer_called,
            reason=reason,
        )
