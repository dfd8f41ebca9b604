from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from steerable_compaction import (
    ContextOverflowError,
    Message,
    MessageError,
    OverflowRetriesExhaustedError,
    resolve_compaction_policy,
)
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.compactor import Compactor
from steerable_compaction.record import JsonlRecord

from .compaction_helpers import tool_round

POLICY = resolve_compaction_policy(
    None, 10_000, reserved_output_tokens=0, headroom_tokens=0, keep_last_tool_results=20
)
BODY = "the parser reads each token and records its position " * 60


def grow(messages: list[Message], first: int, count: int) -> list[Message]:
    for i in range(first, first + count):
        messages.extend(tool_round(i, f"[n{i}] {BODY}"))
    return messages


def test_prepare_passes_messages_through_under_threshold() -> None:
    """Under threshold `prepare` returns exactly what it was given, and records it."""
    compactor = Compactor(POLICY)
    messages = [Message.system("s"), Message.user("goal")]
    out = compactor.prepare(messages)
    assert out == messages
    assert compactor.record.message_count == 2
    out = compactor.prepare(grow(out, 0, 2))
    assert compactor.record.message_count == 6
    assert out == compactor.record.messages()


def test_prepare_compacts_with_a_sync_summarizer_and_keeps_the_originals() -> None:
    """A sync summarizer works; the returned list is compacted, the record keeps everything."""
    requests: list[SummaryRequest] = []

    def summarize(request: SummaryRequest) -> str:
        requests.append(request)
        return "## Primary Request\nfix positions"

    compactor = Compactor(POLICY, summarizer=summarize)
    messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 14))
    assert len(requests) == 1
    assert messages[2].text.startswith("<compacted-summary>\n## Primary Request")
    assert compactor.record.message_count == 30
    assert len(messages) < 30


async def test_prepare_async_with_an_async_summarizer_and_usage_anchoring() -> None:
    """`prepare_async` awaits an async summarizer; `last_prompt_tokens` anchors pressure (R7)."""

    async def summarize(request: SummaryRequest) -> str:
        return "## Primary Request\nfix positions"

    compactor = Compactor(POLICY, summarizer=summarize)
    messages = await compactor.prepare_async([Message.system("s"), Message.user("goal")])
    messages.append(Message.assistant("thinking"))
    messages = await compactor.prepare_async(messages, last_prompt_tokens=1_234)
    assert compactor.pressure() == 1_234 + compactor.hooks.meter.estimate(messages[-1])
    assert compactor.policy is POLICY


def test_a_list_that_does_not_continue_the_last_request_is_refused() -> None:
    """Editing what `prepare` returned raises `MessageError` naming the index; nothing is kept."""
    compactor = Compactor(POLICY)
    out = compactor.prepare([Message.system("s"), Message.user("goal")])
    with pytest.raises(MessageError) as info:
        compactor.prepare([out[0], Message.user("another goal")])
    assert info.value.index == 1
    with pytest.raises(MessageError, match="got 1 messages"):
        compactor.prepare(out[:1])
    assert compactor.record.message_count == 2


def test_manual_compaction_and_overflow_recovery() -> None:
    """`request_compact` compacts at the next prepare (R15); overflow recovery is bounded (R13)."""
    compactor = Compactor(POLICY.replace(keep_last_messages=2))
    messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 3))
    compactor.request_compact()
    compacted = compactor.prepare(messages)
    assert len(compacted) < len(messages)
    compactor.new_turn()
    grown = compactor.prepare(grow(compacted, 10, 3))
    error = ContextOverflowError("too long", provider="fake", status_code=400)
    retry = compactor.recover_overflow(error)
    assert len(retry) < len(grown)
    compactor.prepare(grow(retry, 20, 3))
    compactor.recover_overflow(error)
    with pytest.raises(OverflowRetriesExhaustedError):
        compactor.recover_overflow(error)


async def test_sync_methods_refuse_to_run_inside_an_event_loop() -> None:
    """The sync wrappers say to use the async ones when a loop is running."""
    compactor = Compactor(POLICY)
    with pytest.raises(RuntimeError, match="use the \\*_async method"):
        compactor.prepare([Message.user("g")])
    await asyncio.sleep(0)


def test_a_reopened_record_continues_where_it_stopped(tmp_path: object) -> None:
    """With a file record, a new compactor continues from the record's projection."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "r.jsonl"
    with JsonlRecord(path) as record:
        first = Compactor(POLICY, record=record).prepare([Message.system("s"), Message.user("g")])
    with JsonlRecord(path) as record:
        again = Compactor(POLICY, record=record)
        out = again.prepare([*first, Message.assistant("resumed")])
        assert [m.text for m in out] == ["s", "g", "resumed"]


def test_r22b_prepare_never_returns_broken_tool_pairs() -> None:
    """Regression: a restored orphan result or a dangling call is repaired in what is returned."""
    from steerable_compaction import ToolCall
    from steerable_compaction.compaction import pair_issues

    compactor = Compactor(POLICY)
    messages = [
        Message.user("goal"),
        Message.tool("gone", "restored output"),
        Message.assistant(None, [ToolCall(id="c1", name="run")]),
    ]
    out = compactor.prepare(messages)
    assert not pair_issues(out)
    assert [m.role for m in compactor.record.messages()] == ["user", "tool", "assistant"]
    out.append(Message.tool("c1", "ran"))  # the loop goes on from the list it was given
    again = compactor.prepare(out)
    assert not pair_issues(again)


def test_prepare_returns_the_list_it_was_given_when_nothing_changed() -> None:
    """Under threshold the caller's list comes back as is (no O(transcript) copy per step)."""
    compactor = Compactor(POLICY)
    messages = [Message.system("s"), Message.user("goal")]
    assert compactor.prepare(messages) is messages
    grow(messages, 0, 2)
    assert compactor.prepare(messages) is messages
    assert compactor.prepare(tuple(messages)) == messages  # any other sequence: a new list


def test_r22b_prepare_repairs_incrementally(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each prepare takes only new messages into the pair repair; a compaction redoes it once."""
    from steerable_compaction.compaction.pairs import PairRepair

    taken: list[Message] = []
    real = PairRepair.extend

    def counting(self: PairRepair, messages: Sequence[Message]) -> None:
        taken.extend(messages)
        real(self, messages)

    monkeypatch.setattr(PairRepair, "extend", counting)
    compactor = Compactor(POLICY.replace(keep_last_messages=2))
    messages = compactor.prepare([Message.system("s"), Message.user("goal")])
    for i in range(4):
        messages = compactor.prepare(grow(messages, i, 1))
    assert taken == compactor.record.messages()
    taken.clear()
    compactor.request_compact()
    compacted = compactor.prepare(messages)
    assert compacted is not messages and len(compacted) < len(messages)
    assert taken == compactor.record.projection.messages  # recomputed once after the rewrite


def test_r22b_a_late_result_replaces_the_stand_in_answer() -> None:
    """A result answering a call prepared earlier without one removes the stand-in answer."""
    from steerable_compaction import ToolCall

    compactor = Compactor(POLICY)
    messages = compactor.prepare(
        [Message.user("goal"), Message.assistant(None, [ToolCall(id="c1", name="run")])]
    )
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    stand_in = messages[-1]
    messages.append(Message.tool("c1", "ran"))
    out = compactor.prepare(messages)
    assert out is not messages
    assert stand_in not in out
    assert [m.text for m in out] == ["goal", "", "ran"]


def test_the_sync_methods_share_one_event_loop_until_closed() -> None:
    """One loop serves every sync call (not one per call); `close` ends it, a new one follows."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def summarize(request: SummaryRequest) -> str:
        loops.append(asyncio.get_running_loop())
        return "## Primary Request\nfix positions"

    with Compactor(POLICY.replace(keep_last_messages=2), summarizer=summarize) as compactor:
        messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 3))
        for _ in range(2):
            compactor.request_compact()
            messages = compactor.prepare(grow(messages, len(messages), 3))
        assert len(loops) == 2 and loops[0] is loops[1] and not loops[0].is_closed()
    assert loops[0].is_closed()
    compactor.request_compact()
    compactor.prepare(grow(messages, 100, 3))  # usable after close: a fresh loop
    assert loops[-1] is not loops[0]
    compactor.close()
    compactor.close()  # closing twice is harmless


def test_a_compactor_collected_inside_a_running_loop_closes_quietly() -> None:
    """Regression: garbage-collecting a used compactor inside another event loop raises nothing."""
    import gc

    compactor: Compactor | None = Compactor(POLICY)
    assert compactor is not None
    compactor.prepare([Message.user("g")])

    async def drop() -> None:
        nonlocal compactor
        compactor = None
        gc.collect()

    asyncio.run(drop())  # an exception in the finalizer would surface as an unraisable error


def test_an_interrupt_in_the_summarizer_propagates_and_the_compactor_still_works() -> None:
    """A `KeyboardInterrupt` escapes `prepare`; the shared loop is left usable."""
    calls = 0

    async def summarize(request: SummaryRequest) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyboardInterrupt
        return "## Primary Request\nfix positions"

    compactor = Compactor(POLICY.replace(keep_last_messages=2), summarizer=summarize)
    messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 3))
    compactor.request_compact()
    with pytest.raises(KeyboardInterrupt):
        compactor.prepare(messages)
    compactor.request_compact()
    out = compactor.prepare(grow(messages, 10, 1))
    assert out[2].text.startswith("<compacted-summary>")
    compactor.close()
