"""`sim.arms`: the arms' shared plumbing and how each arm behaves in a session."""

from __future__ import annotations

import pytest

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import newest_turn
from steerable_compaction.errors import ContextOverflowError, ProviderError
from steerable_compaction.hooks import RequestErrorContext
from steerable_compaction.sim import ARM_NAMES
from steerable_compaction.sim.arms import ArmHooks, FoldOnlyArm, NaiveArm, leading_system
from steerable_compaction.sim.peers import CodexArm, LangChainArm, OpenHandsArm

from .sim_helpers import arm_context, fill_record, run


@pytest.mark.parametrize("arm", ARM_NAMES)
def test_each_arm_runs_a_small_task(arm: str) -> None:
    """Every arm but `none` plays a shortened session to the end; each is measured and traced."""
    result = run("light", arm, 0.6)
    assert result.arm == arm and result.requests > 0 and 0.0 <= result.recall <= 1.0
    assert (result.death is None) == (result.rounds == result.planned_rounds)
    assert (result.death is None) == (arm != "none")  # only `none` runs out of room here
    assert set(result.cost_usd) == {"anthropic", "openai", "deepseek"}
    assert len(result.pressure) + result.summary_calls >= result.requests


def test_current_keeps_a_clean_trace_and_pays_summaries_from_the_cache() -> None:
    """The engine's run passes every L2 assertion; its summaries are read from the cache."""
    result = run("light", "current")
    assert result.trace == {} and result.summary_calls >= 1
    assert result.summary_cache_hit_rate is not None and result.summary_cache_hit_rate >= 0.95


def test_cold_arms_fail_the_prefix_replay_assertion_on_every_summary() -> None:
    """A cold summary request is never a prefix replay: the trace flags each one."""
    result = run("light", "naive")
    assert result.summary_calls >= 1
    assert result.trace == {"prefix_replay": result.summary_calls}
    assert result.summary_cache_hit_rate == 0.0


def test_no_context_management_dies_of_overflow_and_answers_nothing() -> None:
    """`none` overflows the window; needles it never reached are reported as such."""
    result = run("light", "none")
    assert (result.death, result.overflow_deaths, result.recall) == ("overflow", 1, 0.0)
    assert "not reached (the session ended first)" in result.lost.values()


def test_current_survives_the_heavy_task() -> None:
    """The engine survives large tool outputs with an unknown model's (high) calibration.

    Found by this suite: a fold's post tokens went negative (billed pressure minus estimated
    savings) and the boundary was refused; fixed by recording post tokens in billed units.
    """
    result = run("heavy", "current")
    assert result.death is None and result.trace == {}


def test_current_summary_requests_never_carry_broken_tool_pairs() -> None:
    """R22b holds for summarizer requests too, also when the session resumes a cut log.

    Found by this suite: the replay was the raw projection while turn requests were repaired.
    """
    assert "tool_pairs" not in run("restored_orphans", "current").trace


@pytest.mark.parametrize(
    ("arm", "survives"),
    [
        ("naive", True),
        ("openhands", True),
        ("codex", True),
        ("fold_only", False),
        ("masking", False),
        ("langchain", False),
    ],
)
def test_heavy_outputs_end_the_sessions_of_arms_that_never_summarize_enough(
    arm: str, survives: bool
) -> None:
    """On heavy tool output, arms that only fold, mask or keep 20 messages run out of room."""
    result = run("heavy", arm)
    assert (result.death is None) is survives
    assert result.overflow_deaths == (0 if survives else 1)


def test_helpers_find_the_newest_turn_and_the_system_prefix() -> None:
    """The newest assistant turn with its results is protected; leading systems are counted."""
    messages = [
        Message.system("s"),
        Message.system("t"),
        Message.user("u"),
        Message.assistant(None, [ToolCall(id="a", name="r")]),
        Message.tool("a", "x"),
    ]
    assert leading_system(messages) == 2
    assert newest_turn(messages) == frozenset({3, 4})
    assert newest_turn([*messages, Message.assistant("done")]) == frozenset()
    assert newest_turn(messages[:3]) == frozenset()


@pytest.mark.parametrize("kind", [NaiveArm, FoldOnlyArm, OpenHandsArm, LangChainArm, CodexArm])
async def test_arms_do_nothing_when_there_is_nothing_to_compact(kind: type[ArmHooks]) -> None:
    """A transcript too short to compact is left alone (`None`, nothing written)."""
    ctx = arm_context()
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("goal"))
    assert await kind(ctx).compact("pressure", 20_000) is None
    assert len(ctx.record) == 2


async def test_overflow_retries_are_bounded_per_turn() -> None:
    """An arm compacts on an overflow at most twice a turn, and never on other errors."""
    ctx = arm_context()
    fill_record(ctx, pairs=4, size=50)
    arm = NaiveArm(ctx)
    overflow = ContextOverflowError("too long")

    def error(turn: int, exc: Exception = overflow) -> RequestErrorContext:
        return RequestErrorContext(record=ctx.record, round=1, turn=turn, error=exc, attempt=1)

    assert await arm.on_request_error(error(1, ProviderError("teapot"))) is None
    assert await arm.on_request_error(error(1)) is not None  # summarized everything
    assert await arm.on_request_error(error(1)) is None  # nothing left to compact
    assert await arm.on_request_error(error(1)) is None  # budget of two used up
    fill_record(ctx, pairs=4, size=50)
    assert await arm.on_request_error(error(2)) is not None  # a new turn, a new budget
