"""`CompactionHooks`, the compaction engine's shell, with its reminder and usage helpers.

`CompactionHooks` does the I/O of compaction and nothing clever: the transitions are the pure
functions of `compaction.state`, the rewrite is planned by `compaction.plan_compaction`, and the
record is the only thing written. A summarizing compaction writes `compaction_start` before the
summarizer is called, then `compaction_summary`, then the boundary (R36, R38).
"""

from __future__ import annotations

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
    plan_compaction,
    plan_merge,
)
from .compaction.state import (
    THRASHING_REASON,
    CircuitReason,
    EngineState,
    after_forced,
    after_pressure_compaction,
    after_summary_attempt,
    at_step,
    compaction_thrashing_reminder,
    gate_round,
    micro_due,
    request_manual,
    take_overflow_retry,
)
from .errors import ContextOverflowError, OverflowRetriesExhaustedError, ProviderError
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
    CompactionTrigger,
    MessageAppended,
    Record,
    SummarySource,
)
from .record.usage import newest_usage
from .summaries import SummaryAttempt, SummaryWriter, closing_message, span_history
from .tokens import TokenMeter
from .writer import CompactionWriter

__all__ = [
    "PROBABLE_OVERFLOW_RATIO",
    "PROBABLE_OVERFLOW_STATUS",
    "THRASHING_REASON",
    "CompactionHooks",
    "SummaryAttempt",
    "compaction_thrashing_reminder",
    "newest_usage",
]

logger = logging.getLogger("steerable_compaction.engine")


# A fatal 400/413/422 at >= 90 % of the window is a probable overflow in unknown words.
PROBABLE_OVERFLOW_STATUS = frozenset({400, 413, 422})
PROBABLE_OVERFLOW_RATIO = 0.9


# -- the engine shell ---------------------------------------------------------------------------


class CompactionHooks:
    """The compaction engine as hooks: pressure, overflow, micro and manual paths (R12-R15).

    `summarizer` answers `SummaryRequest`s (usually the turn model through a provider); without
    one, or with `policy.summarizer_enabled` false, the deterministic excerpt summary is used.
    `replay_images` (default) says the summarizer is the turn model itself, which saw the
    images already, so the replay carries them byte for byte (R28); `False` for a text-only
    summarizer, which gets text pointers instead. `state` starts the engine from a given
    `EngineState` (default: a fresh one).

    Construction does no I/O. `recover()` closes brackets an interrupted run left open (R38); the
    shells call it when they open a record, and the first hook call runs it if nobody did.
    """

    def __init__(
        self,
        record: Record,
        policy: CompactionPolicy,
        *,
        summarizer: Summarizer | None = None,
        meter: TokenMeter | None = None,
        model: str | None = None,
        replay_images: bool = True,
        summarizer_timeout: float | None = 300.0,
        state: EngineState | None = None,
    ) -> None:
        self.record = record
        self.policy = policy
        self.meter = meter if meter is not None else TokenMeter(model)
        self._replay_images = replay_images
        self._state = state if state is not None else EngineState()
        self._writer = CompactionWriter(
            record, self.meter, threshold_tokens=policy.threshold_tokens
        )
        self._summaries = SummaryWriter(summarizer, self.meter, timeout=summarizer_timeout)
        # Read cursors over the append-only record (caches, not decisions): each look reads
        # only the entries appended since the previous one.
        self._assistant_seqs: list[int] = []
        self._scanned = 0
        self._usage_scanned = 0
        self._recovery_done = False
        self.last_outcome: CompactionOutcome | None = None
        """The newest compaction's outcome (written or not), for hosts and tests."""
        self.recovered: CompactionOutcome | None = None
        """What `recover()` closed, if anything."""

    # -- state ------------------------------------------------------------------------------

    @property
    def state(self) -> EngineState:
        """Everything the engine decides from, as one value."""
        return self._state

    @property
    def summarizer(self) -> Summarizer | None:
        """The summarizer this engine asks (`None`: the excerpt only)."""
        return self._summaries.summarizer

    @property
    def circuit_reason(self) -> CircuitReason | None:
        """Why the pressure path is off (`None` while it is on)."""
        return self._state.circuit

    @property
    def compact_requested(self) -> bool:
        """Whether a manual compaction waits for the next `pre_step`."""
        return self._state.manual_requested

    def pressure(self) -> int:
        """The current pressure: observed prompt tokens plus the estimate of what came since."""
        self._observe_new()  # a reply recorded since the last step already tells the truth
        return self.meter.pressure(self.record.projection.messages)

    def request_compact(self) -> None:
        """Compact at the next `pre_step`, bypassing threshold, hysteresis and circuit (R15)."""
        self._state = request_manual(self._state)

    def observe(self, prompt_tokens: int, message_count: int) -> None:
        """Anchor the meter: the request of the first `message_count` messages cost this (R7)."""
        self.meter.observe(prompt_tokens, message_count)

    # -- hooks ------------------------------------------------------------------------------

    def quiet_step(self, ctx: StepContext) -> PreStepAction | None:
        """`pre_step` for a step that compacts nothing, without awaiting; `None` if it might.

        Shells with no event loop at hand (the sync `Compactor.prepare`) try it first; the
        decisions are `pre_step`'s own, which starts with it.
        """
        if not self._recovery_done and self.record.projection.open_brackets:
            return None
        state = at_step(self._state, round_=ctx.round, turn=ctx.turn)
        if state.manual_requested or ctx.compact_requested or micro_due(state, self.policy):
            return None
        self.recover()  # nothing is open: this only marks recovery done
        after, gate = gate_round(state, self.policy, self.pressure())
        if gate in ("compact", "limit"):
            return None
        self._state = after
        return PreStepAction(gate=gate)

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Compact when a path calls for it, then let the request go ahead."""
        quiet = self.quiet_step(ctx)
        if quiet is not None:
            return quiet
        self.recover()
        self._state = at_step(self._state, round_=ctx.round, turn=ctx.turn)
        self._observe_new()
        done: list[CompactionOutcome] = []
        if self._state.manual_requested or ctx.compact_requested:
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
        self._state, gate = gate_round(self._state, self.policy, pressure)
        if gate in ("compact", "limit"):
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
        while the circuit is open. An unrecognized 400/413/422 near the window is tried as a
        probable overflow once per request (`_probable_overflow`).
        """
        if not isinstance(ctx.error, ContextOverflowError):
            return await self._probable_overflow(ctx)
        self.recover()
        self._state = at_step(self._state, round_=ctx.round, turn=ctx.turn)
        spent = take_overflow_retry(self._state, self.policy)
        if spent is None:
            used = self._state.overflow_retries
            raise OverflowRetriesExhaustedError(used, str(ctx.error)) from ctx.error
        self._state = spent
        outcome = await self._compact("overflow", "aggressive")
        self._state = after_forced(
            self._state,
            post_tokens=outcome.post_tokens if outcome.written else None,
            manual=False,
        )
        if not outcome.written:
            raise OverflowRetriesExhaustedError(
                spent.overflow_retries,
                f"{ctx.error} (and nothing is left to compact: {outcome.reason})",
            ) from ctx.error
        return RetryAction(reason="compacted after a context overflow", compactions=(outcome,))

    async def _probable_overflow(self, ctx: RequestErrorContext) -> RetryAction | None:
        """One forced compaction per request for a fatal 400/413/422 near the window.

        Providers word overflows in ever new ways. This spends the R13 per-turn budget; if it
        writes nothing or the budget is spent, the error stays fatal (`None`).
        """
        error = ctx.error
        if not isinstance(error, ProviderError) or error.retryable:
            return None
        if error.status_code not in PROBABLE_OVERFLOW_STATUS:
            return None
        self.recover()
        self._state = at_step(self._state, round_=ctx.round, turn=ctx.turn)
        spent = take_overflow_retry(self._state, self.policy)
        pressure = self.pressure()
        if (
            self._state.probable_tried == (ctx.turn, ctx.round)
            or spent is None
            or pressure < PROBABLE_OVERFLOW_RATIO * self.policy.max_context_tokens
        ):
            return None
        self._state = replace(spent, probable_tried=(ctx.turn, ctx.round))
        logger.warning("%s at %d tokens: compacting once as a probable overflow", error, pressure)
        outcome = await self._compact("overflow", "aggressive", pressure)
        self._state = after_forced(
            self._state,
            post_tokens=outcome.post_tokens if outcome.written else None,
            manual=False,
        )
        if not outcome.written:
            return None
        why = f"probable overflow (HTTP {error.status_code} near the window); {outcome.reason}"
        return RetryAction(
            reason="compacted after a probable context overflow",
            compactions=(replace(outcome, reason=why),),
        )

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
            summarizer=self._summarizer_on() and not self._state.summarizer_failed,
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
                outcome = self._fold(plan.prune, plan.action, trigger, pre)
            case SummaryNeeded():
                outcome = await self._summarize(plan, messages, trigger)
                if outcome.written and outcome.compaction_id is not None:
                    outcome = await self._merge_chain(outcome, trigger)
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

    async def _merge_chain(
        self, first: CompactionOutcome, trigger: CompactionTrigger
    ) -> CompactionOutcome:
        """After a summary: merge the chain's oldest summaries if it outgrew its budget.

        The merge is a bracket of its own, right after the summary's; the outcome is the
        summary's, carried to the merge's post level. A merge that cannot be written leaves the
        chain as it is (the next compaction tries again).
        """
        projection = self.record.projection
        messages = list(projection.messages)
        plan = plan_merge(
            messages,
            self.policy,
            pressure=first.post_tokens,
            estimate=self.meter.estimate,
            rounds=self._rounds(projection.seqs),
            replay_images=self._replay_images,
        )
        if plan is None:
            return first
        merged = await self._summarize(plan, messages, trigger)
        if not merged.written:
            return replace(first, reason=f"{first.reason}; the chain merge failed: {merged.reason}")
        return replace(
            first,
            post_tokens=merged.post_tokens,
            effective=first.effective and merged.post_tokens < self.policy.threshold_tokens,
            summarizer_called=first.summarizer_called or merged.summarizer_called,
            reason=f"{first.reason}; merged the chain's oldest summaries ({merged.reason})",
        )

    def _summarizer_on(self) -> bool:
        return self._summaries.summarizer is not None and self.policy.summarizer_enabled

    def _fold(
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
        return self._writer.fold(
            pruned.edits,
            action=action,
            trigger=trigger,
            pre_tokens=pre,
            reason=f"{why}folded {pruned.folded} results, offloaded {pruned.offloaded} images",
            summarizer_called=called,
        )

    async def _summarize(
        self, plan: SummaryNeeded, messages: list[Message], trigger: CompactionTrigger
    ) -> CompactionOutcome:
        planned: CompactionAction = "summarize" if self._summarizer_on() else "excerpt"
        called = planned == "summarize"
        cid = self._writer.open(
            span=plan.request.span,
            pre_tokens=plan.pre_tokens,
            action=planned,
            trigger=trigger,
            kept=plan.kept,
        )
        attempt = await self._summaries.attempt(
            plan, messages, use_summarizer=self._summarizer_on()
        )
        if called and not plan.merge:  # a failed merge leaves the chain; summaries still work
            self._state = after_summary_attempt(self._state, failed=attempt.failure is not None)
        if attempt.text is None:
            failure = attempt.failure or "no summary could be written"
            if plan.fold.changed:
                # The fold alone would have done (better than an excerpt), or no summary could
                # be written at all (lossy beats stuck). The bracket stays open, so the
                # projection ignores it (R37) and recovery finds no summary to reuse.
                return self._fold(
                    plan.fold,
                    "compact",
                    trigger,
                    plan.pre_tokens,
                    why=f"{failure}; ",
                    called=called,
                )
            # The bracket stays open: its span stays visible and nothing is lost (R37).
            return CompactionOutcome(
                trigger=trigger,
                written=False,
                effective=False,
                pre_tokens=plan.pre_tokens,
                post_tokens=plan.pre_tokens,
                compaction_id=cid,
                summarizer_called=called,
                reason=failure,
            )
        self._writer.summary(cid, attempt.text, attempt.source)
        outcome = self._close(
            cid,
            span=plan.request.span,
            pre_tokens=plan.pre_tokens,
            summary=attempt.text,
            source=attempt.source,
            trigger=trigger,
            kept=plan.kept,
            called=called,
        )
        if attempt.failure is None:
            return outcome
        # A summarizer that failed counts as ineffective even when the excerpt saved the day.
        return replace(outcome, effective=False, reason=attempt.failure)

    def _close(
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
    ) -> CompactionOutcome:
        """Close bracket `cid`: the kept messages, then the summary, replace `span`.

        The retention check adds the span's salient facts the summary lacks, read from the
        messages as appended (a fold before the summary hides none; deterministic: recovery
        rebuilds the same text from the same record), and the summary names the record seqs it
        replaces.
        """
        projection = self.record.projection
        messages = projection.messages
        seqs = projection.seqs
        history = span_history(seqs, span)
        retention = self._summaries.retention(
            messages,
            seqs,
            span,
            summary,
            frozenset(kept),
            budget_tokens=self.policy.retention_tokens,
            entries=self.record.entries,
        )
        text = f"{summary.rstrip()}\n\n{retention.block}" if retention.block else summary
        replacement = (
            *(messages[i] for i in kept),
            closing_message(text, messages, seqs, span, kept),
        )
        action: CompactionAction = "summarize" if source == "summarizer" else "excerpt"
        return self._writer.close(
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

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> CompactionOutcome | None:
        """Close every bracket a crash left open (R38); the outcome of a reused summary, if any.

        The newest bracket is closed with its recorded summary when it has one and nothing has
        rewritten the projection since it started (appended messages and reminders leave its
        span where it was), so the summary is never paid twice. Every other open bracket is
        closed with `compaction_abandoned`: its span stays visible, and compaction is planned
        again only if needed. Runs once per engine (later calls return the first result); a
        read-only record is never written.
        """
        if self._recovery_done:
            return self.recovered
        self._recovery_done = True
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
                self._writer.abandon(start.compaction_id, reason)
                logger.warning("abandoned bracket %s left open: %s", start.compaction_id, reason)
                continue
            outcome = self._close(
                start.compaction_id,
                span=start.span,
                pre_tokens=start.pre_tokens,
                summary=bracket.summary.summary,
                source=bracket.summary.source,
                trigger=start.trigger,
                kept=start.kept,
                called=False,
            )
            logger.warning(
                "closed bracket %s left open by an interrupted run, reusing its recorded summary",
                start.compaction_id,
            )
            self.last_outcome = outcome
        self.recovered = outcome
        return outcome

    def _observe_new(self) -> None:
        """Anchor the meter on the newest reply's recorded usage, if no rewrite came after it.

        Only entries appended since the last look are read, so this costs O(new entries).
        """
        found = newest_usage(self.record, self._usage_scanned)
        self._usage_scanned = len(self.record.entries)
        if found is not None:
            self.meter.observe(*found)
