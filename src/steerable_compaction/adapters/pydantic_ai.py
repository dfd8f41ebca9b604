"""pydantic-ai: `CompactionHistory`, a history-processing capability backed by a record.

```python
from pydantic_ai import Agent
from steerable_compaction import resolve_compaction_policy
from steerable_compaction.adapters.pydantic_ai import CompactionHistory

history = CompactionHistory(resolve_compaction_policy("gpt-4o"))
agent = Agent("openai:gpt-4o", capabilities=[history])
```

Before each model request (`before_model_request`, the hook pydantic-ai's own `ProcessHistory`
runs its history processors in) the capability appends what is new in the run's messages to its
record, compacts when a path calls for it, and sends the projection for that request only: the
run's history stays whole. Summaries are written by the same model with the same settings and
request parameters (tools included), so the summary request is the previous request's prefix
plus one instruction. One instance serves one conversation.

Conversion (`from_pydantic_ai` / `to_pydantic_ai`): system and user prompt parts (text, image
URLs, binary images), tool returns (an outcome other than `success` is an error result), retry
prompts and feedback, and responses' text and tool calls. Any
other content (audio, documents, thinking, built-in tool parts, ...) raises `ConversionError`
naming the message and part. A tool return that is not text is carried as its JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from .. import messages as ours
from ..compaction import SummaryRequest
from ..errors import ConversionError, MessageError
from ..messages import ContentPart, ImagePart, Message, ToolCall, ToolResult
from ..policy import CompactionPolicy
from ..record import Record
from ._bridge import Bridge, Group, image_from_url, turn_model_compactor

__all__ = ["CompactionHistory", "from_pydantic_ai", "to_pydantic_ai"]


class CompactionHistory(AbstractCapability[Any]):
    """Compacts what the model sees; the record keeps every message (see module doc)."""

    def __init__(
        self,
        policy: CompactionPolicy,
        *,
        record: Record | None = None,
        model: str | None = None,
        summarize: bool = True,
        summarizer_timeout: float | None = 300.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.compactor = turn_model_compactor(
            policy,
            self._summarize if summarize else None,
            record=record,
            model=model,
            summarizer_timeout=summarizer_timeout,
            env=env,
        )
        self._codec = _Codec()
        self._bridge: Bridge[ModelMessage] = Bridge(
            self.compactor,
            split=self._codec.split,
            convert=self._codec.convert,
            prompt_tokens=_prompt_tokens,
        )
        self._context: ModelRequestContext | None = None

    @property
    def record(self) -> Record:
        """The append-only record of the conversation."""
        return self.compactor.record

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the compacted projection for this request; the run's history is untouched."""
        self._context = request_context
        try:
            request_context.messages = await self._bridge.request(request_context.messages)
        finally:
            self._context = None
        return request_context

    async def _summarize(self, request: SummaryRequest) -> str:
        """The same model, settings and request parameters write the summary."""
        context = self._context
        if context is None:  # pragma: no cover - only called inside a model request
            raise RuntimeError("no model request in progress")
        response = await context.model.request(
            self._bridge.to_framework(request.messages),
            context.model_settings,
            context.model_request_parameters,
        )
        return "".join(p.content for p in response.parts if isinstance(p, TextPart))


# -- conversion ----------------------------------------------------------------------------------


def from_pydantic_ai(messages: Sequence[ModelMessage]) -> list[Message]:
    """pydantic-ai messages as ours; `ConversionError` for what ours cannot carry."""
    return [m for group in _Codec().split(messages) for m in group.messages]


def to_pydantic_ai(messages: Sequence[Message]) -> list[ModelMessage]:
    """Our messages as pydantic-ai messages (the inverse of `from_pydantic_ai`)."""
    codec = _Codec()  # no history: tool names come from the calls in `messages`
    for message in messages:
        codec.learn(message)
    return [item for message in messages for item in codec.convert(message)]


def _prompt_tokens(new: Sequence[ModelMessage]) -> int | None:
    """The input tokens of the first new response: it answered the previous request."""
    for item in new:
        if isinstance(item, ModelResponse):
            return item.usage.input_tokens or None
    return None


class _Codec:
    """Converts both ways; remembers each call's tool name (a tool return needs it back)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def learn(self, message: Message) -> None:
        for call in message.tool_calls:
            self.names[call.id] = call.name

    def split(self, items: Sequence[ModelMessage]) -> list[Group[ModelMessage]]:
        groups: list[Group[ModelMessage]] = []
        for i, item in enumerate(items):
            try:
                if isinstance(item, ModelResponse):
                    messages: tuple[Message, ...] = (_response(item),)
                else:
                    messages = tuple(
                        _request_part(p, f"parts[{j}]") for j, p in enumerate(item.parts)
                    )
            except MessageError as exc:
                if exc.index is not None:
                    raise
                raise ConversionError(exc.reason, index=i, field=exc.field) from exc
            for message in messages:
                self.learn(message)
            groups.append(Group((item,), messages))
        return groups

    def convert(self, message: Message) -> list[ModelMessage]:
        match message.role:
            case "system":
                return [ModelRequest(parts=[SystemPromptPart(content=message.text)])]
            case "user":
                return [ModelRequest(parts=[UserPromptPart(content=_user_content(message.parts))])]
            case "assistant":
                parts: list[ModelResponsePart] = (
                    [TextPart(content=message.text)] if message.text else []
                )
                parts += [
                    ToolCallPart(tool_name=c.name, args=c.arguments, tool_call_id=c.id)
                    for c in message.tool_calls
                ]
                return [ModelResponse(parts=parts)]
            case "tool":
                (result,) = message.parts
                assert isinstance(result, ToolResult)
                return [ModelRequest(parts=[self._tool_part(result)])]
        raise AssertionError(message.role)  # pragma: no cover - roles are validated

    def _tool_part(self, result: ToolResult) -> ModelRequestPart:
        name = self.names.get(result.call_id)
        if name is None:
            raise ConversionError(f"no tool call {result.call_id!r} names the tool this answers")
        return ToolReturnPart(
            tool_name=name,
            content=_user_content(result.content),
            tool_call_id=result.call_id,
            outcome="failed" if result.is_error else "success",
        )


def _request_part(part: ModelRequestPart, where: str) -> Message:
    if isinstance(part, SystemPromptPart):
        return Message.system(part.content)
    if isinstance(part, UserPromptPart):
        return Message(role="user", parts=tuple(_parts(part.content, f"{where}.content")))
    if isinstance(part, ToolReturnPart):
        content = part.content
        if isinstance(content, list) and all(
            isinstance(c, str | ImageUrl | BinaryContent) for c in content
        ):
            body = tuple(_parts(content, f"{where}.content"))
        else:
            text = content if isinstance(content, str) else part.model_response_str()
            body = (ours.TextPart(text=text),)
        failed = part.outcome != "success"
        result = ToolResult(call_id=part.tool_call_id, content=body, is_error=failed)
        return Message(role="tool", parts=(result,))
    if isinstance(part, RetryPromptPart):  # deprecated, still found in stored histories
        if part.tool_name is None:
            return Message.user(part.model_response())
        text = part.content if isinstance(part.content, str) else part.model_response()
        result = ToolResult(
            call_id=part.tool_call_id, content=(ours.TextPart(text=text),), is_error=True
        )
        return Message(role="tool", parts=(result,))
    if isinstance(part, RetryFeedbackPart):
        return Message.user(part.model_response())
    raise ConversionError(f"a {type(part).__name__} cannot be carried", field=where)


def _response(item: ModelResponse) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, part in enumerate(item.parts):
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            args = part.args if isinstance(part.args, str) else json.dumps(part.args or {})
            calls.append(ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=args))
        else:
            raise ConversionError(f"a {type(part).__name__} cannot be carried", field=f"parts[{j}]")
    text = "".join(texts)
    return Message.assistant(text if text or not calls else None, calls)


def _parts(content: str | Sequence[UserContent], where: str) -> list[ContentPart]:
    if isinstance(content, str):
        return [ours.TextPart(text=content)]
    parts: list[ContentPart] = []
    for j, item in enumerate(content):
        field = f"{where}[{j}]"
        if isinstance(item, str):
            parts.append(ours.TextPart(text=item))
        elif isinstance(item, ImageUrl):
            parts.append(image_from_url(item.url, field))
        elif isinstance(item, BinaryContent) and item.is_image:
            parts.append(ImagePart(data=item.data, media_type=item.media_type))
        else:
            raise ConversionError(f"a {type(item).__name__} cannot be carried", field=field)
    return parts


def _user_content(parts: Sequence[Any]) -> str | list[UserContent]:
    if len(parts) == 1 and isinstance(parts[0], ours.TextPart):
        return parts[0].text
    out: list[UserContent] = []
    for part in parts:
        if isinstance(part, ours.TextPart):
            out.append(part.text)
        elif part.url is not None:
            out.append(ImageUrl(url=part.url))
        else:
            out.append(BinaryContent(data=part.data, media_type=part.media_type))
    return out
