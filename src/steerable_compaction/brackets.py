"""`BracketRunner`: a planned compaction carried out as record writes.

The planner (`compaction.plan_compaction`) decides what to rewrite; this writes it: a fold as
one boundary, a summary as a bracket (`compaction_start` before the summarizer is asked, then
`compaction_summary`, then the boundary that closes it, R36, R38), the retention block added
to the summary, and on recovery the brackets an interrupted run left open. It holds no engine
state: `CompactionHooks` decides whether the summarizer may be asked and counts its failures.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from .compaction import PruneResult, SummaryNeeded
from .compaction.plan import MIN_SUMMARY_TOKENS
from .hooks import CompactionOutcome
from .messages import Message
from .policy import CompactionPolicy
from .record import (
    CompactionAction,
    CompactionBoundary,
    CompactionStart,
    CompactionTrigger,
    Record,
    SummarySource,
)
from .summaries import SummaryWriter, closing_message, span_history
from .tokens import TokenMeter
from .writer import CompactionWriter

__all__ = ["BracketRunner"]

logger = logging.getLogger("steerable_compaction.engine")


class BracketRunner:
    """Writes folds and summary brackets for `CompactionHooks`, and recovers open brackets.

    `summaries` asks the summarizer and judges its answer; `writer` appends the events and
    keeps `meter` on the projection.
    """

    def __init__(
        self,
        record: Record,
        policy: CompactionPolicy,
        meter: TokenMeter,
        summaries: SummaryWriter,
        writer: CompactionWriter,
    ) -> None:
        self.record = record
        self.policy = policy
        self.meter = meter
        self.summaries = summaries
        self.writer = writer

    def fold(
        self,
        pruned: PruneResult,
        action: Literal["compact", "micro_compact"],
        trigger: CompactionTrigger,
        pre: int,
        *,
        why: str = "",
        called: bool = False,
    ) -> CompactionOutcome:
        """Write a fold-only rewrite (a boundary without a bracket, R36).

        `why` prefixes the reason when the fold stands in for a summary that failed; `called`
        says the summarizer was asked first.
        """
        return self.writer.fold(
            pruned.edits,
            action=action,
            trigger=trigger,
            pre_tokens=pre,
            reason=f"{why}folded {pruned.folded} messages, offloaded {pruned.offloaded} images",
            summarizer_called=called,
        )

    async def summarize(
        self,
        plan: SummaryNeeded,
        messages: list[Message],
        trigger: CompactionTrigger,
        *,
        use: bool,
        squeeze: int = 0,
        focus: str | None = None,
    ) -> tuple[CompactionOutcome, bool | None]:
        """Write `plan` as a summary bracket, asking the summarizer when `use` says so.

        Returns the outcome and, for a summary the summarizer was asked for outside a chain
        merge, whether it failed (the consecutive-failures breaker counts it); else `None`.
        Without a usable answer the excerpt stands in; without any summary the plan's fold is
        written instead (lossy beats stuck), or nothing.
        """
        planned: CompactionAction = "summarize" if use and plan.fits else "excerpt"
        called = planned == "summarize"
        cid = self.writer.open(
            span=plan.request.span,
            pre_tokens=plan.pre_tokens,
            action=planned,
            trigger=trigger,
            kept=plan.kept,
            focus=focus,
        )
        # What stays after the summary: the rest of the projection and the kept messages. When
        # a summary can bring the next request inside the window, one that does not is refused
        # (frees too little); when it cannot (a piece of a span too large to replay at once),
        # it only has to shrink its span.
        rest = plan.pre_tokens - plan.middle_tokens + plan.kept_tokens
        room = self.policy.limit_tokens - rest
        attempt = await self.summaries.attempt(
            plan,
            messages,
            use_summarizer=use,
            max_tokens=room if room >= MIN_SUMMARY_TOKENS else None,
            seqs=self.record.projection.seqs,
        )
        # A failed merge leaves the chain; summaries still work: only the others count.
        failed = attempt.failure is not None if called and not plan.merge else None
        if attempt.text is None:
            failure = attempt.failure or "no summary could be written"
            self.writer.abandon(cid, failure, "refused")  # its span stays as it is (R37)
            if plan.fold.changed:
                # No summary, not even the excerpt, could be written: lossy beats stuck.
                folded = self.fold(
                    plan.fold,
                    "compact",
                    trigger,
                    plan.pre_tokens,
                    why=f"{failure}; ",
                    called=called,
                )
                return folded, failed
            return CompactionOutcome(
                trigger=trigger,
                written=False,
                effective=False,
                pre_tokens=plan.pre_tokens,
                post_tokens=plan.pre_tokens,
                compaction_id=cid,
                summarizer_called=called,
                reason=failure,
            ), failed
        # The retention block comes out of the room the summary leaves below the level a
        # compaction aims for: the threshold less one hysteresis margin, the room a fold-only
        # rewrite must leave too (the next compaction waits for that margin of growth). Two
        # margins kept growth room at the cost of memory: in 2,048-token windows the block had
        # no room left and `eval small_window` recalled 0.33-0.67 (seeds 0, 3), 0.67-1.00 with
        # one, for about 25 % more summaries there; larger windows are not affected. A
        # squeezed compaction (the request would not fit) keeps none.
        closing = closing_message(
            attempt.text, messages, list(self.record.projection.seqs), plan.request.span, plan.kept
        )
        target = self.policy.threshold_tokens - self.policy.recompact_margin_tokens
        # The summary and the block share one memory budget: the block's ceiling plus the
        # output room the summary was given. A summarizer that writes less (a terse one, or a
        # prose one that states fewer values) leaves the rest of its room to the block, so how
        # much a compaction keeps does not hang on how the summarizer writes.
        unused = max((plan.request.max_output_tokens or 0) - self.meter.estimate(closing), 0)
        budget = self.summaries.retention_budget(
            messages,
            self.record.projection.seqs,
            plan.request.span,
            attempt.text,
            frozenset(plan.kept),
            ceiling=0 if squeeze else self.policy.retention_tokens + unused,
            room=target - rest - self.meter.estimate(closing),
            calibration=self.meter.calibration,
        )
        self.writer.summary(
            cid, attempt.text, attempt.source, retention_budget=budget, refused=attempt.failure
        )
        outcome = self.close(
            cid,
            span=plan.request.span,
            pre_tokens=plan.pre_tokens,
            summary=attempt.text,
            source=attempt.source,
            trigger=trigger,
            kept=plan.kept,
            called=called,
            retention_budget=budget,
            focus=focus,
        )
        if attempt.failure is None:
            return outcome, failed
        # A summarizer that failed counts as ineffective even when the excerpt saved the day.
        return replace(outcome, effective=False, reason=attempt.failure), failed

    def close(
        self,
        cid: str,
        *,
        span: tuple[int, int],
        pre_tokens: int,
        summary: str,
        source: SummarySource,
        trigger: CompactionTrigger,
        kept: Sequence[int],
        called: bool,
        retention_budget: int | None,
        focus: str | None = None,
    ) -> CompactionOutcome:
        """Close bracket `cid`: the kept messages, then the summary, replace `span`.

        The retention check adds the span's salient facts the summary lacks, read from the
        messages as appended (a fold before the summary hides none; deterministic: recovery
        rebuilds the same text from the same record), within `retention_budget` (recorded with
        the summary; `None` for a record written before it was: the policy's bound alone).
        The summary names the record seqs it replaces.
        """
        projection = self.record.projection
        messages = projection.messages
        seqs = projection.seqs
        history = span_history(seqs, span)
        if retention_budget is None:
            retention_budget = self.summaries.retention_budget(
                messages,
                seqs,
                span,
                summary,
                frozenset(kept),
                ceiling=self.policy.retention_tokens,
            )
        retention = self.summaries.retention(
            messages,
            seqs,
            span,
            summary,
            frozenset(kept),
            budget_tokens=retention_budget,
            entries=self.record.entries,
            focus=focus,
        )
        text = f"{summary.rstrip()}\n\n{retention.block}" if retention.block else summary
        replacement = (
            *(messages[i] for i in kept),
            closing_message(text, messages, seqs, span, kept),
        )
        action: CompactionAction = "summarize" if source == "summarizer" else "excerpt"
        return self.writer.close(
            cid,
            span=span,
            replacement=replacement,
            action=action,
            trigger=trigger,
            pre_tokens=pre_tokens,
            summarizer_called=called,
            history=history,
            retained=(retention.found, len(retention.kept)),
        )

    def recover(self) -> CompactionOutcome | None:
        """Close every bracket a crash left open (R38); the outcome of a reused summary, if any.

        The newest bracket is closed with its recorded summary when it has one and nothing has
        rewritten the projection since it started (appended messages and reminders leave its
        span where it was), so the summary is never paid twice. Every other open bracket is
        closed with `compaction_abandoned`: its span stays visible, and compaction is planned
        again only if needed. A read-only record is never written.
        """
        if self.record.readonly:
            return None
        outcome = None
        for bracket in self.record.projection.open_brackets:
            start = bracket.start
            tail = self.record.entries[bracket.start_seq + 1 :]
            moved = any(isinstance(e.event, CompactionBoundary | CompactionStart) for e in tail)
            if bracket.summary is None or moved:
                reason = (
                    "no summary was recorded before the run ended"
                    if bracket.summary is None
                    else "the projection was rewritten after the bracket started"
                )
                self.writer.abandon(start.compaction_id, reason)
                logger.warning("abandoned bracket %s left open: %s", start.compaction_id, reason)
                continue
            outcome = self.close(
                start.compaction_id,
                span=start.span,
                pre_tokens=start.pre_tokens,
                summary=bracket.summary.summary,
                source=bracket.summary.source,
                trigger=start.trigger,
                kept=start.kept,
                called=False,
                retention_budget=bracket.summary.retention_budget,
                focus=start.focus,
            )
            logger.warning(
                "closed bracket %s left open by an interrupted run, reusing its recorded summary",
                start.compaction_id,
            )
        return outcome
