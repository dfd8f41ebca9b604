"""`CompactionHooks`, the compaction engine's shell, with its reminder and usage helpers.

`CompactionHooks` does the I/O of compaction and nothing clever: the transitions are the pure
functions of `compaction.state`, the rewrite is planned by `compaction.plan_compaction`, and the
record is the only thing written. `BracketRunner` (`brackets`) writes a planned rewrite: a
summarizing compaction writes `compaction_start` before the summarizer is called, then
`compaction_summary`, then the boundary (R36, R38). `RecordCursors` (`cursors`) reads rounds,
the goal and the newest usage from the record. `ColdCacheRule` (`coldcache`) says whether to
compact now, with the prompt cache cold. This module keeps the paths (pressure, micro, manual,
overflow, cold cache), the breakers' state and the fit guard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal, assert_never, get_args

from .brackets import BracketRunner
from .coldcache import ColdCacheRule
from .compaction import (
    FoldRewrite,
    NothingToDo,
    Plan,
    SummaryNeeded,
    plan_compaction,
    plan_merge,
)
from .compaction.prune import fold_largest
from .compaction.regions import newest_turn, pinned_indices
from .compaction.state import (
    THRASHING_REASON,
    THRASHING_TEXT,
    CircuitReason,
    EngineState,
    Gate,
    after_forced,
    after_pressure_compaction,
    after_send,
    after_summary_attempt,
    at_step,
    circuit_after_healthy,
    compaction_thrashing_reminder,
    gate_round,
    micro_due,
    micro_due_at,
    pressure_gate,
    quiet_round,
    quiet_round_into,
    rebase_growth,
    report_cold,
    request_manual,
    take_overflow_retry,
)
from .compaction.summary import check_focus
from .cursors import RecordCursors
from .errors import (
    ContextOverflowError,
    OverflowRetriesExhaustedError,
    ProviderError,
    RequestTooLargeError,
)
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
    CompactionTrigger,
    Record,
    Reminder,
)
from .record.usage import newest_usage
from .summaries import SummaryAttempt, SummaryWriter
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


_FIT_ROUNDS = 8  # compactions `_fit` may write in one step before it folds (pieces of a span)
OVERFLOW_CUT = 0.9
"""After an overflow, the retried request's estimate must be this share of the refused one's.

The provider said the estimate was short by an unknown amount; until the meter learns from a
billed reply, a tenth less is a judgement, not a measurement."""

# A fatal 400/413/422 at >= 90 % of the window is a probable overflow in unknown words.
PROBABLE_OVERFLOW_STATUS = frozenset({400, 413, 422})
PROBABLE_OVERFLOW_RATIO = 0.9


# -- the engine shell ---------------------------------------------------------------------------


_QUIET = {gate: PreStepAction(gate=gate) for gate in get_args(Gate)}  # frozen: shared by steps


class CompactionHooks:
    """The compaction engine as hooks: pressure, overflow, micro and manual paths (R12-R15).

    `summarizer` answers `SummaryRequest`s (usually the turn model through a provider); without
    one, or with `policy.summarizer_enabled` false, the deterministic excerpt summary is used.
    `replay_images` (default) says the summarizer is the turn model itself, which saw the
    images already, so the replay carries them byte for byte (R28); `False` for a text-only
    summarizer, which gets text pointers instead. `state` starts the engine from a given
    `EngineState` (default: a fresh one). `clock` gives the seconds the cold-cache rule measures
    idle time in (default `time.monotonic`; a test or a simulator passes its own).

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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.record = record
        self._clock = clock if clock is not None else time.monotonic
        self._policy = policy
        self.meter = meter if meter is not None else TokenMeter(model)
        self._replay_images = replay_images
        self._state = state if state is not None else EngineState()
        # The state the quiet path made and nobody else holds: it may write it in place.
        self._private: EngineState | None = None
        self._writer = CompactionWriter(
            record, self.meter, threshold_tokens=policy.threshold_tokens
        )
        self._summaries = SummaryWriter(summarizer, self.meter, timeout=summarizer_timeout)
        self._brackets = BracketRunner(record, policy, self.meter, self._summaries, self._writer)
        self._cursors = RecordCursors(record)  # caches over the record, not decisions
        self._cold = ColdCacheRule(
            record, policy, self.meter, self._clock, replay_images=replay_images
        )
        self._threshold = policy.threshold_tokens  # derived: read once per policy (the setter)
        self._recovery_done = False
        self.last_outcome: CompactionOutcome | None = None
        """The newest compaction's outcome (written or not), for hosts and tests."""
        self.recovered: CompactionOutcome | None = None
        """What `recover()` closed, if anything."""

    # -- state ------------------------------------------------------------------------------

    @property
    def policy(self) -> CompactionPolicy:
        """The resolved policy in force; a new one set here holds from the next step on."""
        return self._policy

    @policy.setter
    def policy(self, policy: CompactionPolicy) -> None:
        # Every part that decides from the policy reads the one set here.
        self._policy = policy
        self._brackets.policy = policy
        self._cold.policy = policy
        self._threshold = self._writer.threshold_tokens = policy.threshold_tokens

    @property
    def state(self) -> EngineState:
        """Everything the engine decides from, as one value (a copy: it never changes)."""
        state = self._state
        if state is self._private:
            # The quiet path writes its own state in place: hand out a copy, so a host reading
            # it (from any thread) holds a value no later step changes.
            return replace(state)
        return state

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

    def request_compact(self, focus: str | None = None) -> None:
        """Compact at the next `pre_step`, bypassing threshold, hysteresis and circuit (R15).

        `focus` steers it: a short text naming what the summary must keep in full (like an
        agent CLI's `/compact <instructions>`); the instruction carries it, the retention check
        favours clauses about it, the record keeps it with the compaction, and a steered
        compaction always summarizes (a fold could keep no subject).
        """
        self._state = request_manual(self._state, check_focus(focus))

    def report_cache_cold(self) -> None:
        """Tell the engine the provider's prompt cache is cold (evicted, another region, ...).

        The next step then treats the prefix as unpaid whatever the clock says: above the cold
        threshold, it compacts when that costs less than waiting (`compaction.cold`).
        """
        self._state = report_cold(self._state)

    def observe(self, prompt_tokens: int, message_count: int) -> None:
        """Anchor the meter: the request of the first `message_count` messages cost this (R7)."""
        self.meter.observe(prompt_tokens, message_count)

    # -- hooks ------------------------------------------------------------------------------

    def quiet_step(self, ctx: StepContext) -> PreStepAction | None:
        """`pre_step` for a step that compacts nothing, without awaiting; `None` if it might.

        Shells with no event loop at hand (the sync `Compactor.prepare`) try it first; the
        decisions are `pre_step`'s own, which starts with it.
        """
        if ctx.compact_requested:
            return None
        return self.quiet_step_at(ctx.round, ctx.turn)

    def quiet_step_at(self, round_: int, turn: int) -> PreStepAction | None:
        """`quiet_step` of a step at `round_` and `turn` the host asked no compaction of.

        The sync `Compactor.prepare` calls it with no `StepContext` to build (one only when it
        returns `None`): a tiny step costs a few microseconds, and each one counts.
        """
        if not self._recovery_done and self.record.projection.open_brackets:
            return None
        state, policy = self._state, self._policy  # the field: no property call per step
        if state.manual_requested or micro_due_at(round_, policy):
            return None
        if state.circuit == "rapid_refill" and self._reminder_missing():
            return None  # `pre_step` appends it again (an overflow compaction may have taken it)
        if not self._recovery_done:
            self.recover()  # nothing is open: this only marks recovery done
        pressure = self.pressure()
        # `pressure_gate`'s first rule, decided here at no call; the round and turn do not
        # change the gate.
        gate: Gate = (
            "below_threshold"
            if pressure < self._threshold
            else pressure_gate(state, policy, pressure)
        )
        if gate == "compact" or gate == "limit":
            return None
        if gate == "below_threshold" and self._cold.due(
            state, pressure, circuit_open=circuit_after_healthy(state, policy) is not None
        ):
            return None
        at = self._clock()
        if state is self._private:
            quiet_round_into(
                state, policy, round_=round_, turn=turn, gate=gate, pressure=pressure, at=at
            )
        else:  # the first quiet step, or the state was handed out: a state of its own
            self._state = self._private = quiet_round(
                state, policy, round_=round_, turn=turn, gate=gate, pressure=pressure, at=at
            )
        return _QUIET[gate]

    def _sent(self, state: EngineState, start: int) -> EngineState:
        """`state` once this step's request leaves (`start`: the pressure the step began at)."""
        return after_send(state, at=self._clock(), start_tokens=start, sent_tokens=self.pressure())

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Compact when a path calls for it, then make sure the request fits the window."""
        quiet = self.quiet_step(ctx)
        if quiet is not None:
            return quiet
        return await self._step(ctx, sends=True)

    async def compact_now(self, ctx: StepContext, /) -> PreStepAction:
        """A manual compaction at once, between steps (R15): `pre_step`'s, but no request follows.

        `ctx.compact_focus` steers it. The cache clock and the request count stay as they were;
        the next round's growth is measured from where it left the context.
        """
        return await self._step(replace(ctx, compact_requested=True), sends=False)

    async def _step(self, ctx: StepContext, *, sends: bool) -> PreStepAction:
        """`pre_step` past its quiet check; `sends` says a request leaves after it."""
        self.recover()
        self._state = at_step(self._state, round_=ctx.round, turn=ctx.turn)
        self._observe_new()
        start = self.pressure()
        done: list[CompactionOutcome] = []
        gate = None
        if self._state.manual_requested or ctx.compact_requested:
            focus = self._state.manual_focus or check_focus(ctx.compact_focus)
            outcome = await self._compact(
                "manual", "aggressive" if focus else "normal", focus=focus
            )
            done.append(outcome)
            self._state = after_forced(
                self._state,
                post_tokens=outcome.post_tokens if outcome.written else None,
                manual=True,
            )
        else:
            folded = False
            if micro_due(self._state, self.policy):
                outcome = await self._compact("micro", "fold_only")
                done.append(outcome)
                # The flowchart ends here: a summary now would replay a projection the provider
                # never saw (the fold just changed it), losing the warm prefix (R25).
                folded = outcome.written
            if not folded:
                gate, pressured = await self._pressure_path()
                done.extend(pressured)
                if gate == "below_threshold":
                    cold = await self._cold_path()
                    if cold is not None:
                        done.append(cold)
        self._keep_reminder()  # before the fit: the reminder is part of the request
        fitted = await self._fit("pressure")
        if any(o.written for o in fitted):
            # The hysteresis measures growth from where the step left the context.
            self._state = replace(
                self._state,
                last_compaction_round=self._state.round,
                last_post_tokens=self.pressure(),
            )
        done.extend(fitted)
        self._keep_reminder(fits=True)  # the fit may have summarized it away
        if sends:
            self._state = self._sent(self._state, start)
        else:
            self._state = rebase_growth(
                self._state, start_tokens=start, post_tokens=self.pressure()
            )
        return PreStepAction(compactions=tuple(done), gate=gate)

    async def _pressure_path(self) -> tuple[Gate, list[CompactionOutcome]]:
        """The pressure gate and, when it opens, a compaction (R12, R16, R31-R33).

        Over the window's limit the fit guard goes on compacting in the same step; the breakers
        and the hysteresis then count the step by where it left the context, not by its first
        compaction alone.
        """
        pressure = self.pressure()
        self._state, gate = gate_round(self._state, self.policy, pressure)
        if gate not in ("compact", "limit"):
            return gate, []
        outcome = await self._compact("pressure", "normal", pressure)
        if outcome.nothing_to_do:
            return gate, [outcome]  # nothing compactable: neither a failure nor a baseline
        fitted = await self._fit("pressure")
        end = self.pressure() if fitted else outcome.post_tokens
        threshold = self.policy.threshold_tokens
        # Ineffective stays ineffective when the compaction wrote nothing or its summarizer
        # failed (the excerpt stood in); one that only freed too little is judged by the end.
        freed_too_little = outcome.written and outcome.post_tokens >= threshold
        was_open = self._state.circuit
        self._state = after_pressure_compaction(
            self._state,
            self.policy,
            post_tokens=end,
            effective=end < threshold and (outcome.effective or freed_too_little),
        )
        if was_open is None and self._state.circuit == "rapid_refill":
            self.record.append(self._reminder())
        return gate, [outcome, *fitted]

    async def _cold_path(self) -> CompactionOutcome | None:
        """With the cache cold, compact now when that costs less than waiting (`coldcache`)."""
        pressure = self.pressure()
        if not self._cold.compact_now(self._state, pressure, summarizer=self._summarizer_on()):
            return None
        outcome = await self._compact("cold_cache", "normal", pressure)
        if outcome.written:  # the hysteresis baseline; the breakers count pressure only
            self._state = after_forced(self._state, post_tokens=outcome.post_tokens, manual=False)
        return outcome

    def _reminder(self) -> Reminder:
        # A healthy round may reset the count while the circuit stays open: the reminder
        # tells how many refills opened it.
        refills = self._state.rapid_refills
        if self._state.circuit == "rapid_refill":
            refills = max(refills, self.policy.max_rapid_refills)
        return compaction_thrashing_reminder(refills, self.policy.rapid_refill_window_rounds)

    def _reminder_missing(self) -> bool:
        """Whether the rapid-refill circuit is open and its reminder is out of view."""
        if self._state.circuit != "rapid_refill" or self.record.readonly:
            return False
        return not any(THRASHING_TEXT in m.text for m in self.record.projection.messages)

    def _keep_reminder(self, *, fits: bool = False, limit: int | None = None) -> None:
        """While the rapid-refill circuit is open, its reminder stays visible to the model.

        A compaction may summarize it away; it is appended again (R33). With `fits`, only if
        the request still fits the window with it (or `limit`, after an overflow).
        """
        if not self._reminder_missing():
            return
        reminder = self._reminder()
        bar = self.policy.limit_tokens if limit is None else limit
        if fits and self.pressure() + self.meter.estimate(reminder.message) > bar:
            return
        self.record.append(reminder)

    async def _fit(
        self,
        trigger: CompactionTrigger,
        *,
        limit: int | None = None,
        bound: str | None = None,
    ) -> list[CompactionOutcome]:
        """Compact until the next request fits the window; `RequestTooLargeError` if it cannot.

        No request leaves while the calibrated estimate is over `limit_tokens` (the window less
        the output reserve), whatever the breakers, the hysteresis or a cooldown say. Cheapest
        loss first: summaries that keep neither a retention block nor the span's user messages
        but those of the turn in progress (the request being worked on), a piece of the span at
        a time while each frees something; then the tail cut to the newest turn; then that
        request summarized too; then the largest tool results (and long strings in tool calls'
        arguments) folded, the newest turn's included, until it fits or none is left; last,
        oversized pinned text (the goal too), each fold with a pointer to the record and a loud
        warning. After each round of folds that leaves the request over, the ladder starts again
        at the summaries: a fold in the newest turn may have made the room a summary lacked.
        `limit` lowers the bar (after an overflow), and `bound` says why, for the error.
        """
        limit = self.policy.limit_tokens if limit is None else limit
        done: list[CompactionOutcome] = []
        rounds = 0
        # Each summary replays a piece that fits the window: a context many windows large
        # needs many. Every round must free something, so the loop ends; the bound only caps
        # the summarizer calls of one step.
        most = max(_FIT_ROUNDS, 2 * -(-self.pressure() // max(limit, 1)))
        for pinned in (False, True):
            while (start := self.pressure()) > limit:
                squeeze = 1
                while (pressure := self.pressure()) > limit and squeeze <= 3 and rounds < most:
                    outcome = await self._compact(trigger, "normal", pressure, squeeze=squeeze)
                    done.append(outcome)
                    rounds += 1
                    if not outcome.written or self.pressure() >= pressure:
                        squeeze += 1  # nothing more at this rung: the next loss
                # Tool results first, every one if need be, and only then the pinned text:
                # the estimate of what a fold frees is not what the provider will count.
                while (before := self.pressure()) > limit:
                    folded = self._fold_largest(trigger, pinned=pinned, limit=limit)
                    if folded is None:
                        break
                    done.append(folded)
                    self.last_outcome = folded
                    if self.pressure() >= before:
                        break
                if self.pressure() >= start:
                    break  # neither rung freed anything more
        tokens = self.pressure()
        if tokens > limit:
            raise RequestTooLargeError(
                tokens, limit, self._must_stay(), self.policy.max_context_tokens, bound
            )
        return done

    def _must_stay(self) -> int:
        """Tokens of what no compaction may take out: system, goal, pinned, the newest turn."""
        messages = self.record.projection.messages
        stay = pinned_indices(messages, self._goal_index(messages)) | newest_turn(messages)
        return sum(self.meter.estimate(messages[i]) for i in stay)

    def _fold_largest(
        self, trigger: CompactionTrigger, *, pinned: bool, limit: int
    ) -> CompactionOutcome | None:
        """Fold the largest results and calls (the newest turn's too), or the pinned text.

        With `pinned`, the pinned text; else tool results and the long strings in tool calls'
        arguments. The last rungs of `_fit`: lossy beats stuck, loudly.
        """
        projection = self.record.projection
        messages = list(projection.messages)
        seqs = list(projection.seqs)
        keep = pinned_indices(messages, self._goal_index(messages))
        if pinned:
            candidates = {
                i for i in keep if messages[i].role == "user" and messages[i].text.strip()
            }
        else:  # tool results, and the calls whose arguments hold long strings
            candidates = {
                i for i, m in enumerate(messages) if m.role == "tool" or m.tool_calls
            } - keep
        pre = self.pressure()
        need = pre - limit
        result = fold_largest(
            messages,
            candidates=candidates,
            need=need,
            excerpt_chars=self.policy.fold_excerpt_chars,
            estimate=self.meter.estimate,
            seqs=seqs,
        )
        if not result.changed:
            return None
        what = "pinned messages (the goal among them)" if pinned else "tool results and calls"
        logger.warning(
            "the next request (%d tokens) would not fit its limit of %d: folded the %d largest "
            "%s, the newest turn included, keeping %d characters of each (the record keeps "
            "the originals)",
            pre,
            limit,
            result.folded,
            what,
            self.policy.fold_excerpt_chars,
        )
        return self._brackets.fold(
            result,
            "compact",
            trigger,
            pre,
            why=f"the request would not fit the window: folded the largest {what}; ",
        )

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """On context overflow: compact (forced) and retry (R13).

        At most `max_overflow_retries` per turn, then `OverflowRetriesExhaustedError`. Works
        while the circuit is open. The refusal is a measurement (`_overflow_compaction`); a
        compaction that frees nothing is not retried (the same request would fail the same
        way). An unrecognized 400/413/422 near the window is tried as a probable
        overflow once per request (`_probable_overflow`).
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
        try:
            outcomes = await self._overflow_compaction()
        except RequestTooLargeError as exc:
            raise OverflowRetriesExhaustedError(
                spent.overflow_retries, f"{ctx.error} (and {exc})"
            ) from ctx.error
        if not outcomes:
            raise OverflowRetriesExhaustedError(
                spent.overflow_retries,
                f"{ctx.error} (and nothing is left to compact: {self._why_nothing()})",
            ) from ctx.error
        return RetryAction(reason="compacted after a context overflow", compactions=outcomes)

    async def _overflow_compaction(
        self, *, probable: bool = False
    ) -> tuple[CompactionOutcome, ...]:
        """Compact after the provider refused the request as too long; `()` if nothing freed.

        The refusal is a measurement: the request was larger than the estimate said. So the
        retried request must come in at least `OVERFLOW_CUT` under the refused one's estimate
        (and under the limit): the fit guard compacts until it does, or `RequestTooLargeError`
        says it cannot. A `probable` overflow (an unrecognized error) is held to the limit only.
        """
        self._observe_new()
        before = self.pressure()
        outcome = await self._compact("overflow", "normal", before)
        self.last_outcome = outcome
        target, bound = self.policy.limit_tokens, None
        if not probable and int(before * OVERFLOW_CUT) < target:
            target = int(before * OVERFLOW_CUT)
            bound = (
                f"a tenth under the {before:,}-token estimate of the request the provider "
                f"refused; the window is {self.policy.max_context_tokens:,}"
            )
        done = [outcome] if outcome.written else []
        try:
            done.extend(
                o for o in await self._fit("overflow", limit=target, bound=bound) if o.written
            )
        finally:
            if done:  # the baseline is where the compactions left the context
                post = self.pressure()  # the retried request: growth is measured from it
                state = after_forced(self._state, post_tokens=post, manual=False)
                self._state = rebase_growth(state, start_tokens=before, post_tokens=post)
        if self.pressure() >= before or not done:
            return ()
        self._keep_reminder(fits=True, limit=target)  # a compaction may have taken it away
        return tuple(done)

    def _why_nothing(self) -> str:
        outcome = self.last_outcome
        return outcome.reason if outcome is not None and outcome.reason else "no change"

    async def _probable_overflow(self, ctx: RequestErrorContext) -> RetryAction | None:
        """One forced compaction per request for a fatal 400/413/422 near the window.

        Providers word overflows in ever new ways. This spends the R13 per-turn budget; if it
        frees nothing or the budget is spent, the error stays fatal (`None`).
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
        try:
            outcomes = await self._overflow_compaction(probable=True)
        except RequestTooLargeError:
            return None
        if not outcomes:
            return None
        why = f"probable overflow (HTTP {error.status_code} near the window)"
        first, *rest = outcomes
        return RetryAction(
            reason="compacted after a probable context overflow",
            compactions=(replace(first, reason=f"{why}; {first.reason}"), *rest),
        )

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Compaction leaves tool results as they are."""
        return ctx.result

    # -- compaction -------------------------------------------------------------------------

    async def _compact(
        self,
        trigger: CompactionTrigger,
        mode: Literal["normal", "aggressive", "fold_only"],
        pressure: int | None = None,
        *,
        squeeze: int = 0,
        focus: str | None = None,
    ) -> CompactionOutcome:
        messages = list(self.record.projection.messages)
        pre = self.meter.pressure(messages) if pressure is None else pressure
        plan = self._plan(mode, pre, squeeze=squeeze, focus=focus)
        match plan:
            case NothingToDo():
                outcome = CompactionOutcome(
                    trigger=trigger,
                    written=False,
                    effective=False,
                    pre_tokens=pre,
                    post_tokens=pre,
                    reason=plan.reason,
                    nothing_to_do=True,
                )
            case FoldRewrite():
                outcome = self._brackets.fold(plan.prune, plan.action, trigger, pre)
            case SummaryNeeded():
                outcome = await self._summarize(
                    plan, messages, trigger, squeeze=squeeze, focus=focus
                )
                if outcome.written and outcome.compaction_id is not None and not squeeze:
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

    def _plan(
        self,
        mode: Literal["normal", "aggressive", "fold_only"],
        pressure: int,
        *,
        squeeze: int = 0,
        focus: str | None = None,
    ) -> Plan:
        projection = self.record.projection
        messages = list(projection.messages)
        seqs = list(projection.seqs)
        return plan_compaction(
            messages,
            self.policy,
            pressure=pressure,
            estimate=self.meter.estimate,
            mode=mode,
            seqs=seqs,
            rounds=self._cursors.rounds(seqs),
            replay_images=self._replay_images,
            summarizer=self._summarizer_on(),
            goal=self._goal_index(messages),
            squeeze=squeeze,
            focus=focus,
        )

    def _goal_index(self, messages: Sequence[Message]) -> int | None:
        return self._cursors.goal_index(messages)

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
            rounds=self._cursors.rounds(projection.seqs),
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

    async def _summarize(
        self,
        plan: SummaryNeeded,
        messages: list[Message],
        trigger: CompactionTrigger,
        *,
        squeeze: int = 0,
        focus: str | None = None,
    ) -> CompactionOutcome:
        """Write `plan`'s summary bracket; the summarizer is asked unless its breaker is open."""
        use = self._summarizer_on() and not (
            self._state.circuit == "consecutive_failures" and self._state.summarizer_failed
        )
        outcome, failed = await self._brackets.summarize(
            plan, messages, trigger, use=use, squeeze=squeeze, focus=focus
        )
        if failed is not None:
            self._state = after_summary_attempt(self._state, failed=failed)
        return outcome

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> CompactionOutcome | None:
        """Close every bracket a crash left open (R38); the outcome of a reused summary, if any.

        The newest bracket is closed with its recorded summary when it has one and nothing has
        rewritten the projection since it started, so the summary is never paid twice; every
        other open bracket is abandoned (`BracketRunner.recover`). Runs once per engine (later
        calls return the first result).
        """
        if self._recovery_done:
            return self.recovered
        self._recovery_done = True
        self.recovered = self._brackets.recover()
        if self.recovered is not None:
            self.last_outcome = self.recovered
        return self.recovered

    def _observe_new(self) -> None:
        """Anchor the meter on the newest reply's recorded usage, if no rewrite came after it.

        Only entries appended since the last look are read, so this costs O(new entries).
        """
        found = self._cursors.new_usage()
        if found is not None:
            self.meter.observe(*found)
