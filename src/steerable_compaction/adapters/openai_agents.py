"""OpenAI Agents SDK: `CompactionSession`, a `Session` on a record that returns the projection.

```python
from agents import Agent, RunConfig, Runner
from steerable_compaction import resolve_compaction_policy
from steerable_compaction.adapters.openai_agents import CompactionSession

session = CompactionSession(resolve_compaction_policy("gpt-4o"), session_id="user-42")
config = RunConfig(call_model_input_filter=session.call_model_input_filter)
result = await Runner.run(agent, "Fix the failing test.", session=session, run_config=config)
```

The runner stores every item through `add_items` (appended to the record, nothing is ever
removed); `get_items` compacts when a path calls for it and returns the projection, so each run
starts from the compacted history; `call_model_input_filter` compacts inside a long run, before
each model call. Summaries are written by the agent's own model (the agent's `Model`, or the
SDK's default provider for a model name) with the run's instructions and the agent's function
tools, so the summary request is the previous request's prefix plus one instruction; pass
`summarizer=` to use another. The record is append-only: `pop_item` and `clear_session` raise
`RecordError`. `FakeSummaries` makes the SDK's `ScriptedModel` answer the summary requests in
tests.

Conversion (`from_agents_items` / `to_agents_items`): user, system/developer and assistant
messages (text; user images as `input_image` URLs), `function_call` items (joined to the
assistant message before them) and `function_call_output` items. Reasoning, hosted-tool and
file items raise `ConversionError` naming the item and field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import SessionSettings
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.models.multi_provider import MultiProvider
from agents.run import CallModelData, ModelInputData
from agents.tool import Tool
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

from ..compaction import SummaryRequest
from ..compactor import AnySummarizer
from ..errors import ConversionError, MessageError, RecordError
from ..messages import ContentPart, ImagePart, Message, TextPart, ToolCall, ToolResult
from ..policy import CompactionPolicy
from ..record import Record
from ..testing import fake_summary, is_summary_request
from ._bridge import Bridge, Group, image_from_url, image_url, turn_model_compactor

__all__ = ["CompactionSession", "FakeSummaries", "from_agents_items", "to_agents_items"]

Item = TResponseInputItem


class CompactionSession:
    """A record-backed `Session` whose history is the compacted projection (see module doc)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        policy: CompactionPolicy,
        *,
        session_id: str = "default",
        record: Record | None = None,
        model: str | None = None,
        summarizer: AnySummarizer | None = None,
        summarizer_timeout: float | None = 300.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.session_id = session_id
        self._own_summarizer = summarizer is not None
        self.compactor = turn_model_compactor(
            policy,
            summarizer,
            self._summarize,
            record=record,
            model=model,
            summarizer_timeout=summarizer_timeout,
            env=env,
        )
        self._bridge: Bridge[Item] = Bridge(self.compactor, split=_split, convert=_convert)
        self._base: list[Item] = []  # what `get_items` returned: the head of each run's input
        self._run: list[Item] = []  # items after it, recorded by `add_items` or the filter
        self._acked = 0  # how many of `_run` the runner has stored through `add_items`
        self._call: CallModelData[Any] | None = None  # the latest model call seen

    @property
    def record(self) -> Record:
        """The append-only record of the conversation."""
        return self.compactor.record

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The projection as items (the latest `limit`); a full read compacts first."""
        if limit is not None:
            items = self._bridge.to_framework(self.compactor.record.projection.messages)
            return items[-limit:] if limit > 0 else []
        hooks = self.compactor.hooks
        policy = hooks.policy
        if not self._own_summarizer and self._call is None:
            # No model to ask yet: compact with the excerpt rather than try and fail (R6 path).
            hooks.policy = policy.replace(summarizer_enabled=False)
        try:
            items = self._bridge.to_framework(await self.compactor.extend_async(()))
        finally:
            hooks.policy = policy
        self._base, self._run, self._acked = list(items), [], 0
        return list(items)

    async def add_items(self, items: list[Item]) -> None:
        """Append the runner's new items (those a filter call recorded already are skipped)."""
        fresh: list[Item] = []
        for item in items:
            if self._acked < len(self._run) and self._run[self._acked] == item:
                self._acked += 1
                continue
            fresh.append(item)
        self.compactor.append(self._bridge.record(fresh))  # a user message starts a turn
        self._run.extend(fresh)
        self._acked = len(self._run)

    async def pop_item(self) -> Item | None:
        """Refused: the record is append-only."""
        raise RecordError("the record is append-only: a CompactionSession cannot pop items")

    async def clear_session(self) -> None:
        """Refused: the record is append-only (start a new session id and record instead)."""
        raise RecordError("the record is append-only: a CompactionSession cannot be cleared")

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """Compact inside a run: record what the session has not stored yet, send the projection."""
        self._call = data
        items = data.model_data.input
        tail = items[len(self._base) :]
        if len(items) < len(self._base) or tail[: len(self._run)] != self._run:
            raise MessageError(
                "the model input does not continue this session's history: use the session "
                "in the same run as its call_model_input_filter"
            )
        new = list(tail[len(self._run) :])
        projection = await self.compactor.extend_async(self._bridge.record(new))
        self._run.extend(new)
        return ModelInputData(
            input=self._bridge.to_framework(projection), instructions=data.model_data.instructions
        )

    async def _summarize(self, request: SummaryRequest) -> str:
        """The agent's own model, with the run's instructions and tools, writes the summary."""
        call = self._call
        if call is None:  # pragma: no cover - `get_items` turns the summarizer off meanwhile
            raise RuntimeError("no model call seen yet: pass summarizer= to summarize earlier")
        agent = call.agent
        model = (
            agent.model
            if isinstance(agent.model, Model)
            else MultiProvider().get_model(agent.model)
        )
        tools: list[Tool] = list(agent.tools)
        response = await model.get_response(
            call.model_data.instructions,
            self._bridge.to_framework(request.messages),
            agent.model_settings,
            tools,
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        return "".join(
            part.text
            for item in response.output
            if getattr(item, "type", None) == "message"
            for part in getattr(item, "content", ())
            if getattr(part, "type", None) == "output_text"
        )


# -- testing ------------------------------------------------------------------------------------


class FakeSummaries(Model):
    """For tests: answers summary requests with `summary`, everything else with `model`.

    Wrap a scripted model (`agents.testing.ScriptedModel`) so that the session's summary
    requests do not use up its script. `summary_requests` holds the input of each summary
    request answered. The session asks for summaries with `get_response`; streamed requests
    all go to `model`.
    """

    def __init__(self, model: Model, *, summary: str | None = None) -> None:
        self.model = model
        self.summary = summary
        self.summary_requests: list[list[Item]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Item],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """The summary for a summary request; otherwise `model`'s response."""
        if isinstance(input, list) and _asks_summary(input):
            self.summary_requests.append(list(input))
            summary = self.summary
            if summary is None:
                try:
                    summary = fake_summary(from_agents_items(input))
                except ConversionError:
                    summary = fake_summary()
            text = ResponseOutputText(text=summary, type="output_text", annotations=[])
            message = ResponseOutputMessage(
                id="fake-summary",
                type="message",
                role="assistant",
                status="completed",
                content=[text],
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        return await self.model.get_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """`model`'s stream, whatever it asks (the session never streams a summary request)."""
        return self.model.stream_response(*args, **kwargs)


def _asks_summary(items: Sequence[Item]) -> bool:
    """Whether the input ends with the summary instruction as a user message."""
    try:
        messages = from_agents_items(items[-1:])
    except ConversionError:
        return False
    return is_summary_request(messages)


# -- conversion ----------------------------------------------------------------------------------


def from_agents_items(items: Sequence[Item]) -> list[Message]:
    """Agents SDK input items as our messages; `ConversionError` for what ours cannot carry."""
    return [m for group in _split(items) for m in group.messages]


def to_agents_items(messages: Sequence[Message]) -> list[Item]:
    """Our messages as Agents SDK input items (the inverse of `from_agents_items`)."""
    return [item for message in messages for item in _convert(message)]


def _split(items: Sequence[Item]) -> list[Group[Item]]:
    groups: list[Group[Item]] = []
    open_assistant = False  # the last group is an assistant message that calls may join
    for i, item in enumerate(items):
        try:
            if not isinstance(item, Mapping):
                raise ConversionError(f"an item must be a mapping, not {type(item).__name__}")
            kind = str(item.get("type") or "message")
            if kind == "function_call" and open_assistant:
                last = groups.pop()
                (message,) = last.messages
                joined = Message.assistant(message.text or None, [*message.tool_calls, _call(item)])
                groups.append(Group((*last.items, item), (joined,)))
                continue
            if kind == "function_call":
                groups.append(Group((item,), (Message.assistant(None, [_call(item)]),)))
                open_assistant = True
                continue
            message = _message(item, kind)
            open_assistant = message.role == "assistant"
            groups.append(Group((item,), (message,)))
        except MessageError as exc:
            if exc.index is not None:
                raise
            raise ConversionError(exc.reason, index=i, field=exc.field) from exc
    return groups


def _call(item: Mapping[str, Any]) -> ToolCall:
    return ToolCall(
        id=item.get("call_id", ""), name=item.get("name", ""), arguments=item.get("arguments", "")
    )


def _message(item: Mapping[str, Any], kind: str) -> Message:
    if kind == "function_call_output":
        output = item.get("output")
        result = ToolResult(
            call_id=item.get("call_id", ""), content=tuple(_parts(output, "output"))
        )
        return Message(role="tool", parts=(result,))
    if kind != "message":
        raise ConversionError(f"a {kind!r} item cannot be carried", field="type")
    role = item.get("role")
    parts = _parts(item.get("content"), "content")
    if role in ("system", "developer"):
        if any(not isinstance(p, TextPart) for p in parts):
            raise ConversionError(f"a {role} message can carry text only", field="content")
        return Message(role="system", parts=tuple(parts))
    if role == "user":
        return Message(role="user", parts=tuple(parts))
    if role == "assistant":
        if any(not isinstance(p, TextPart) for p in parts):
            raise ConversionError("an assistant message can carry text only", field="content")
        return Message.assistant("".join(p.text for p in parts if isinstance(p, TextPart)))
    raise ConversionError(f"role {role!r} cannot be carried", field="role")


_TEXT = frozenset({"input_text", "output_text"})


def _parts(content: Any, where: str) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    if not isinstance(content, list):
        raise ConversionError(
            f"content must be text or a list of parts, got {content!r:.60}", field=where
        )
    parts: list[ContentPart] = []
    for j, part in enumerate(content):
        field = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT:
            parts.append(TextPart(text=part.get("text", "")))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(image_from_url(part["image_url"], field))
        else:
            raise ConversionError(f"a {kind!r} part cannot be carried", field=field)
    return parts


def _convert(message: Message) -> list[Item]:
    match message.role:
        case "system":
            return [cast(Item, {"role": "system", "content": message.text})]
        case "user":
            return [cast(Item, {"role": "user", "content": _content(message.parts)})]
        case "assistant":
            items: list[Item] = []
            if message.text or not message.tool_calls:
                items.append(cast(Item, {"role": "assistant", "content": message.text}))
            items.extend(
                cast(
                    Item,
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                )
                for call in message.tool_calls
            )
            return items
        case "tool":
            (result,) = message.parts
            assert isinstance(result, ToolResult)
            output = {
                "type": "function_call_output",
                "call_id": result.call_id,
                "output": _content(result.content),
            }
            return [cast(Item, output)]
    raise AssertionError(message.role)  # pragma: no cover - roles are validated


def _content(parts: Sequence[Any]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return [
        {"type": "input_text", "text": p.text}
        if isinstance(p, TextPart)
        else {"type": "input_image", "image_url": image_url(p), "detail": "auto"}
        for p in parts
        if isinstance(p, TextPart | ImagePart)
    ]
