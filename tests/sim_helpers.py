"""Shared helpers for the simulator tests: memoized sessions, arm contexts, filled records."""

from __future__ import annotations

import asyncio
from pathlib import Path

from steerable_compaction import Message, ToolCall
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.record import MemoryRecord
from steerable_compaction.sim import TASK_NAMES, build_task, run_session
from steerable_compaction.sim.agent import visible_lines
from steerable_compaction.sim.arms import ArmContext
from steerable_compaction.sim.provider import SimClock, SimProvider
from steerable_compaction.sim.runner import RunResult
from steerable_compaction.sim.tasks import Task
from steerable_compaction.testing import CacheRules

_CACHE: dict[tuple[str, str, float], RunResult] = {}


def run(task: str, arm: str, scale: float = 1.0) -> RunResult:
    """One simulated session, memoized for the test run (sessions are deterministic)."""
    key = (task, arm, scale)
    if key not in _CACHE:
        _CACHE[key] = asyncio.run(run_session(build_task(task, 0, scale=scale), arm))
    return _CACHE[key]


def statements(task: Task) -> list[str]:
    """Every line the session states, as the agent could see it uncompacted."""
    messages = [Message.system(task.system), *task.restored]
    for turn in task.turns:
        messages.append(turn.user)
        for step in turn.steps:
            output = step.output if isinstance(step.output, str) else list(step.output)
            messages.append(Message.tool("c", output))
    return visible_lines(messages)


def mean_recall(arm: str) -> float:
    """`arm`'s recall averaged over every task of the suite (full length, seed 0)."""
    return sum(run(task, arm).recall for task in TASK_NAMES) / len(TASK_NAMES)


def arm_context(window: int = 16_384) -> ArmContext:
    """A fresh arm context: empty memory record, a simulated provider answering "s"."""
    policy = resolve_compaction_policy(None, window)
    provider = SimProvider(
        lambda r: "s", window=window, rules=CacheRules.openai(), clock=SimClock()
    )
    return ArmContext(
        record=MemoryRecord(),
        provider=provider,
        policy=policy,
        tools=(),
        spill_dir=Path("."),
        summary_max_tokens=2048,
    )


def fill_record(ctx: ArmContext, pairs: int, size: int) -> None:
    """Append a system prompt, a goal and `pairs` tool rounds of about `size` words each."""
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("Goal: " + "g" * 40))
    for i in range(pairs):
        call = ToolCall(id=f"c{i}", name="read", arguments="{}")
        ctx.record.append_message(Message.assistant(f"step {i}", [call]))
        ctx.record.append_message(Message.tool(f"c{i}", f"out {i} " + "word " * size))
