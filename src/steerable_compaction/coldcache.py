"""`ColdCacheRule`: whether the engine compacts now, while the provider's prompt cache is cold.

The price is `compaction.cold`'s (pure); this reads what it needs from the engine's state, the
policy, the clock, the projection and the record's counts, plans the compaction it would
price, and says yes or no (logging the price either way). The horizon and the growth per round
come from the session's record, so a process that resumed it prices as the one that wrote it.
It holds no engine state and writes nothing: `CompactionHooks` runs the compaction and moves
its state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import assert_never

from .compaction import FoldRewrite, NothingToDo, SummaryNeeded, plan_compaction
from .compaction.cold import ColdVerdict, cache_expired, price_cold_compaction
from .compaction.state import EngineState
from .policy import CompactionPolicy
from .record import Record
from .tokens import TokenMeter

__all__ = ["ColdCacheRule"]

logger = logging.getLogger("steerable_compaction.engine")


class ColdCacheRule:
    """The cold-cache path's decision for `CompactionHooks` (issue 28).

    `clock` is the engine's (the seconds idle time is measured in); `replay_images` as the
    engine plans with it.
    """

    def __init__(
        self,
        record: Record,
        policy: CompactionPolicy,
        meter: TokenMeter,
        clock: Callable[[], float],
        *,
        replay_images: bool,
    ) -> None:
        self.record = record
        self.policy = policy
        self.meter = meter
        self.clock = clock
        self.replay_images = replay_images

    def due(self, state: EngineState, pressure: int, *, circuit_open: bool) -> bool:
        """Whether the cache is cold and the pressure high enough to price a compaction now.

        Not while a circuit is open (compaction is not keeping up), nor within the hysteresis
        margin of the last compaction (another would free too little), nor at or above the
        threshold (the pressure path's).
        """
        policy = self.policy
        if not state.cache_reported_cold and (
            policy.cache_ttl_seconds is None or state.last_request_at is None
        ):
            return False  # not known to be cold: the common case, decided first
        if not policy.cold_threshold_tokens <= pressure < policy.threshold_tokens:
            return False
        if circuit_open or self.record.readonly:
            return False
        last = state.last_post_tokens
        if last is not None and pressure < last + policy.recompact_margin_tokens:
            return False
        return cache_expired(
            state.last_request_at,
            self.clock(),
            policy.cache_ttl_seconds,
            reported=state.cache_reported_cold,
        )

    def compact_now(self, state: EngineState, pressure: int, *, summarizer: bool) -> bool:
        """Whether to compact before this step's request: the cache is cold and it pays.

        `summarizer` says a summary would be asked of the summarizer (not the excerpt).
        """
        if not self.due(state, pressure, circuit_open=state.circuit_open):
            return False
        verdict = self.price(state, pressure, summarizer=summarizer)
        if verdict is None or not verdict.compact:
            if verdict is not None:
                logger.info(
                    "cache cold at %d tokens: compacting now would cost %.0f more than waiting "
                    "over %d rounds; waiting",
                    pressure,
                    -verdict.saving,
                    verdict.rounds,
                )
            return False
        logger.info(
            "cache cold at %d tokens: compacting now saves about %.0f input-token prices over "
            "%d rounds",
            pressure,
            verdict.saving,
            verdict.rounds,
        )
        return True

    def price(self, state: EngineState, pressure: int, *, summarizer: bool) -> ColdVerdict | None:
        """The price of compacting now against waiting; `None` when nothing is compactable.

        Planned from the projection alone: the engine's plan reads each message's round and
        the goal from the record, which loads a resumed record's older entries, for a decision
        that is often "wait". Rounds only label fold markers, and the goal the projection
        shows (`regions.opening_goal`) is at worst a kept user message instead: a few tokens.
        """
        projection = self.record.projection
        plan = plan_compaction(
            projection.messages,
            self.policy,
            pressure=pressure,
            estimate=self.meter.estimate,
            mode="normal",
            seqs=projection.seqs,
            replay_images=self.replay_images,
            summarizer=summarizer,
        )
        match plan:
            case NothingToDo():
                return None
            case FoldRewrite():
                post, summary, asks = plan.post_tokens, 0, False
            case SummaryNeeded():
                # A summary is written at about a quarter of its span or less, within the
                # output room; the retention block comes on top (at most a third of the span,
                # half of what the summary frees, `retention_tokens`). Both err long, against
                # compacting. Without a summarizer, or when no summary request fits the
                # window, the excerpt (no larger) is written and nothing is sent.
                asks = summarizer and plan.fits
                span = max(plan.middle_tokens - plan.kept_tokens, 0)
                summary = min(span // 4, self.policy.effective_reserved_output_tokens)
                block = min(self.policy.retention_tokens, span // 3, (span - summary) // 2)
                post = pressure - span + summary + block
            case _:
                assert_never(plan)
        return price_cold_compaction(
            self.policy,
            pressure=pressure,
            post_tokens=max(post, 0),
            summary_tokens=summary if asks else 0,
            growth_per_round=self._growth_per_round(state),
            rounds_seen=self.record.reply_count,
            asks_summarizer=asks,
        )

    def _growth_per_round(self, state: EngineState) -> float:
        """What a round adds to the prompt, on average, as the session's record tells it.

        The rounds since the newest rewrite, as the projection shows them (appended since, so
        as they were sent): each reply with what followed it. A process that resumed the
        record prices as the one that wrote it. Right after a rewrite, with no reply since,
        this process's own measure stands in (`EngineState.growth_per_round`).
        """
        projection = self.record.projection
        messages, seqs = projection.messages, projection.seqs
        after = self.record.newest_boundary
        after = -1 if after is None else after
        tokens = replies = pending = 0
        for i in range(len(seqs) - 1, -1, -1):
            if seqs[i] <= after:
                break
            pending += self.meter.estimate(messages[i])
            if messages[i].role == "assistant":  # a round: this reply and what came after it
                tokens, replies, pending = tokens + pending, replies + 1, 0
        return tokens / replies if replies else state.growth_per_round
