"""Shared helpers for the simulator tests: memoized sessions, arm contexts, filled records."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from steerable_compaction import Message, ToolCall
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import MemoryRecord, MessageAppended
from steerable_compaction.sim import TASK_NAMES, build_task, run_session, runner
from steerable_compaction.sim.agent import observation_message, visible_lines
from steerable_compaction.sim.arms import ArmContext
from steerable_compaction.sim.provider import SimClock, SimProvider
from steerable_compaction.sim.runner import RunResult
from steerable_compaction.sim.tasks import Task
from steerable_compaction.testing import CacheRules


def run(task: str, arm: str, scale: float = 1.0) -> RunResult:
    """One simulated session, memoized for the test run (sessions are deterministic)."""
    return play(task, arm, scale).result


def session_messages(task: Task) -> list[Message]:
    """Every message the session states, uncompacted, as the host and agent send them.

    Calls and commands are left out: only what the host, the user and the tools say, and the
    agent's thoughts (where it states its findings).
    """
    messages = [Message.system(task.system), *task.restored, *task.demonstration]
    for turn in task.turns:
        messages.append(turn.user)
        for step in turn.steps:
            messages.append(Message.assistant(step.thought))
            for one in (step, *step.parallel):
                if turn.observations:
                    messages.append(observation_message(one))
                    continue
                output = one.output if isinstance(one.output, str) else list(one.output)
                messages.append(Message.tool("c", output))
    return messages


@dataclass(frozen=True, slots=True)
class Played:
    """A session with what it sent: requests the provider got and every message recorded."""

    result: RunResult
    requests: tuple[CompletionRequest, ...]
    messages: tuple[Message, ...]


_PLAYED: dict[tuple[str, str, float], Played] = {}


def play(task: str, arm: str, scale: float = 1.0, *, cached: bool = True) -> Played:
    """`run_session` for `task` (seed 0) with its provider and record kept (memoized)."""
    key = (task, arm, scale)
    if cached and key in _PLAYED:
        return _PLAYED[key]
    providers: list[SimProvider] = []
    records: list[MemoryRecord] = []

    class KeptProvider(SimProvider):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            providers.append(self)

    class KeptRecord(MemoryRecord):
        def __init__(self) -> None:
            super().__init__()
            records.append(self)

    with (
        patch.object(runner, "SimProvider", KeptProvider),
        patch.object(runner, "MemoryRecord", KeptRecord),
    ):
        result = asyncio.run(run_session(build_task(task, 0, scale=scale), arm))
    (provider,), (record,) = providers, records
    messages = tuple(
        e.event.message for e in record.entries if isinstance(e.event, MessageAppended)
    )
    played = Played(result, tuple(e.request for e in provider.exchanges), messages)
    _PLAYED.setdefault(key, played)
    return played


def statements(task: Task) -> list[str]:
    """Every line the session states, as the agent could see it uncompacted."""
    return visible_lines(session_messages(task))


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
