"""`sim.agent`: the scripted agent that plays a task."""

from __future__ import annotations

import pytest

from steerable_compaction import Message
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.sim import build_task
from steerable_compaction.sim.agent import ScriptedAgent


async def test_agent_fails_loudly_off_script() -> None:
    """A request before `begin`, or a tool the agent did not call, is a bug in the harness."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    with pytest.raises(RuntimeError, match="begin"):
        agent.respond(CompletionRequest(messages=(Message.user("hi"),)))
    with pytest.raises(RuntimeError, match="pending"):
        await agent.run_tool("read_file", {})
