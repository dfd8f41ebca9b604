from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import Message
from steerable_compaction.demo import ScriptedAgent, Workspace, build_provider
from steerable_compaction.host.session import Session
from steerable_compaction.providers.base import CompletionRequest, StreamDone
from steerable_compaction.record import JsonlRecord, MemoryRecord

from .host_helpers import demo_session


async def test_without_an_llm_summarizer_compactions_are_excerpts_without_usage() -> None:
    """`STEERABLE_SUMMARIZER=0`: summaries are deterministic excerpts; no summarizer usage rides."""
    workspace = Workspace()
    provider = build_provider("demo", window=4096, agent=ScriptedAgent(workspace))
    session = Session(
        MemoryRecord(),
        provider,
        window=4096,
        tools=workspace.tools(),
        env={"STEERABLE_SUMMARIZER": "0"},
    )
    seen: list[dict[str, Any]] = []
    await session.send(Message.user("Map it (read 30 files)."), sink=seen.append)
    boundaries = [e for e in seen if e["type"] == "compaction"]
    assert "excerpt" in [b["action"] for b in boundaries]
    assert all("summarizer" not in b for b in boundaries)


async def test_the_session_provider_streams_and_keeps_the_summarizer_usage() -> None:
    """The tapped provider streams like the real one and remembers a summary call's usage."""
    session = demo_session(MemoryRecord())
    provider = session.harness.loop.provider
    assert provider.name == "caching"
    request = CompletionRequest(messages=(Message.user("hi"),), cache_retention="none")
    streamed = [e async for e in provider.stream(request)]
    assert isinstance(streamed[-1], StreamDone)
    assert session.tap.summarizer_usage == streamed[-1].completion.usage
    with pytest.raises(ValueError, match="must be a user message"):
        await session.send(Message.assistant("no"))


def test_r38_opening_a_session_closes_a_bracket_left_with_its_summary_paid() -> None:
    """R38: the session recovers on open, so `status` shows no open bracket before any turn."""
    from steerable_compaction.record import CompactionStart, CompactionSummary

    record = MemoryRecord()
    record.append_message(Message.system("sys"))
    record.append_message(Message.user("goal"))
    for i in range(6):
        record.append_message(Message.user(f"note {i}: " + "word " * 50))
    record.append(
        CompactionStart(compaction_id="k9", span=(2, 6), pre_tokens=900, action="summarize")
    )
    record.append(CompactionSummary(compaction_id="k9", summary="## Current Work\npaid"))
    session = demo_session(record)
    assert session.status()["open_brackets"] == []
    assert any("paid" in m.text for m in record.messages())


async def test_input_no_record_can_store_changes_nothing(tmp_path: Path) -> None:
    """Issue 26: a lone surrogate in the input or the seed is refused before anything is written.

    The record file stays as it was and the turn counter does not move; a good send then runs
    turn 1.
    """
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        session = demo_session(record, system="Be brief.")
        before = path.read_bytes()
        bad = Message.user("hi \ud800")
        seed = [Message.user("fine"), Message.assistant("ok"), bad]
        with pytest.raises(ValueError, match=r"input\[0\] holds text that is not valid Unicode"):
            await session.send(bad)
        with pytest.raises(ValueError, match=r"seed\[2\] holds text"):
            await session.send(Message.user("go"), seed=seed)
        with pytest.raises(ValueError, match=r"seed\[2\] holds text"):
            session.seed(seed)
        assert path.read_bytes() == before
        assert session.harness.loop.turn == 0
        done = await session.send(Message.user("Look around (read 1 files)."))
        assert done.turn.stop == "answered" and session.harness.loop.turn == 1
