from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import is_summary_instruction, pair_issues
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.harness import load_harness
from steerable_compaction.loop import CoreLoop, Tool
from steerable_compaction.providers.base import Completion, CompletionRequest, provider_error
from steerable_compaction.record import JsonlRecord
from steerable_compaction.testing import CacheRules, CachingProvider
from steerable_compaction.tokens import estimate_tokens

SUMMARY = "## Primary Request\nMap every module.\n## Current Work\nRead " + ", ".join(
    f"src/mod_{i}.py" for i in range(80)
)


class ScriptedAgent:
    """A deterministic agent: reads one file per round, answers after 20 rounds per turn.

    Summary requests (the warm-prefix replay ends with the instruction) get a fixed summary.
    From its `overflow_at`-th model call on, the first request estimated at `overflow_tokens` or
    more fails once the way a provider whose real tokenizer counts more than our estimate does
    near the limit: a 400 context-length error.
    """

    def __init__(self, overflow_at: int, overflow_tokens: int = 2_500) -> None:
        self.calls = 0
        self.turn_calls = 0  # the test resets it at each new turn
        self.overflow_at = overflow_at
        self.overflow_tokens = overflow_tokens
        self.overflowed = False
        self.summaries = 0

    def __call__(self, request: CompletionRequest) -> Message:
        last = request.messages[-1]
        if last.role == "user" and is_summary_instruction(last.text):
            self.summaries += 1
            return Message.assistant(SUMMARY)
        self.calls += 1
        near_limit = estimate_tokens(list(request.messages)) >= self.overflow_tokens
        if self.calls >= self.overflow_at and near_limit and not self.overflowed:
            self.overflowed = True
            raise provider_error(
                "caching",
                status_code=400,
                code="context_length_exceeded",
                message="This model's maximum context length is 4096 tokens. However, your "
                "messages resulted in 4301 tokens.",
            )
        self.turn_calls += 1
        if self.turn_calls > 20:
            return Message.assistant(f"Turn done after {self.turn_calls - 1} reads.")
        path = f"src/mod_{self.calls}.py"  # one new file per round
        return Message.assistant(
            None,
            [
                ToolCall(
                    id=f"call_{self.calls}", name="read_file", arguments=json.dumps({"path": path})
                )
            ],
        )


class PairedCachingProvider(CachingProvider):
    """Keeps each successful request next to its completion (failed ones have none)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pairs: list[tuple[CompletionRequest, Completion]] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        completion = await super().complete(request)
        self.pairs.append((request, completion))
        return completion


async def read_file(arguments: Mapping[str, Any]) -> str:
    path = arguments["path"]
    return f"# {path}\n" + "".join(f"def fn_{i}(x):\n    return x + {i}\n" for i in range(30))


@pytest.mark.parametrize("fold_first", [False, True])
async def test_sixty_rounds_through_fold_summary_overflow_and_manual_compaction(
    tmp_path: Path, fold_first: bool
) -> None:
    """A 60-round session on a caching provider with a small window goes through every path.

    Warm-prefix summary, overflow recovery and a manual compaction all happen, and fold-only
    rewrites exactly when the fold comes first (the default for this window summarizes
    instead); no request carries a broken tool pair; summaries are paid mostly from the cache;
    and the record, read back from disk, replays to the live projection.
    """
    agent = ScriptedAgent(overflow_at=33)
    provider = PairedCachingProvider(agent, window=4096, rules=CacheRules.openai())
    path = tmp_path / "session.jsonl"
    record = JsonlRecord(path)
    config = tmp_path / "harness.yaml"
    config.write_text(f"compaction:\n  fold_first: {str(fold_first).lower()}\n", encoding="utf-8")
    hosts: list[tuple[CoreLoop, CompactionHooks]] = []
    manual: list[int] = []

    async def read_and_maybe_compact(arguments: Mapping[str, Any]) -> str:
        # Late in the session the host asks for a compaction once there is something to compact.
        loop, engine = hosts[0]
        if agent.calls > 42 and not manual and engine.pressure() > 1_500:
            manual.append(agent.calls)
            loop.request_compact()
        return await read_file(arguments)

    harness = load_harness(
        config,
        provider=provider,
        record=record,
        model=None,
        max_context_tokens=4096,
        tools=[Tool(name="read_file", fn=read_and_maybe_compact)],
        env={},
    )
    loop = harness.loop
    engine = harness.compaction
    assert engine is not None
    hosts.append((loop, engine))
    rounds = 0
    for turn in range(3):
        agent.turn_calls = 0
        result = await loop.run_turn(f"Turn {turn}: map the next modules.")
        assert result.stop == "answered"
        rounds += result.rounds
    assert rounds >= 60

    infos = record.compactions()
    triggers_actions = {(c.trigger, c.action) for c in infos}
    assert (("pressure", "compact") in triggers_actions) is fold_first
    assert ("pressure", "summarize") in triggers_actions
    assert any(c.trigger == "overflow" for c in infos)
    assert any(c.trigger == "manual" for c in infos)
    assert all(c.status in {"closed", "fold"} for c in infos)
    assert all(c.post_tokens is not None and c.post_tokens < c.pre_tokens for c in infos)

    for request in provider.requests:
        assert not pair_issues(request.messages)
    summary_calls = [(req, done) for req, done in provider.pairs if req.cache_retention == "none"]
    assert summary_calls, "the summarizer was never called"
    assert agent.summaries == len(summary_calls)
    cached = sum(done.usage.cached_tokens for _, done in summary_calls)
    prompt = sum(done.usage.prompt_tokens for _, done in summary_calls)
    assert cached / prompt >= 0.85, f"summary cache share {cached / prompt:.2f}"

    live = record.messages()
    record.close()
    with JsonlRecord(path, readonly=True) as again:
        assert again.messages() == live
        assert again.message_count > len(live)
