"""L2 trace assertions: each check passes on a clean trace and catches a planted violation."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from steerable_compaction import CompactionError, Message, ToolCall
from steerable_compaction.compaction import SUMMARY_INSTRUCTION
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.providers.base import CompletionRequest, ToolSpec
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    CompactionTrigger,
    Edit,
    Event,
    MemoryRecord,
    Usage,
)
from steerable_compaction.record.events import MessageAppended
from steerable_compaction.trace import (
    TraceAssertionError,
    TraceViolation,
    check_trace,
    is_summary_request,
)

POLICY = resolve_compaction_policy(None, 10_000)  # threshold 8,000, margin 1,000


def session(n: int = 8) -> list[Message]:
    out = [Message.system("sys"), Message.user("goal")]
    for i in range(n):
        out.append(Message.assistant(f"step {i}", [ToolCall(id=f"c{i}", name="read")]))
        out.append(Message.tool(f"c{i}", f"output {i}"))
    return out


def record_with(*events: Event, messages: list[Message] | None = None) -> MemoryRecord:
    record = MemoryRecord()
    for message in messages if messages is not None else session():
        record.append_message(message)
    for event in events:
        record.append(event)
    return record


def bracket(
    cid: str, pre: int, post: int, *, trigger: CompactionTrigger = "pressure"
) -> list[Event]:
    span = (2, 6)
    return [
        CompactionStart(
            compaction_id=cid, span=span, pre_tokens=pre, action="summarize", trigger=trigger
        ),
        CompactionSummary(compaction_id=cid, summary="s"),
        CompactionBoundary(
            action="summarize",
            trigger=trigger,
            pre_tokens=pre,
            post_tokens=post,
            replacement_count=4,
            compaction_id=cid,
            span=span,
            replacement=(Message.user("<compacted-summary>s</compacted-summary>"),),
        ),
    ]


def fold(pre: int, post: int, *, trigger: CompactionTrigger = "pressure") -> CompactionBoundary:
    return CompactionBoundary(
        action="compact",
        trigger=trigger,
        pre_tokens=pre,
        post_tokens=post,
        replacement_count=1,
        edits=(Edit(index=3, message=Message.tool("c0", "[folded]")),),
    )


def test_l2_clean_record_passes_every_record_check() -> None:
    """Closed brackets and folds that shrink, spaced by the margin, give an ok report."""
    record = record_with(fold(8_100, 5_000), *bracket("k1", 9_000, 3_000))
    report = check_trace(record, policy=POLICY)
    assert report.ok and report.violations == ()
    assert (report.closed_brackets, report.folds, report.pressure_compactions) == (1, 1, 2)
    assert report.margin_tokens == 1_000
    report.raise_if_violated()  # nothing to raise


def test_l2_bracket_with_post_not_below_pre_is_caught() -> None:
    """A closed bracket whose post is >= pre is a `bracket_shrinks` violation at its seq."""
    record = record_with(*bracket("k1", 9_000, 9_000))
    report = check_trace(record, policy=POLICY)
    assert report.counts() == {"bracket_shrinks": 1}
    (violation,) = report.violations
    assert violation.seq == len(record) - 1 and "'k1'" in violation.detail


def test_l2_fold_that_does_not_shrink_is_caught() -> None:
    """A fold-only boundary with post >= pre is a `fold_shrinks` violation."""
    report = check_trace(record_with(fold(8_500, 8_600)), policy=POLICY)
    assert report.counts() == {"fold_shrinks": 1}


def test_r31_compaction_inside_the_hysteresis_band_is_caught() -> None:
    """A pressure compaction less than the margin above the last post level violates R31."""
    record = record_with(*bracket("k1", 9_000, 7_500), fold(8_200, 6_000))
    report = check_trace(record, policy=POLICY)
    assert report.counts() == {"hysteresis": 1}
    assert "7500 + 1000 margin" in report.violations[0].detail


def test_r31_pressure_compaction_below_threshold_is_caught() -> None:
    """With a policy, a pressure compaction under the threshold is a violation."""
    report = check_trace(record_with(fold(7_000, 5_000)), policy=POLICY)
    assert report.counts() == {"hysteresis": 1}
    assert "below the threshold 8000" in report.violations[0].detail


def test_r31_without_policy_only_rising_pressure_is_required() -> None:
    """Without a policy, the margin is unknown: pressure must only rise above the last post."""
    step = MessageAppended(message=Message.user("next"))  # a later step, not the same one
    ok = record_with(*bracket("k1", 9_000, 7_500), step, fold(7_600, 6_000))
    assert check_trace(ok).ok
    bad = record_with(*bracket("k1", 9_000, 7_500), step, fold(7_500, 6_000))
    report = check_trace(bad)
    assert report.counts() == {"hysteresis": 1} and report.margin_tokens is None
    assert "> 7500" in report.violations[0].detail


def test_r31_a_fold_right_after_a_boundary_at_its_post_level_is_the_same_step() -> None:
    """The engine compacting further because the request would not fit: not gated again."""
    same = record_with(*bracket("k1", 12_000, 9_500), fold(9_500, 8_000))
    assert check_trace(same, policy=POLICY).ok


def test_r31_micro_and_forced_compactions_are_exempt() -> None:
    """Micro folds are not gated and keep the post level; manual/overflow ones set it."""
    record = record_with(
        *bracket("k1", 9_000, 4_000),
        fold(4_500, 4_000, trigger="micro"),  # does not move the post level
        fold(5_200, 5_100, trigger="overflow"),  # not gated, sets the post level to 5,100
        fold(8_000, 5_000),  # >= 5,100 + 1,000 and >= threshold
    )
    assert check_trace(record, policy=POLICY).ok
    # Where the post level decides: after the micro fold it is still the bracket's 4,000, so a
    # pressure fold at 8,100 passes; the overflow fold sets it to 7,600, so one at 8,200 fails.
    levels = record_with(
        *bracket("k1", 9_000, 4_000),
        fold(8_600, 7_900, trigger="micro"),
        fold(8_100, 5_000),
        fold(9_000, 7_600, trigger="overflow"),
        fold(8_200, 5_000),
    )
    report = check_trace(levels, policy=POLICY)
    assert report.counts() == {"hysteresis": 1}
    assert report.violations[0].seq == len(levels) - 1
    assert report.pressure_compactions == 3  # the bracket and the two pressure folds


def test_r31_unclosed_bracket_counts_its_pre_level() -> None:
    """A bracket that never closed (summarizer failed) leaves the post level at its pre."""
    start = CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=8_100, action="summarize")
    record = record_with(start, fold(8_700, 5_000))
    report = check_trace(record, policy=POLICY)
    assert report.counts() == {"hysteresis": 1}


def test_r31_a_fold_written_for_a_failed_summary_is_the_same_compaction() -> None:
    """The engine folds right after a failed bracket's start, at the same pressure: one gate.

    Anything written in between (a message, another pressure) makes it a new compaction.
    """
    start = CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=8_500, action="summarize")
    assert check_trace(record_with(start, fold(8_500, 5_000)), policy=POLICY).ok
    later = record_with(start)
    later.append_message(Message.user("more"))
    later.append(fold(8_500, 5_000))
    assert check_trace(later, policy=POLICY).counts() == {"hysteresis": 1}
    other = record_with(start, fold(8_600, 5_000))
    assert check_trace(other, policy=POLICY).counts() == {"hysteresis": 1}


def test_r31_a_compaction_over_the_limit_is_never_inside_the_band() -> None:
    """The fit guard compacts whatever the hysteresis says once a request would not fit.

    Over `limit_tokens` (8,750 here) a pressure compaction right after another is no violation;
    under it, the band holds.
    """
    assert POLICY.limit_tokens == 8_750
    over = record_with(fold(8_700, 7_900), fold(8_800, 6_000))
    assert check_trace(over, policy=POLICY).ok
    under = record_with(fold(8_700, 7_900), fold(8_700, 6_000))
    assert check_trace(under, policy=POLICY).counts() == {"hysteresis": 1}


def test_r24_summary_request_replaying_the_previous_prefix_passes() -> None:
    """Head + middle of the previous request, byte-identical, plus one instruction: ok."""
    messages = tuple(session())
    tools = (ToolSpec(name="read"),)
    turn = CompletionRequest(messages=messages, tools=tools)
    summary = CompletionRequest(
        messages=(*messages[:6], Message.user(SUMMARY_INSTRUCTION)),
        tools=tools,
        cache_retention="none",
    )
    report = check_trace(record_with(), [turn, summary, turn])
    assert report.ok and (report.requests, report.summary_requests) == (3, 1)


def _summary(messages: tuple[Message, ...], tools: tuple[ToolSpec, ...] = ()) -> CompletionRequest:
    return CompletionRequest(messages=messages, tools=tools, cache_retention="none")


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda m: _summary((Message.system("other"), *m[1:6], Message.user("sum"))), "message 0"),
        (lambda m: _summary((Message.user("cold: summarize this"),)), "replays nothing"),
        (lambda m: _summary((*m, Message.user("x"), Message.user("sum"))), "newer message"),
        (lambda m: _summary((*m[:6], Message.assistant("sum"))), "text-only user instruction"),
        (lambda m: _summary((*m[:6], Message.user("sum")), tools=(ToolSpec(name="x"),)), "tools"),
    ],
)
def test_r24_summary_requests_that_are_not_a_prefix_replay_are_caught(
    make: Callable[[tuple[Message, ...]], CompletionRequest], needle: str
) -> None:
    """Foreign prefixes, cold requests, extensions, bad instructions and tool changes fail."""
    messages = tuple(session())
    turn = CompletionRequest(messages=messages)
    bad = make(messages)
    report = check_trace(record_with(), [turn, bad])
    assert report.counts() == {"prefix_replay": 1}
    assert needle in report.violations[0].detail
    assert report.violations[0].request == 1


def test_r24_a_further_compaction_in_the_same_step_is_counted_apart() -> None:
    """Right after a summary, a warm replay of what the first compaction left is no violation.

    The fit guard may compact again before any request: that summary replays the session's
    head and a projection no request carried. A cold or foreign request there still fails.
    """
    messages = tuple(session())
    turn = CompletionRequest(messages=messages)
    first = _summary((*messages[:6], Message.user("sum")))
    further = _summary((messages[0], messages[1], Message.user("[summary]"), Message.user("sum")))
    report = check_trace(record_with(), [turn, first, further])
    assert report.ok and report.same_step_summaries == 1
    cold = _summary((Message.user("<transcript>...</transcript>"), Message.user("sum")))
    assert check_trace(record_with(), [turn, first, cold]).counts() == {"prefix_replay": 1}
    alone = check_trace(record_with(), [turn, further])
    assert alone.counts() == {"prefix_replay": 1} and alone.same_step_summaries == 0


def test_r24_instruction_already_in_the_previous_request_is_caught() -> None:
    """Replaying a prefix and then the previous request's own next message adds nothing new."""
    turn = CompletionRequest(
        messages=(Message.user("goal"), Message.user("sum"), Message.user("z"))
    )
    report = check_trace([], [turn, _summary((Message.user("goal"), Message.user("sum")))])
    assert report.counts() == {"prefix_replay": 1}
    assert "next message" in report.violations[0].detail


def test_r24_summary_request_without_a_turn_before_it_is_caught() -> None:
    """A summarizer request that comes first has nothing to replay."""
    report = check_trace([], [_summary((Message.user("goal"), Message.user("sum")))])
    assert report.counts() == {"prefix_replay": 1}
    assert "no earlier turn request" in report.violations[0].detail


def test_r22b_request_with_broken_tool_pairs_is_caught() -> None:
    """An orphan tool result or an unanswered call in any request is a `tool_pairs` violation."""
    orphan = CompletionRequest(messages=(Message.user("goal"), Message.tool("gone", "out")))
    unanswered = CompletionRequest(
        messages=(Message.user("goal"), Message.assistant(None, [ToolCall(id="c", name="r")]))
    )
    report = check_trace([], [orphan, unanswered])
    assert report.counts() == {"tool_pairs": 2}
    assert "orphan results at [1]" in report.violations[0].detail
    assert "'c'" in report.violations[1].detail


def test_strict_mode_raises_a_picklable_named_error() -> None:
    """`strict=True` raises `TraceAssertionError` (a `CompactionError`) listing violations."""
    record = record_with(*bracket("k1", 9_000, 9_500), *bracket("k2", 9_000, 9_500)[:0])
    with pytest.raises(TraceAssertionError) as caught:
        check_trace(record, policy=POLICY, strict=True)
    error = caught.value
    assert isinstance(error, CompactionError)
    assert "1 trace assertion(s) failed: bracket_shrinks (seq" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert again.violations == error.violations and str(again) == str(error)


def test_error_message_lists_at_most_five_violations() -> None:
    """Long violation lists are cut in the message; all are kept on the error."""
    violations = [TraceViolation(check="tool_pairs", detail=f"v{i}", request=i) for i in range(7)]
    error = TraceAssertionError(violations)
    assert "and 2 more" in str(error) and len(error.violations) == 7
    assert str(TraceViolation(check="hysteresis", detail="d")) == "hysteresis (run): d"


def test_is_summary_request_recognizes_the_engine_call() -> None:
    """The engine marks summary calls with `cache_retention='none'` and the R29 instruction."""
    assert is_summary_request(_summary((Message.user("x"),)))
    assert is_summary_request(CompletionRequest(messages=(Message.user(SUMMARY_INSTRUCTION),)))
    assert not is_summary_request(CompletionRequest(messages=(Message.user("hi"),)))
    assert not is_summary_request(CompletionRequest(messages=()))


def test_record_entries_and_usage_messages_are_accepted() -> None:
    """`check_trace` reads a record or any iterable of entries alike."""
    record = record_with(*bracket("k1", 9_000, 3_000), fold(8_500, 8_600))
    record.append(MessageAppended(message=Message.assistant("ok"), usage=Usage(prompt_tokens=5)))
    from_list = check_trace(list(record.entries), policy=POLICY)
    assert from_list == check_trace(record, policy=POLICY)
    assert from_list.counts() == {"fold_shrinks": 1}  # the entries were read, not skipped
    assert (from_list.closed_brackets, from_list.folds) == (1, 1)
