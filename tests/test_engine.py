from __future__ import annotations

import asyncio
import random
import string
from dataclasses import dataclass, field

import pytest

from steerable_compaction import (
    ContextOverflowError,
    Message,
    OverflowRetriesExhaustedError,
    ProviderError,
    resolve_compaction_policy,
)
from steerable_compaction.compaction import (
    SUMMARY_INSTRUCTION,
    SummaryNeeded,
    SummaryRequest,
    is_folded,
    plan_compaction,
    summary_message,
)
from steerable_compaction.compaction.state import EngineState
from steerable_compaction.compaction.summary import AFTER_ANSWER_LEAD, EXCERPT_LEAD
from steerable_compaction.engine import THRASHING_REASON, CompactionHooks
from steerable_compaction.hooks import (
    CompactionOutcome,
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
)
from steerable_compaction.policy import CompactionPolicy
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    MemoryRecord,
    MessageAppended,
    Record,
    Reminder,
)
from steerable_compaction.tokens import TokenMeter
from steerable_compaction.trace import check_trace

from .compaction_helpers import tool_round

WORDS = "the parser reads each token and records its position in the source file "


def policy(**overrides: object) -> CompactionPolicy:
    """A 10k window with threshold 8,000 and margin 1,000 (no reserve/headroom)."""
    return resolve_compaction_policy(
        None,
        10_000,
        reserved_output_tokens=0,
        headroom_tokens=0,
        **overrides,
    )


def body(tokens: int, tag: str = "") -> str:
    """Tool output of roughly `tokens` tokens for any sane estimator (English prose)."""
    return tag + (WORDS * (tokens // 13 + 1))


def notes(tokens: int) -> str:
    """A summary of roughly `tokens` tokens that does not repeat itself (numbered notes)."""
    return "\n".join(
        f"- note {i}: token {i} sits at column {i * 7}" for i in range(tokens // 12 + 1)
    )


def start(record: Record) -> None:
    record.append_message(Message.system("You are a careful coding agent."))
    record.append_message(Message.user("Find why the parser loses token positions."))


def add_rounds(record: Record, first: int, count: int, tokens: int = 600) -> None:
    for i in range(first, first + count):
        for message in tool_round(i, body(tokens, f"[needle-{i}] ")):
            record.append_message(message)


@dataclass
class FakeSummarizer:
    """Records every request; answers with `reply` (or raises / sleeps as told).

    Without a `reply` it writes a short checkpoint naming the calls of the span it summarizes,
    as a summary of that span would (the engine refuses one that keeps none of its values).
    """

    reply: str | None = None
    error: BaseException | None = None
    delay: float = 0.0
    requests: list[SummaryRequest] = field(default_factory=list)
    record: Record | None = None
    seen_last_kind: list[str] = field(default_factory=list)

    async def __call__(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        if self.record is not None:
            self.seen_last_kind.append(self.record.entries[-1].event.kind)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.reply if self.reply is not None else naming_reply(request)


def naming_reply(request: SummaryRequest) -> str:
    """A checkpoint naming the tool calls of `request`'s span (what a real summary keeps)."""
    start, end = request.span
    calls = [c.arguments for m in request.replay[start:end] for c in m.tool_calls]
    return (
        "## Primary Request\nFix token positions.\n## Current Work\nReading the parser: "
        + "; ".join(calls)
    )


class Session:
    """A record, hooks, and a round counter, stepping like a loop would."""

    def __init__(self, hooks: CompactionHooks) -> None:
        self.hooks = hooks
        self.record = hooks.record
        self.round = 0
        self.turn = 1

    async def step(self) -> PreStepAction:
        self.round += 1
        return await self.hooks.pre_step(
            StepContext(record=self.record, round=self.round, turn=self.turn)
        )

    async def overflow(self, attempt: int = 1) -> RetryAction | None:
        return await self.hooks.on_request_error(
            RequestErrorContext(
                record=self.record,
                round=self.round,
                turn=self.turn,
                error=ContextOverflowError("prompt is too long", provider="fake", status_code=400),
                attempt=attempt,
            )
        )


def session(
    summarizer: FakeSummarizer | None = None,
    rounds: int = 0,
    *,
    state: EngineState | None = None,
    **knobs: object,
) -> Session:
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, rounds)
    if summarizer is not None:
        summarizer.record = record
    hooks = CompactionHooks(record, policy(**knobs), summarizer=summarizer, state=state)
    return Session(hooks)


def kinds(record: Record, since: int = 0) -> list[str]:
    return [e.event.kind for e in record.entries[since:] if e.event.kind != "message"]


async def test_without_fold_first_a_fold_that_would_do_is_a_summary_instead() -> None:
    """`fold_first=False` (desktop default): with a summarizer, the pressure path summarizes.

    The same session as the R17 test below: folding alone would bring it under the threshold
    with the margin to spare, but the fold would cut results no summary has read.
    """
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=12, keep_last_messages=4)
    assert not s.hooks.policy.fold_first
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "summarize" and outcome.written and outcome.effective
    assert len(summarizer.requests) == 1
    assert kinds(s.record) == ["compaction_start", "compaction_summary", "compaction_boundary"]


async def test_without_a_summarizer_the_fold_comes_first_anyway() -> None:
    """With no LLM summarizer the alternative is the excerpt, which keeps less than a fold."""
    for s in (
        session(None, rounds=12, keep_last_messages=4),
        session(FakeSummarizer(), rounds=12, keep_last_messages=4, summarizer_enabled=False),
    ):
        (outcome,) = (await s.step()).compactions
        assert outcome.action == "compact" and outcome.effective
        assert kinds(s.record) == ["compaction_boundary"]


async def test_r16_below_threshold_nothing_is_written() -> None:
    """R16: under threshold `pre_step` writes nothing and resets the breakers."""
    s = session(FakeSummarizer(), rounds=2)
    before = len(s.record)
    action = await s.step()
    assert action.compactions == ()
    assert action.gate == "below_threshold"
    assert len(s.record) == before


async def test_a_policy_set_on_the_hooks_moves_the_threshold_at_the_next_step() -> None:
    """A policy set on the hooks (as the adapters do) is in force at the next quiet step."""
    s = session(rounds=6)  # about 3,700 tokens: under the threshold of 8,000
    assert (await s.step()).gate == "below_threshold"
    s.hooks.policy = policy(threshold_ratio=0.2)  # 2,000
    action = await s.step()
    assert action.gate == "compact" and action.compactions
    s.hooks.policy = policy()
    assert (await s.step()).gate == "below_threshold"


def test_the_quiet_step_ends_one_token_under_the_threshold() -> None:
    """At the threshold the quiet step hands over to `pre_step`; one token under, it is quiet."""
    s = session(rounds=2)
    count = len(s.record.projection)
    s.hooks.observe(7_999, count)
    assert s.hooks.quiet_step_at(1, 1) is not None
    s.hooks.observe(8_000, count)
    assert s.hooks.quiet_step_at(2, 1) is None


async def test_r17_fold_alone_writes_a_boundary_without_a_bracket_or_llm_call() -> None:
    """R17/R36: when folding suffices, a boundary (action compact) and no summarizer call."""
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=12, keep_last_messages=4, fold_first=True)
    assert s.hooks.pressure() >= 8_000
    action = await s.step()
    (outcome,) = action.compactions
    assert outcome.action == "compact"
    assert outcome.written and outcome.effective
    assert summarizer.requests == []
    assert kinds(s.record) == ["compaction_boundary"]
    boundary = s.record.entries[-1].event
    assert isinstance(boundary, CompactionBoundary)
    assert boundary.compaction_id is None
    assert boundary.post_tokens < boundary.pre_tokens
    assert boundary.replacement_count == len(boundary.edits) > 0
    assert s.hooks.pressure() == boundary.post_tokens  # R10: the estimate stays continuous


async def test_r36_r38_summary_brackets_are_written_in_order_start_before_the_call() -> None:
    """R36/R38: start is on disk before the summarizer runs; then summary, then boundary."""
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=14, keep_last_tool_results=20)
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "summarize"
    assert summarizer.seen_last_kind == ["compaction_start"]
    assert kinds(s.record) == ["compaction_start", "compaction_summary", "compaction_boundary"]
    start_e, summary_e, boundary_e = (e.event for e in s.record.entries[-3:])
    assert isinstance(start_e, CompactionStart)
    assert isinstance(summary_e, CompactionSummary)
    assert isinstance(boundary_e, CompactionBoundary)
    assert start_e.compaction_id == summary_e.compaction_id == boundary_e.compaction_id
    assert boundary_e.span == start_e.span
    assert summary_e.source == "summarizer"
    assert boundary_e.post_tokens < boundary_e.pre_tokens == start_e.pre_tokens
    assert boundary_e.replacement_count == start_e.span[1] - start_e.span[0]
    visible = s.record.messages()
    assert visible[2].text.startswith("<compacted-summary>\n## Primary Request")
    assert len(s.record.history()) == 2 + 28  # R34: the originals stay in the record


async def test_r24_r25_summarizer_gets_the_sessions_own_prefix_plus_one_instruction() -> None:
    """R24/R25: the request is the projection the provider last saw, up to the tail, + 1 user."""
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=14, keep_last_tool_results=20)
    before = s.record.messages()
    await s.step()
    (request,) = summarizer.requests
    span = request.span
    assert request.messages[:-1] == tuple(before[: span[1]])
    assert all(a is b for a, b in zip(request.messages[:-1], before, strict=False))
    assert request.messages[-1] == Message.user(SUMMARY_INSTRUCTION)
    assert request.cache_retention == "none"


async def test_r20_without_a_summarizer_the_excerpt_summary_replaces_the_middle() -> None:
    """R20: no summarizer wired: the deterministic excerpt summary closes the bracket."""
    s = session(None, rounds=14, keep_last_tool_results=20)
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "excerpt"
    assert outcome.effective
    start_e = s.record.entries[-3].event
    assert isinstance(start_e, CompactionStart)
    assert start_e.action == "excerpt"
    summary_e = s.record.entries[-2].event
    assert isinstance(summary_e, CompactionSummary)
    assert summary_e.source == "excerpt"
    assert "Find why the parser loses token positions." in summary_e.summary


async def test_r6_summarizer_disabled_by_policy_uses_the_excerpt() -> None:
    """R6: `summarizer_enabled=False` never calls the summarizer."""
    summarizer = FakeSummarizer()
    s = session(summarizer, rounds=14, keep_last_tool_results=20, summarizer_enabled=False)
    (outcome,) = (await s.step()).compactions
    assert outcome.action == "excerpt"
    assert summarizer.requests == []


@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (FakeSummarizer(error=ProviderError("boom", provider="fake", status_code=500)), "boom"),
        (FakeSummarizer(reply="   "), "empty summary"),
        (FakeSummarizer(reply=notes(20_000)), "does not shrink"),
        (FakeSummarizer(reply=" ".join(["```"] * 256)), "refused: it has no words"),
        (FakeSummarizer(reply="Assistant: I will read the parser next."), "continues the"),
        (FakeSummarizer(reply="I will read the parser next."), "distinctive values"),
        (FakeSummarizer(reply="<think>Primary Request, Next Step</think>"), "reasoning block"),
        (FakeSummarizer(delay=5), "TimeoutError"),
    ],
)
async def test_summarizer_failures_fall_back_to_the_excerpt_and_count_as_ineffective(
    fake: FakeSummarizer, reason: str
) -> None:
    """A failing summarizer never puts error text in the summary or loses a message."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 14)
    fake.record = record
    hooks = CompactionHooks(
        record, policy(keep_last_tool_results=20), summarizer=fake, summarizer_timeout=0.05
    )
    s = Session(hooks)
    (outcome,) = (await s.step()).compactions
    assert outcome.written
    assert outcome.action == "excerpt"
    assert not outcome.effective
    assert reason in outcome.reason
    summary_e = record.entries[-2].event
    assert isinstance(summary_e, CompactionSummary)
    assert summary_e.source == "excerpt"
    assert reason not in summary_e.summary
    assert hooks.state.consecutive_failures == 1
    assert len(record.history()) == 30


async def test_a_sparse_answer_stays_in_front_of_the_excerpt_that_replaces_it() -> None:
    """A sparse answer (too few exact values, no garbage) stays ahead of the excerpt.

    It may hold what no excerpt can (what a screenshot showed, the model's own reading), so it
    is kept in front of the excerpt that stands in; the refusal is still named. Garbage is never
    kept.
    """
    seen = "The dashboard screenshot showed the release codename raven-juniper-62 in red."
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 14)
    hooks = CompactionHooks(
        record, policy(keep_last_tool_results=20), summarizer=FakeSummarizer(reply=seen)
    )
    (outcome,) = (await Session(hooks).step()).compactions
    assert outcome.action == "excerpt" and not outcome.effective
    assert "distinctive values" in outcome.reason
    summary_e = record.entries[-2].event
    assert isinstance(summary_e, CompactionSummary)
    assert summary_e.source == "excerpt" and "distinctive values" in (summary_e.refused or "")
    answer, excerpt = summary_e.summary.split(AFTER_ANSWER_LEAD)
    assert answer.strip() == seen
    assert "## Primary Request" in excerpt and EXCERPT_LEAD not in summary_e.summary
    boundary = record.entries[-1].event
    assert isinstance(boundary, CompactionBoundary)
    assert "raven-juniper-62" in boundary.replacement[-1].text

    garbage = MemoryRecord()
    start(garbage)
    add_rounds(garbage, 0, 14)
    turn = "Assistant: I will read the parser next; raven-juniper-62 looks fine."
    hooks = CompactionHooks(
        garbage, policy(keep_last_tool_results=20), summarizer=FakeSummarizer(reply=turn)
    )
    await Session(hooks).step()
    summary_e = garbage.entries[-2].event
    assert isinstance(summary_e, CompactionSummary) and "continues the" in (summary_e.refused or "")
    assert summary_e.summary.startswith(EXCERPT_LEAD) and "raven" not in summary_e.summary


async def test_a_sparse_answer_too_large_to_share_the_room_gives_it_to_the_excerpt() -> None:
    """A sparse answer taking over half the room the summary may use is left out.

    The excerpt keeps more exact values per token.
    """
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 14)
    rng = random.Random(7)
    words = ("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(4000))
    plain = " ".join(words)
    hooks = CompactionHooks(
        record, policy(keep_last_tool_results=20), summarizer=FakeSummarizer(reply=plain)
    )
    (outcome,) = (await Session(hooks).step()).compactions
    assert outcome.action == "excerpt" and "distinctive values" in outcome.reason
    summary_e = record.entries[-2].event
    assert isinstance(summary_e, CompactionSummary)
    assert summary_e.summary.startswith(EXCERPT_LEAD)


async def test_r31_hysteresis_blocks_an_immediate_recompaction() -> None:
    """R31: right after a compaction, pressure inside the margin does not compact again."""
    s = session(None, rounds=14, keep_last_tool_results=20, recompact_margin_ratio=0.6)
    await s.step()
    post = s.hooks.state.last_post_tokens
    assert post is not None
    extra = 100
    while s.hooks.pressure() < 8_000:
        add_rounds(s.record, extra, 1)
        extra += 1
    assert s.hooks.pressure() < post + 6_000
    action = await s.step()
    assert action.gate == "hysteresis"
    assert action.compactions == ()


async def test_r32_failure_breaker_opens_and_the_pressure_path_stops() -> None:
    """R32: a head too big to compact makes every compaction ineffective; 3 open the circuit.

    While open, the pressure path no longer compacts at the threshold (gate `circuit_open`),
    but once the next request would not fit the window it compacts anyway (gate `limit`):
    no request leaves that the library knows is too large.
    """
    record = MemoryRecord()
    record.append_message(Message.system(body(6_150)))  # ~8,150 of the 8,000 threshold
    record.append_message(Message.user("goal"))
    hooks = CompactionHooks(record, policy(recompact_margin_ratio=0.0, keep_last_messages=2))
    s = Session(hooks)
    for i in range(3):
        add_rounds(record, 10 * i, 3, tokens=50)
        (outcome,) = (await s.step()).compactions
        assert outcome.written and not outcome.effective
    assert hooks.circuit_reason == "consecutive_failures"
    assert hooks.state.consecutive_failures == 3
    add_rounds(record, 99, 1, tokens=50)
    action = await s.step()
    assert action.gate == "circuit_open"
    assert action.compactions == ()
    add_rounds(record, 100, 12, tokens=200)
    assert hooks.pressure() > hooks.policy.limit_tokens
    action = await s.step()
    assert action.gate == "limit" and action.compactions
    assert hooks.pressure() <= hooks.policy.limit_tokens
    assert hooks.state.consecutive_failures == 3  # bounded, however many more fail


async def test_r33_rapid_refills_open_the_circuit_and_remind_model_and_host() -> None:
    """R33: three successful compactions each within 3 rounds of the last: thrashing reminder."""
    s = session(None, rounds=14, keep_last_tool_results=20, recompact_margin_ratio=0.0)
    await s.step()
    for n in range(3):
        add_rounds(s.record, 200 + 20 * n, 8)
        (outcome,) = (await s.step()).compactions
        assert outcome.effective
    assert s.hooks.circuit_reason == "rapid_refill"
    reminder = s.record.entries[-1].event
    assert isinstance(reminder, Reminder)
    assert reminder.reason == THRASHING_REASON
    assert s.record.messages()[-1] == reminder.message
    assert "thrashing" in reminder.message.text


async def test_r13_overflow_compacts_and_retries_then_fails_loudly() -> None:
    """R13: two forced compactions per turn, then `OverflowRetriesExhaustedError`."""
    s = session(FakeSummarizer(), rounds=6, keep_last_messages=2)
    assert isinstance(await s.overflow(), RetryAction)
    assert kinds(s.record)[-1] == "compaction_boundary"
    add_rounds(s.record, 50, 4)
    assert isinstance(await s.overflow(), RetryAction)
    with pytest.raises(OverflowRetriesExhaustedError) as info:
        await s.overflow()
    assert info.value.attempts == 2
    s.turn += 1  # a new turn has a fresh budget
    add_rounds(s.record, 80, 4)
    assert isinstance(await s.overflow(), RetryAction)


async def test_r13_overflow_path_works_with_the_circuit_open() -> None:
    """R13: the overflow path compacts even while the pressure path's circuit is open."""
    s = session(
        FakeSummarizer(),
        rounds=10,
        keep_last_messages=2,
        state=EngineState(circuit="consecutive_failures"),
    )
    assert s.hooks.circuit_reason == "consecutive_failures"
    assert s.hooks.policy.threshold_tokens <= s.hooks.pressure() <= s.hooks.policy.limit_tokens
    assert (await s.step()).gate == "circuit_open"  # the pressure path is off ...
    assert kinds(s.record) == []
    assert isinstance(await s.overflow(), RetryAction)  # ... the overflow path compacts
    assert kinds(s.record)[-1] == "compaction_boundary"
    assert s.hooks.last_outcome is not None and s.hooks.last_outcome.trigger == "overflow"
    assert s.hooks.circuit_reason == "consecutive_failures"  # and leaves the circuit as it is


async def test_r13_overflow_with_nothing_to_compact_fails_at_once() -> None:
    """Retrying a request that nothing can shrink would overflow again: fail loudly now."""
    s = session(FakeSummarizer(), rounds=0)
    with pytest.raises(OverflowRetriesExhaustedError, match="nothing is left to compact"):
        await s.overflow()


async def test_other_request_errors_are_not_compaction_business() -> None:
    """Only context overflow is handled; other errors pass through (`None`)."""
    s = session(FakeSummarizer(), rounds=2)
    ctx = RequestErrorContext(
        record=s.record, round=1, turn=1, error=ProviderError("rate", status_code=429), attempt=1
    )
    assert await s.hooks.on_request_error(ctx) is None


async def test_r15_manual_compaction_bypasses_threshold_and_resets_breakers() -> None:
    """R15: `request_compact` compacts at the next step even far below threshold."""
    summarizer = FakeSummarizer()
    s = session(
        summarizer,
        rounds=4,
        keep_last_messages=2,
        state=EngineState(consecutive_failures=2, circuit="rapid_refill"),
    )
    s.hooks.request_compact()
    assert s.hooks.compact_requested
    (outcome,) = (await s.step()).compactions
    assert outcome.trigger == "manual"
    assert outcome.action == "summarize"
    assert len(summarizer.requests) == 1
    assert s.hooks.circuit_reason is None
    assert s.hooks.state.consecutive_failures == 0
    assert not s.hooks.compact_requested


async def test_r14_a_micro_rewrite_ends_the_step_even_over_threshold() -> None:
    """R14/R25: after a micro fold the step ends; no summary replays the unseen projection."""
    s = session(
        FakeSummarizer(), rounds=14, micro_compact_interval_rounds=1, keep_last_tool_results=2
    )
    assert s.hooks.pressure() >= 8_000
    (outcome,) = (await s.step()).compactions
    assert outcome.trigger == "micro"
    assert kinds(s.record) == ["compaction_boundary"]


async def test_r14_micro_compaction_folds_every_n_rounds_regardless_of_pressure() -> None:
    """R14: with an interval of 2, every second step folds old results (`micro_compact`)."""
    s = session(None, rounds=6, micro_compact_interval_rounds=2)
    assert s.hooks.pressure() < 8_000
    assert (await s.step()).compactions == ()
    (outcome,) = (await s.step()).compactions
    assert outcome.trigger == "micro"
    assert outcome.action == "micro_compact"
    assert any(is_folded(m) for m in s.record.messages())


async def test_r9_observation_resets_after_a_rewrite_and_anchors_after_a_reply() -> None:
    """R7/R9: a reported usage anchors pressure; a rewrite replaces it by a continuous estimate."""
    s = session(None, rounds=2)
    n = len(s.record.projection)
    s.hooks.observe(5_000, n)
    assert s.hooks.pressure() == 5_000
    s.record.append_message(Message.user("one more thing"))
    assert s.hooks.pressure() > 5_000


async def test_r38_recovery_reuses_a_paid_summary_instead_of_calling_again() -> None:
    """R38: a bracket left open after its summary was recorded is closed on open, no new call."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 14)
    record.append(
        CompactionStart(compaction_id="k99", span=(2, 20), pre_tokens=9_000, action="summarize")
    )
    record.append(CompactionSummary(compaction_id="k99", summary="paid for already"))
    summarizer = FakeSummarizer()
    length = len(record)
    hooks = CompactionHooks(record, policy(), summarizer=summarizer)
    assert len(record) == length  # construction writes nothing; recovery is a step of its own
    assert hooks.recover() is hooks.recovered
    assert summarizer.requests == []
    assert hooks.recovered is not None
    assert hooks.recovered.action == "summarize"
    boundary = record.entries[-1].event
    assert isinstance(boundary, CompactionBoundary)
    assert boundary.compaction_id == "k99"
    assert record.messages()[2].text.startswith("<compacted-summary>\npaid for already")
    assert not record.projection.open_brackets


async def test_a_summary_keeps_the_users_messages_and_recovery_rebuilds_them() -> None:
    """A summary keeps the user's own messages from its span, verbatim, before it.

    Newest first within the budget; a crash after the summary was paid for replays to the same
    projection (R37).
    """
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 4)
    record.append_message(Message.user("Keep the public API unchanged."))
    add_rounds(record, 4, 4)
    record.append_message(Message.user("Port 8443 is the only one open."))
    add_rounds(record, 8, 6)
    summarizer = FakeSummarizer()
    hooks = CompactionHooks(record, policy(), summarizer=summarizer)
    (outcome,) = (await Session(hooks).step()).compactions
    assert outcome.action == "summarize" and outcome.effective
    boundary = record.entries[-1].event
    assert isinstance(boundary, CompactionBoundary)
    texts = [m.text for m in boundary.replacement]
    assert texts[:2] == ["Keep the public API unchanged.", "Port 8443 is the only one open."]
    assert texts[2].startswith("<compacted-summary>\n")
    assert "the user's 2 messages above are kept from them word for word" in texts[2]
    assert record.messages()[2:5] == list(boundary.replacement)
    started = record.entries[-3].event
    assert isinstance(started, CompactionStart) and started.kept == (10, 19)
    # The same run, crashed between the paid summary and the boundary, reopened with another
    # policy and a meter that counts differently: the recorded choice is what counts.
    crashed = MemoryRecord()
    for entry in record.entries[:-1]:
        crashed.append(entry.event)
    again = CompactionHooks(
        crashed,
        policy(keep_user_messages_ratio=0),
        summarizer=FakeSummarizer(),
        meter=TokenMeter("claude-sonnet-4"),
    )
    assert again.recover() is not None
    assert crashed.messages() == record.messages()


async def test_a_summary_must_undercut_the_span_minus_the_messages_it_keeps() -> None:
    """The kept user messages stay, so the summary must be smaller than the rest of the span."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 4)
    record.append_message(Message.user(body(600, "Constraints: ")))
    add_rounds(record, 4, 10)
    hooks = CompactionHooks(record, policy(fold_first=False), summarizer=FakeSummarizer())
    plan = plan_compaction(
        record.messages(), hooks.policy, pressure=hooks.pressure(), estimate=hooks.meter.estimate
    )
    assert isinstance(plan, SummaryNeeded) and plan.kept_tokens > 500
    room = plan.middle_tokens - plan.kept_tokens
    reply = next(
        text
        for n in range(0, 200_000, 200)
        if hooks.meter.estimate(summary_message(text := notes(n), plan.replaced, len(plan.kept)))
        >= room
    )
    assert hooks.meter.estimate(summary_message(reply, plan.replaced)) < plan.middle_tokens
    answering = CompactionHooks(
        record, policy(fold_first=False), summarizer=FakeSummarizer(reply=reply)
    )
    (outcome,) = (await Session(answering).step()).compactions
    assert "summarizer's summary does not shrink the span" in outcome.reason


async def test_a_failed_summarizer_costs_one_compaction_not_the_session() -> None:
    """A failed summarizer: the excerpt stands in, with the reason; the next one asks again.

    Summaries are only asked for where a fold does not come first; a fold keeps 160
    characters of a result, so the excerpt with its retention block keeps more. The next
    compaction that needs a summary asks the summarizer again (issue 30: one refusal used to
    switch it off for good, and the session folded from then on).
    """
    summarizer = FakeSummarizer(error=ProviderError("boom", provider="fake", status_code=500))
    s = session(summarizer, rounds=10, keep_last_messages=4)
    (outcome,) = (await s.step()).compactions
    assert outcome.summarizer_called and "boom" in outcome.reason
    assert outcome.action == "excerpt" and not outcome.effective
    summary = [e.event for e in s.record.entries if isinstance(e.event, CompactionSummary)]
    assert summary[-1].source == "excerpt" and "boom" in (summary[-1].refused or "")
    assert not s.record.projection.open_brackets

    async def refill_and_step() -> CompactionOutcome:
        post = s.hooks.state.last_post_tokens
        assert post is not None
        while s.hooks.pressure() < max(8_000, post + 1_000):
            add_rounds(s.record, 100 + len(s.record), 1)
        (outcome,) = (await s.step()).compactions
        return outcome

    summarizer.error = None
    again = await refill_and_step()
    assert again.action == "summarize" and len(summarizer.requests) == 2
    report = check_trace(s.record, policy=s.hooks.policy)
    assert report.violations == ()


@pytest.mark.parametrize("wired", [True, False])
async def test_when_no_summary_can_be_written_the_overflow_path_folds(wired: bool) -> None:
    """Lossy beats stuck: the summarizer (if any) fails and the fold frees room.

    The overflow path enters at the fold (issue 30): without a summarizer the fold that frees
    enough is the whole compaction; with a failing one the fold stands in for its summary.
    """
    record = MemoryRecord()
    start(record)
    # A result just long enough for its fold to save tokens, in a middle too small for the
    # excerpt summary (section headings alone) to be any smaller.
    for message in [*tool_round(0, "word " * 60), *tool_round(1, "short")]:
        record.append_message(message)
    failing = FakeSummarizer(error=ProviderError("boom", provider="fake", status_code=500))
    knobs = {
        "keep_last_messages": 2,
        "keep_last_tool_results": 0,
        "keep_user_messages_ratio": 0,
        "fold_excerpt_chars": 40,
    }
    s = Session(CompactionHooks(record, policy(**knobs), summarizer=failing if wired else None))
    assert await s.overflow() is not None
    outcome = s.hooks.last_outcome
    assert outcome is not None and outcome.written and outcome.action == "compact"
    assert ("boom" in outcome.reason) is wired
    assert outcome.summarizer_called is wired
    assert any(is_folded(m) for m in record.messages())


async def test_recovery_without_a_summary_leaves_the_span_visible() -> None:
    """An open bracket with no summary changes nothing on open; planning decides later."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 3)
    record.append(
        CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=9_000, action="summarize")
    )
    before = record.messages()
    hooks = CompactionHooks(record, policy(), summarizer=FakeSummarizer())
    assert hooks.recover() is None
    assert record.messages() == before


async def test_r38_recovery_still_reuses_the_summary_after_appended_messages() -> None:
    """A host appending the next message before reattaching does not cost a second summary."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 3)
    record.append(
        CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=9_000, action="summarize")
    )
    record.append(CompactionSummary(compaction_id="k1", summary="paid"))
    record.append_message(Message.user("later"))
    summarizer = FakeSummarizer()
    hooks = CompactionHooks(record, policy(), summarizer=summarizer)
    assert hooks.recover() is not None
    assert summarizer.requests == []
    assert record.messages()[2].text.startswith("<compacted-summary>\npaid")
    assert record.messages()[-1] == Message.user("later")


async def test_recovery_abandons_a_bracket_that_a_later_rewrite_made_stale() -> None:
    """A bracket followed by another rewrite no longer addresses its span: abandoned, not reused.

    Its summary is not spliced in (the span moved), and the bracket does not stay open.
    """
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 3)
    record.append(
        CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=9_000, action="summarize")
    )
    record.append(CompactionSummary(compaction_id="k1", summary="s"))
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=9,
            post_tokens=5,
            replacement_count=1,
            edits=(Edit(index=3, message=Message.tool("call_0", "[folded]")),),
        )
    )
    visible = record.messages()
    hooks = CompactionHooks(record, policy())
    assert hooks.recover() is None
    assert not record.projection.open_brackets
    abandon = record.entries[-1].event
    assert isinstance(abandon, CompactionAbandoned)
    assert abandon.compaction_id == "k1"
    assert "rewritten" in abandon.reason
    assert record.messages() == visible


async def test_meter_is_seeded_from_the_newest_reply_usage_on_open() -> None:
    """Reopening a record anchors the meter on the last reply's usage (if no rewrite followed)."""
    from steerable_compaction.record import Usage

    record = MemoryRecord()
    start(record)
    record.append(MessageAppended(message=Message.assistant("hi"), usage=Usage(prompt_tokens=4321)))
    hooks = CompactionHooks(record, policy())
    assert hooks.pressure() == 4321 + hooks.meter.estimate(record.messages()[-1])


async def test_pressure_reads_a_reply_recorded_since_the_last_step() -> None:
    """`pressure()` between steps already anchors on the newest reply's billed usage."""
    from steerable_compaction.record import Usage

    record = MemoryRecord()
    start(record)
    hooks = CompactionHooks(record, policy())
    record.append(MessageAppended(message=Message.assistant("hi"), usage=Usage(prompt_tokens=777)))
    assert hooks.pressure() == 777 + hooks.meter.estimate(record.messages()[-1])


async def test_the_first_hook_call_recovers_when_the_shell_did_not() -> None:
    """R38: a shell that never calls `recover()` still gets the paid summary reused, once."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, 14)
    record.append(
        CompactionStart(compaction_id="k7", span=(2, 20), pre_tokens=9_000, action="summarize")
    )
    record.append(CompactionSummary(compaction_id="k7", summary="paid for already"))
    summarizer = FakeSummarizer()
    s = Session(CompactionHooks(record, policy(), summarizer=summarizer))
    assert record.projection.open_brackets
    await s.step()
    assert not record.projection.open_brackets
    assert s.hooks.recovered is not None and s.hooks.recovered.compaction_id == "k7"
    assert summarizer.requests == []
    boundaries = [e for e in record.entries if isinstance(e.event, CompactionBoundary)]
    await s.step()
    assert [e for e in record.entries if isinstance(e.event, CompactionBoundary)] == boundaries


# -- probable overflow (issue 14 item 9) ---------------------------------------------------------


def client_error(status: int = 400, *, retryable: bool = False) -> ProviderError:
    """A provider error whose wording no overflow pattern knows."""
    return ProviderError(
        "Invalid 'messages': request rejected", status_code=status, retryable=retryable
    )


async def failed(s: Session, error: BaseException, attempt: int = 1) -> RetryAction | None:
    return await s.hooks.on_request_error(
        RequestErrorContext(
            record=s.record, round=s.round, turn=s.turn, error=error, attempt=attempt
        )
    )


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_an_unknown_client_error_near_the_window_is_compacted_once(status: int) -> None:
    """A fatal 400/413/422 within 10 % of the window gets one forced compaction per request."""
    s = session(FakeSummarizer(), rounds=11, keep_last_messages=2)
    assert s.hooks.pressure() >= 0.9 * s.hooks.policy.max_context_tokens
    action = await failed(s, client_error(status))
    assert isinstance(action, RetryAction)
    (outcome,) = action.compactions
    assert outcome.written and outcome.trigger == "overflow"
    assert "probable overflow" in outcome.reason
    assert kinds(s.record)[-1] == "compaction_boundary"
    assert await failed(s, client_error(status), attempt=2) is None  # then it is fatal
    await s.step()  # the next request may try once more
    add_rounds(s.record, 50, 12)
    assert isinstance(await failed(s, client_error(status)), RetryAction)


async def test_an_unknown_client_error_far_from_the_window_stays_fatal() -> None:
    """Below 90 % of the window an unrecognized 400 is not compaction's business."""
    s = session(FakeSummarizer(), rounds=6, keep_last_messages=2)
    assert s.hooks.pressure() < 0.9 * s.hooks.policy.max_context_tokens
    assert await failed(s, client_error(400)) is None
    assert kinds(s.record) == []


@pytest.mark.parametrize(
    "error",
    [
        client_error(401),
        client_error(404),
        client_error(400, retryable=True),
        ProviderError("no status", status_code=None),
        ValueError("not a provider error"),
    ],
)
async def test_other_errors_near_the_window_are_not_probable_overflows(
    error: BaseException,
) -> None:
    """Only a fatal 400/413/422 qualifies; auth, not-found and retryable errors pass through."""
    s = session(FakeSummarizer(), rounds=11, keep_last_messages=2)
    assert await failed(s, error) is None
    assert kinds(s.record) == []


async def test_a_probable_overflow_spends_the_turns_overflow_budget() -> None:
    """Probable overflows share the R13 per-turn budget; once spent, the error is fatal."""
    s = session(FakeSummarizer(), rounds=11, keep_last_messages=2)
    assert isinstance(await s.overflow(), RetryAction)
    add_rounds(s.record, 50, 12)
    assert isinstance(await s.overflow(), RetryAction)
    add_rounds(s.record, 80, 12)
    await s.step()
    assert await failed(s, client_error(400)) is None


async def test_a_probable_overflow_with_nothing_to_compact_stays_fatal() -> None:
    """When compaction writes nothing, the original error goes through unchanged.

    A system message is never compacted (R21): nothing can bring this request under the window.
    """
    record = MemoryRecord()
    start(record)
    record.append_message(Message.system(body(9_500)))
    s = Session(CompactionHooks(record, policy(keep_last_messages=2)))
    assert s.hooks.pressure() >= 9_000
    assert await failed(s, client_error(400)) is None
    assert kinds(s.record) == []


async def test_r13_the_overflow_retry_reports_its_compaction() -> None:
    """The `RetryAction` carries the overflow compaction's outcome (issue 14 item 10)."""
    s = session(FakeSummarizer(), rounds=6, keep_last_messages=2)
    action = await s.overflow()
    assert isinstance(action, RetryAction)
    (outcome,) = action.compactions
    assert outcome == s.hooks.last_outcome
    assert outcome.trigger == "overflow" and outcome.written
