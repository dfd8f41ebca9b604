"""`CompactionHooks`, the compaction engine's shell, with its reminder and usage helpers.

`CompactionHooks` does the I/O of compaction and nothing clever: the transitions are the pure
functions of `compaction.state`, the rewrite is planned by `compaction.plan_compaction`, and the
record is the only thing written. A summarizing compaction writes `compaction_start` before the
summarizer is called, then `compaction_summary`, then the boundary (R36, R38).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal, assert_never

from .compaction import (
    FoldRewrite,
    NothingToDo,
    PruneResult,
    SummaryNeeded,
    excerpt_summary,
    plan_compaction,
    summary_message,
)
from .compaction.regions import REMINDER_TAG
from .compaction.state import (
    CircuitReason,
    EngineState,
    after_forced,
    after_pressure_compaction,
    healthy,
    micro_due,
    pressure_gate,
)
from .compaction.summary import degenerate_summary
from .errors import ContextOverflowError, OverflowRetriesExhaustedError
from .hooks import (
    CompactionOutcome,
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
    Summarizer,
    ToolResultContext,
)
from .messages import Message, ToolResult
from .policy import CompactionPolicy
from .record import (
    CompactionAction,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    CompactionTrigger,
    MessageAppended,
    Record,
    Reminder,
    SummarySource,
)
from .tokens import TokenMeter

__all__ = [
    "THRASHING_REASON",
    "CompactionHooks",
    "compaction_thrashing_reminder",
    "newest_usage",
]

logger = logging.getLogger("steerable_compaction.engine")

THRASHING_REASON = "compaction_thrashing"


def newest_usage(record: Record, since: int) -> tuple[int, int] | None:
    """`(prompt_tokens, message_count)` of the newest billed reply among `entries[since:]`.

    `message_count` is the reply's position in the projection: the request that produced it
    held the messages before it. `None` when no reply carries usage, or a rewrite came after
    it (its count no longer describes the projection, R9).
    """
    for entry in reversed(record.entries[since:]):
        event = entry.event
        if isinstance(event, CompactionBoundary):
            return None
        if isinstance(event, MessageAppended) and event.usage is not None:
            seqs = record.projection.seqs
            for index in range(len(seqs) - 1, -1, -1):
                if seqs[index] == entry.seq:
                    return event.usage.prompt_tokens, index
            return None
    return None


def compaction_thrashing_reminder(refills: int, window: int) -> Reminder:
    """The `CompactionThrashingReminder` (R33): a notice for the model and the host."""
    text = (
        f"{REMINDER_TAG}\n"
        f"Context compaction is thrashing: the context filled up again within {window} rounds "
        f"of the previous compaction, {refills} times in a row, so automatic compaction is "
        "paused. Work in smaller steps: read only what you need, prefer targeted searches to "
        "whole files, and write down findings instead of re-reading.\n"
        "</system-reminder>"
    )
    return Reminder(reason=THRASHING_REASON, message=Message.user(text))


# -- the engine shell ---------------------------------------------------------------------------


class CompactionHooks:
    """The compaction engine as hooks: pressure, overflow, micro and manual paths (R12-R15).

    `summarizer` answers `SummaryRequest`s (usually the turn model through a provider); without
    one, or with `policy.summarizer_enabled` false, the deterministic excerpt summary is used.
    `replay_images=True` says the summarizer is the turn model itself, which saw the images
    already (R28). Opening on a record whose last bracket is unclosed but already has its
    summary closes it with that summary, without calling the summarizer again (R38).
    """

    def __init__(
        self,
        record: Record,
        policy: CompactionPolicy,
        *,
        summarizer: Summarizer | None = None,
        meter: TokenMeter | None = None,
        model: str | None = None,
        replay_images: bool = False,
        summarizer_timeout: float | None = 300.0,
    ) -> None:
        self.record = record
        self.policy = policy
        self.meter = meter if meter is not None else TokenMeter(model)
        self._summarizer = summarizer
        self._replay_images = replay_images
        self._timeout = summarizer_timeout
        self._state = EngineState()
        self._manual = False
        self._assistant_seqs: list[int] = []
        self._scanned = 0
        self.last_outcome: CompactionOutcome | None = None
        self._summarizer_failed = False  # the last summarizer call failed: fold first meanwhile
        self._usage_scanned = 0
        self.recovered: CompactionOutcome | None = self._recover()
        self._observe_new()

    # -- state ------------------------------------------------------------------------------

    @property
    def state(self) -> EngineState:
        """The engine's counters, last compaction and circuit, as one value."""
        return self._state

    @property
    def circuit_reason(self) -> CircuitReason | None:
        """Why the pressure path is off (`None` while it is on)."""
        return self._state.circuit

    @property
    def compact_requested(self) -> bool:
        """Whether a manual compaction waits for the next `pre_step`."""
        return self._manual

    def pressure(self) -> int:
        """The current pressure: observed prompt tokens plus the estimate of what came since."""
        self._observe_new()  # a reply recorded since the last step already tells the truth
        return self.meter.pressure(self.record.projection.messages)

    def request_compact(self) -> None:
        """Compact at the next `pre_step`, bypassing threshold, hysteresis and circuit (R15)."""
        self._manual = True

    def observe(self, prompt_tokens: int, message_count: int) -> None:
        """Anchor the meter: the request of the first `message_count` messages cost this (R7)."""
        self.meter.observe(prompt_tokens, message_count)

    # -- hooks ------------------------------------------------------------------------------

    def _sync(self, round_: int, turn: int) -> None:
        state = self._state
        if turn != state.turn:
            state = replace(state, turn=turn, overflow_retries=0)
        self._state = replace(state, round=round_)

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Compact when a path calls for it, then let the request go ahead."""
        self._sync(ctx.round, ctx.turn)
        self._observe_new()
        done: list[CompactionOutcome] = []
        if self._manual or ctx.compact_requested:
            self._manual = False
            outcome = await self._compact("manual", "aggressive")
            self._state = after_forced(
                self._state,
                post_tokens=outcome.post_tokens if outcome.written else None,
                manual=True,
            )
            return PreStepAction(compactions=(outcome,))
        if micro_due(self._state, self.policy):
            outcome = await self._compact("micro", "fold_only")
            if outcome.written:
                # The flowchart ends here: a summary now would replay a projection the provider
                # never saw (the fold just changed it), losing the warm prefix (R25).
                return PreStepAction(compactions=(outcome,))
            done.append(outcome)
        pressure = self.pressure()
        gate = pressure_gate(self._state, self.policy, pressure)
        if gate == "below_threshold":
            self._state = healthy(self._state)
        elif gate == "compact":
            outcome = await self._compact("pressure", "normal", pressure)
            done.append(outcome)
            was_open = self._state.circuit
            self._state = after_pressure_compaction(
                self._state,
                self.policy,
                post_tokens=outcome.post_tokens,
                effective=outcome.effective,
            )
            if was_open is None and self._state.circuit == "rapid_refill":
                self.record.append(
                    compaction_thrashing_reminder(
                        self._state.rapid_refills, self.policy.rapid_refill_window_rounds
                    )
                )
        return PreStepAction(compactions=tuple(done), gate=gate)

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """On context overflow: compact (forced) and retry (R13).

        At most `max_overflow_retries` per turn, then `OverflowRetriesExhaustedError`. Works
        while the circuit is open.
        """
        if not isinstance(ctx.error, ContextOverflowError):
            return None
        self._sync(ctx.round, ctx.turn)
        used = self._state.overflow_retries
        if used >= self.policy.max_overflow_retries:
            raise OverflowRetriesExhaustedError(used, str(ctx.error)) from ctx.error
        self._state = replace(self._state, overflow_retries=used + 1)
        outcome = await self._compact("overflow", "aggressive")
        self._state = after_forced(
            self._state,
            post_tokens=outcome.post_tokens if outcome.written else None,
            manual=False,
        )
        if not outcome.written:
            raise OverflowRetriesExhaustedError(
                used + 1, f"{ctx.error} (and nothing is left to compact: {outcome.reason})"
            ) from ctx.error
        return RetryAction(reason="compacted after a context overflow")

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Compaction leaves tool results as they are."""
        return ctx.result

    # -- compaction -------------------------------------------------------------------------

    def _rounds(self, seqs: Sequence[int]) -> list[int]:
        """Each message's round: how many assistant replies the record held before it."""
        entries = self.record.entries
        for entry in entries[self._scanned :]:
            event = entry.event
            if isinstance(event, MessageAppended) and event.message.role == "assistant":
                self._assistant_seqs.append(entry.seq)
        self._scanned = len(entries)
        return [bisect.bisect_left(self._assistant_seqs, seq) for seq in seqs]

    async def _compact(
        self,
        trigger: CompactionTrigger,
        mode: Literal["normal", "aggressive", "fold_only"],
        pressure: int | None = None,
    ) -> CompactionOutcome:
        projection = self.record.projection
        messages = list(projection.messages)
        seqs = list(projection.seqs)
        pre = self.meter.pressure(messages) if pressure is None else pressure
        plan = plan_compaction(
            messages,
            self.policy,
            pressure=pre,
            estimate=self.meter.estimate,
            mode=mode,
            seqs=seqs,
            rounds=self._rounds(seqs),
            replay_images=self._replay_images,
            # After a failed summarizer call, a fold that frees enough comes first again; the
            # summarizer is asked next when only a summary will do.
            summarizer=self._summarizer_on() and not self._summarizer_failed,
        )
        match plan:
            case NothingToDo():
                outcome = CompactionOutcome(
                    trigger=trigger,
                    written=False,
                    effective=False,
                    pre_tokens=pre,
                    post_tokens=pre,
                    reason=plan.reason,
                )
            case FoldRewrite():
                outcome = self._fold(plan.prune, plan.action, trigger, pre, messages)
            case SummaryNeeded():
                outcome = await self._summarize(plan, messages, trigger)
            case _:
                assert_never(plan)
        self.last_outcome = outcome
        if outcome.written:
            logger.info(
                "compaction %s/%s: %d -> %d tokens (%s)",
                trigger,
                outcome.action,
                pre,
                outcome.post_tokens,
                outcome.reason,
            )
        return outcome

    def _summarizer_on(self) -> bool:
        return self._summarizer is not None and self.policy.summarizer_enabled

    def _fold(
        self,
        pruned: PruneResult,
        action: Literal["compact", "micro_compact"],
        trigger: CompactionTrigger,
        pre: int,
        messages: list[Message],
        *,
        why: str = "",
        called: bool = False,
    ) -> CompactionOutcome:
        """Write a fold-only rewrite (a boundary without a bracket, R36).

        `why` prefixes the reason when the fold stands in for a summary that failed; `called`
        says the summarizer was asked first.
        """
        post = self.meter.preview_rewrite(messages, pruned.messages)
        self.record.append(
            CompactionBoundary(
                action=action,
                trigger=trigger,
                pre_tokens=pre,
                post_tokens=post,
                replacement_count=len(pruned.edits),
                edits=pruned.edits,
            )
        )
        self.meter.rewrite(messages, pruned.messages)
        return CompactionOutcome(
            trigger=trigger,
            written=True,
            effective=post < self.policy.threshold_tokens,
            pre_tokens=pre,
            post_tokens=post,
            action=action,
            summarizer_called=called,
            reason=f"{why}folded {pruned.folded} results, offloaded {pruned.offloaded} images",
        )

    async def _summarize(
        self, plan: SummaryNeeded, messages: list[Message], trigger: CompactionTrigger
    ) -> CompactionOutcome:
        start, end = plan.request.span
        cid = f"k{len(self.record)}"
        planned: CompactionAction = "summarize" if self._summarizer_on() else "excerpt"
        self.record.append(
            CompactionStart(
                compaction_id=cid,
                span=(start, end),
                pre_tokens=plan.pre_tokens,
                action=planned,
                trigger=trigger,
                kept=plan.kept,
            )
        )
        summary, source, failure = await self._write_summary(plan, messages)
        if planned == "summarize":
            self._summarizer_failed = bool(failure)
        if summary is None and plan.fold.changed:
            # The fold alone would have done (better than an excerpt), or no summary could be
            # written at all (lossy beats stuck). The bracket stays open, so the projection
            # ignores it (R37) and recovery finds no summary to reuse.
            return self._fold(
                plan.fold,
                "compact",
                trigger,
                plan.pre_tokens,
                messages,
                why=f"{failure}; ",
                called=planned == "summarize",
            )
        if summary is None:
            # The bracket stays open: its span stays visible and nothing is lost (R37).
            return CompactionOutcome(
                trigger=trigger,
                written=False,
                effective=False,
                pre_tokens=plan.pre_tokens,
                post_tokens=plan.pre_tokens,
                compaction_id=cid,
                summarizer_called=planned == "summarize",
                reason=failure,
            )
        self.record.append(CompactionSummary(compaction_id=cid, summary=summary, source=source))
        return self._close(
            cid,
            plan.pre_tokens,
            (start, end),
            summary,
            source,
            trigger,
            messages,
            plan.kept,
            called=planned == "summarize",
            failure=failure,
        )

    def _close(
        self,
        cid: str,
        pre: int,
        span: tuple[int, int],
        summary: str,
        source: SummarySource,
        trigger: CompactionTrigger,
        messages: list[Message],
        kept: Sequence[int],
        *,
        called: bool,
        failure: str,
    ) -> CompactionOutcome:
        start, end = span
        replacement = (
            *(messages[i] for i in kept),
            summary_message(summary, end - start, len(kept)),
        )
        after = [*messages[:start], *replacement, *messages[end:]]
        post = self.meter.preview_rewrite(messages, after)
        action: CompactionAction = "summarize" if source == "summarizer" else "excerpt"
        self.record.append(
            CompactionBoundary(
                action=action,
                trigger=trigger,
                pre_tokens=pre,
                post_tokens=post,
                replacement_count=end - start,
                compaction_id=cid,
                span=span,
                replacement=replacement,
            )
        )
        self.meter.rewrite(messages, after)
        # A summarizer that failed counts as ineffective even when the excerpt saved the day.
        effective = post < self.policy.threshold_tokens and not failure
        return CompactionOutcome(
            trigger=trigger,
            written=True,
            effective=effective,
            pre_tokens=pre,
            post_tokens=post,
            action=action,
            compaction_id=cid,
            summarizer_called=called,
            reason=failure or f"replaced {end - start} messages",
        )

    async def _write_summary(
        self, plan: SummaryNeeded, messages: list[Message]
    ) -> tuple[str | None, SummarySource, str]:
        """The summary text and who wrote it, or `None` and why not."""
        failure = ""
        room = plan.middle_tokens - plan.kept_tokens  # what the summary message must undercut
        kept = len(plan.kept)
        if self._summarizer_on():
            assert self._summarizer is not None
            try:
                text = await asyncio.wait_for(self._summarizer(plan.request), self._timeout)
            except Exception as exc:  # a failed summarizer must never lose the session
                failure = f"summarizer failed: {type(exc).__name__}: {exc}"
            else:
                text = text.strip() if isinstance(text, str) else ""
                if not text:
                    failure = "summarizer returned an empty summary"
                elif self.meter.estimate(summary_message(text, plan.replaced, kept)) >= room:
                    failure = "summarizer's summary does not shrink the span"
                elif (flaw := degenerate_summary(text)) is not None:
                    failure = f"summarizer's summary is degenerate: {flaw}"
                else:
                    return text, "summarizer", ""
            if plan.fold_enough:
                logger.warning("%s; folding instead (the fold alone frees enough)", failure)
                return None, "excerpt", failure
            logger.warning("%s; falling back to the excerpt summary", failure)
        middle_chars = sum(len(m.text) for m in plan.request.replay[plan.request.span[0] :])
        budget = max(400, min(12_000, middle_chars // 4))
        excerpt = excerpt_summary(messages, plan.request.span, max_chars=budget)
        if self.meter.estimate(summary_message(excerpt, plan.replaced, kept)) < room:
            return excerpt, "excerpt", failure
        return (
            None,
            "excerpt",
            (failure + "; " if failure else "") + ("the excerpt summary would not shrink the span"),
        )

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self) -> CompactionOutcome | None:
        """Close the last bracket if a crash left it with its summary already paid for (R38)."""
        brackets = self.record.projection.open_brackets
        if not brackets or self.record.readonly:
            return None
        bracket = brackets[-1]
        if bracket.summary is None:
            return None  # the span stays visible; compaction is re-planned only if needed
        # Appended messages and reminders leave the span where it was; another rewrite or
        # bracket after this one means the span no longer addresses what it summarized.
        tail = self.record.entries[bracket.start_seq + 1 :]
        if any(isinstance(e.event, CompactionBoundary | CompactionStart) for e in tail):
            return None
        start = bracket.start
        messages = list(self.record.projection.messages)
        outcome = self._close(
            start.compaction_id,
            start.pre_tokens,
            start.span,
            bracket.summary.summary,
            bracket.summary.source,
            start.trigger,
            messages,
            start.kept,
            called=False,
            failure="",
        )
        logger.warning(
            "closed bracket %s left open by an interrupted run, reusing its recorded summary",
            start.compaction_id,
        )
        self.last_outcome = outcome
        return outcome

    def _observe_new(self) -> None:
        """Anchor the meter on the newest reply's recorded usage, if no rewrite came after it.

        Only entries appended since the last look are read, so this costs O(new entries).
        """
        found = newest_usage(self.record, self._usage_scanned)
        self._usage_scanned = len(self.record.entries)
        if found is not None:
            self.meter.observe(*found)
