"""The history tools in the loop: offered once the session compacted, answered from the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steerable_compaction import Message, ToolCall
from steerable_compaction.harness import load_harness
from steerable_compaction.loop import CoreLoop, Tool
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.recall import HISTORY_READ, HISTORY_SEARCH
from steerable_compaction.record import CompactionBoundary, MemoryRecord
from steerable_compaction.testing import CacheRules, CachingProvider, ScriptedProvider
from steerable_compaction.trace import check_trace
from tests.test_recall import summarize

FACT = "note: the staging database port is 61046 for the new cluster"


def names(request: CompletionRequest) -> list[str]:
    return [spec.name for spec in request.tools]


async def read(arguments: object) -> str:
    return "\n".join(f"line {i}: the parser reads tokens and positions" for i in range(120))


class Agent:
    """Reads a file per round; after the first compaction, searches its history once."""

    def __init__(self) -> None:
        self.calls = 0
        self.searched = False
        self.found: str | None = None

    def __call__(self, request: CompletionRequest) -> Message:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("Your context window"):
            return Message.assistant("## Current Work\nreading files")
        if last.role == "tool" and self.searched and self.found is None:
            self.found = last.text  # then it reads on, and the session compacts again
        if self.calls >= 45:
            return Message.assistant("Mapped.")
        if HISTORY_SEARCH in names(request) and not self.searched:
            self.searched = True
            args = json.dumps({"query": "staging database port"})
            return Message.assistant(None, [ToolCall(id="h1", name=HISTORY_SEARCH, arguments=args)])
        self.calls += 1
        path = "facts.md" if self.calls == 1 else f"src/m{self.calls}.py"
        return Message.assistant(
            None, [ToolCall(id=f"c{self.calls}", name="read", arguments=json.dumps({"p": path}))]
        )


async def run_session(tmp_path: Path, history: bool) -> tuple[CachingProvider, MemoryRecord, Agent]:
    agent = Agent()
    provider = CachingProvider(agent, window=4096, rules=CacheRules.openai())
    record = MemoryRecord()
    config = tmp_path / "harness.yaml"
    config.write_text(f"loop:\n  history_tools: {str(history).lower()}\n", encoding="utf-8")
    calls = {"n": 0}

    async def read_tool(arguments: object) -> str:
        calls["n"] += 1
        return FACT if calls["n"] == 1 else await read(arguments)

    harness = load_harness(
        config,
        provider=provider,
        record=record,
        model=None,
        max_context_tokens=4096,
        tools=[Tool(name="read", fn=read_tool)],
        env={},
        spill_directory=tmp_path / "spill",
    )
    harness.loop.max_rounds_per_turn = 60
    await harness.loop.run_turn("Map the repository.")
    return provider, record, agent


async def test_history_tools_are_offered_once_the_session_compacted(tmp_path: Path) -> None:
    """Before the first boundary no request lists them; after it, the model searches and finds.

    The search finds the fact a summary took out of the context, and every summary request
    replays the tools of the request before it (the warm prefix holds, R24).
    """
    provider, record, agent = await run_session(tmp_path, history=True)
    first = next(i for i, e in enumerate(record.entries) if isinstance(e.event, CompactionBoundary))
    assert first > 0
    turn_requests = [r for r in provider.requests if r.cache_retention != "none"]
    assert HISTORY_SEARCH not in names(turn_requests[0])
    assert any(HISTORY_SEARCH in names(r) and HISTORY_READ in names(r) for r in turn_requests)
    assert agent.found is not None and "61046" in agent.found
    summaries = [r for r in provider.requests if r.cache_retention == "none"]
    assert [HISTORY_SEARCH in names(r) for r in summaries][-1], "no summary after the first"
    report = check_trace(record, provider.requests)
    assert report.counts().get("prefix_replay", 0) == 0, report.violations


async def test_the_harness_knob_turns_the_history_tools_off(tmp_path: Path) -> None:
    """`loop.history_tools: false`: never offered, even after compaction."""
    provider, record, agent = await run_session(tmp_path, history=False)
    assert any(isinstance(e.event, CompactionBoundary) for e in record.entries)
    assert all(HISTORY_SEARCH not in names(r) for r in provider.requests)
    assert not agent.searched


def test_a_user_tool_may_not_take_a_history_tool_name() -> None:
    """The history tools' names are reserved when they are on."""

    async def fn(arguments: object) -> str:
        return ""

    with pytest.raises(ValueError, match="reserved for the history tools"):
        CoreLoop(
            ScriptedProvider([]),
            MemoryRecord(),
            tools=[Tool(name=HISTORY_SEARCH, fn=fn)],
            history_tokens=1000,
        )
    CoreLoop(ScriptedProvider([]), MemoryRecord(), tools=[Tool(name=HISTORY_SEARCH, fn=fn)])


async def test_a_bad_history_call_is_an_error_result_not_a_crash() -> None:
    """Malformed arguments come back as the tool result; the turn goes on."""
    record = MemoryRecord()
    record.append_message(Message.system("s"))
    record.append(
        CompactionBoundary(action="compact", pre_tokens=10, post_tokens=5, replacement_count=0)
    )
    bad = Message.assistant(None, [ToolCall(id="x", name=HISTORY_SEARCH, arguments="{oops")])
    provider = ScriptedProvider([bad, Message.assistant("done")])
    loop = CoreLoop(provider, record, history_tokens=1000)
    result = await loop.run_turn("go")
    assert result.stop == "answered"
    tool_text = record.messages()[-2].text
    assert "not valid JSON" in tool_text


async def test_no_step_indexes_the_record_its_first_search_does(tmp_path: Path) -> None:
    """Indexing stays off the step path: the FTS5 table appears with the model's first search."""
    import sqlite3

    from steerable_compaction.recall import search_history
    from steerable_compaction.recall.fts import TABLE
    from steerable_compaction.record import SqliteRecord

    path = tmp_path / "r.db"
    record = SqliteRecord(path)
    record.append_message(Message.system("s"))
    loop = CoreLoop(ScriptedProvider([]), record, history_tokens=1000)
    record.append_message(Message.user("the port is 31337"))
    record.append_message(Message.assistant("noted"))
    summarize(record, 1, 3)  # seqs 1-2 leave the projection
    assert loop.history_offered
    record.append_message(Message.user("appended after"))

    def tables() -> set[str]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {name for (name,) in rows}

    assert TABLE not in tables()
    assert [hit.seq for hit in search_history(record, "31337")] == [1]
    assert TABLE in tables()
    with sqlite3.connect(path) as conn:
        # The index table itself: FTS5 keeps shadow tables (`..._config` and others).
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0] == 4
    record.close()
