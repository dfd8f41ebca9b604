"""pydantic-ai: `CompactionHistory`, a capability, and `CompactionProcessor`, a history processor.

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
run's history stays whole; when the run ends (`after_run`) it records the final reply, so the
record holds every message of the run, in order. Summaries are written by the same model with
the same settings and request parameters (tools included), so the summary request is the
previous request's prefix plus one instruction; pass `summarizer=` to use another.

`CompactionProcessor` is the same engine as a history processor, pydantic-ai's other idiom:
`Agent(model, capabilities=[ProcessHistory(CompactionProcessor(policy))])`. As every history
processor does, it replaces the run's history with what it returns: the run keeps the
compacted projection, the record keeps everything. A processor sees neither the request's
parameters nor the end of the run, so its summary request carries the run's function tools (not
output tools or model-specific parameters), and a run's final reply is recorded when the next
run starts (or by `record_run`). Prefer the capability unless you compose history processors.

One instance of either serves one conversation. `FakeSummaries` makes pydantic-ai's
`TestModel` and `FunctionModel` answer the summary requests in tests.

Conversion (`from_pydantic_ai` / `to_pydantic_ai`): system and user prompt parts (text, image
URLs, binary images), tool returns (an outcome other than `success` is an error result), retry
prompts and feedback, and responses' text and tool calls. Any
other content (audio, documents, thinking, built-in tool parts, ...) raises `ConversionError`
naming the message and part. A tool return that is not text is carried as its JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic_ai import AgentRunResult
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
    repair_messages,
)
from pydantic_ai.models import KnownModelName, Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from .. import messages as ours
from ..compaction import SummaryRequest
from ..compactor import AnySummarizer, Compactor
from ..errors import ConversionError, MessageError
from ..messages import ContentPart, ImagePart, Message, ToolCall, ToolResult
from ..policy import CompactionPolicy
from ..record import Record
from ..testing import fake_summary, is_summary_request
from ._bridge import Bridge, Group, image_from_url, turn_model_compactor

__all__ = [
    "CompactionHistory",
    "CompactionProcessor",
    "FakeSummaries",
    "from_pydantic_ai",
    "to_pydantic_ai",
]


class _Engine:
    """What the capability and the processor share: the compactor, its record and the bridge.

    Its arguments are `CompactionHistory`'s.
    """

    def __init__(
        self,
        policy: CompactionPolicy,
        *,
        record: Record | None = None,
        model: str | None = None,
        summarizer: AnySummarizer | None = None,
        summarizer_timeout: float | None = 300.0,
        env: Mapping[str, str] | None = None,
        summarize: bool | None = None,
    ) -> None:
        self.compactor: Compactor = turn_model_compactor(
            policy,
            summarizer,
            self._summarize,
            summarize=summarize,
            record=record,
            model=model,
            summarizer_timeout=summarizer_timeout,
            env=env,
        )
        codec = _Codec()
        self._bridge: Bridge[ModelMessage] = Bridge(
            self.compactor, split=codec.split, convert=codec.convert, prompt_tokens=_prompt_tokens
        )
        # The model call in progress: the model, its settings and request parameters.
        self._call: tuple[Model, ModelSettings | None, ModelRequestParameters] | None = None

    @property
    def record(self) -> Record:
        """The append-only record of the conversation."""
        return self.compactor.record

    async def _summarize(self, request: SummaryRequest) -> str:
        """The model of the request in progress, with its settings and parameters, summarizes."""
        if self._call is None:  # pragma: no cover - only called inside a model request
            raise RuntimeError("no model request in progress")
        model, settings, parameters = self._call
        response = await model.request(
            self._bridge.to_framework(request.messages), settings, parameters
        )
        return "".join(p.content for p in response.parts if isinstance(p, TextPart))


class CompactionHistory(_Engine, AbstractCapability[Any]):
    """Compacts what the model sees; the record keeps every message (see module doc).

    `CompactionHistory(policy, *, record, model, summarizer, summarizer_timeout, env)`: `record`
    defaults to a `MemoryRecord`; `model` names the model family for token estimates;
    `summarizer` (sync or async, given a `SummaryRequest`) writes the summaries instead of the
    agent's own model. `summarize` is deprecated: `summarize=False` is a policy with
    `summarizer_enabled=False`.
    """

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the compacted projection for this request; the run's history is untouched."""
        context = request_context
        self._call = (context.model, context.model_settings, context.model_request_parameters)
        try:
            request_context.messages = await self._bridge.request(request_context.messages)
        finally:
            self._call = None
        return request_context

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Record the messages after the run's last model request: its final reply, in order."""
        self._bridge.catch_up(result.all_messages())
        return result


class CompactionProcessor(_Engine):
    """A history processor: `ProcessHistory(CompactionProcessor(policy))` (see module doc).

    Takes the same arguments as `CompactionHistory`.
    """

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        """The compacted history, which replaces the run's own (see module doc)."""
        tools = ctx.tool_manager.tool_defs if ctx.tool_manager is not None else []
        # Processors run before model requests, so the run's model is a request model.
        model, settings = cast(Model, ctx.model), cast(ModelSettings | None, ctx.model_settings)
        self._call = (model, settings, ModelRequestParameters(function_tools=tools))
        try:
            projection = await self._bridge.request(messages)
        finally:
            self._call = None
        # The run continues from what a processor returns, and the next run from that history
        # as pydantic-ai normalizes it (adjacent requests merged): hand it out normalized.
        history = repair_messages(projection, repair_last_response=False)
        self._bridge.expect(history)
        return history

    def record_run(self, messages: Sequence[ModelMessage]) -> None:
        """Record what is new in `messages` now (a run's final reply) instead of at the next run.

        Pass `result.all_messages()` of the run that ended.
        """
        self._bridge.catch_up(messages)


# -- testing ------------------------------------------------------------------------------------


class FakeSummaries(WrapperModel):
    """For tests: answers summary requests with `summary`, everything else with `wrapped`.

    Wrap `TestModel` or a scripted `FunctionModel` so that their answers to the adapter's
    summary requests (tool calls, or a script step used up) do not stand in for a summary.
    `summary_requests` holds the messages of each summary request answered.
    """

    def __init__(
        self, wrapped: Model | KnownModelName | str, *, summary: str | None = None
    ) -> None:
        super().__init__(wrapped)
        self.summary = summary
        self.summary_requests: list[list[ModelMessage]] = []

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """The summary for a summary request; otherwise the wrapped model's response."""
        if _asks_summary(messages):
            self.summary_requests.append(list(messages))
            summary = self.summary
            if summary is None:
                try:
                    summary = fake_summary(from_pydantic_ai(messages))
                except ConversionError:
                    summary = fake_summary()
            return ModelResponse(parts=[TextPart(summary)], model_name=self.model_name)
        return await super().request(messages, model_settings, model_request_parameters)


def _asks_summary(messages: Sequence[ModelMessage]) -> bool:
    """Whether `messages` end with the summary instruction as a user prompt."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest) or not last.parts:
        return False
    part = last.parts[-1]
    return (
        isinstance(part, UserPromptPart)
        and isinstance(part.content, str)
        and is_summary_request(part.content)
    )


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
