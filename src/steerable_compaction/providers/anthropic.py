"""`AnthropicProvider`: the Messages API through the official `anthropic` SDK.

Messages go out through `to_anthropic(..., lossy=True)`: the leading system messages become
`system`, consecutive tool results share one user message, and what the API cannot carry
degrades deterministically (see `steerable_compaction.wire`).

Prompt caching. The request carries `cache_control: {"type": "ephemeral"}` breakpoints, at most
one per position below, so never more than the API's limit of 4:

1. the last `system` block or, without a system prompt, the last tool: tools and system stay a
   cache hit whatever happens to the messages;
2. the last block of the first message (the goal): the head stays a hit after a compaction
   rewrote everything behind it;
3. the last block of the last user message before the final message: where the previous
   request ended, so its entry is read even when the new turn added more blocks than the ~20
   the API looks back from a breakpoint;
4. the last block of the final message, only when `cache_retention="default"`.

With `cache_retention="none"` (R27) the request keeps 1-3, positions where earlier requests of the
same transcript already wrote entries: it reads the warm prefix and writes no entry for its new
suffix. A block that cannot carry a breakpoint (an empty text) is skipped for the one before it.

Usage: Anthropic's `input_tokens` excludes cached tokens, so `Usage.prompt_tokens` is
`input_tokens + cache_read_input_tokens + cache_creation_input_tokens`; `cached_tokens` is the
cache read and `cache_write_tokens` the cache creation.

The reply keeps its non-empty text blocks, then its `tool_use` blocks (whose `input` becomes
compact JSON text, as `from_anthropic` spells it); thinking and server-tool blocks are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .sdk import SdkProvider, missing_key, missing_sdk, resolve_key

try:
    import anthropic
except ModuleNotFoundError as exc:  # the `anthropic` extra is not installed
    raise missing_sdk(exc, "anthropic", "AnthropicProvider") from exc

from ..errors import ConfigError, MessageError, ProviderError
from ..record import Usage
from ..wire import AnthropicSystem, from_anthropic, to_anthropic
from .base import (
    Completion,
    CompletionRequest,
    ToolSpec,
    malformed_reply,
    provider_error,
    reply_count,
    str_or_none,
)

__all__ = ["AnthropicProvider"]

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_CACHEABLE = frozenset({"text", "image", "tool_use", "tool_result", "document"})


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic, anthropic.APIError]):
    """A `Provider` on `anthropic.AsyncAnthropic` Messages.

    Pass a ready `client`, or `api_key` / `base_url` to build one (the key defaults to
    `ANTHROPIC_API_KEY`, or a bearer `ANTHROPIC_AUTH_TOKEN`). `max_output_tokens` is the
    `max_tokens` sent when a request sets none (the API requires one).

    `complete` and `stream` raise `ContextOverflowError` for a prompt longer than the model's
    context and `ProviderError` for any other failure (`retryable` for 429, 5xx, 529 overloaded,
    transport errors and an `error` event inside a stream) or a malformed reply. The SDK
    refuses a non-streaming request whose `max_tokens` could take over ten minutes (above ~21k
    tokens) with a `ValueError`; use `stream` for those.

    Raises:
        ConfigError: no key anywhere (it names `ANTHROPIC_API_KEY`), a client together with
            `base_url`/`api_key`, or a `max_output_tokens` that is not a positive integer.
    """

    _sdk_error = anthropic.APIError
    _sdk_model = anthropic.BaseModel

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_output_tokens: int = 4096,
        name: str = "anthropic",
    ) -> None:
        self.check_client(client, base_url, api_key)
        if isinstance(max_output_tokens, bool) or not (
            isinstance(max_output_tokens, int) and max_output_tokens > 0
        ):
            raise ConfigError("max_output_tokens", max_output_tokens, "a positive integer")
        owns = client is None
        if client is None:
            if resolve_key(api_key, ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")) is None:
                raise missing_key("ANTHROPIC_API_KEY", "Anthropic", "AnthropicProvider")
            client = anthropic.AsyncAnthropic(api_key=api_key or None, base_url=base_url)
        super().__init__(model, client=client, owns_client=owns, name=name)
        self.max_output_tokens = max_output_tokens

    async def _create(self, params: dict[str, Any]) -> Any:
        return await self._client.messages.create(**params)

    def _completion(self, data: Mapping[str, Any]) -> Completion:
        return _completion(data, self.name)

    def _stream_state(self) -> _StreamState:
        return _StreamState()

    def _params(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        system, messages = to_anthropic(request.messages, lossy=True)
        tools = [_tool(spec) for spec in request.tools]
        system, messages, tools = _cache_breakpoints(
            system, messages, tools, new_suffix=request.cache_retention == "default"
        )
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_output_tokens or self.max_output_tokens,
            "messages": messages,
        }
        if system is not None:
            params["system"] = system
        if tools:
            params["tools"] = tools
        if request.temperature is not None:  # newer SDKs have no `temperature` keyword
            params["extra_body"] = {"temperature": request.temperature}
        if stream:
            params["stream"] = True
        return params

    def _error(self, exc: anthropic.APIError) -> ProviderError:
        if isinstance(exc, anthropic.APIResponseValidationError):
            return malformed_reply(self.name, exc.message, status_code=exc.status_code)
        status: int | None = None
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code >= 400:
            status = exc.status_code  # an `error` event inside a 200 stream counts as no status
        code, message = None, exc.message
        error = exc.body.get("error") if isinstance(exc.body, Mapping) else None
        if isinstance(error, Mapping):
            code = error.get("type") if isinstance(error.get("type"), str) else None
            message = error["message"] if isinstance(error.get("message"), str) else message
        return provider_error(self.name, status_code=status, code=code, message=message)


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "input_schema": dict(spec.parameters)}
    if spec.description:
        tool["description"] = spec.description
    return tool


# -- prompt caching ------------------------------------------------------------------------------


def _cache_breakpoints(
    system: AnthropicSystem,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    new_suffix: bool,
) -> tuple[AnthropicSystem, list[dict[str, Any]], list[dict[str, Any]]]:
    """Copies of `system`, `messages` and `tools` carrying the module docstring's breakpoints.

    `new_suffix=False` (`cache_retention="none"`) leaves the final message unmarked.
    """
    marked = _mark_system(system)
    if marked is not None:
        system = marked
    elif tools:
        tools = [*tools[:-1], _marked(tools[-1])]
    last = len(messages) - 1
    positions: set[int] = set()
    if messages:
        if new_suffix:
            positions.add(last)
        if last > 0:
            positions.add(0)
        previous = [i for i in range(last) if messages[i].get("role") == "user"]
        if previous:
            positions.add(previous[-1])
    messages = [_mark_message(m) if i in positions else m for i, m in enumerate(messages)]
    return system, messages, tools


def _mark_system(system: AnthropicSystem) -> AnthropicSystem:
    """`system` with a breakpoint on its last block, or `None` if it cannot take one."""
    if isinstance(system, str):
        return [_marked({"type": "text", "text": system})] if system else None
    if system and system[-1].get("text"):
        return [*system[:-1], _marked(system[-1])]
    return None


def _mark_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]  # a string or a list of blocks, as `to_anthropic` builds it
    if isinstance(content, str):
        if not content:
            return message
        return {**message, "content": [_marked({"type": "text", "text": content})]}
    for j in range(len(content) - 1, -1, -1):
        block = content[j]
        if block.get("type") in _CACHEABLE and not (
            block.get("type") == "text" and not block.get("text")
        ):
            return {**message, "content": [*content[:j], _marked(block), *content[j + 1 :]]}
    return message


def _marked(block: Mapping[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": dict(_EPHEMERAL)}


# -- replies -------------------------------------------------------------------------------------


def _completion(data: Mapping[str, Any], provider: str) -> Completion:
    content = data.get("content")
    if not isinstance(content, list):
        raise malformed_reply(provider, f"content must be a list of blocks, got {content!r:.80}")
    texts: list[Any] = []
    calls: list[Any] = []
    for j, block in enumerate(content):
        if not isinstance(block, Mapping):
            raise malformed_reply(provider, f"content[{j}] is not an object")
        kind = block.get("type")
        if kind == "text" and block.get("text") != "":
            texts.append(block)
        elif kind == "tool_use":
            calls.append(block)
    try:
        (message,) = from_anthropic(None, [{"role": "assistant", "content": texts + calls}])
    except MessageError as exc:
        where = f" ({exc.field} among the text and tool_use blocks)" if exc.field else ""
        raise malformed_reply(provider, f"{exc.reason}{where}") from exc
    return Completion(
        message=message,
        usage=_usage(data.get("usage"), provider),
        stop_reason=str_or_none(data.get("stop_reason")),
        model=str_or_none(data.get("model")),
    )


def _usage(value: Any, provider: str) -> Usage:
    if not isinstance(value, Mapping):
        return Usage(prompt_tokens=0)
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens")
    fresh, output, read, write = (
        reply_count(value.get(key), f"usage.{key}", provider)
        for key in (*keys, "cache_creation_input_tokens")
    )
    return Usage(
        prompt_tokens=fresh + read + write,
        completion_tokens=output,
        cached_tokens=read,
        cache_write_tokens=write,
    )


@dataclass
class _StreamState:
    """The message the events have built so far."""

    started: bool = False
    model: str | None = None
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    input_json: dict[int, list[str]] = field(default_factory=dict)

    def add(self, event: Mapping[str, Any], provider: str) -> list[str]:
        """Fold in one event; return its text pieces."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, Mapping):
                raise malformed_reply(provider, "message_start carries no message object")
            self.started = True
            self.model = str_or_none(message.get("model"))
            self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, Mapping):
                raise malformed_reply(provider, "content_block_start carries no content_block")
            self.blocks[self._index(event, provider)] = dict(block)
        elif kind == "content_block_delta":
            return self._add_delta(event, provider)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping):
                self.stop_reason = str_or_none(delta.get("stop_reason")) or self.stop_reason
            self._add_usage(event.get("usage"))
        return []  # content_block_stop, message_stop, ping and future events

    def _add_delta(self, event: Mapping[str, Any], provider: str) -> list[str]:
        index = self._index(event, provider)
        block = self.blocks.get(index)
        delta = event.get("delta")
        if block is None or not isinstance(delta, Mapping):
            raise malformed_reply(provider, f"content_block_delta for unknown block {index}")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if block.get("type") != "text" or not isinstance(text, str):
                raise malformed_reply(provider, f"text_delta for block {index} is not text")
            block["text"] = block.get("text", "") + text
            return [text] if text else []
        if kind == "input_json_delta":
            piece = delta.get("partial_json")
            if block.get("type") != "tool_use" or not isinstance(piece, str):
                raise malformed_reply(
                    provider, f"input_json_delta for block {index} is not tool_use"
                )
            self.input_json.setdefault(index, []).append(piece)
        return []  # thinking, signature and citation deltas are not kept

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):  # message_delta counts are cumulative: latest wins
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    @staticmethod
    def _index(event: Mapping[str, Any], provider: str) -> int:
        index = event.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            raise malformed_reply(provider, f"{event.get('type')} has no integer index")
        return index

    def completion(self, provider: str) -> Completion:
        """The reply the events spelled out."""
        if not self.started:
            raise malformed_reply(provider, "the stream ended without message_start")
        content: list[dict[str, Any]] = []
        for index, block in sorted(self.blocks.items()):
            text = "".join(self.input_json.get(index, ()))
            if text:
                try:
                    block = {**block, "input": json.loads(text)}
                except ValueError as exc:
                    raise malformed_reply(provider, f"tool_use {index} input is not JSON") from exc
            content.append(block)
        data = {"content": content, "usage": self.usage, "model": self.model}
        return _completion({**data, "stop_reason": self.stop_reason}, provider)
