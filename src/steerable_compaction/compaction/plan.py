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

The summaries form an incremental chain: a summary covers only what came after the newest
earlier summary (`Regions.span`), and earlier summaries stay verbatim. When the chain outgrows
`policy.summary_chain_tokens`, `plan_merge` merges its oldest summaries (all but the newest)
with one warm-prefix request whose replay ends at the last summary merged. Pinned messages (and
the goal) are never folded and are kept verbatim in every replacement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeAlias

from ..messages import Message, ToolCall
from .prune import PruneResult, prune
from .regions import (
    _UNSET,
    Regions,
    call_sites,
    is_goal_candidate,
    newest_turn,
    pinned_indices,
    select_regions,
    summary_indices,
)
from .summary import (
    INCREMENTAL_INSTRUCTION,
    MERGE_INSTRUCTION,
    SUMMARY_INSTRUCTION,
    SummaryRequest,
    build_summary_request,
    kept_messages,
    with_focus,
)

__all__ = [
    "FoldRewrite",
    "NothingToDo",
    "Plan",
    "PlanSettings",
    "SummaryNeeded",
    "plan_compaction",
    "plan_merge",
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
    def summary_chain_tokens(self) -> int:
        """Most tokens the summary chain may hold before a merge (0: no chain)."""

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

    @property
    def head_tokens(self) -> int:
        """The most the opening may hold and stay whole as the head."""

    @property
    def max_context_tokens(self) -> int:
        """The context window: a summary request and its output must fit it."""

    @property
    def limit_tokens(self) -> int:
        """The most a request may carry: the window less the output room it keeps."""

    @property
    def effective_reserved_output_tokens(self) -> int:
        """The output room a request keeps: the most a summary may be asked to write."""

    @property
    def effective_headroom_tokens(self) -> int:
        """Room kept free for the estimate's error (R11): a summary request keeps it too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FoldRewrite:
    """Rewrite with `prune.edits` only: a boundary without a bracket."""

    action: Literal["compact", "micro_compact"]
    prune: PruneResult
    regions: Regions
    pre_tokens: int
    post_tokens: int
    horizonless: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryNeeded:
    """Summarize `request.span`; `fold` is what folding alone would have done (not applied).

    `kept` indexes the messages of the span kept verbatim before the summary (pinned ones and
    the user's own); `kept_tokens` is their estimate, part of `middle_tokens` (the span's).
    `fold_enough` says the pressure path's fold alone would have freed enough (it summarizes
    because the fold does not come first); a failed summarizer still gives way to the excerpt,
    whose retention block keeps what the fold would cut, and the fold stands in only when no
    summary can be written at all. `merge` marks
    a merge of the chain's oldest summaries (`plan_merge`). `fits` is false when no summary
    request of the span fits the window: the excerpt stands in.
    """

    request: SummaryRequest
    regions: Regions
    fold: PruneResult
    pre_tokens: int
    middle_tokens: int
    kept: tuple[int, ...] = ()
    kept_tokens: int = 0
    kept_users_only: bool = True
    fold_enough: bool = False
    merge: bool = False
    fits: bool = True

    @property
    def replaced(self) -> int:
        """How many projected messages the summary replaces."""
        start, end = self.request.span
        return end - start


@dataclass(frozen=True, slots=True, kw_only=True)
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
    goal: int | None = _UNSET,
    squeeze: int = 0,
    focus: str | None = None,
) -> Plan:
    """Plan one compaction of `messages` at `pressure` tokens.

    `mode="normal"` (pressure path) stops after the fold when it suffices and the fold comes
    first (`policy.fold_first`, or `summarizer=False`: no LLM summarizer is wired, so the summary
    would be the deterministic excerpt); `"aggressive"` (overflow and manual paths) summarizes
    whenever there is a span to summarize; `"fold_only"` (micro-compaction, R14) never
    summarizes. When nothing came after the chain, an oversized chain is merged (`plan_merge`).
    `seqs` and `rounds` give each message's record seq and round for fold markers and image
    pointers. `goal` is the goal's index (default: `regions.opening_goal`).

    `squeeze` is the escalation a request that would not fit asks for, cheapest loss first:
    1 keeps no user message of the span verbatim but those of the turn in progress
    (`current_requests`; pinned ones, the goal and system messages stay), 2 also cuts the tail
    to the newest turn, 3 keeps not even those (`NothingToDo` when there are none: it would be
    2 again). `focus` steers the summary instruction toward what the host named (`with_focus`).
    """
    keep_last, tail_cap = policy.keep_last_messages, policy.max_tail_tokens
    if squeeze >= 2:
        keep_last, tail_cap = 1, 1  # the tail is the newest turn alone (R23)
    regions = select_regions(
        messages,
        keep_last,
        max_tail_tokens=tail_cap,
        estimate=estimate,
        goal=goal,
        head_tokens=policy.head_tokens,
    )
    chain = policy.summary_chain_tokens > 0
    if not chain:  # every summary replaces the whole middle, earlier summaries included
        regions = replace(regions, chain_end=regions.head_end)
    pinned = pinned_indices(messages, goal)

    def run_prune(start: int, horizon: int, protect: frozenset[int]) -> PruneResult:
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

    folded = run_prune(regions.head_end, regions.tail_start, pinned)
    post_fold = pressure - folded.saved_tokens
    if mode == "fold_only":
        if folded.changed:
            return FoldRewrite(
                action="micro_compact",
                prune=folded,
                regions=regions,
                pre_tokens=pressure,
                post_tokens=post_fold,
            )
        return NothingToDo(reason="no old tool result or image to fold", regions=regions)
    if not regions.span_empty:
        # A fold that lands just under the threshold is refilled within a round or two and
        # trips the rapid-refill breaker: it must leave the hysteresis margin free (R17, R31).
        enough = post_fold < policy.threshold_tokens - policy.recompact_margin_tokens
        fold_enough = folded.changed and enough and mode == "normal"
        if fold_enough and (policy.fold_first or not summarizer) and not squeeze:
            return FoldRewrite(
                action="compact",
                prune=folded,
                regions=regions,
                pre_tokens=pressure,
                post_tokens=post_fold,
            )
        current = (  # only a squeezed summary keeps them apart from the user-message budget
            current_requests(messages, regions.span, estimate, policy.user_message_tokens)
            if squeeze
            else ()
        )
        if squeeze >= 3 and not current:
            # The last rung only gives up the current request: without one it is rung 2 again.
            return NothingToDo(reason="no current request left to summarize", regions=regions)
        chained = chain and bool(summary_indices(messages, regions.head_end, regions.chain_end))
        return _summary_plan(
            messages,
            policy,
            regions,
            regions.span,
            instruction=with_focus(
                INCREMENTAL_INSTRUCTION if chained else SUMMARY_INSTRUCTION, focus
            ),
            estimate=estimate,
            pinned=pinned,
            pressure=pressure,
            fold=folded,
            fold_enough=fold_enough,
            rounds=rounds,
            replay_images=replay_images,
            user_budget=0 if squeeze else policy.user_message_tokens,
            current=current if squeeze < 3 else (),
        )
    merge = (
        None
        if not chain
        else plan_merge(
            messages,
            policy,
            pressure=pressure,
            estimate=estimate,
            rounds=rounds,
            replay_images=replay_images,
            regions=regions,
            force=True,
            goal=goal,
        )
    )
    if merge is not None:
        return merge
    # Degenerate case: nothing to summarize after the chain, the tail itself is the pressure.
    fallback = run_prune(regions.head_end, len(messages), pinned | newest_turn(messages))
    if fallback.changed:
        return FoldRewrite(
            action="compact",
            prune=fallback,
            regions=regions,
            pre_tokens=pressure,
            post_tokens=pressure - fallback.saved_tokens,
            horizonless=True,
        )
    return NothingToDo(
        reason="the middle is empty (nothing after the summaries to summarize) and nothing in "
        "the tail can be folded",
        regions=regions,
    )


def plan_merge(
    messages: Sequence[Message],
    policy: PlanSettings,
    *,
    pressure: int,
    estimate: Callable[[Message], int],
    rounds: Sequence[int] | None = None,
    replay_images: bool = False,
    regions: Regions | None = None,
    force: bool = False,
    goal: int | None = _UNSET,
) -> SummaryNeeded | None:
    """Plan merging the chain's oldest summaries into one, or `None` when there is no need.

    Needed when the chain holds two summaries or more and more than
    `policy.summary_chain_tokens` (with `force`, whenever it holds two or more). The oldest
    summaries are merged, with the messages kept in front of them, until they hold half the
    chain (at least two, never the newest): the span is `[head_end, last merged summary + 1)`
    and the replay ends there, a prefix of what the provider last saw. The merged summary may
    take a quarter of the chain's budget; pinned messages and the user's messages that fit the
    budget stay.
    """
    if policy.summary_chain_tokens <= 0:
        return None
    if regions is None:
        regions = select_regions(
            messages,
            policy.keep_last_messages,
            max_tail_tokens=policy.max_tail_tokens,
            estimate=estimate,
            goal=goal,
            head_tokens=policy.head_tokens,
        )
    # The whole chain, wherever the tail starts: right after a compaction the tail of a short
    # projection may reach back over the newest summaries.
    summaries = summary_indices(messages, regions.head_end, len(messages))
    if len(summaries) < 2:
        return None
    prices = [estimate(m) for m in messages[regions.head_end : summaries[-1] + 1]]
    chain = sum(prices)
    if not force and chain <= policy.summary_chain_tokens:
        return None
    # The oldest summaries (with what each kept) until they hold half the chain, at least two,
    # never the newest: recent summaries stay verbatim, only old ones are compressed again.
    merged, last = 0, summaries[0]
    for count, at in enumerate(summaries[:-1], start=1):
        last = at
        merged = sum(prices[: at + 1 - regions.head_end])
        if count >= 2 and merged * 2 >= chain:
            break
    span = (regions.head_end, last + 1)
    empty = PruneResult(edits=(), messages=tuple(messages), folded=0, offloaded=0, saved_tokens=0)
    return _summary_plan(
        messages,
        policy,
        regions,
        span,
        instruction=MERGE_INSTRUCTION,
        estimate=estimate,
        pinned=pinned_indices(messages, goal),
        pressure=pressure,
        fold=empty,
        fold_enough=False,
        rounds=rounds,
        replay_images=replay_images,
        merge=True,
        user_budget=policy.user_message_tokens,
    )


def current_requests(
    messages: Sequence[Message],
    span: tuple[int, int],
    estimate: Callable[[Message], int],
    budget: int,
) -> tuple[int, ...]:
    """The user's messages of the turn in progress that `span` holds, newest first in `budget`.

    The turn in progress is everything after the agent's newest plain reply (an assistant
    message with no tool call ends a turn): the user's request and any nudge after it ("go
    on"). A turn's request must outlive the compactions made inside that turn (its search
    results, its tool rounds), or the model goes on without knowing what it was asked; a
    squeezed summary keeps these verbatim, and gives them up only on the last rung. Agents
    that type commands as plain text end a turn at every command: there, nothing is kept.
    """
    start, end = span
    kept: list[int] = []
    left = budget
    for i in range(len(messages) - 1, start - 1, -1):
        message = messages[i]
        if message.role == "assistant" and not message.tool_calls:
            break
        if i < end and is_goal_candidate(message):
            price = estimate(message)
            if price <= left:
                left -= price
                kept.append(i)
    return tuple(kept)


def _summary_plan(
    messages: Sequence[Message],
    policy: PlanSettings,
    regions: Regions,
    span: tuple[int, int],
    *,
    instruction: str,
    estimate: Callable[[Message], int],
    pinned: frozenset[int],
    pressure: int,
    fold: PruneResult,
    fold_enough: bool,
    rounds: Sequence[int] | None,
    replay_images: bool,
    user_budget: int,
    current: tuple[int, ...] = (),
    merge: bool = False,
) -> SummaryNeeded:
    """A summary of `messages[span]` with `instruction`, keeping pinned and user messages.

    `current` (`current_requests`) are kept too where the span, as cut, holds them, within half
    the span's tokens, as the user messages are.

    The request must fit the window, less the headroom kept for the estimate's error, with
    room for the summary (R13's failure, learned only from the provider, is avoided): when the
    replay, the instruction and the least useful summary (`MIN_SUMMARY_TOKENS`) do not fit, the
    span ends earlier, at the last place that splits no tool call from its results, and the
    rest stays after the summary for a later compaction (a piece of the span, summarized
    warm). The summarizer is asked for no more than the room left, the policy's output
    reserve, and (for a merge) a quarter of the chain's budget. `fits` is false when not even
    the first message of the span fits.
    """
    start, end = span
    window = policy.max_context_tokens - policy.effective_headroom_tokens
    ask = estimate(Message.user(instruction))
    # The request is the projection's first messages plus the instruction, priced two ways,
    # the larger kept: the pressure (billed: tool schemas and framing count) less what comes
    # after the replay, which errs low when the estimate of that rest errs high; and the
    # estimate of the replay itself, which misses the framing.
    after = [estimate(m) for m in messages[start:]]
    before = sum(estimate(m) for m in messages[:start])
    fits = True

    def request_tokens(cut: int) -> int:
        billed = pressure - sum(after[cut - start :])
        return max(billed, before + sum(after[: cut - start])) + ask

    sites = call_sites(messages)  # once: the loop below may step back over every message
    while end > start and request_tokens(end) + MIN_SUMMARY_TOKENS > window:
        end = _clean_cut(messages, start, end - 1, sites)
    if end <= start:
        end, fits = span[1], False  # the excerpt stands in: no summarizer request can fit
    span = (start, end)
    room = window - request_tokens(end)
    cap = min(max(room, 1), max(policy.effective_reserved_output_tokens, MIN_SUMMARY_TOKENS))
    if merge:
        cap = min(cap, max(policy.summary_chain_tokens // 4, 1))
    prices = after[: end - start]
    request = build_summary_request(
        messages,
        span,
        replay_images=replay_images,
        rounds=rounds,
        instruction=instruction,
        max_output_tokens=cap,
    )
    kept = kept_messages(messages, span, user_budget, prices, pinned)
    left = sum(prices) // 2 - sum(prices[i - start] for i in kept)  # the summary must free room
    extra: set[int] = set()
    for i in current:  # newest first; only those of the piece, as cut
        if start <= i < end and i not in kept and prices[i - start] <= left:
            left -= prices[i - start]
            extra.add(i)
    if extra:
        kept = tuple(sorted({*kept, *extra}))
    return SummaryNeeded(
        request=request,
        regions=regions,
        fold=fold,
        pre_tokens=pressure,
        middle_tokens=sum(prices),
        kept=kept,
        kept_tokens=sum(prices[i - start] for i in kept),
        kept_users_only=all(messages[i].role == "user" for i in kept),
        fold_enough=fold_enough,
        merge=merge,
        fits=fits,
    )


MIN_SUMMARY_TOKENS = 64
"""The least output a summary request keeps room for; below it the span is cut (or excerpted)."""


def _clean_cut(
    messages: Sequence[Message],
    start: int,
    end: int,
    sites: Mapping[str, tuple[int, ToolCall]],
) -> int:
    """The largest cut `<= end` (and `> start`, else `start`) that splits no call from a result.

    `messages[cut]` must not answer a call issued in `[start, cut)` (`sites`: `call_sites`):
    the piece before the cut then holds whole tool rounds only (R22).
    """
    cut = end
    while cut > start:
        result = messages[cut].tool_result if cut < len(messages) else None
        if result is None or sites.get(result.call_id, (start - 1,))[0] < start:
            return cut
        cut -= 1
    return start
