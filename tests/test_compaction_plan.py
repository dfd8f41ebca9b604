from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message
from steerable_compaction.compaction import (
    FoldRewrite,
    NothingToDo,
    SummaryNeeded,
    pair_issues,
    plan_compaction,
    select_regions,
    text_pointer_span,
)
from steerable_compaction.compaction.regions import is_goal_candidate, opening_goal

from .compaction_helpers import (
    Knobs,
    apply_plan,
    est,
    session,
    tool_round,
    total,
    write_session,
)
from .strategies import agent_transcripts


def test_r17_fold_alone_when_it_brings_pressure_under_threshold() -> None:
    """R17: if the post-fold estimate is under threshold, the plan is a fold: no LLM call."""
    messages = session(10)
    pressure = total(messages)
    knobs = Knobs(threshold_tokens=pressure - 500)
    plan = plan_compaction(messages, knobs, pressure=pressure, estimate=est)
    assert isinstance(plan, FoldRewrite)
    assert plan.action == "compact"
    assert not plan.horizonless
    assert plan.post_tokens == pressure - plan.prune.saved_tokens < knobs.threshold_tokens
    assert plan.pre_tokens == pressure


def test_a_session_whose_bulk_is_in_tool_calls_is_compacted_by_a_fold() -> None:
    """Files written through tool calls (results "ok") fold like large results: no LLM call."""
    messages = write_session(10)
    pressure = total(messages)
    knobs = Knobs(threshold_tokens=pressure - 1_000)
    plan = plan_compaction(messages, knobs, pressure=pressure, estimate=est)
    assert isinstance(plan, FoldRewrite)
    assert plan.post_tokens < knobs.threshold_tokens
    assert {messages[e.index].role for e in plan.prune.edits} == {"assistant"}


def test_r20_summary_when_fold_is_not_enough() -> None:
    """R20: still over threshold after the fold, the middle is summarized (warm replay)."""
    messages = session(10)
    pressure = total(messages)
    plan = plan_compaction(messages, Knobs(threshold_tokens=200), pressure=pressure, estimate=est)
    assert isinstance(plan, SummaryNeeded)
    regions = select_regions(messages, 6)
    assert plan.request.span == regions.middle
    assert plan.replaced == regions.tail_start - regions.head_end
    assert plan.middle_tokens == total(messages[regions.head_end : regions.tail_start])
    assert plan.fold.changed  # the fold was tried first


def test_r25_summary_request_replays_the_pre_fold_span() -> None:
    """R25: the replay holds the raw results the fold would have folded, not fold markers."""
    messages = session(10)
    plan = plan_compaction(
        messages, Knobs(threshold_tokens=200), pressure=total(messages), estimate=est
    )
    assert isinstance(plan, SummaryNeeded)
    folded = {e.index for e in plan.fold.edits}
    for i in folded:
        assert plan.request.messages[i] is messages[i]


def test_aggressive_mode_summarizes_even_when_fold_would_do() -> None:
    """Overflow and manual paths summarize whenever there is a middle."""
    messages = session(10)
    pressure = total(messages)
    knobs = Knobs(threshold_tokens=pressure - 500)
    assert knobs.fold_first  # so the pressure path would stop at the fold ...
    normal = plan_compaction(messages, knobs, pressure=pressure, estimate=est)
    assert isinstance(normal, FoldRewrite)
    plan = plan_compaction(messages, knobs, pressure=pressure, estimate=est, mode="aggressive")
    assert isinstance(plan, SummaryNeeded)  # ... and the forced paths summarize anyway
    assert plan.request.span == normal.regions.middle and not plan.fold_enough


def test_r14_fold_only_mode_never_summarizes() -> None:
    """R14: micro-compaction folds (action `micro_compact`) and never plans a summary."""
    messages = session(10)
    plan = plan_compaction(
        messages,
        Knobs(threshold_tokens=10),
        pressure=total(messages),
        estimate=est,
        mode="fold_only",
    )
    assert isinstance(plan, FoldRewrite)
    assert plan.action == "micro_compact"
    again = plan_compaction(
        list(plan.prune.messages), Knobs(), pressure=0, estimate=est, mode="fold_only"
    )
    assert isinstance(again, NothingToDo)


def test_r18_horizonless_fallback_when_the_tail_is_the_pressure() -> None:
    """R18: with an empty middle, fold inside the tail but spare the newest turn (R23)."""
    messages = [Message.system("s"), Message.user("g")]
    for i in range(4):
        messages += tool_round(i, "q" * 8_000)
    knobs = Knobs(threshold_tokens=100, keep_last_messages=20, keep_last_tool_results=1)
    assert select_regions(messages, 20).middle_empty
    plan = plan_compaction(messages, knobs, pressure=total(messages), estimate=est)
    assert isinstance(plan, FoldRewrite)
    assert plan.horizonless
    assert sorted(e.index for e in plan.prune.edits) == [3, 5, 7]
    assert plan.prune.messages[-1] is messages[-1]
    assert plan.prune.messages[-2] is messages[-2]


def test_nothing_to_do_when_nothing_can_change() -> None:
    """A transcript with an empty middle and nothing foldable yields `NothingToDo`."""
    messages = [Message.system("s"), Message.user("g"), *tool_round(0, "short")]
    plan = plan_compaction(messages, Knobs(threshold_tokens=1), pressure=10_000, estimate=est)
    assert isinstance(plan, NothingToDo)
    assert "middle is empty" in plan.reason
    micro = plan_compaction(messages, Knobs(), pressure=0, estimate=est, mode="fold_only")
    assert isinstance(micro, NothingToDo)


def test_plan_reads_a_real_policy() -> None:
    """Planning accepts any object with the policy's knobs (here a replaced dataclass)."""
    messages = session(10)
    knobs = replace(Knobs(), keep_last_messages=2, threshold_tokens=50)
    plan = plan_compaction(messages, knobs, pressure=total(messages), estimate=est)
    assert isinstance(plan, SummaryNeeded)
    assert plan.request.span == (2, len(messages) - 2)


@given(
    agent_transcripts(max_rounds=10, restored_orphans=False),
    st.integers(1, 8),
    st.sampled_from(["normal", "aggressive", "fold_only"]),
    st.integers(0, 3),
    st.booleans(),
    st.sampled_from([1, 200, 10**9]),
    st.sampled_from([0, 50, 10**9]),
    st.sampled_from([1, 10**9]),
)
def test_planned_projection_keeps_head_tail_and_pairs_intact(
    messages: list[Message],
    keep: int,
    mode: str,
    keep_results: int,
    fold_first: bool,
    max_tail: int,
    user_tokens: int,
    threshold: int,
) -> None:
    """Property: any plan keeps head and tail byte-identical and breaks no call/result pair.

    The replay is the pre-compaction messages up to the tail plus exactly one user instruction;
    kept messages are the user's own, from the middle, in order, within their budget.
    """
    knobs = Knobs(
        threshold_tokens=threshold,  # 10**9: every fold frees enough, so `fold_first` decides
        keep_last_messages=keep,
        keep_last_tool_results=keep_results,
        fold_first=fold_first,
        max_tail_tokens=max_tail,
        user_message_tokens=user_tokens,
    )
    plan = plan_compaction(messages, knobs, pressure=total(messages), estimate=est, mode=mode)  # type: ignore[arg-type]
    after = apply_plan(messages, plan)
    regions = plan.regions
    assert after[: regions.head_end] == messages[: regions.head_end]
    if not (isinstance(plan, FoldRewrite) and plan.horizonless):
        tail = len(messages) - regions.tail_start
        assert after[len(after) - tail :] == messages[regions.tail_start :]
    assert not pair_issues(after)
    if isinstance(plan, SummaryNeeded):
        assert plan.request.replay == text_pointer_span(messages[: regions.tail_start])
        assert plan.request.messages[-1].role == "user"
        assert len(plan.request.messages) == regions.tail_start + 1
        assert list(plan.kept) == sorted(plan.kept)
        assert all(regions.head_end <= i < regions.tail_start for i in plan.kept)
        # The user's own messages within their budget, the goal, and every system message (R21).
        goal = opening_goal(messages)
        users = [i for i in plan.kept if messages[i].role != "system" and i != goal]
        assert all(is_goal_candidate(messages[i]) for i in users)
        assert all(
            i in plan.kept for i in range(*plan.request.span) if messages[i].role == "system"
        )
        assert plan.kept_tokens == total([messages[i] for i in plan.kept])
        assert total([messages[i] for i in users]) <= user_tokens
        assert total([messages[i] for i in users]) <= plan.middle_tokens // 2
    if isinstance(plan, FoldRewrite):
        assert plan.post_tokens <= plan.pre_tokens
        if mode == "normal" and not plan.horizonless:
            assert fold_first
    if isinstance(plan, SummaryNeeded):
        assert plan.fold_enough == (threshold > 1 and plan.fold.changed and mode == "normal")
        assert not (plan.fold_enough and fold_first)


def test_r17_a_fold_landing_inside_the_hysteresis_margin_summarizes_instead() -> None:
    """A fold that leaves less than the margin under the threshold would be refilled at once.

    Deliberate reading of R17 with R31: fold alone only when it lands below threshold - margin.
    """
    messages = session(10)
    pressure = total(messages)
    fold = plan_compaction(messages, Knobs(threshold_tokens=10**9), pressure=pressure, estimate=est)
    assert isinstance(fold, FoldRewrite)
    post_fold = pressure - fold.prune.saved_tokens
    inside = Knobs(threshold_tokens=post_fold + 100, recompact_margin_tokens=200)
    plan = plan_compaction(messages, inside, pressure=pressure, estimate=est)
    assert isinstance(plan, SummaryNeeded)
    clear = Knobs(threshold_tokens=post_fold + 300, recompact_margin_tokens=200)
    assert isinstance(
        plan_compaction(messages, clear, pressure=pressure, estimate=est), FoldRewrite
    )


def test_without_fold_first_the_pressure_path_summarizes_what_the_fold_would_cut() -> None:
    """`fold_first=False`: where R17 would fold alone, a wired summarizer reads the results."""
    messages = session(10)
    pressure = total(messages)
    knobs = Knobs(threshold_tokens=pressure - 500, fold_first=False)
    plan = plan_compaction(messages, knobs, pressure=pressure, estimate=est)
    assert isinstance(plan, SummaryNeeded)
    assert plan.fold.changed  # the fold would have done, and was not applied
    without = plan_compaction(messages, knobs, pressure=pressure, estimate=est, summarizer=False)
    assert isinstance(without, FoldRewrite)  # the excerpt keeps less than a fold: fold first
    micro = plan_compaction(messages, knobs, pressure=pressure, estimate=est, mode="fold_only")
    assert isinstance(micro, FoldRewrite)  # micro-compaction (R14) still only folds


def test_the_tail_token_cap_narrows_the_tail_and_widens_the_summary() -> None:
    """`max_tail_tokens`: the tail keeps fewer messages while it is over the cap."""
    messages = session(10)  # ~510-token tool results
    pressure = total(messages)
    wide = plan_compaction(messages, Knobs(threshold_tokens=200), pressure=pressure, estimate=est)
    capped = plan_compaction(
        messages, Knobs(threshold_tokens=200, max_tail_tokens=600), pressure=pressure, estimate=est
    )
    assert isinstance(wide, SummaryNeeded) and isinstance(capped, SummaryNeeded)
    assert wide.regions.tail_start == len(messages) - 6
    assert capped.regions.tail_start == len(messages) - 2  # the newest turn only
    assert total(messages[capped.regions.tail_start :]) <= 600
    assert capped.replaced == wide.replaced + 4


def test_a_summary_keeps_the_users_own_messages_from_its_span() -> None:
    """The user's messages in the middle are kept verbatim, newest first within the budget."""
    messages = session(2)
    for i, text in enumerate(["Use port 8443.", "Also skip the vendored code." * 20]):
        messages += [Message.user(text), *tool_round(10 + i, "y" * 2_000)]
    messages += tool_round(20, "z" * 2_000)
    summaries = [Message.user("<compacted-summary>\nold\n</compacted-summary>")]
    messages[2:2] = summaries  # an earlier summary: never kept as the user's words
    pressure = total(messages)
    knobs = Knobs(threshold_tokens=200, keep_last_messages=2, user_message_tokens=10**6)
    plan = plan_compaction(messages, knobs, pressure=pressure, estimate=est)
    assert isinstance(plan, SummaryNeeded)
    users = [i for i, m in enumerate(messages) if m.role == "user" and i > 1 and i != 2]
    assert plan.kept == tuple(users)
    small = plan_compaction(
        messages, replace(knobs, user_message_tokens=10), pressure=pressure, estimate=est
    )
    assert isinstance(small, SummaryNeeded)
    assert [messages[i].text for i in small.kept] == ["Use port 8443."]  # the long one skipped


def test_r18_the_plans_fold_stops_at_the_tail_horizon() -> None:
    """R18 through the planner: a fold-first rewrite edits nothing from the tail on.

    The tail (6 messages) holds 3 results while the newest 2 are kept from folding anyway: a
    horizon moved to the end of the transcript would fold the third (issue 30 item 9).
    """
    messages = session(8)
    knobs = Knobs(threshold_tokens=10**9, keep_last_messages=6, keep_last_tool_results=2)
    plan = plan_compaction(messages, knobs, pressure=total(messages), estimate=est)
    assert isinstance(plan, FoldRewrite) and plan.prune.changed and not plan.horizonless
    tail = plan.regions.tail_start
    assert sum(m.role == "tool" for m in messages[tail:]) == 3
    assert all(edit.index < tail for edit in plan.prune.edits)
