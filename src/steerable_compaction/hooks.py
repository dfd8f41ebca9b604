"""The hook protocol the loop calls, and `ChainHooks`, which runs several hooks in order.

The loop calls, in the harness's order, `pre_step` before every model request,
`on_request_error` after a failed request, and `post_tool_result` before a tool result is
appended (R3). Each hook receives one frozen context object, so fields can be added without
breaking implementers, and returns a decision. The compaction engine's shell,
`CompactionHooks`, lives in `engine`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeAlias

from .compaction import SummaryRequest
from .compaction.state import Gate
from .messages import ToolResult
from .record import CompactionAction, CompactionTrigger, Record

__all__ = [
    "ChainHooks",
    "CompactionOutcome",
    "Hooks",
    "PreStepAction",
    "RequestErrorContext",
    "RetryAction",
    "StepContext",
    "Summarizer",
    "ToolResultContext",
]

Summarizer: TypeAlias = Callable[[SummaryRequest], Awaitable[str]]
"""Answers a summary request with the summary text; raises on failure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext:
    """Handed to `pre_step`: the record, the round (request) and user turn numbers.

    `compact_requested` is set when the host asked for a compaction (`agent.chat.compact`, R15),
    `compact_focus` to what its summary must keep in full when the host named a subject.
    """

    record: Record
    round: int
    turn: int
    compact_requested: bool = False
    compact_focus: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestErrorContext:
    """Handed to `on_request_error`: the failed request's error and attempt number."""

    record: Record
    round: int
    turn: int
    error: BaseException
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultContext:
    """Handed to `post_tool_result`: the result about to be appended, and its tool's name."""

    record: Record
    tool_name: str
    result: ToolResult


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionOutcome:
    """What one compaction did. `written` is false when the record was left unchanged.

    `nothing_to_do` marks a compaction that found nothing it may change (not a failure).
    """

    trigger: CompactionTrigger
    written: bool
    effective: bool
    pre_tokens: int
    post_tokens: int
    action: CompactionAction | None = None
    compaction_id: str | None = None
    summarizer_called: bool = False
    reason: str = ""
    nothing_to_do: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PreStepAction:
    """`pre_step`'s decision: go on with the request; what was compacted on the way."""

    compactions: tuple[CompactionOutcome, ...] = ()
    gate: Gate | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryAction:
    """Retry the failed request after `delay_s` seconds; what was compacted to make it fit."""

    delay_s: float = 0.0
    reason: str = ""
    compactions: tuple[CompactionOutcome, ...] = ()


class Hooks(Protocol):
    """What the loop calls. Implement the ones you need; `ChainHooks` runs several in order."""

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Before every model request."""

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """After a failed request: a `RetryAction` to retry, `None` to let the error through."""

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Before a tool result is appended: return it, or a replacement."""


class ChainHooks:
    """Runs hooks in order.

    Every `pre_step` runs; the first `on_request_error` that retries wins; each
    `post_tool_result` sees the previous one's output.
    """

    def __init__(self, hooks: Sequence[Hooks]) -> None:
        self.hooks = tuple(hooks)

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Run every hook's `pre_step`; the outcomes are concatenated."""
        compactions: list[CompactionOutcome] = []
        gate: Gate | None = None
        for hook in self.hooks:
            action = await hook.pre_step(ctx)
            compactions.extend(action.compactions)
            gate = action.gate or gate
        return PreStepAction(compactions=tuple(compactions), gate=gate)

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """The first hook that asks for a retry wins."""
        for hook in self.hooks:
            action = await hook.on_request_error(ctx)
            if action is not None:
                return action
        return None

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Each hook sees the result as the previous hook left it."""
        result = ctx.result
        for hook in self.hooks:
            result = await hook.post_tool_result(replace(ctx, result=result))
        return result
