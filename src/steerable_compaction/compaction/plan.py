"""Planning one compaction: which stage runs and exactly what it writes. Pure; no I/O.

Fold first (R17), when `policy.fold_first` is on or no LLM summarizer is wired: if folding the
middle's old tool results and images brings the estimate under the threshold, with the
hysteresis margin to spare, the plan is a fold-only rewrite and no LLM is called. (A fold that
lands just under the threshold would be refilled within a round or two and open the
rapid-refill breaker, so it goes on to the summary instead.) With `fold_first` off and a
summarizer wired, the pressure path always summarizes: a fold-only rewrite would cut results to
excerpts that no summary has read. The summary (R20) uses the exact warm-prefix replay request;
the user's own messages in the middle that fit `policy.user_message_tokens` are kept verbatim
in front of it. The tail is capped at `policy.max_tail_tokens`. When the middle is empty and
the tail itself is the pressure, a horizon-less fold is the fallback (R18: lossy beats stuck),
still sparing the newest assistant turn and its results (R23).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from ..messages import Message
from .prune import PruneResult, prune
from .regions import Regions, newest_turn, select_regions
from .summary import SummaryRequest, build_summary_request, kept_user_messages

__all__ = [
    "FoldRewrite",
    "NothingToDo",
    "Plan",
    "PlanSettings",
    "SummaryNeeded",
    "plan_compaction",
]


class PlanSettings(Protocol):
    """The knobs planning reads; `CompactionPolicy` is the usual one."""

    @property
    def threshold_tokens(self) -> int:
        """Pressure at or above which compaction runs."""

    @property
    def recompact_margin_tokens(self) -> int:
        """Hysteresis margin: a fold-only rewrite must leave at least this much room."""

    @property
    def keep_last_messages(self) -> int:
        """Tail length before widening."""

    @property
    def max_tail_tokens(self) -> int:
        """Most estimated tokens the tail keeps (fewer messages, never fewer than the newest)."""

    @property
    def fold_first(self) -> bool:
        """Whether a fold that frees enough stops the pressure path before any summary."""

    @property
    def user_message_tokens(self) -> int:
        """Budget for the user's own messages a summary keeps verbatim."""

    @property
    def keep_last_tool_results(self) -> int:
        """Newest tool results never folded."""

    @property
    def fold_excerpt_chars(self) -> int:
        """Head + tail characters a fold marker keeps."""

    @property
    def image_offload(self) -> bool:
        """Whether old images become text pointers."""

    @property
    def keep_last_images(self) -> int:
        """Newest images never offloaded."""


@dataclass(frozen=True, slots=True)
class FoldRewrite:
    """Rewrite with `prune.edits` only: a boundary without a bracket."""

    action: Literal["compact", "micro_compact"]
    prune: PruneResult
    regions: Regions
    pre_tokens: int
    post_tokens: int
    horizonless: bool = False


@dataclass(frozen=True, slots=True)
class SummaryNeeded:
    """Summarize `request.span`; `fold` is what folding alone would have done (not applied).

    `kept` indexes the user messages of the span kept verbatim before the summary;
    `kept_tokens` is their estimate, part of `middle_tokens`. `fold_enough` says the pressure
    path's fold alone would have freed enough (it summarizes because the fold does not come
    first): the fallback if the summarizer fails.
    """

    request: SummaryRequest
    regions: Regions
    fold: PruneResult
    pre_tokens: int
    middle_tokens: int
    kept: tuple[int, ...] = ()
    kept_tokens: int = 0
    fold_enough: bool = False

    @property
    def replaced(self) -> int:
        """How many projected messages the summary replaces."""
        start, end = self.request.span
        return end - start


@dataclass(frozen=True, slots=True)
class NothingToDo:
    """Planning found nothing it may change; `reason` says why."""

    reason: str
    regions: Regions


Plan: TypeAlias = FoldRewrite | SummaryNeeded | NothingToDo


def plan_compaction(
    messages: Sequence[Message],
    policy: PlanSettings,
    *,
    pressure: int,
    estimate: Callable[[Message], int],
    mode: Literal["normal", "aggressive", "fold_only"] = "normal",
    seqs: Sequence[int] | None = None,
    rounds: Sequence[int] | None = None,
    replay_images: bool = False,
    summarizer: bool = True,
) -> Plan:
    """Plan one compaction of `messages` at `pressure` tokens.

    `mode="normal"` (pressure path) stops after the fold when it suffices and the fold comes
    first (`policy.fold_first`, or `summarizer=False`: no LLM summarizer is wired, so the summary
    would be the deterministic excerpt); `"aggressive"` (overflow and manual paths) summarizes
    whenever the middle is not empty; `"fold_only"` (micro-compaction, R14) never summarizes.
    `seqs` and `rounds` give each message's record seq and round for fold markers and image
    pointers.
    """
    regions = select_regions(
        messages,
        policy.keep_last_messages,
        max_tail_tokens=policy.max_tail_tokens,
        estimate=estimate,
    )

    def run_prune(start: int, horizon: int, protect: frozenset[int] = frozenset()) -> PruneResult:
        return prune(
            messages,
            start=start,
            horizon=horizon,
            keep_last_tool_results=policy.keep_last_tool_results,
            fold_excerpt_chars=policy.fold_excerpt_chars,
            image_offload=policy.image_offload,
            keep_last_images=policy.keep_last_images,
            estimate=estimate,
            seqs=seqs,
            rounds=rounds,
            protect=protect,
        )

    folded = run_prune(regions.head_end, regions.tail_start)
    post_fold = pressure - folded.saved_tokens
    if mode == "fold_only":
        if folded.changed:
            return FoldRewrite("micro_compact", folded, regions, pressure, post_fold)
        return NothingToDo("no old tool result or image to fold", regions)
    if not regions.middle_empty:
        # A fold that lands just under the threshold is refilled within a round or two and
        # trips the rapid-refill breaker: it must leave the hysteresis margin free (R17, R31).
        enough = post_fold < policy.threshold_tokens - policy.recompact_margin_tokens
        fold_enough = folded.changed and enough and mode == "normal"
        if fold_enough and (policy.fold_first or not summarizer):
            return FoldRewrite("compact", folded, regions, pressure, post_fold)
        request = build_summary_request(
            messages, regions.middle, replay_images=replay_images, rounds=rounds
        )
        prices = [estimate(m) for m in messages[regions.head_end : regions.tail_start]]
        kept = kept_user_messages(messages, regions.middle, policy.user_message_tokens, prices)
        middle_tokens = sum(prices)
        kept_tokens = sum(prices[i - regions.head_end] for i in kept)
        return SummaryNeeded(
            request,
            regions,
            folded,
            pressure,
            middle_tokens,
            kept=kept,
            kept_tokens=kept_tokens,
            fold_enough=fold_enough,
        )
    # Degenerate case: nothing between head and tail, the tail itself is the pressure.
    fallback = run_prune(regions.head_end, len(messages), newest_turn(messages))
    if fallback.changed:
        return FoldRewrite(
            "compact", fallback, regions, pressure, pressure - fallback.saved_tokens, True
        )
    return NothingToDo("the middle is empty and nothing in the tail can be folded", regions)
