"""`OpenAIProvider`: Chat Completions through the official `openai` SDK.

It speaks to OpenAI and to OpenAI-compatible servers (llama.cpp `llama-server`, vLLM, …) alike:

- messages go out through `to_openai(..., lossy=True)`, so what Chat Completions cannot carry (an
  image inside a tool result, a tool error flag) degrades deterministically instead of failing;
- the output cap is sent as `max_tokens` by default: every compatible server reads it, while
  `max_completion_tokens` is ignored by older llama.cpp and llama-cpp-python (the reply would
  run unbounded). Pass `max_tokens_field="max_completion_tokens"` for OpenAI reasoning models,
  which refuse `max_tokens`;
- `cache_retention` is ignored: OpenAI-style prompt caching is automatic and has no per-request
  "do not write" switch;
- the reply becomes one assistant `Message`: its text (dropped when empty and the reply calls
  tools) and its tool calls, each `arguments` string kept byte for byte. Reasoning fields
  (`reasoning_content`) and refusals are not kept;
- usage: `prompt_tokens`, `completion_tokens` and `prompt_tokens_details.cached_tokens`, or
  DeepSeek's `prompt_cache_hit_tokens` when the details are absent (its `prompt_tokens` already
  counts hits and misses).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .sdk import SdkProvider, missing_key, missing_sdk, resolve_key

try:
    import openai
except ModuleNotFoundError as exc:  # the `openai` extra is not installed
    raise missing_sdk(exc, "openai", "OpenAIProvider") from exc

from ..errors import ConfigError, MessageError, ProviderError
from ..messages import Message
from ..record import Usage
from ..wire import from_openai, to_openai
from .base import (
    Completion,
    CompletionRequest,
    malformed_reply,
    provider_error,
    reply_count,
    str_or_none,
)

__all__ = ["OpenAIProvider"]

_NO_KEY = "unused"  # llama.cpp and vLLM accept any key unless started with one


class OpenAIProvider(SdkProvider[openai.AsyncOpenAI, openai.APIError]):
    """A `Provider` on `openai.AsyncOpenAI` Chat Completions.

    Pass a ready `client`, or `base_url` / `api_key` to build one (the key defaults to
    `OPENAI_API_KEY`; with `base_url` and no key anywhere, a placeholder key is sent, as local
    servers want none). `extra_body` is merged into every request body (e.g. llama.cpp's
    `{"cache_prompt": True}`).

    `complete` and `stream` raise `ContextOverflowError` for a request longer than the
    model's context and `ProviderError` for any other failure (`retryable` for 429, 5xx and
    transport errors, and for an error event inside a stream unless it reports an overflow) or
    a malformed reply. A stream's usage comes from its final chunk
    (`stream_options.include_usage`); a server that sends none (older llama.cpp) yields a
    `StreamDone` whose usage is all zeros.

    Raises:
        ConfigError: no key for OpenAI itself (it names `OPENAI_API_KEY`), a client together
            with `base_url`/`api_key`, or an unknown `max_tokens_field`.
    """

    _sdk_error = openai.APIError
    _sdk_model = openai.BaseModel

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        name: str = "openai",
        extra_body: Mapping[str, Any] | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        self.check_client(client, base_url, api_key)
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            allowed = "'max_tokens' or 'max_completion_tokens'"
            raise ConfigError("max_tokens_field", max_tokens_field, allowed)
        owns = client is None
        if client is None:
            key = resolve_key(api_key, ("OPENAI_API_KEY",))
            if key is None and base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                hint = "; for a local OpenAI-compatible server pass base_url=... instead"
                raise missing_key("OPENAI_API_KEY", "OpenAI", "OpenAIProvider", hint)
            client = openai.AsyncOpenAI(api_key=key or _NO_KEY, base_url=base_url)
        super().__init__(model, client=client, owns_client=owns, name=name)
        self._extra_body = dict(extra_body or {})
        self._max_tokens_field = max_tokens_field

    async def _create(self, params: dict[str, Any]) -> Any:
        return await self._client.chat.completions.create(**params)

    def _params(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai(request.messages, lossy=True),
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": dict(tool.parameters),
                    },
                }
                for tool in request.tools
            ]
        if request.max_output_tokens is not None:
            params[self._max_tokens_field] = request.max_output_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if self._extra_body:
            params["extra_body"] = dict(self._extra_body)
        if stream:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        return params

    def _error(self, exc: openai.APIError) -> ProviderError:
        if isinstance(exc, openai.APIResponseValidationError):
            return malformed_reply(self.name, exc.message, status_code=exc.status_code)
        # An error event inside a 200 stream has no status: classified like a dropped stream.
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        message = exc.message
        if isinstance(exc.body, Mapping) and isinstance(exc.body.get("message"), str):
            message = exc.body["message"]  # the SDK's own message repeats the whole body
        elif isinstance(exc.body, str) and exc.body:
            message = exc.body  # TGI's `{"error": "..."}`: the SDK keeps the string as the body
        # llama.cpp and vLLM send the HTTP status as `code` and say what happened in `type`.
        code = " ".join(c for c in (exc.code, exc.type) if isinstance(c, str) and c) or None
        return provider_error(self.name, status_code=status, code=code, message=message)

    def _completion(self, data: Mapping[str, Any]) -> Completion:
        return _completion(data, self.name)

    def _stream_state(self) -> _StreamState:
        return _StreamState()


# -- replies -------------------------------------------------------------------------------------


def _completion(data: Mapping[str, Any], provider: str) -> Completion:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed_reply(provider, f"no choices (got {choices!r:.80})")
    choice = choices[0]
    if not isinstance(choice, Mapping) or not isinstance(choice.get("message"), Mapping):
        raise malformed_reply(provider, "choices[0] has no message object")
    wire = choice["message"]
    return Completion(
        message=_assistant(wire.get("content"), wire.get("tool_calls"), provider),
        usage=_usage(data.get("usage"), provider),
        stop_reason=str_or_none(choice.get("finish_reason")),
        model=str_or_none(data.get("model")),
    )


def _assistant(content: Any, tool_calls: Any, provider: str) -> Message:
    """The neutral reply, decoded by `from_openai` (one canonical form for both paths)."""
    wire: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        wire["tool_calls"] = tool_calls
    try:
        (decoded,) = from_openai([wire])
    except MessageError as exc:
        where = f"message.{exc.field}" if exc.field else "message"
        raise malformed_reply(provider, f"{where}: {exc.reason}") from exc
    text, calls = decoded.text, decoded.tool_calls
    return Message.assistant(text if text or not calls else None, calls)


def _usage(value: Any, provider: str) -> Usage:
    if not isinstance(value, Mapping):
        return Usage(prompt_tokens=0)
    details = value.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    where = "usage.prompt_tokens_details.cached_tokens"
    if cached is None and "prompt_cache_hit_tokens" in value:
        cached, where = value["prompt_cache_hit_tokens"], "usage.prompt_cache_hit_tokens"
    return Usage(
        prompt_tokens=reply_count(value.get("prompt_tokens"), "usage.prompt_tokens", provider),
        completion_tokens=reply_count(
            value.get("completion_tokens"), "usage.completion_tokens", provider
        ),
        cached_tokens=reply_count(cached, where, provider),
    )


@dataclass
class _ToolCallState:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    """What the chunks have said so far: choice 0's text, tool calls, finish, usage, model."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallState] = field(default_factory=dict)
    seen_choice: bool = False
    finish_reason: str | None = None
    model: str | None = None
    usage: Any = None

    def add(self, chunk: Mapping[str, Any], provider: str) -> list[str]:
        """Fold in one chunk; return its text pieces."""
        self.model = str_or_none(chunk.get("model")) or self.model
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise malformed_reply(provider, f"chunk choices must be a list, got {choices!r:.80}")
        pieces: list[str] = []
        for choice in choices:
            if not isinstance(choice, Mapping):
                raise malformed_reply(provider, "a chunk choice is not an object")
            if choice.get("index", 0) != 0:
                continue
            self.seen_choice = True
            self.finish_reason = str_or_none(choice.get("finish_reason")) or self.finish_reason
            delta = choice.get("delta") or {}
            if not isinstance(delta, Mapping):
                raise malformed_reply(provider, "choices[0].delta is not an object")
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self.text.append(piece)
                pieces.append(piece)
            for call in delta.get("tool_calls") or ():
                self._add_call(call, provider)
        return pieces

    def _add_call(self, call: Any, provider: str) -> None:
        index = call.get("index") if isinstance(call, Mapping) else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise malformed_reply(provider, f"a tool call delta has no integer index: {call!r:.80}")
        state = self.calls.setdefault(index, _ToolCallState())
        function = call.get("function") or {}
        if not isinstance(function, Mapping):
            raise malformed_reply(provider, f"tool call {index}: function is not an object")
        if isinstance(call.get("id"), str) and not state.id:
            state.id = call["id"]  # some servers repeat the id in every delta
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str):
            state.name += name
        if isinstance(arguments, str):
            state.arguments.append(arguments)

    def completion(self, provider: str) -> Completion:
        """The reply the chunks spelled out."""
        if not self.seen_choice:
            raise malformed_reply(provider, "the stream ended without a choice")
        calls = [
            {
                "id": state.id,
                "type": "function",
                "function": {"name": state.name, "arguments": "".join(state.arguments)},
            }
            for _, state in sorted(self.calls.items())
        ]
        content = "".join(self.text) if self.text else None
        return Completion(
            message=_assistant(content, calls or None, provider),
            usage=_usage(self.usage, provider),
            stop_reason=self.finish_reason,
            model=self.model,
        )
