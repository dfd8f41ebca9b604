"""`CoreLoop`: rounds of request → reply → tool calls → tool results over a record.

Before every request the hook chain's `pre_step` runs (compaction may rewrite the projection);
the request is the projection with broken tool pairs repaired (R22b); a failed request goes to
`on_request_error`, which may compact and ask for a retry (R13) or back off (`RetryHooks`); each
tool result passes `post_tool_result` (spill, R2) before it is appended. Replies are recorded
with their usage, which the compaction meter reads as its ground truth (R7).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .compaction.pairs import PairedProjection
from .compaction.summary import check_focus
from .errors import ProviderError
from .hooks import (
    ChainHooks,
    CompactionOutcome,
    Hooks,
    RequestErrorContext,
    StepContext,
    ToolResultContext,
)
from .messages import ContentPart, Message, TextPart, ToolCall, ToolResult
from .providers.base import Completion, CompletionRequest, Provider, ToolSpec
from .recall import history_tools
from .record import CompactionBoundary, MessageAppended, Record

__all__ = ["CoreLoop", "Tool", "TurnResult"]

logger = logging.getLogger("steerable_compaction.loop")

ToolOutput = str | Sequence[ContentPart]
ToolFunction = Callable[[Mapping[str, Any]], Awaitable[ToolOutput]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A tool the model may call: an async function of its JSON arguments, and its schema."""

    name: str
    fn: ToolFunction
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    @property
    def spec(self) -> ToolSpec:
        """What the provider is told about this tool."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    """How a turn ended: the final reply (if any), rounds used, and what was compacted."""

    reply: Message | None
    rounds: int
    stop: Literal["answered", "max_rounds"]
    compactions: tuple[CompactionOutcome, ...] = ()
    retries: int = 0


class CoreLoop:
    """Runs agent turns over `record` with `provider`, calling `hooks` around each request.

    `hooks` is usually the harness's chain (compaction, spill, retry). One loop serves one
    record; turns run one at a time. With `history_tokens`, the model is offered
    `history_search` and `history_read` (`steerable_compaction.recall`, results capped at that
    many tokens) from the first request after the record's first compaction: the record keeps
    what compaction took out of the context, and these read it back.
    """

    def __init__(
        self,
        provider: Provider,
        record: Record,
        *,
        hooks: Hooks | Sequence[Hooks] = (),
        tools: Sequence[Tool] = (),
        max_rounds_per_turn: int = 50,
        max_output_tokens: int | None = None,
        history_tokens: int | None = None,
    ) -> None:
        if max_rounds_per_turn < 1:
            raise ValueError(f"max_rounds_per_turn must be >= 1, got {max_rounds_per_turn!r}")
        self.provider = provider
        self.record = record
        self.hooks: Hooks = ChainHooks(hooks) if isinstance(hooks, Sequence) else hooks
        self.tools = {tool.name: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool names must be unique")
        self.max_rounds_per_turn = max_rounds_per_turn
        self.max_output_tokens = max_output_tokens
        self._history: dict[str, Tool] = {}
        if history_tokens is not None:
            self._history = {
                t.name: Tool(
                    name=t.name, fn=t.fn, description=t.description, parameters=t.parameters
                )
                for t in history_tools(record, max_tokens=history_tokens)
            }
            taken = sorted(set(self._history) & set(self.tools))
            if taken:
                raise ValueError(f"tool names {taken} are reserved for the history tools")
        self._compacted = False
        self._scanned = 0
        self.round = 0
        self.turn = 0
        self._compact_requested = False
        self._compact_focus: str | None = None
        self._paired = PairedProjection(record)  # repaired in O(new messages) per round

    @property
    def history_offered(self) -> bool:
        """Whether the history tools are offered: on, and the record has compacted (O(new))."""
        if not self._history:
            return False
        if not self._compacted:
            entries = self.record.entries
            # A resumed record's checkpoint follows a boundary: the entries before it stay unread.
            resumed = self.record.resumed_at is not None
            self._compacted = resumed or any(
                isinstance(e.event, CompactionBoundary) for e in entries[self._scanned :]
            )
            self._scanned = len(entries)
            # No index is built here: the model's searches catch it up a slice at a time.
        return self._compacted

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools as the provider sees them (the history tools once the record compacted)."""
        tools = [*self.tools.values(), *(self._history.values() if self.history_offered else ())]
        return tuple(tool.spec for tool in tools)

    def request_compact(self, focus: str | None = None) -> None:
        """Compact at the next `pre_step`, whatever the pressure (R15).

        `focus` names what the summary must keep in full (`compaction.check_focus`).
        """
        self._compact_focus = check_focus(focus) or self._compact_focus
        self._compact_requested = True

    def _request(self) -> tuple[CompletionRequest, int]:
        request = CompletionRequest(
            messages=tuple(self._paired.sync()),
            tools=self.tool_specs,
            max_output_tokens=self.max_output_tokens,
        )
        return request, len(self.record.projection)

    async def _complete(self) -> tuple[Completion, int, tuple[CompactionOutcome, ...]]:
        """One request, retried as the error hooks say.

        Returns the reply, the retries used and what the error hooks compacted on the way.
        """
        attempt = 0
        compacted: list[CompactionOutcome] = []
        while True:
            request, _ = self._request()
            try:
                return await self.provider.complete(request), attempt, tuple(compacted)
            except ProviderError as error:
                attempt += 1
                action = await self.hooks.on_request_error(
                    RequestErrorContext(
                        record=self.record,
                        round=self.round,
                        turn=self.turn,
                        error=error,
                        attempt=attempt,
                    )
                )
                if action is None:
                    raise
                compacted.extend(action.compactions)
                logger.info("retrying request (attempt %d): %s", attempt + 1, action.reason)
                if action.delay_s > 0:
                    await asyncio.sleep(action.delay_s)

    async def run_turn(self, user_input: str | Message) -> TurnResult:
        """Append the user's input and run rounds until the model answers without tool calls."""
        message = Message.user(user_input) if isinstance(user_input, str) else user_input
        self.record.append_message(message)
        self.turn += 1  # only once the input is recorded: a refused input is no turn
        compactions: list[CompactionOutcome] = []
        retries = 0
        for used in range(1, self.max_rounds_per_turn + 1):
            self.round += 1
            requested, self._compact_requested = self._compact_requested, False
            focus, self._compact_focus = self._compact_focus, None
            action = await self.hooks.pre_step(
                StepContext(
                    record=self.record,
                    round=self.round,
                    turn=self.turn,
                    compact_requested=requested,
                    compact_focus=focus,
                )
            )
            compactions.extend(action.compactions)
            completion, attempts, compacted = await self._complete()
            compactions.extend(compacted)  # overflow compactions count like any other
            retries += attempts
            reply = completion.message
            if reply.role != "assistant":
                raise ProviderError(
                    f"the reply has role {reply.role!r}, expected 'assistant'",
                    provider=self.provider.name,
                )
            self.record.append(MessageAppended(message=reply, usage=completion.usage))
            if not reply.tool_calls:
                return TurnResult(
                    reply=reply,
                    rounds=used,
                    stop="answered",
                    compactions=tuple(compactions),
                    retries=retries,
                )
            for call in reply.tool_calls:
                result = await self._run_tool(call)
                result = await self.hooks.post_tool_result(
                    ToolResultContext(record=self.record, tool_name=call.name, result=result)
                )
                self.record.append_message(Message(role="tool", parts=(result,)))
        return TurnResult(
            reply=None,
            rounds=self.max_rounds_per_turn,
            stop="max_rounds",
            compactions=tuple(compactions),
            retries=retries,
        )

    async def _run_tool(self, call: ToolCall) -> ToolResult:
        """Run one call; a bad call or a failing tool becomes an error result, never a crash."""
        tool = self.tools.get(call.name)
        if tool is None and self.history_offered:
            tool = self._history.get(call.name)
        if tool is None:
            offered = [spec.name for spec in self.tool_specs]
            return _error(call, f"unknown tool {call.name!r}; available: {sorted(offered)}")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return _error(call, f"the arguments are not valid JSON: {exc}")
        if not isinstance(arguments, dict):
            return _error(call, "the arguments must be a JSON object")
        try:
            output = await tool.fn(arguments)
        except Exception as exc:  # a tool's failure is the model's business, not the loop's
            logger.info("tool %s failed: %s", call.name, exc)
            return _error(call, f"{type(exc).__name__}: {exc}")
        content: tuple[ContentPart, ...] = tuple(
            TextPart(text=_valid_unicode(part.text)) if isinstance(part, TextPart) else part
            for part in ((TextPart(text=output),) if isinstance(output, str) else output)
        )
        return ToolResult(call_id=call.id, content=content)


def _valid_unicode(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes from a tool) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _error(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call_id=call.id, content=(TextPart(text=text),), is_error=True)
