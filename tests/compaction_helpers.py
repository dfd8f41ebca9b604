"""Shared pieces for the compaction planning tests: knobs, an estimate, session builders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from steerable_compaction import ImagePart, Message, ToolCall
from steerable_compaction.compaction import (
    FoldRewrite,
    Plan,
    SummaryNeeded,
    SummaryRequest,
    summary_message,
)


@dataclass(frozen=True, slots=True)
class Knobs:
    """A stand-in satisfying `PlanSettings`.

    Desktop-tier retention, the spec's fold-first order, no tail cap and no kept user
    messages; a test opts into the rest.
    """

    threshold_tokens: int = 1_000
    recompact_margin_tokens: int = 0
    keep_last_messages: int = 6
    keep_last_tool_results: int = 2
    fold_excerpt_chars: int = 160
    image_offload: bool = True
    keep_last_images: int = 1
    fold_first: bool = True
    max_tail_tokens: int = 10**9
    user_message_tokens: int = 0
    summary_chain_tokens: int = 10**9
    head_tokens: int = 10**9
    max_context_tokens: int = 10**9
    limit_tokens: int = 10**9
    effective_reserved_output_tokens: int = 4096
    effective_headroom_tokens: int = 0


def est(message: Message) -> int:
    """A simple deterministic estimate: 4 chars a token, framing, images, call JSON."""
    calls = sum(8 + len(c.name) // 4 + len(c.arguments) // 4 for c in message.tool_calls)
    return 4 + len(message.text) // 4 + 300 * len(message.images) + calls


def total(messages: Sequence[Message]) -> int:
    return sum(est(m) for m in messages)


def tool_round(i: int, body: str, name: str = "read_file") -> list[Message]:
    """One assistant call and its result."""
    call = ToolCall(id=f"call_{i}", name=name, arguments=json.dumps({"path": f"src/m{i}.py"}))
    return [Message.assistant(f"Step {i}.", [call]), Message.tool(f"call_{i}", body)]


def session(rounds: int, body_chars: int = 2_000) -> list[Message]:
    """System, goal, then `rounds` tool rounds with bodies of `body_chars`."""
    out = [Message.system("You are a coding agent."), Message.user("Find the failing import.")]
    for i in range(rounds):
        out += tool_round(i, f"# file m{i}\n" + ("x = 1\n" * (body_chars // 6)))
    return out


def write_session(rounds: int, content_chars: int = 3_000) -> list[Message]:
    """System, goal, then `rounds` file writes: the bulk is in the calls, each result is "ok"."""
    out = [Message.system("You are a coding agent."), Message.user("Write the new modules.")]
    for i in range(rounds):
        body = f"# module m{i}\n" + ("y = 2\n" * (content_chars // 6))
        arguments = json.dumps({"path": f"src/m{i}.py", "content": body})
        call = ToolCall(id=f"call_{i}", name="write_file", arguments=arguments)
        out += [Message.assistant(f"Writing m{i}.", [call]), Message.tool(f"call_{i}", "ok")]
    return out


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def image_message(tag: str) -> Message:
    return Message.user([ImagePart(media_type="image/png", data=PNG + tag.encode())])


def apply_plan(messages: Sequence[Message], plan: Plan, summary: str = "S") -> list[Message]:
    """The projection after a plan is carried out (what the engine will write)."""
    if isinstance(plan, FoldRewrite):
        return list(plan.prune.messages)
    if isinstance(plan, SummaryNeeded):
        start, end = plan.request.span
        kept = [messages[i] for i in plan.kept]
        replacement = summary_message(summary, end - start, len(kept))
        return [*messages[:start], *kept, replacement, *messages[end:]]
    return list(messages)


def span_values(request: SummaryRequest) -> str:
    """The tool calls of the span `request` asks to summarize, as one summary line.

    A test summarizer that returns canned text keeps none of what it summarized, and the
    engine refuses such an answer (`compaction.judge`); naming the calls, as a real summary
    names the files it read, makes it one. Tool output is left to the retention check.
    """
    start, end = request.span
    calls = [f"{c.name} {c.arguments}" for m in request.replay[start:end] for c in m.tool_calls]
    return "Calls: " + "; ".join(calls) if calls else ""
