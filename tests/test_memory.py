"""Memory across many compactions: the incremental summary chain, merges, pinning, the tail.

These drive the engine (`CompactionHooks`) round by round on a `MemoryRecord`, as a loop would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from steerable_compaction import Message, TextPart, resolve_compaction_policy
from steerable_compaction.compaction import (
    INCREMENTAL_INSTRUCTION,
    MERGE_INSTRUCTION,
    SUMMARY_INSTRUCTION,
    SummaryNeeded,
    SummaryRequest,
    is_summary,
    is_summary_instruction,
    plan_compaction,
    select_regions,
)
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import PreStepAction, StepContext
from steerable_compaction.policy import CompactionPolicy
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    JsonlRecord,
    MemoryRecord,
    Record,
)
from steerable_compaction.trace import check_trace
from tests.compaction_helpers import span_values

from .compaction_helpers import tool_round

WORDS = "the parser reads each token and records its position in the source file "


def body(tokens: int, tag: str = "") -> str:
    return tag + (WORDS * (tokens // 13 + 1))


def policy(**overrides: object) -> CompactionPolicy:
    """A 10k window: threshold 8,000, margin 1,000 (no reserve/headroom)."""
    knobs: dict[str, object] = {"reserved_output_tokens": 0, "headroom_tokens": 0}
    knobs.update(overrides)
    return resolve_compaction_policy(None, 10_000, **knobs)


@dataclass
class Numbered:
    """A summarizer that answers each request with a distinct, short summary."""

    requests: list[SummaryRequest] = field(default_factory=list)
    fail_merges: bool = False

    async def __call__(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        instruction = request.messages[-1].text
        if instruction == MERGE_INSTRUCTION and self.fail_merges:
            raise RuntimeError("merge refused")
        kind = {MERGE_INSTRUCTION: "merged", INCREMENTAL_INSTRUCTION: "incremental"}.get(
            instruction, "first"
        )
        return (
            f"## Primary Request\nParser fix.\n## Current Work\n{kind} summary {len(self.requests)}"
            + f"\n{merged_paths(request) if kind == 'merged' else span_values(request)}"
        )


def merged_paths(request: SummaryRequest) -> str:
    """The paths the summaries being merged name, once each (what a merge keeps, shorter)."""
    start, end = request.span
    text = " ".join(m.text for m in request.replay[start:end])
    return "Read: " + ", ".join(dict.fromkeys(re.findall(r'"path": "([^"]+)"', text)))


class Driver:
    """Appends tool rounds and steps the engine like a loop."""

    def __init__(self, hooks: CompactionHooks) -> None:
        self.hooks = hooks
        self.record = hooks.record
        self.round = 0
        self.next_call = 0

    async def until(self, requests: list[SummaryRequest], count: int, limit: int = 60) -> None:
        """Step until the summarizer has been asked `count` times."""
        for _ in range(limit):
            if len(requests) >= count:
                return
            await self.rounds(1)
        raise AssertionError(f"only {len(requests)} summary requests in {limit} rounds")

    async def step(self, tokens: int = 600) -> PreStepAction:
        """One tool round, then one `pre_step`; its decision."""
        for message in tool_round(self.next_call, body(tokens, f"[fact-{self.next_call}] ")):
            self.record.append_message(message)
        self.next_call += 1
        self.round += 1
        return await self.hooks.pre_step(StepContext(record=self.record, round=self.round, turn=1))

    async def rounds(self, count: int, tokens: int = 600) -> None:
        for _ in range(count):
            for message in tool_round(self.next_call, body(tokens, f"[fact-{self.next_call}] ")):
                self.record.append_message(message)
            self.next_call += 1
            self.round += 1
            await self.hooks.pre_step(StepContext(record=self.record, round=self.round, turn=1))


def new_engine(summarizer: Numbered, record: Record | None = None, **knobs: object) -> Driver:
    record = record if record is not None else MemoryRecord()
    record.append_message(Message.system("You are a careful coding agent."))
    record.append_message(Message.user("Find why the parser loses token positions."))
    return Driver(CompactionHooks(record, policy(**knobs), summarizer=summarizer))


def summaries(messages: list[Message] | tuple[Message, ...]) -> list[str]:
    return [m.text for m in messages if is_summary(m)]


async def test_r21_a_later_summary_covers_only_what_came_after_the_previous_one() -> None:
    """The chain: the second compaction summarizes after the first summary, which stays."""
    summarizer = Numbered()
    d = new_engine(summarizer, summary_chain_ratio=1.0)
    await d.rounds(14)
    first = summaries(d.record.messages())
    assert len(first) == 1 and summarizer.requests[0].messages[-1].text == SUMMARY_INSTRUCTION
    await d.rounds(14)
    second = summarizer.requests[1]
    assert second.messages[-1].text == INCREMENTAL_INSTRUCTION
    start, _ = second.span
    # The span starts right after the first summary: it is replayed, not replaced.
    assert is_summary(second.messages[start - 1])
    projected = summaries(d.record.messages())
    assert projected[0] == first[0]  # byte for byte, in place
    assert len(projected) >= 2 and "incremental summary 2" in projected[1]


async def test_the_chain_merges_its_oldest_summaries_past_its_budget() -> None:
    """Past `summary_chain_tokens`, the oldest summaries merge in a second, warm bracket.

    The merge replays a prefix of the projection it rewrites (ending at the last summary it
    merges), asks for at most a quarter of the chain's budget, and leaves the newest summary
    verbatim; the trace checks (hysteresis, shrinking brackets) hold.
    """
    summarizer = Numbered()
    d = new_engine(summarizer, summary_chain_ratio=0.01)  # an 80-token chain budget
    await d.until(summarizer.requests, 3)
    kinds = [r.messages[-1].text for r in summarizer.requests]
    assert kinds[:3] == [SUMMARY_INSTRUCTION, INCREMENTAL_INSTRUCTION, MERGE_INSTRUCTION]
    merge = summarizer.requests[2]
    assert merge.max_output_tokens == max(d.hooks.policy.summary_chain_tokens // 4, 1)
    start, end = merge.span
    assert start == 2 and is_summary(merge.messages[end - 1])
    projected = summaries(d.record.messages())
    assert len(projected) == 2
    assert "merged summary 3" in projected[0] and "incremental summary 2" in projected[1]
    starts = [e.event for e in d.record.entries if isinstance(e.event, CompactionStart)]
    assert len(starts) == 2 + (len(summarizer.requests) - 2)
    report = check_trace(d.record, policy=d.hooks.policy)
    assert report.ok, report.violations


async def test_a_failed_merge_leaves_the_chain_as_it_was() -> None:
    """A merge the summarizer refuses changes nothing: both summaries stay, no excerpt."""
    summarizer = Numbered(fail_merges=True)
    d = new_engine(summarizer, summary_chain_ratio=0.01)
    await d.until(summarizer.requests, 3)
    assert summarizer.requests[2].messages[-1].text == MERGE_INSTRUCTION
    projected = summaries(d.record.messages())
    assert len(projected) == 2
    assert "first summary 1" in projected[0] and "incremental summary 2" in projected[1]
    outcome = d.hooks.last_outcome
    assert outcome is not None and "chain merge failed" in outcome.reason
    assert outcome.written and outcome.action == "summarize"
    assert not d.hooks.state.summarizer_failed  # summaries still come first
    await d.until(summarizer.requests, 4)
    assert summarizer.requests[3].messages[-1].text == INCREMENTAL_INSTRUCTION


async def test_a_pinned_message_is_never_folded_or_summarized() -> None:
    """A pinned message of the span is kept verbatim in the replacement, whatever the budgets."""
    summarizer = Numbered()
    d = new_engine(summarizer, keep_user_messages_ratio=0)
    await d.rounds(3)
    pinned = Message.user("Constraint: never touch src/legacy/ (" + WORDS * 30 + ")", pinned=True)
    d.record.append_message(pinned)
    await d.rounds(14)
    messages = d.record.messages()
    assert summaries(messages), "no summary was written"
    assert pinned in messages
    index = messages.index(pinned)
    assert is_summary(messages[index + 1])  # kept in front of the summary of its span


async def test_a_pinned_tool_result_keeps_its_call() -> None:
    """Pinning one half of a tool pair keeps the pair: no orphan for the repair to rewrite."""
    summarizer = Numbered()
    d = new_engine(summarizer, keep_user_messages_ratio=0)
    await d.rounds(2)
    call, result = tool_round(99, "the schema: id INTEGER PRIMARY KEY, name TEXT")
    d.record.append_message(call)
    d.record.append_message(result.pin())
    await d.rounds(14)
    messages = d.record.messages()
    assert summaries(messages)
    assert result.pin() in messages and call in messages
    assert messages.index(call) + 1 == messages.index(result.pin())


def test_r21_restored_rounds_before_the_goal_compact_and_the_goal_stays() -> None:
    """R21: twelve tool rounds before the goal are summarized; the goal is kept verbatim."""
    goal = Message.user("Goal: make the import pass.")
    messages = [Message.system("sys")]
    for i in range(12):
        messages += tool_round(i, body(600))
    messages.append(goal)
    for i in range(50, 54):
        messages += tool_round(i, body(600))

    def estimate(message: Message) -> int:
        return len(message.text) // 8  # every summary request fits the 10k window

    total = sum(estimate(m) for m in messages)
    plan = plan_compaction(messages, policy(), pressure=total, estimate=estimate)
    assert isinstance(plan, SummaryNeeded)
    assert plan.request.span[0] == 1  # right after the system message
    kept = [messages[i] for i in plan.kept]
    assert goal in kept


def test_the_tail_always_holds_the_newest_assistant_message() -> None:
    """Observations as user messages: the agent's newest turn stays, however small the cap."""
    messages = [Message.system("sys"), Message.user("Task: fix the bug.")]
    for i in range(10):
        messages += [Message.assistant(f"run command {i}"), Message.user(body(500, f"obs {i}: "))]
    regions = select_regions(messages, 6, max_tail_tokens=10, estimate=lambda m: len(m.text) // 4)
    tail = messages[regions.tail_start :]
    assert any(m.role == "assistant" for m in tail)


@pytest.mark.parametrize("store", ["memory", "jsonl"])
async def test_pinned_messages_round_trip_through_the_record(store: str, tmp_path: object) -> None:
    """`pinned` is persisted (only when set) and read back; old lines without it load."""
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "r.jsonl"
    record: Record = MemoryRecord() if store == "memory" else JsonlRecord(path)
    record.append_message(Message.user("keep me", pinned=True))
    record.append_message(Message.user("plain"))
    if store == "jsonl":
        record.close()
        lines = path.read_text().splitlines()
        assert '"pinned": true' in lines[0] or '"pinned":true' in lines[0]
        assert "pinned" not in lines[1]
        record = JsonlRecord(path, readonly=True)
    assert [m.pinned for m in record.messages()] == [True, False]


def test_summary_instructions_are_recognized() -> None:
    """Every summary instruction is one (first, incremental, merge); other text is not."""
    for text in (SUMMARY_INSTRUCTION, INCREMENTAL_INSTRUCTION, MERGE_INSTRUCTION):
        assert is_summary_instruction(text)
    assert not is_summary_instruction("Summarize please.")


async def test_merge_brackets_are_continuations_for_the_trace() -> None:
    """A merge starting at the summary's post level right after it is not a new compaction."""
    summarizer = Numbered()
    d = new_engine(summarizer, summary_chain_ratio=0.01)
    await d.rounds(28)
    boundaries = [e for e in d.record.entries if isinstance(e.event, CompactionBoundary)]
    assert len(boundaries) >= 3
    assert check_trace(d.record, policy=d.hooks.policy).ok


async def test_r33_the_engine_trips_the_rapid_refill_breaker_in_a_thrash() -> None:
    """R33 driven round by round: compactions every few rounds, healthy rounds between, trip.

    Before R16 and R33 were combined, the healthy rounds right after each compaction reset the
    refill count and the breaker never opened. With the circuit open the pressure path stops at
    the threshold, still compacts at the window's limit, and a healthy stretch closes it.
    """
    summarizer = Numbered()
    d = new_engine(summarizer, keep_last_messages=2, summary_chain_ratio=0)
    tripped = None
    for _ in range(40):
        await d.rounds(1, tokens=2_600)  # each round adds ~2.6k: a refill every three rounds
        if d.hooks.circuit_reason == "rapid_refill":
            tripped = d.round
            break
    assert tripped is not None, "the breaker never opened"
    reminders = [e for e in d.record.entries if e.event.kind == "reminder"]
    assert len(reminders) == 1
    before = len(summarizer.requests)
    await d.rounds(1, tokens=200)  # below the window's limit: no compaction with it open
    assert len(summarizer.requests) == before
    gates = []
    for _ in range(6):  # fewer rounds than a healthy stretch: the circuit stays open
        action = await d.step(tokens=1_500)
        gates.append(action.gate)
        if action.gate == "limit":
            break
    assert gates[-1] == "limit" and d.hooks.circuit_reason == "rapid_refill", gates
    assert len(summarizer.requests) > before, "nothing compacted at the window's limit"
    assert d.hooks.pressure() < d.hooks.policy.threshold_tokens


def recovered(record: Record, boundary: CompactionBoundary, policy: CompactionPolicy) -> Record:
    """`record` replayed up to `boundary` (a crash after the summary), then recovered.

    Asserts that recovery writes the same boundary again: the retention check depends only on
    the record and the policy.
    """
    crashed = MemoryRecord()
    for entry in record.entries:
        if entry.event is boundary:
            break
        crashed.append(entry.event)
    assert CompactionHooks(crashed, policy, summarizer=Numbered()).recover() is not None
    assert crashed.entries[-1].event == boundary
    return crashed


async def test_a_summary_carries_retained_facts_and_names_its_seqs() -> None:
    """The boundary records atoms found and kept and the seqs replaced; recovery rebuilds it.

    A crash after the summary was paid for, before the boundary, replays to the same text:
    the retention check depends only on the record and the policy.
    """
    summarizer = Numbered()
    record = MemoryRecord()
    d = new_engine(summarizer, record)
    for message in tool_round(90, "note: the staging port is 61046 for the new cluster"):
        d.record.append_message(message)
    await d.until(summarizer.requests, 1)
    (boundary,) = [e.event for e in record.entries if isinstance(e.event, CompactionBoundary)]
    assert boundary.retained is not None and boundary.retained[1] >= 1
    assert boundary.history is not None
    first, last = boundary.history
    summary = boundary.replacement[-1].text
    assert f"[history seq {first}-{last}]" in summary
    assert "## Retained facts" in summary
    assert "61046" not in summarizer.requests[0].messages[-1].text  # not from the summarizer
    crashed = recovered(record, boundary, d.hooks.policy)
    assert crashed.messages() == record.messages()[: len(crashed.messages())]


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


async def test_the_retention_check_reads_what_a_fold_hid_from_the_summarizer() -> None:
    """A fold before the summary cuts a result to its excerpt; the check reads the original.

    With the fold first, the summarizer only ever sees the folded result; the fact stated
    between the excerpt's head and tail reaches the retained block from the record, with the
    original's seq, and recovery rebuilds the same block.
    """
    summarizer = Numbered()
    record = MemoryRecord()
    d = new_engine(summarizer, record, fold_first=True)
    fact = "note: the staging port is 61046 for the new cluster"
    for message in tool_round(90, body(300) + "\n" + fact + "\n" + body(300)):
        record.append_message(message)
    seq = len(record.entries) - 1
    await d.until(summarizer.requests, 1)
    folds = [e.event for e in record.entries if isinstance(e.event, CompactionBoundary)]
    assert folds[0].action == "compact" and not folds[0].replacement  # a fold came first
    assert all(fact not in m.text for m in summarizer.requests[0].messages)
    boundary = folds[-1]
    summary = boundary.replacement[-1].text
    assert f"- {fact} [history seq {seq}]" in summary.split("## Retained facts")[1]
    recovered(record, boundary, d.hooks.policy)


def screenshot_session(**options: object) -> tuple[SummaryRequest, list[Message]]:
    """A screenshot goal, pasted screenshots, parallel screenshot results, until a summary.

    Returns the first summary request and the request sent just before it.
    """
    import json

    from steerable_compaction import Compactor, ImagePart, ToolCall

    def shot(tag: str) -> ImagePart:
        return ImagePart(media_type="image/png", data=PNG + tag.encode())

    seen: list[SummaryRequest] = []

    def summarize(request: SummaryRequest) -> str:
        seen.append(request)
        return "## Current Work\nlooking at screenshots"

    compactor = Compactor(policy(keep_user_messages_ratio=0.2), summarizer=summarize, **options)  # type: ignore[arg-type]
    messages = [
        Message.system("s"),
        Message.user([TextPart(text="Fix the dashboard like this:"), shot("goal")]),
    ]
    sent: list[list[Message]] = []
    for i in range(30):
        messages = compactor.prepare(messages)
        sent.append(list(messages))
        if seen:
            return seen[0], sent[-2]
        if i % 5 == 4:
            messages.append(Message.user([TextPart(text=f"now this {i}"), shot(f"u{i}")]))
        calls = [
            ToolCall(id=f"c{i}_{k}", name="screenshot", arguments=json.dumps({"k": k}))
            for k in range(2)
        ]
        messages.append(Message.assistant(None, calls))
        for k in range(2):
            result = (TextPart(text=body(300, f"screen {i}.{k} ")), shot(f"{i}.{k}"))
            messages.append(Message.tool(f"c{i}_{k}", result))
    raise AssertionError("the session never summarized")


def test_images_in_the_warm_prefix_replay_byte_for_byte_by_default() -> None:
    """The summary request replays exactly what the last request sent, images included.

    A screenshot goal, pasted screenshots kept by the summary, parallel screenshot results
    (R24, R28): by default the summarizer is the turn model, which saw them.
    """
    request, previous = screenshot_session()
    replay = list(request.messages[:-1])
    assert replay and replay == previous[: len(replay)]
    assert any(m.images for m in replay)


def test_a_text_only_summarizer_gets_no_image_bytes() -> None:
    """R28: with `replay_images=False` every image in the replay is a text pointer."""
    request, _ = screenshot_session(replay_images=False)
    assert not any(m.images for m in request.messages)
    assert any("[image offloaded: " in m.text for m in request.messages)
