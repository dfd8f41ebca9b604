from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steerable_compaction import (
    ContextOverflowError,
    Message,
    MessageError,
    OverflowRetriesExhaustedError,
    RequestTooLargeError,
    resolve_compaction_policy,
)
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.compaction.state import CircuitReason, EngineState
from steerable_compaction.compactor import Compactor
from steerable_compaction.record import JsonlRecord
from tests.compaction_helpers import span_values

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
        return f"## Primary Request\nfix positions\n{span_values(request)}"

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


def test_the_overflow_budget_is_per_user_turn_without_new_turn() -> None:
    """R13: a new user message renews the budget; the caller need not call `new_turn()`."""
    compactor = Compactor(POLICY.replace(keep_last_messages=2))
    error = ContextOverflowError("too long", provider="fake", status_code=400)
    messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 6))
    for turn in range(3):
        messages = compactor.recover_overflow(error)
        messages = compactor.prepare(grow(messages, 10 * turn + 10, 6))
        messages = compactor.recover_overflow(error)
        with pytest.raises(OverflowRetriesExhaustedError):
            compactor.recover_overflow(error)  # the budget of this turn is spent
        messages = compactor.prepare([*messages, Message.user(f"next request {turn}")])
        messages = compactor.prepare(grow(messages, 10 * turn + 100, 6))


def test_new_turn_and_a_user_message_count_as_one_turn() -> None:
    """`new_turn()` before the user message it announces does not start a second turn."""
    compactor = Compactor(POLICY)
    compactor.new_turn()
    compactor.prepare([Message.system("s"), Message.user("goal")])
    assert compactor._turn == 1
    compactor.prepare([*compactor.record.messages(), Message.user("more")])
    assert compactor._turn == 2


def test_append_records_without_compacting_and_counts_a_user_turn_once() -> None:
    """`append` only records: no compaction above the threshold, one turn per user message."""
    compactor = Compactor(POLICY.replace(keep_last_messages=2))
    compactor.extend([Message.system("s"), Message.user("goal")])
    compactor.append(grow([], 0, 12))
    assert compactor.pressure() > compactor.policy.threshold_tokens
    assert compactor.record.compactions() == []
    assert compactor.record.message_count == 2 + 24
    compactor.append([Message.user("next")])
    compactor.extend([])  # the step after it: the user message started its turn already
    assert compactor._turn == 2
    assert [c.action for c in compactor.record.compactions()] == ["excerpt"]  # the step did


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({"STEERABLE_SIDECAR_SUMMARIZER": "0"}, False),
        ({"STEERABLE_SUMMARIZER": "off"}, False),
        ({"STEERABLE_SIDECAR_SUMMARIZER": "1", "STEERABLE_SUMMARIZER": "0"}, True),
        ({}, True),
    ],
)
def test_r6_the_environment_switch_also_turns_off_the_compactors_summarizer(
    env: dict[str, str], enabled: bool
) -> None:
    """R6 in `Compactor`: the switch keeps the summarizer from being called at all."""
    calls: list[SummaryRequest] = []

    def summarize(request: SummaryRequest) -> str:
        calls.append(request)
        return f"## Primary Request\nfix the positions\n{span_values(request)}"

    compactor = Compactor(POLICY, summarizer=summarize, env=env)
    assert compactor.policy.summarizer_enabled is enabled
    messages = compactor.prepare(grow([Message.system("s"), Message.user("goal")], 0, 14))
    assert len(calls) == int(enabled)
    assert messages[2].text.startswith("<compacted-summary>")


def test_r6_the_compactor_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without `env`, `os.environ` is read, as `load_harness` does."""
    monkeypatch.setenv("STEERABLE_SIDECAR_SUMMARIZER", "0")
    assert Compactor(POLICY).policy.summarizer_enabled is False
    monkeypatch.delenv("STEERABLE_SIDECAR_SUMMARIZER")
    assert Compactor(POLICY).policy is POLICY


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


def test_history_tools_for_your_own_loop_once_the_compactor_compacted() -> None:
    """No schemas before the first compaction; then both, and calls answered from the record."""
    from steerable_compaction import ToolCall, resolve_compaction_policy
    from steerable_compaction.recall import HISTORY_SEARCH

    compactor = Compactor(resolve_compaction_policy(None, 4096))
    assert compactor.history_tool_schemas("openai") == []
    messages = [Message.system("s"), Message.user("goal")]
    for i in range(40):
        messages = compactor.prepare(messages)
        fact = "note: the staging database port is 61046" if i == 0 else "filler " * 120
        call = ToolCall(id=f"c{i}", name="read", arguments="{}")
        messages += [Message.assistant(None, [call]), Message.tool(f"c{i}", fact)]
    messages = compactor.prepare(messages)
    assert compactor.compacted
    openai = compactor.history_tool_schemas("openai")
    anthropic = compactor.history_tool_schemas("anthropic")
    assert {t["function"]["name"] for t in openai} == {"history_search", "history_read"}
    assert {t["name"] for t in anthropic} == {"history_search", "history_read"}
    found = compactor.run_history_tool(HISTORY_SEARCH, '{"query": "staging database port"}')
    assert "61046" in found
    assert "error" in compactor.run_history_tool(HISTORY_SEARCH, "{not json")


def test_your_own_loop_can_have_hidden_images_read_back() -> None:
    """`run_history_tool(..., images=True)` lists hidden images and reads one back as parts."""
    from steerable_compaction import ImagePart, TextPart, ToolCall, resolve_compaction_policy
    from steerable_compaction.recall import HISTORY_READ, HISTORY_SEARCH
    from steerable_compaction.sim.content import screenshot

    compactor = Compactor(resolve_compaction_policy(None, 4096))
    messages = [Message.system("s"), Message.user("goal")]
    shot = screenshot(64, 64, "Banner: the codename is blue-heron.")
    for i in range(40):
        messages = compactor.prepare(messages)
        output = (TextPart(text="shot"), shot) if i == 0 else "filler " * 120
        call = ToolCall(id=f"c{i}", name="look", arguments="{}")
        messages += [Message.assistant(None, [call]), Message.tool(f"c{i}", output)]
    compactor.prepare(messages)
    assert compactor.compacted
    listing = compactor.run_history_tool(HISTORY_SEARCH, '{"query": "codename"}', images=True)
    assert isinstance(listing, str)
    seq = int(listing.split(": seq ")[1].split(".")[0].split(",")[0])
    back = compactor.run_history_tool(HISTORY_READ, {"seq": seq}, images=True)
    assert isinstance(back, list) and back[1] == shot and isinstance(back[1], ImagePart)
    assert isinstance(compactor.run_history_tool(HISTORY_READ, {"seq": seq}), str)


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
        return f"## Primary Request\nfix the positions\n{span_values(request)}"

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


# -- the quiet step against the full pre-step ----------------------------------------------------


class _Clock:
    """Seconds that move only when a step says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["round", "round", "round", "unanswered", "user", "text", "none"]),
        st.integers(0, 3),  # body size, a power of 7 lines
        st.sampled_from([None, 0.8, 1.0, 1.3]),  # billed / estimated, the previous request
        st.sampled_from([0.0, 5.0, 400.0]),  # seconds since the previous request
        st.sampled_from(["", "", "", "", "state", "compact", "cold", "turn"]),
    ),
    min_size=10,
    max_size=60,
)


def _full_path(compactor: Compactor) -> Compactor:
    """`compactor` with the quiet step switched off: every step takes the full `pre_step`."""
    compactor.hooks.quiet_step_at = lambda round_, turn: None  # type: ignore[method-assign]
    return compactor


@settings(max_examples=120, deadline=None)
@given(
    steps=_STEPS,
    micro=st.sampled_from([0, 4]),
    circuit=st.sampled_from([None, None, "rapid_refill", "consecutive_failures"]),
)
def test_the_quiet_step_leaves_what_the_full_pre_step_leaves(
    steps: list[tuple[str, int, float | None, float, str]],
    micro: int,
    circuit: CircuitReason | None,
) -> None:
    """Property: over random steps, `prepare` and a compactor without its quiet step agree.

    Same lists handed out, same records, same engine state and pressure after every step:
    the quiet step (and everything it skips) is the full `pre_step` of a step that compacts
    nothing, over tool rounds, unanswered calls, turns, usage, idle gaps, a cold cache,
    manual compactions and a host reading the state in between, from a closed or open circuit
    (the rapid-refill one keeps its reminder in view).
    """
    policy = POLICY.replace(
        cache_ttl_seconds=300.0, cold_threshold_ratio=0.5, micro_compact_interval_rounds=micro
    )
    clocks = _Clock(), _Clock()
    quiet = Compactor(policy, clock=clocks[0], env={})
    full = _full_path(Compactor(policy, clock=clocks[1], env={}))
    for c in (quiet, full):
        c.hooks._state = EngineState(circuit=circuit)  # as a resumed engine may start
    opening = [Message.system("You are a coding agent."), Message.user("Fix the parser.")]
    handed = [quiet.prepare(list(opening)), full.prepare(list(opening))]
    held: list[tuple[EngineState, EngineState]] = []
    sent = quiet.pressure()
    for i, (kind, size, billed, idle, host) in enumerate(steps):
        new: list[Message] = []
        if kind in ("round", "unanswered"):
            new = tool_round(i, f"[n{i}] the parser reads token {i}\n" * 7**size)
            if kind == "unanswered":
                new = new[:1]
        elif kind == "user":
            new = [Message.user(f"Now look at case {i}.")]
        elif kind == "text":
            new = [Message.assistant(f"Case {i} is done.")]
        for c, clock in zip((quiet, full), clocks, strict=True):
            clock.now += idle
            if host == "state":
                held.append((c.hooks.state, replace(c.hooks.state)))
            elif host == "compact":
                c.request_compact()
            elif host == "cold":
                c.report_cache_cold()
            elif host == "turn":
                c.new_turn()
        usage = None if billed is None else int(sent * billed)
        outcomes: list[list[Message] | RequestTooLargeError] = []
        for c, h in zip((quiet, full), handed, strict=True):
            try:
                outcomes.append(c.prepare([*h, *new], last_prompt_tokens=usage))
            except RequestTooLargeError as exc:
                outcomes.append(exc)
        if isinstance(outcomes[0], RequestTooLargeError):  # both give up alike, or neither
            assert repr(outcomes[0]) == repr(outcomes[1])
            break
        handed = [h for h in outcomes if not isinstance(h, RequestTooLargeError)]
        assert handed[0] == handed[1]
        assert list(quiet.record.entries) == list(full.record.entries)
        # Read past `state`: a host holding the state may change how the engine keeps it.
        assert quiet.hooks._state == full.hooks._state
        sent = quiet.pressure()
        assert sent == full.pressure()
    for state, copy in held:  # a state handed out is a value: no step changes it
        assert state == copy
    quiet.close()
    full.close()


def test_extend_with_nothing_new_works_on_a_read_only_record(tmp_path: Path) -> None:
    """Handing over no new messages writes nothing, so a read-only record answers as before."""
    from steerable_compaction.record import SqliteRecord

    path = tmp_path / "r.db"
    with SqliteRecord(path) as writer:
        writer.append_message(Message.system("s"))
        writer.append_message(Message.user("go"))
    with SqliteRecord(path, readonly=True) as reader:
        compactor = Compactor(resolve_compaction_policy(None, 100_000), record=reader, env={})
        assert [m.text for m in compactor.extend([])] == ["s", "go"]


def test_a_state_read_during_a_quiet_step_is_a_value_the_step_does_not_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host reading `hooks.state` (from any thread) while the quiet path writes its own state.

    The read is placed at the worst moment: after the step chose to write in place.
    """
    from steerable_compaction import engine

    compactor = Compactor(resolve_compaction_policy(None, 10_000_000), env={})
    handed = compactor.prepare([Message.system("s"), Message.user("go")])
    handed = compactor.prepare([*handed, Message.assistant("one")])
    seen: list[tuple[EngineState, EngineState]] = []
    write = engine.quiet_round_into  # type: ignore[attr-defined]

    def host_reads_then_write(state: EngineState, *args: object, **kwargs: object) -> None:
        read = compactor.hooks.state
        seen.append((read, replace(read)))
        write(state, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "quiet_round_into", host_reads_then_write)
    for i in range(3):
        handed = compactor.prepare([*handed, Message.assistant(f"r{i}")])
    assert seen, "the quiet path wrote in place"
    assert all(read == snapshot for read, snapshot in seen)
