"""LangChain v1: `CompactionMiddleware`, an agent middleware that compacts through the engine.

```python
from langchain.agents import create_agent
from steerable_compaction import resolve_compaction_policy
from steerable_compaction.adapters.langchain import CompactionMiddleware

middleware = CompactionMiddleware(resolve_compaction_policy("gpt-4o"))
agent = create_agent(model, tools, middleware=[middleware])
```

The agent's state keeps its whole history; before every model call (`wrap_model_call`) the
middleware appends what is new to its record, compacts when a path calls for it, and sends the
projection instead; when the run ends (`after_agent`) it records the final reply, so the record
holds every message of the state, in order. Summaries are written by the agent's own model
through the same call chain (same system prompt, same tools), so the summary request is the
previous request's prefix plus one instruction; pass `summarizer=` to use another. One
middleware instance serves one conversation (one thread). `FakeSummaries` makes LangChain's
fake chat models answer the summary requests in tests.

Conversion (`from_langchain` / `to_langchain`): system, human, AI (text and tool calls) and tool
messages, with text and image content blocks (`image_url`, or `image` with `url` or `base64`).
Anything else (audio, files, reasoning blocks, ...) raises `ConversionError` naming the message
and block. Tool-call `args` travel as compact JSON and come back as the same dict.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from pydantic import Field

from ..compaction import SummaryRequest
from ..compactor import AnySummarizer
from ..errors import ConversionError, MessageError
from ..messages import ContentPart, ImagePart, Message, TextPart, ToolCall, ToolResult
from ..policy import CompactionPolicy
from ..record import Record
from ..testing import fake_summary, is_summary_request
from ._bridge import Bridge, Group, image_from_url, turn_model_compactor

__all__ = ["CompactionMiddleware", "FakeSummaries", "from_langchain", "to_langchain"]

_SKIPPED_AI_BLOCKS = frozenset({"tool_use", "tool_call", "function_call"})  # in `tool_calls`


class CompactionMiddleware(AgentMiddleware):
    """Compacts what the agent's model sees; the record keeps every message (see module doc).

    `record` defaults to a `MemoryRecord`; `model` names the model family for token estimates;
    `summarizer` (sync or async, given a `SummaryRequest`) writes the summaries instead of the
    agent's own model. `summarize` is deprecated: `summarize=False` is a policy with
    `summarizer_enabled=False`.
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
        super().__init__()
        self.compactor = turn_model_compactor(
            policy,
            summarizer,
            self._summarize,
            summarize=summarize,
            record=record,
            model=model,
            summarizer_timeout=summarizer_timeout,
            env=env,
        )
        self._bridge: Bridge[AnyMessage] = Bridge(
            self.compactor, split=_split, convert=_convert, prompt_tokens=_prompt_tokens
        )
        self._request: ModelRequest | None = None
        self._handler: Callable[[ModelRequest], Any] | None = None

    @property
    def record(self) -> Record:
        """The append-only record of the conversation."""
        return self.compactor.record

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Send the compacted projection instead of the full history."""
        self._request, self._handler = request, handler
        try:
            messages = self._bridge.request_sync(request.messages)
        finally:
            self._request = self._handler = None
        return handler(request.override(messages=messages))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """`wrap_model_call` for `ainvoke` / `astream`."""
        self._request, self._handler = request, handler
        try:
            messages = await self._bridge.request(request.messages)
        finally:
            self._request = self._handler = None
        return await handler(request.override(messages=messages))

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """Record the messages after the run's last model call: its final reply, in order."""
        self._bridge.catch_up(state["messages"])

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        """`after_agent` for `ainvoke` / `astream`."""
        self._bridge.catch_up(state["messages"])

    async def _summarize(self, summary: SummaryRequest) -> str:
        """Ask the agent's own model, through the same call chain, for the summary."""
        request, handler = self._request, self._handler
        if request is None or handler is None:  # pragma: no cover - only called inside a call
            raise RuntimeError("no model call in progress")
        reply = handler(request.override(messages=self._bridge.to_framework(summary.messages)))
        if isinstance(reply, Awaitable):
            reply = await reply
        result = reply.result if isinstance(reply, ModelResponse) else [reply]
        return "".join(m.text for m in result if isinstance(m, AIMessage))


# -- testing ------------------------------------------------------------------------------------


class FakeSummaries(BaseChatModel):
    """For tests: answers summary requests with `summary`, everything else with `model`.

    Wrap a scripted fake (`GenericFakeChatModel`, `FakeMessagesListChatModel`) so that the
    middleware's summary requests do not use up its script. `summary_requests` holds each
    summary request answered, shared by the copies `bind_tools` makes. Tools are bound to
    `model` when it supports them, else ignored (the fakes answer from their script).
    """

    model: Runnable[LanguageModelInput, BaseMessage]
    summary: str | None = None
    summary_requests: list[list[BaseMessage]] = Field(default_factory=list)

    def __init__(self, model: Runnable[LanguageModelInput, BaseMessage], **data: Any) -> None:
        super().__init__(**{**data, "model": model})

    @property
    def _llm_type(self) -> str:
        return "fake-summaries"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """This wrapper around `model` with the tools bound, if `model` binds tools."""
        if not isinstance(self.model, BaseChatModel):
            return self
        try:
            bound = self.model.bind_tools(tools, tool_choice=tool_choice, **kwargs)
        except NotImplementedError:
            return self
        return self.model_copy(update={"model": bound})

    def _summary(self, messages: list[BaseMessage]) -> ChatResult | None:
        last = messages[-1] if messages else None
        if not isinstance(last, HumanMessage) or not is_summary_request(last.text):
            return None
        self.summary_requests.append(list(messages))
        text = self.summary if self.summary is not None else _fake_summary(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        summary = self._summary(messages)
        if summary is not None:
            return summary
        reply = self.model.invoke(messages, stop=stop, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        summary = self._summary(messages)
        if summary is not None:
            return summary
        reply = await self.model.ainvoke(messages, stop=stop, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=reply)])


# -- conversion ----------------------------------------------------------------------------------


def _fake_summary(messages: Sequence[BaseMessage]) -> str:
    """`testing.fake_summary` of a LangChain request (its canned opening if it won't convert)."""
    try:
        return fake_summary(from_langchain(messages))  # type: ignore[arg-type]
    except ConversionError:
        return fake_summary()


def from_langchain(messages: Sequence[AnyMessage]) -> list[Message]:
    """LangChain messages as ours; `ConversionError` for what ours cannot carry."""
    return [m for group in _split(messages) for m in group.messages]


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    """Our messages as LangChain messages (the inverse of `from_langchain`)."""
    return [item for message in messages for item in _convert(message)]


def _split(items: Sequence[AnyMessage]) -> list[Group[AnyMessage]]:
    return [Group((item,), (_message(item, i),)) for i, item in enumerate(items)]


def _message(item: BaseMessage, i: int) -> Message:
    try:
        return _decode(item, i)
    except MessageError as exc:  # a value ours refuses (a bad image, an empty tool name, ...)
        if exc.index is not None:
            raise
        raise ConversionError(exc.reason, index=i, field=exc.field) from exc


def _decode(item: BaseMessage, i: int) -> Message:
    if isinstance(item, SystemMessage):
        return Message.system(_text_only(item.content, i))
    if isinstance(item, HumanMessage):
        return Message(role="user", parts=tuple(_parts(item.content, i, "content")))
    if isinstance(item, AIMessage):
        return _assistant(item, i)
    if isinstance(item, ToolMessage):
        result = ToolResult(
            call_id=item.tool_call_id,
            content=tuple(_parts(item.content, i, "content")),
            is_error=item.status == "error",
        )
        return Message(role="tool", parts=(result,))
    raise ConversionError(f"a {type(item).__name__} cannot be carried", index=i)


def _assistant(item: AIMessage, i: int) -> Message:
    texts: list[str] = []
    blocks = [item.content] if isinstance(item.content, str) else item.content
    for j, block in enumerate(blocks):
        kind = block if isinstance(block, str) else block.get("type")
        if isinstance(block, str):
            texts.append(block)
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind not in _SKIPPED_AI_BLOCKS:
            raise ConversionError(
                f"an AI {kind!r} block cannot be carried", index=i, field=f"content[{j}]"
            )
    calls = [
        ToolCall(id=_call_id(c.get("id"), i), name=c["name"], arguments=json.dumps(c["args"]))
        for c in item.tool_calls
    ]
    calls += [
        ToolCall(
            id=_call_id(c.get("id"), i), name=c.get("name") or "", arguments=c.get("args") or ""
        )
        for c in item.invalid_tool_calls  # kept as the model wrote them, to go back as invalid
    ]
    text = "".join(texts)
    return Message.assistant(text if text or not calls else None, calls)


def _call_id(value: Any, i: int) -> str:
    if not isinstance(value, str) or not value:
        raise ConversionError(
            "a tool call without an id cannot be carried", index=i, field="tool_calls"
        )
    return value


def _text_only(content: str | list[str | dict[str, Any]], i: int) -> str:
    parts = _parts(content, i, "content")
    if any(not isinstance(p, TextPart) for p in parts):
        raise ConversionError("a system message can carry text only", index=i, field="content")
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def _parts(content: str | list[str | dict[str, Any]], i: int, where: str) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    parts: list[ContentPart] = []
    for j, block in enumerate(content):
        field = f"{where}[{j}]"
        if isinstance(block, str):
            parts.append(TextPart(text=block))
        elif block.get("type") == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        elif block.get("type") in ("image_url", "image"):
            parts.append(_image(block, i, field))
        else:
            raise ConversionError(
                f"a {block.get('type')!r} block cannot be carried", index=i, field=field
            )
    return parts


def _image(block: Mapping[str, Any], i: int, field: str) -> ImagePart:
    if block.get("type") == "image_url":
        url = block["image_url"]
        return image_from_url(url["url"] if isinstance(url, Mapping) else url, field)
    if block.get("url"):
        return image_from_url(block["url"], field)
    data = block.get("base64") or block.get("data")
    return image_from_url(f"data:{block.get('mime_type')};base64,{data}", field)


def _prompt_tokens(new: Sequence[AnyMessage]) -> int | None:
    """The input tokens of the first new reply: it answered the previous request."""
    for item in new:
        if isinstance(item, AIMessage):
            usage = item.usage_metadata
            return usage["input_tokens"] if usage else None
    return None


def _convert(message: Message) -> list[AnyMessage]:
    match message.role:
        case "system":
            return [SystemMessage(content=message.text)]
        case "user":
            return [HumanMessage(content=_content(message.parts))]
        case "assistant":
            calls: list[Any] = []
            invalid: list[Any] = []
            for call in message.tool_calls:
                args = _json_object(call.arguments)
                if args is None:
                    invalid.append(
                        {
                            "name": call.name,
                            "args": call.arguments,
                            "id": call.id,
                            "error": None,
                            "type": "invalid_tool_call",
                        }
                    )
                else:
                    calls.append(
                        {"name": call.name, "args": args, "id": call.id, "type": "tool_call"}
                    )
            return [AIMessage(content=message.text, tool_calls=calls, invalid_tool_calls=invalid)]
        case "tool":
            (result,) = message.parts
            assert isinstance(result, ToolResult)
            return [
                ToolMessage(
                    content=_content(result.content),
                    tool_call_id=result.call_id,
                    status="error" if result.is_error else "success",
                )
            ]
    raise AssertionError(message.role)  # pragma: no cover - roles are validated


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _content(parts: Sequence[Any]) -> str | list[str | dict[str, Any]]:
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    out: list[str | dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        elif part.url is not None:
            out.append({"type": "image", "url": part.url})
        else:
            data = base64.b64encode(part.data).decode("ascii")
            out.append({"type": "image", "base64": data, "mime_type": part.media_type})
    return out
