from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.host.reconcile import (
    ReconcilePlan,
    SeedConflictError,
    apply_reconcile,
    plan_reconcile,
)
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Entry,
    Event,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
    Reminder,
)
from tests.compaction_helpers import span_values

from .record_sessions import event_sequences, small_session


def raw_history(record: Record) -> list[Message]:
    out = []
    for entry in record.history(reminders=False):
        assert isinstance(entry.event, MessageAppended)
        out.append(entry.event.message)
    return out


def summarize(cid: str, span: tuple[int, int], text: str) -> list[Event]:
    summary = Message.user(f"<compacted-summary>\n{text}\n</compacted-summary>")
    return [
        CompactionStart(compaction_id=cid, span=span, pre_tokens=900, action="summarize"),
        CompactionSummary(compaction_id=cid, summary=text),
        CompactionBoundary(
            action="summarize",
            pre_tokens=900,
            post_tokens=300,
            replacement_count=span[1] - span[0],
            compaction_id=cid,
            span=span,
            replacement=(summary,),
        ),
    ]


def rounds(first: int, count: int) -> list[Message]:
    out: list[Message] = []
    for k in range(first, first + count):
        call = ToolCall(id=f"c{k}", name="read_file", arguments=f'{{"path": "f{k}.py"}}')
        out += [Message.assistant(None, [call]), Message.tool(f"c{k}", f"contents of f{k}.py")]
    return out


GOAL = Message.user("Map the repository.")
SYSTEM = Message.system("You are a careful agent.")


def compacted_record() -> MemoryRecord:
    """system, goal, 4 rounds, summary of rounds 1-3 (k1), 2 rounds, summary absorbing k1 (k2)."""
    record = MemoryRecord()
    for message in [SYSTEM, GOAL, *rounds(0, 4)]:
        record.append_message(message)
    for event in summarize("k1", (2, 8), "rounds 0-2"):  # raw 2..7 (3 rounds)
        record.append(event)
    for message in rounds(4, 2):
        record.append_message(message)
    # projection: SYSTEM GOAL S1 a3 t3 a4 t4 a5 t5; k2 replaces S1..t4 (projection 2..7)
    for event in summarize("k2", (2, 7), "rounds 0-4"):
        record.append(event)
    return record


def test_r1_an_empty_record_takes_the_whole_seed() -> None:
    """A host migrating a session seeds its full history into a fresh record: all of it is new."""
    seed = [SYSTEM, GOAL, *rounds(0, 2)]
    plan = plan_reconcile(MemoryRecord(), seed)
    assert plan.new == tuple(seed)
    assert plan.summary() == {
        "record_messages": 0,
        "appended": 6,
        "matched_raw": 0,
        "matched_stand_ins": 0,
        "matched_reminders": 0,
        "skipped_system": 0,
    }


def test_r1_a_seed_equal_to_the_raw_history_adds_nothing() -> None:
    """The record's own raw history (never compacted) reconciles to nothing new."""
    record = compacted_record()
    plan = plan_reconcile(record, raw_history(record))
    assert plan.new == ()
    assert plan.raw == record.message_count == 14


def test_r1_new_messages_are_appended_after_the_compacted_projection() -> None:
    """Only the new suffix is appended, as messages, and the compacted projection is kept."""
    record = compacted_record()
    before = record.messages()
    extra = [Message.user("Now find the TODOs."), *rounds(6, 1)]
    plan = plan_reconcile(record, [*raw_history(record), *extra])
    assert plan.new == tuple(extra)
    assert apply_reconcile(record, plan) == 3
    assert record.messages() == [*before, *extra]
    assert record.message_count == 17


def test_r1_a_seeded_back_summary_stands_for_the_raw_messages_it_replaced() -> None:
    """A host that shows summaries may seed one back: it stands for every raw message behind it.

    k2 replaced 5 projected messages, one of them k1's summary, so it stands for raw 2..11.
    """
    record = compacted_record()
    raw = raw_history(record)
    s1, s2 = (e.event for e in record.entries if isinstance(e.event, CompactionBoundary))
    assert isinstance(s1, CompactionBoundary) and isinstance(s2, CompactionBoundary)
    (summary1,), (summary2,) = s1.replacement, s2.replacement
    new = Message.user("next")
    via_k2 = plan_reconcile(record, [SYSTEM, GOAL, summary2, *raw[12:], new])
    assert via_k2.new == (new,)
    assert (via_k2.raw, via_k2.stand_ins) == (4, 1)
    via_k1 = plan_reconcile(record, [SYSTEM, GOAL, summary1, *raw[8:], new])
    assert via_k1.new == (new,)
    assert (via_k1.raw, via_k1.stand_ins) == (8, 1)
    projection = plan_reconcile(record, [*record.messages(), new])
    assert projection.new == (new,)


def test_r1_fold_markers_stand_for_the_result_they_folded() -> None:
    """A seed holding the fold marker in place of a folded tool result still matches."""
    record = MemoryRecord()
    for message in [GOAL, *rounds(0, 2)]:
        record.append_message(message)
    marker = Message.tool("c0", "[folded: read_file, 18 chars]")
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=500,
            post_tokens=400,
            replacement_count=1,
            edits=(Edit(index=2, message=marker),),
        )
    )
    plan = plan_reconcile(record, record.messages())
    assert plan.new == () and plan.stand_ins == 1


def test_r1_reminders_may_be_seeded_or_left_out() -> None:
    """The runtime's reminders are the host's to keep or drop; both seeds match."""
    record = MemoryRecord()
    record.append_message(GOAL)
    reminder = Message.user("<system-reminder>\nslow down\n</system-reminder>")
    record.append(Reminder(reason="compaction_thrashing", message=reminder))
    record.append_message(Message.assistant("ok"))
    assert plan_reconcile(record, [GOAL, Message.assistant("ok")]).new == ()
    kept = plan_reconcile(record, [GOAL, reminder, Message.assistant("ok")])
    assert kept.new == () and kept.reminders == 1


def test_r1_a_reminder_equal_to_a_raw_message_is_not_misread() -> None:
    """A seed message that fits two rules keeps both readings alive; the longest match wins."""
    same = Message.user("same")
    record = MemoryRecord()
    record.append_message(GOAL)
    record.append(Reminder(reason="note", message=same))
    record.append_message(same)
    plan = plan_reconcile(record, record.messages())  # GOAL, same (reminder), same (raw)
    assert plan.new == ()


def test_r1_a_seed_without_system_messages_need_not_repeat_the_runtimes() -> None:
    """A host that sends no system message is not asked for the runtime's system prompt."""
    record = MemoryRecord()
    for message in [SYSTEM, GOAL]:
        record.append_message(message)
    new = Message.user("more")
    plan = plan_reconcile(record, [GOAL, new])
    assert plan.new == (new,) and plan.skipped_system == 1


def test_r1_a_different_system_prompt_contradicts_the_record() -> None:
    """A seed with its own system message must match the record's: a different one is refused."""
    record = MemoryRecord()
    for message in [SYSTEM, GOAL]:
        record.append_message(message)
    with pytest.raises(SeedConflictError) as info:
        plan_reconcile(record, [Message.system("Another prompt."), GOAL])
    error = info.value
    assert (error.kind, error.seed_index, error.record_index, error.seq) == ("mismatch", 0, 0, 0)
    assert "expected raw message 0 (seq 0) system: 'You are a careful agent.'" in str(error)
    assert "got system: 'Another prompt.'" in str(error)


def test_r1_a_contradicting_seed_is_refused_and_the_record_file_is_untouched(
    tmp_path: Path,
) -> None:
    """An edited message in the seed is a conflict; the record's bytes do not change."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        for event in small_session():
            record.append(event)
        before = path.read_bytes()
        seed = raw_history(record)
        seed[4] = Message.assistant("I would rather not. " * 10)
        with pytest.raises(SeedConflictError) as info:
            plan_reconcile(record, [*seed, Message.user("next")])
        assert info.value.kind == "mismatch"
        assert (info.value.seed_index, info.value.record_index) == (4, 4)
        assert info.value.matched == 4
        assert "calls read_file" in str(info.value) and "…'" in str(info.value)
    assert path.read_bytes() == before


def test_r1_a_seed_behind_the_record_is_refused() -> None:
    """A seed that ends before the raw history is behind: the error says where to page from."""
    record = compacted_record()
    raw = raw_history(record)
    with pytest.raises(SeedConflictError) as info:
        plan_reconcile(record, raw[:9])
    error = info.value
    assert (error.kind, error.matched, error.seed_index, error.record_index) == (
        "behind",
        9,
        9,
        9,
    )
    assert "history(offset=9)" in str(error)


def test_r1_a_plan_made_on_an_older_record_is_not_applied() -> None:
    """`apply_reconcile` refuses a plan when raw messages arrived since it was made."""
    record = MemoryRecord()
    record.append_message(GOAL)
    plan = plan_reconcile(record, [GOAL, Message.user("a")])
    record.append_message(Message.assistant("meanwhile"))
    with pytest.raises(SeedConflictError, match="changed since the seed was planned"):
        apply_reconcile(record, plan)
    assert record.message_count == 2


def test_a_plan_is_appended_as_one_group_commit() -> None:
    """Issue 26: the plan's messages go in one `batch()`: one transaction, one write."""

    class Counting(MemoryRecord):
        def __init__(self) -> None:
            super().__init__()
            self.batched: list[bool] = []
            self.commits = 0

        def _persist(self, entry: Entry, *, durable: bool) -> None:
            self.batched.append(self._batching)
            super()._persist(entry, durable=durable)

        def _commit_batch(self, *, durable: bool) -> None:
            self.commits += 1

    record = Counting()
    assert apply_reconcile(record, plan_reconcile(record, [GOAL, *rounds(0, 2)])) == 5
    assert record.batched == [True] * 5 and record.commits == 1


def test_seed_conflict_error_pickles_with_its_attributes() -> None:
    """The error crosses process boundaries intact, like every library error."""
    error = SeedConflictError("no", kind="behind", seed_index=3, record_index=3, seq=7, matched=3)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is SeedConflictError
    assert vars(back) == vars(error) and str(back) == "no"


@given(events=event_sequences(), extra=st.lists(st.sampled_from([GOAL, SYSTEM]), max_size=3))
def test_r1_property_raw_history_and_projection_both_reconcile(
    events: list[Event], extra: list[Message]
) -> None:
    """For any valid record, its raw history and its projection each match it exactly.

    Whatever follows is exactly what gets appended; a raw history cut short is behind.
    """
    record = MemoryRecord(events)
    raw = raw_history(record)
    assert plan_reconcile(record, [*raw, *extra]).new == tuple(extra)
    assert plan_reconcile(record, record.messages()).new == ()
    if raw and raw[-1].role != "system":
        with pytest.raises(SeedConflictError):
            plan_reconcile(record, raw[:-1])


def test_reconcile_plan_defaults_describe_an_empty_plan() -> None:
    """A plan without new messages appends nothing."""
    plan = ReconcilePlan(record_messages=0)
    assert apply_reconcile(MemoryRecord(), plan) == 0


async def test_r1_an_engine_summary_with_kept_user_messages_reconciles_both_ways() -> None:
    """The engine's replacement (kept user messages, then the summary) is matched in a seed.

    A host seeding its raw history, what the model saw, or the summary without the messages
    kept in front of it appends only what is new; the kept messages cannot stand in for the
    span without the summary.
    """
    record = MemoryRecord()
    users = [Message.user("Use port 8443."), Message.user("Skip vendored code.")]
    for message in [SYSTEM, GOAL, *rounds(0, 3), users[0], *rounds(3, 3), users[1]]:
        record.append_message(message)
    for message in rounds(6, 40):
        record.append_message(message)

    async def summarizer(request: SummaryRequest) -> str:
        return f"## Primary Request\nMap the repository.\n{span_values(request)}"

    policy = resolve_compaction_policy(None, 2048, reserved_output_tokens=0, headroom_tokens=0)
    hooks = CompactionHooks(record, policy, summarizer=summarizer)
    (outcome,) = (await hooks.pre_step(StepContext(record=record, round=1, turn=1))).compactions
    assert outcome.action == "summarize"
    assert record.messages()[2:4] == users
    new = Message.user("next")
    shown = record.messages()
    for seed in (raw_history(record), shown, [*shown[:2], *shown[4:]]):
        assert plan_reconcile(record, [*seed, new]).new == (new,)
    with pytest.raises(SeedConflictError):
        plan_reconcile(record, [*shown[:4], *shown[5:], new])
