"""`engine`: no request leaves that the library knows will not fit (issue 25), open breakers.

The fit guard, the escalation ladder, the named error, budgets in one unit, the summary
request priced before it is sent, the goal rule as the engine reads it from the record, and
what an open circuit does (R32, R33).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from steerable_compaction import (
    CompactionHooks,
    MemoryRecord,
    Message,
    ProviderError,
    RequestTooLargeError,
    StepContext,
    ToolCall,
)
from steerable_compaction.compaction import SummaryNeeded, is_summary, plan_compaction
from steerable_compaction.compaction.state import THRASHING_TEXT, EngineState
from steerable_compaction.loop import CoreLoop
from steerable_compaction.record import CompactionSummary, Reminder
from steerable_compaction.sim import build_task, run_session
from steerable_compaction.sim.summarizer import ExtractiveSummarizer
from steerable_compaction.testing import ScriptedProvider
from steerable_compaction.tokens import estimate_tokens

from .test_engine import FakeSummarizer, Session, add_rounds, body, kinds, policy, session, start


def over_limit(s: Session) -> bool:
    return s.hooks.pressure() > s.hooks.policy.limit_tokens


# -- the fit guard -------------------------------------------------------------------------------


async def test_no_step_ends_over_the_limit_whatever_the_breaker_says() -> None:
    """Past `limit_tokens` the engine compacts even with a circuit open and inside hysteresis.

    Issue 25: 30 of 44 measured overflows were sent with the breaker open although the
    library's own estimate was over the window.
    """
    for circuit in ("consecutive_failures", "rapid_refill"):
        s = session(
            FakeSummarizer(),
            rounds=13,
            keep_last_messages=2,
            state=EngineState(circuit=circuit, last_post_tokens=9_000),
        )
        assert over_limit(s)
        action = await s.step()
        assert action.gate == "limit" and action.compactions
        assert not over_limit(s)


async def test_the_ladder_drops_kept_messages_and_cuts_the_tail_before_failing() -> None:
    """A summary that leaves the request over the limit is followed by squeezed ones.

    Rung 1 keeps no user message of the span verbatim and writes no retention block; rung 2
    keeps only the newest turn as the tail. The request fits in the end.
    """
    record = MemoryRecord()
    record.append_message(Message.system(body(5_200)))  # ~6.9k that no compaction touches
    record.append_message(Message.user("goal"))
    for i in range(7):  # large user notes, each within the kept-messages budget
        record.append_message(Message.user(body(150, f"note {i}: ")))
        add_rounds(record, 10 * i, 1, tokens=1_200)
    hooks = CompactionHooks(record, policy(keep_last_messages=6), summarizer=FakeSummarizer())
    s = Session(hooks)
    assert over_limit(s)
    action = await s.step()
    assert len(action.compactions) >= 2  # the pressure compaction did not fit on its own
    first = action.compactions[0]
    assert first.post_tokens > hooks.policy.limit_tokens
    assert not over_limit(s)
    notes = [m for m in record.messages() if m.text.startswith("note ")]
    assert len(notes) < 7  # the squeezed summary kept fewer of them verbatim


def _squeezed(system_tokens: int) -> tuple[MemoryRecord, Session, str]:
    """A record over the limit whose user asked something; the agent's call answered large."""
    record = MemoryRecord()
    record.append_message(Message.system(body(system_tokens)))
    record.append_message(Message.user("goal"))
    add_rounds(record, 0, 6, tokens=900)
    request = "Which of the notes names the staging port, and which service owns it?"
    record.append_message(Message.user(request))
    add_rounds(record, 99, 1, tokens=2_500)  # the agent's turn on it: one call, a large result
    hooks = CompactionHooks(record, policy(keep_last_messages=4), summarizer=FakeSummarizer())
    return record, Session(hooks), request


async def test_the_ladder_keeps_the_users_current_request_while_it_can() -> None:
    """Squeezed summaries keep no user message verbatim but the one the agent is working on.

    Cutting the tail to the newest turn (the call and its large result) put the request into
    the span, and it vanished into the summary: the model went on with a result whose purpose
    it no longer knew (seen in 2k windows, the question of a turn gone after its history
    searches). Only on the last rung, when nothing else fits, is it summarized too.
    """
    for system_tokens in (3_000, 4_000):
        record, s, request = _squeezed(system_tokens)
        assert over_limit(s)
        action = await s.step()
        assert len(action.compactions) >= 2 and not over_limit(s)
        texts = [m.text for m in record.messages()]
        assert request in texts
        assert not any(t.startswith("[folded") for t in texts)

    record, s, request = _squeezed(5_000)  # no room left for it
    await s.step()
    assert not over_limit(s)
    assert request not in [m.text for m in record.messages()]


def test_a_squeezed_plan_keeps_the_turns_request_and_its_nudge_within_half_the_span() -> None:
    """A squeezed summary keeps the user's messages of the turn in progress, "go on" and all.

    The turn in progress is everything after the agent's newest plain reply: a nudge after the
    request does not make the request itself the one that is summarized.
    """
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 4)
    record.append_message(Message.assistant("Done with the parser."))  # ends the earlier turn
    request = Message.user("Which of the notes names the staging port?")
    nudge = Message.user("Continue where you stopped.")
    record.append_message(request)
    add_rounds(record, 4, 3)
    record.append_message(nudge)
    add_rounds(record, 7, 1, tokens=2_500)
    hooks = CompactionHooks(record, policy(keep_last_messages=2))
    messages = record.messages()

    def kept(squeeze: int) -> list[str]:
        plan = plan_compaction(
            messages,
            hooks.policy,
            pressure=hooks.pressure(),
            estimate=hooks.meter.estimate,
            squeeze=squeeze,
        )
        assert isinstance(plan, SummaryNeeded)
        return [messages[i].text for i in plan.kept]

    assert kept(1) == kept(2) == [request.text, nudge.text]
    assert kept(3) == []
    # Within half the span's tokens, as any kept user message: the summary must free room.
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 1, tokens=200)
    long = Message.user(body(900, "Which note names the port? "))
    record.append_message(long)
    add_rounds(record, 1, 1, tokens=6_000)
    messages = record.messages()
    loose = policy(keep_last_messages=2, keep_user_messages_ratio=0.5)
    plan = plan_compaction(
        messages, loose, pressure=hooks.pressure(), estimate=hooks.meter.estimate, squeeze=2
    )
    assert isinstance(plan, SummaryNeeded)
    assert messages.index(long) in range(*plan.request.span)
    assert plan.kept == () and plan.middle_tokens < 2 * hooks.meter.estimate(long)


async def test_the_last_rung_without_a_request_to_give_up_asks_nothing_more() -> None:
    """No turn in progress to give up: the last rung would be the one before it again.

    That would be another summarizer call for nothing. And no written compaction leaves the
    context as large as it found it: a summary is priced with the history reference it is
    written with.
    """
    record = MemoryRecord()
    record.append_message(Message.system(body(5_000)))
    record.append_message(Message.user("goal"))
    add_rounds(record, 0, 6, tokens=900)
    add_rounds(record, 99, 1, tokens=2_500)
    hooks = CompactionHooks(record, policy(keep_last_messages=4), summarizer=FakeSummarizer())
    action = await Session(hooks).step()
    assert all(o.post_tokens < o.pre_tokens for o in action.compactions if o.written)
    idle = [o for o in action.compactions if not o.written and o.summarizer_called]
    assert len(idle) <= 2  # rungs 1 and 2 found nothing more to free; rung 3 asks nothing


async def test_a_head_that_cannot_fit_is_a_named_error_before_any_request() -> None:
    """Nothing left to compact and still over: `RequestTooLargeError`, and nothing is sent."""
    record = MemoryRecord()
    record.append_message(Message.system(body(9_000)))  # ~12k tokens, a 10k window
    record.append_message(Message.user("goal"))
    hooks = CompactionHooks(record, policy())
    provider = ScriptedProvider([Message.assistant("never")])
    loop = CoreLoop(provider, record, hooks=[hooks])
    with pytest.raises(RequestTooLargeError) as caught:
        await loop.run_turn("go")
    assert provider.requests == []
    error = caught.value
    assert error.window == 10_000 and error.limit == 10_000
    assert error.head_tokens > error.limit and error.tokens >= error.head_tokens
    assert "10,000-token window" in str(error)


async def test_a_result_too_large_for_the_window_is_folded_even_in_the_newest_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Lossy beats stuck (R18, issue 30 item 7): R23 gives way, with one loud warning."""
    record = MemoryRecord()
    start(record)
    call = ToolCall(id="big", name="read_file", arguments='{"path": "dump.log"}')
    record.append_message(Message.assistant("Reading the dump.", [call]))
    record.append_message(Message.tool("big", body(9_000)))
    s = Session(CompactionHooks(record, policy(), summarizer=FakeSummarizer()))
    assert over_limit(s)
    with caplog.at_level("WARNING", logger="steerable_compaction.engine"):
        action = await s.step()
    assert not over_limit(s)
    assert action.compactions[-1].action == "compact"
    assert any("newest turn included" in r.message for r in caplog.records)
    folded = record.messages()[-1]
    assert folded.tool_result is not None and "the full result is in the record" in folded.text


async def test_a_call_too_large_for_the_window_has_its_arguments_folded_as_a_last_resort() -> None:
    """A file written in the newest turn that alone overflows: its content is folded, not sent."""
    record = MemoryRecord()
    start(record)
    arguments = json.dumps({"path": "dump.txt", "content": body(9_000)})
    call = ToolCall(id="big", name="write_file", arguments=arguments)
    record.append_message(Message.assistant("Writing the dump.", [call]))
    record.append_message(Message.tool("big", "Wrote it."))
    s = Session(CompactionHooks(record, policy(), summarizer=FakeSummarizer()))
    assert over_limit(s)
    await s.step()
    assert not over_limit(s)
    written = record.messages()[-2]
    (folded,) = written.tool_calls
    assert folded.id == "big" and folded.name == "write_file"
    value = folded.parsed_arguments()
    assert value["path"] == "dump.txt"
    assert "the whole call is in the record" in value["content"]
    assert record.entries[-1].event.kind == "compaction_boundary"  # the original stays
    assert any(
        e.event.kind == "message" and e.event.message.tool_calls == (call,) for e in record.entries
    )


async def test_a_compaction_with_nothing_to_compact_changes_no_state() -> None:
    """Neither a failure (R32) nor the hysteresis baseline (R31): the state stays as it was."""
    record = MemoryRecord()
    record.append_message(Message.system(body(6_150)))  # ~8,150: over the 8,000 threshold
    record.append_message(Message.user("goal"))
    hooks = CompactionHooks(record, policy())
    before = hooks.state
    action = await Session(hooks).step()
    (outcome,) = action.compactions
    assert outcome.nothing_to_do and not outcome.written
    after = hooks.state
    assert after.consecutive_failures == before.consecutive_failures == 0
    assert after.last_post_tokens is None and after.last_compaction_round is None


async def test_a_retry_that_frees_nothing_is_not_repeated() -> None:
    """An overflow with nothing compactable fails at once: the same request would fail again."""
    from steerable_compaction import ContextOverflowError, OverflowRetriesExhaustedError
    from steerable_compaction.hooks import RequestErrorContext

    record = MemoryRecord()
    start(record)
    hooks = CompactionHooks(record, policy())
    error = ContextOverflowError("too long", provider="fake", status_code=400)
    with pytest.raises(OverflowRetriesExhaustedError):
        await hooks.on_request_error(
            RequestErrorContext(record=record, round=1, turn=1, error=error, attempt=1)
        )
    assert hooks.state.overflow_retries == 1  # one retry spent, none repeated


# -- the summary request, priced before it is sent ------------------------------------------------


async def test_r13_the_summary_request_fits_the_window_with_room_for_its_output() -> None:
    """Issue 25 item 6: replay + instruction + output limit fit the window less its headroom.

    A span too large to replay at once is cut at a clean boundary (a piece, summarized warm)
    and the summarizer's output limit is the room left.
    """
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=24, keep_last_messages=2)  # ~21k tokens, a 10k window
    policy_ = s.hooks.policy
    await s.step()
    assert summarizer.requests
    for request in summarizer.requests:
        size = sum(s.hooks.meter.estimate(m) for m in request.messages)
        assert request.max_output_tokens is not None
        assert size + request.max_output_tokens <= policy_.max_context_tokens
        replay = request.replay
        assert not replay[-1].tool_calls  # no call is cut from its results
    assert not over_limit(s)


# -- budgets in one unit ---------------------------------------------------------------------------


async def test_the_retention_budget_is_priced_in_the_meters_calibrated_units() -> None:
    """With the meter calibrated at 2 billed tokens per estimated one, the block halves.

    The budget is recorded with the summary (`CompactionSummary.retention_budget`).
    """
    budgets = []
    for factor in (1.0, 2.0):
        s = session(FakeSummarizer(), rounds=10, keep_last_messages=2)
        s.hooks.meter._factor = factor  # as learned from billed usage
        s.hooks.meter._samples = 1
        await s.step()
        (event,) = [e.event for e in s.record.entries if isinstance(e.event, CompactionSummary)]
        assert event.retention_budget is not None
        budgets.append(event.retention_budget)
    assert budgets[1] <= budgets[0] // 2 + 1


async def test_the_retention_block_comes_out_of_the_room_the_summary_leaves() -> None:
    """A summary that leaves pressure near the threshold gets no block at all."""
    record = MemoryRecord()
    record.append_message(Message.system(body(5_000)))  # ~6.6k of the 7k target stay anyway
    record.append_message(Message.user("goal"))
    add_rounds(record, 0, 6, tokens=500)
    s = Session(CompactionHooks(record, policy(keep_last_messages=2), summarizer=FakeSummarizer()))
    await s.step()
    (event,) = [e.event for e in record.entries if isinstance(e.event, CompactionSummary)]
    assert event.retention_budget == 0


async def test_the_block_may_fill_the_room_down_to_the_level_a_fold_must_leave() -> None:
    """Summary and block aim at the threshold less one hysteresis margin, no lower.

    That is the level a fold-only rewrite must leave free too (7,000 here). Aiming two margins
    lower left this session no block at all: the memory gave way to growth room.
    """
    record = MemoryRecord()
    record.append_message(Message.system(body(4_000)))
    record.append_message(Message.user("goal"))
    add_rounds(record, 0, 6, tokens=500)
    knobs = policy(keep_last_messages=2)
    s = Session(CompactionHooks(record, knobs, summarizer=FakeSummarizer()))
    await s.step()
    (event,) = [e.event for e in record.entries if isinstance(e.event, CompactionSummary)]
    assert event.retention_budget is not None and event.retention_budget > 0
    after = estimate_tokens(list(record.messages()))
    limit = knobs.threshold_tokens - knobs.recompact_margin_tokens
    assert limit - knobs.recompact_margin_tokens < after <= limit  # past the old aim


# -- the goal ------------------------------------------------------------------------------------


async def test_the_task_after_a_demonstration_is_the_goal_and_survives_compactions() -> None:
    """Issue 25 item 5: a demonstration sent before the task is compacted, the task stays.

    The opening is over the head budget, so only the system prompt is the head; the task
    (the newest user message before the first assistant message) is kept verbatim by every
    summary, however many follow.
    """
    record = MemoryRecord()
    record.append_message(Message.system("You are a coding agent."))
    demo = Message.user("Here is a worked example:\n" + body(2_000))
    task = Message.user("The real task: make test_parser pass.")
    record.append_message(demo)
    record.append_message(task)
    hooks = CompactionHooks(record, policy(keep_last_messages=2), summarizer=FakeSummarizer())
    s = Session(hooks)
    for i in range(4):
        add_rounds(record, 10 * i, 8, tokens=400)
        await s.step()
        messages = record.messages()
        assert task in messages
        assert (demo in messages) is (i == 0 and not any(is_summary(m) for m in messages))
    assert any(is_summary(m) for m in record.messages())


async def test_a_goal_named_by_the_host_wins_over_the_opening_rule() -> None:
    """`Message.goal`: the named message is kept verbatim, wherever it stands."""
    record = MemoryRecord()
    record.append_message(Message.system("sys"))
    named = Message.user("Primary goal: ship the parser fix.", goal=True)
    record.append_message(named)
    record.append_message(Message.user("Also, a side note that is no goal."))
    knobs = policy(keep_last_messages=2, keep_user_messages_ratio=0)
    hooks = CompactionHooks(record, knobs, summarizer=FakeSummarizer())
    s = Session(hooks)
    for i in range(3):
        add_rounds(record, 10 * i, 8, tokens=400)
        await s.step()
    assert named in record.messages()
    assert Message.user("Also, a side note that is no goal.") not in record.messages()


def test_the_plan_keeps_a_mid_session_system_message_verbatim() -> None:
    """R21: every system message stays verbatim, wherever it stands (issue 30 item 6)."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 4)
    late = Message.system("From now on, answer in French.")
    record.append_message(late)
    add_rounds(record, 4, 8)
    hooks = CompactionHooks(record, policy(keep_last_messages=2))
    plan = plan_compaction(
        record.messages(), hooks.policy, pressure=hooks.pressure(), estimate=hooks.meter.estimate
    )
    assert isinstance(plan, SummaryNeeded)
    index = record.messages().index(late)
    assert plan.request.span[0] <= index < plan.request.span[1]
    assert index in plan.kept


async def test_a_mid_session_system_message_is_still_seen_after_compactions() -> None:
    """R21 end to end: the late system prompt is in the projection after each compaction."""
    s = session(FakeSummarizer(), rounds=4, keep_last_messages=2)
    late = Message.system("From now on, answer in French.")
    s.record.append_message(late)
    for i in range(3):
        add_rounds(s.record, 10 + 10 * i, 8)
        await s.step()
        assert late in s.record.messages()
    assert kinds(s.record).count("compaction_boundary") >= 2


# -- open breakers (R32, R33; issue 30 item 1) ---------------------------------------------------


async def test_r33_a_session_refilling_to_the_limit_every_round_compacts_only_there() -> None:
    """Each round adds a large read (R33, issue 30 item 1).

    After the circuit opens, compactions come only past the limit, no request is over it, the
    refill count stays bounded, and the reminder (which does not say compaction is paused)
    stays visible to the model while the circuit is open.
    """
    s = session(FakeSummarizer(), rounds=2, keep_last_messages=2, recompact_margin_ratio=0.0)
    reminders = 0
    for n in range(12):
        add_rounds(s.record, 100 + 10 * n, 3, tokens=1_100)  # ~3.3k tokens a round
        action = await s.step()
        assert not over_limit(s)
        if s.hooks.circuit_reason == "rapid_refill":
            assert action.gate in ("circuit_open", "limit", "below_threshold")
            assert any(THRASHING_TEXT in m.text for m in s.record.messages())
        reminders = sum(isinstance(e.event, Reminder) for e in s.record.entries)
    assert s.hooks.circuit_reason == "rapid_refill"
    assert s.hooks.state.rapid_refills == s.hooks.policy.max_rapid_refills
    assert reminders >= 1
    (text,) = {e.event.message.text for e in s.record.entries if isinstance(e.event, Reminder)}
    assert "paused" not in text and "would not fit the window" in text


async def test_pre_step_with_a_fresh_hook_on_a_record_over_the_limit_compacts() -> None:
    """A fresh engine on a record already over the limit compacts in its first `pre_step`."""
    s = session(FakeSummarizer(), rounds=14, keep_last_messages=2)
    assert over_limit(s)
    action = await s.hooks.pre_step(StepContext(record=s.record, round=1, turn=1))
    assert action.compactions and not over_limit(s)


# -- R35: every rewrite writes a boundary that tells it whole --------------------------------------


async def test_r35_a_boundary_carries_action_pre_post_and_replacement_count_of_its_span() -> None:
    """R35: action, pre_tokens, post_tokens and replacement_count match the span closed.

    The summary's boundary replaces exactly its bracket's span; its pre level is the pressure
    the compaction started from, its post level the pressure the meter holds after it; the
    fold's boundary counts its edits.
    """
    from steerable_compaction.record import CompactionBoundary, CompactionStart

    s = session(FakeSummarizer(), rounds=10, keep_last_messages=2)
    pre = s.hooks.pressure()
    before = list(s.record.messages())
    seqs = list(s.record.projection.seqs)
    (outcome,) = (await s.step()).compactions
    starts = [e.event for e in s.record.entries if isinstance(e.event, CompactionStart)]
    (start,) = starts
    boundary = s.record.entries[-1].event
    assert isinstance(boundary, CompactionBoundary)
    assert boundary.compaction_id == start.compaction_id
    assert boundary.action == "summarize" == outcome.action
    assert boundary.trigger == "pressure" == start.trigger
    assert boundary.pre_tokens == pre == start.pre_tokens == outcome.pre_tokens
    assert boundary.post_tokens == s.hooks.pressure() == outcome.post_tokens < pre
    begin, end = start.span
    assert boundary.span == start.span and boundary.replacement_count == end - begin
    after = s.record.messages()
    assert len(after) == len(before) - (end - begin) + len(boundary.replacement)
    assert after[:begin] == before[:begin] and after[-(len(before) - end) :] == before[end:]
    assert boundary.history == (min(seqs[begin:end]), max(seqs[begin:end]))
    # A fold-only rewrite: no bracket, its edits counted.
    fold = session(None, rounds=12, keep_last_messages=4, keep_last_tool_results=0)
    (folded,) = (await fold.step()).compactions
    event = fold.record.entries[-1].event
    assert isinstance(event, CompactionBoundary) and event.compaction_id is None
    assert event.action == "compact" and event.replacement_count == len(event.edits) > 0
    assert event.post_tokens == fold.hooks.pressure() == folded.post_tokens < event.pre_tokens


# -- steering: a manual compaction with a focus (issue 27 item 4, issue 30 item 8) --------------


async def test_a_focus_steers_the_instruction_the_retention_and_the_record() -> None:
    """`request_compact(focus=...)`: the instruction carries it; the start event records it."""
    from steerable_compaction.compaction import SUMMARY_INSTRUCTION, instruction_focus
    from steerable_compaction.record import CompactionStart

    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=6, keep_last_messages=2)
    for i in range(12):
        subject = "billing" if i % 3 == 0 else "search"
        s.record.append_message(Message.user(f"note: the {subject} quota {i} is {4000 + i} req/s"))
    s.hooks.request_compact(focus="  billing quotas ")
    (outcome,) = (await s.step()).compactions
    assert outcome.trigger == "manual" and outcome.action == "summarize"
    (request,) = summarizer.requests
    text = request.instruction.text
    assert text.startswith(SUMMARY_INSTRUCTION) and instruction_focus(text) == "billing quotas"
    (start,) = [e.event for e in s.record.entries if isinstance(e.event, CompactionStart)]
    assert start.focus == "billing quotas"
    assert s.hooks.state.manual_focus is None  # spent with the compaction


async def test_a_steered_manual_compaction_summarizes_where_a_fold_would_do() -> None:
    """Issue 30 item 8: manual compactions enter at the fold, but a focus asks for a summary."""
    plain = session(FakeSummarizer(), rounds=10, keep_last_messages=4, fold_first=True)
    plain.hooks.request_compact()
    (outcome,) = (await plain.step()).compactions
    assert outcome.action == "compact"  # the fold alone frees enough: no summarizer call
    steered = session(FakeSummarizer(), rounds=10, keep_last_messages=4, fold_first=True)
    steered.hooks.request_compact("the parser")
    (outcome,) = (await steered.step()).compactions
    assert outcome.action == "summarize"


def test_a_bad_focus_is_refused_before_anything_runs() -> None:
    """A focus that is no string, or an over-long one, is refused; a blank one means none."""
    s = session(FakeSummarizer(), rounds=2)
    with pytest.raises(TypeError, match="focus must be a string"):
        s.hooks.request_compact(focus=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 2,000 characters"):
        s.hooks.request_compact(focus="x" * 2_001)
    s.hooks.request_compact(focus="   ")
    assert s.hooks.state.manual_requested and s.hooks.state.manual_focus is None


# -- a refused answer is asked once more -----------------------------------------------------------


async def test_a_refused_answer_is_asked_once_more_with_its_reason() -> None:
    """The second request is the same replay with the reason named; its summary is written.

    An error is not asked again here (the provider's retry hooks see it), and a second bad
    answer gives way to the excerpt.
    """
    from steerable_compaction.compaction import RETRY_LEAD, base_instruction
    from steerable_compaction.record import CompactionSummary as Summary

    answers = iter(["Assistant: Reading the parser next."])
    summarizer = FakeSummarizer()
    original = FakeSummarizer.__call__

    async def first_bad(request: object) -> str:
        text = await original(summarizer, request)  # type: ignore[arg-type]
        return next(answers, text)

    s = session(summarizer, rounds=10, keep_last_messages=2)
    s.hooks._summaries.summarizer = first_bad
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "summarize" and outcome.effective
    first, second = summarizer.requests
    assert second.replay == first.replay
    assert (
        RETRY_LEAD in second.instruction.text
        and "continues the transcript" in second.instruction.text
    )
    assert base_instruction(second.instruction.text) == first.instruction.text
    (event,) = [e.event for e in s.record.entries if isinstance(e.event, Summary)]
    assert event.source == "summarizer" and event.refused is None

    broken = FakeSummarizer(error=ProviderError("boom", provider="fake", status_code=500))
    s = session(broken, rounds=10, keep_last_messages=2)
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "excerpt" and len(broken.requests) == 1

    stubborn = FakeSummarizer(reply="Done.")
    s = session(stubborn, rounds=10, keep_last_messages=2)
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "excerpt" and len(stubborn.requests) == 2


# -- found in review: the ladder's order, its length, and what the step leaves ---------------------


async def test_every_tool_result_is_folded_before_the_goal() -> None:
    """The estimate of what a fold frees is not what the meter counts: the rung repeats.

    A leaner tokenizer (billed 0.8 of the estimate) made one pass over the results free less
    than it meant to, and the goal was folded while three large results stood whole.
    """
    record = MemoryRecord()
    record.append_message(Message.system("You are a careful coding agent."))
    goal = "GOAL: " + body(1_500)
    record.append_message(Message.user(goal))
    calls = [
        ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "m{i}.py"}}') for i in range(6)
    ]
    record.append_message(Message.assistant("Reading six files.", calls))
    for i in range(6):
        record.append_message(Message.tool(f"c{i}", body(2_500, f"[file {i}] ")))
    hooks = CompactionHooks(record, policy(), summarizer=FakeSummarizer())
    messages = list(record.projection.messages)
    hooks.meter.rewrite(messages, messages)  # the meter's anchor on this projection
    hooks.observe(int(hooks.meter.pressure(messages) * 0.8), len(messages))
    s = Session(hooks)
    assert over_limit(s)
    await s.step()
    assert not over_limit(s)
    assert any(m.text == goal for m in record.projection.messages)


async def test_a_context_many_windows_large_is_summarized_piece_by_piece_in_one_step() -> None:
    """Resumed into a smaller window: as many pieces as it takes, then no error, no fold.

    With a fixed eight rounds a 178k-token context in a 10k window folded the newest turn and
    raised `RequestTooLargeError` although summaries were still freeing room.
    """
    s = session(FakeSummarizer(), rounds=200)
    assert s.hooks.pressure() > 10 * s.hooks.policy.limit_tokens
    action = await s.step()
    assert not over_limit(s)
    assert len(action.compactions) > 8
    assert all(o.action == "summarize" for o in action.compactions)


async def test_the_hysteresis_baseline_is_where_the_step_left_the_context() -> None:
    """A pressure compaction the fit guard had to follow counts by the step's end level."""
    s = session(FakeSummarizer(), rounds=30)
    action = await s.step()
    assert len(action.compactions) >= 2
    assert s.hooks.state.last_post_tokens == s.hooks.pressure()


async def test_an_overflow_compaction_keeps_the_reminder_in_view() -> None:
    """A summary of the overflow path may take the open circuit's reminder: it comes back.

    The retried request carries it again, and so does every step after (R33).
    """
    from steerable_compaction.compaction.state import compaction_thrashing_reminder

    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 2)
    record.append(compaction_thrashing_reminder(3, 3))
    add_rounds(record, 2, 8)
    state = EngineState(circuit="rapid_refill", rapid_refills=3, last_success_round=0)
    hooks = CompactionHooks(record, policy(), summarizer=FakeSummarizer(), state=state)
    s = Session(hooks)
    s.round = 5

    def visible() -> bool:
        return any(THRASHING_TEXT in m.text for m in record.projection.messages)

    retry = await s.overflow()
    assert retry is not None and retry.compactions and visible()
    for _ in range(2):
        await s.step()
        assert visible()


async def test_an_overflow_that_cannot_come_in_under_the_cut_says_so() -> None:
    """The error names the bound it missed: a tenth under the refused request, not the window."""
    from steerable_compaction import OverflowRetriesExhaustedError

    record = MemoryRecord()
    record.append_message(Message.system(body(6_600)))  # more than 0.9 of the request
    record.append_message(Message.user("goal"))
    record.append_message(Message.assistant(body(300, "reply: ")))
    s = Session(CompactionHooks(record, policy(), summarizer=FakeSummarizer()))
    with pytest.raises(OverflowRetriesExhaustedError) as caught:
        await s.overflow()
    assert "a tenth under the" in str(caught.value) and "window less" not in str(caught.value)


@pytest.mark.parametrize("scale", [1.15, 1.3])
def test_summaries_are_tried_again_once_folds_in_the_newest_turn_made_room(scale: float) -> None:
    """A 2k window whose model bills 1.15-1.3x the static estimate plays to its end.

    The question turn's history searches fill the newest turn; the summary of the span before
    it could not fit beside them, so the folds of their results came next, and then the
    request was still over: the session died with `RequestTooLargeError` although the
    summary now had room. After the folds the ladder starts again from its cheapest rung.
    """
    task = replace(build_task("small_window", 0), token_scale=scale)
    result = asyncio.run(run_session(task, "current", summarizer=ExtractiveSummarizer()))
    assert result.death is None
    assert (result.requests_over_estimate, result.failed_requests) == (0, 0)
