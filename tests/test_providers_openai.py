"""Tests for `steerable_compaction.providers.openai` against the real SDK and a mock transport.

The SDKs run on `httpx2`, so the fake server is an `httpx2.MockTransport`; the payloads follow
the documented Chat Completions shapes (and llama.cpp / vLLM variants where they differ).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx2
import openai
import pytest

from steerable_compaction.errors import ConfigError, ContextOverflowError, ProviderError
from steerable_compaction.messages import ImagePart, Message, ToolCall
from steerable_compaction.providers import (
    Completion,
    CompletionRequest,
    Provider,
    StreamDone,
    TextDelta,
    ToolSpec,
)
from steerable_compaction.providers.openai import OpenAIProvider
from steerable_compaction.record import Usage
from steerable_compaction.wire import to_openai

MODEL = "gpt-4o-2024-08-06"
RAW_ARGUMENTS = '{"path": "src/app.py",\n  "limit":40 , "note": "caf\\u00e9"}'
TRANSCRIPT = (
    Message.system("You are a coding agent."),
    Message.user("Fix the failing test in src/app.py."),
    Message.assistant("Reading it.", [ToolCall(id="call_0", name="read_file", arguments="{}")]),
    Message.tool("call_0", "def main(): ..."),
)
TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
)


class Server:
    """A fake endpoint: answers each request with the next scripted reply and records it."""

    def __init__(self, *replies: httpx2.Response | Callable[[httpx2.Request], Any]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, httpx2.Response):
            return reply
        result: httpx2.Response = reply(request)
        return result

    @property
    def body(self) -> dict[str, Any]:
        """The JSON body of the last request."""
        body: dict[str, Any] = json.loads(self.requests[-1].content)
        return body


@asynccontextmanager
async def provider(server: Server, **kwargs: Any) -> AsyncIterator[OpenAIProvider]:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(server)) as http:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="https://api.test/v1", http_client=http, max_retries=0
        )
        yield OpenAIProvider(MODEL, client=client, **kwargs)


def completion_body(content: str | None, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    """A `chat.completion` object as the API documents it."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 1117,
            "completion_tokens": 46,
            "total_tokens": 1163,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035",
    }


def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `chat.completion.chunk` object."""
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": MODEL,
        "system_fingerprint": "fp_fc9f1d7035",
        "choices": choices,
        "usage": usage,
    }


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"index": 0, "delta": fields, "logprobs": None, "finish_reason": finish}


def stream_chunks(
    content: str | None, calls: list[tuple[str, str, str]], *, usage: bool = True
) -> list[dict[str, Any]]:
    """The streamed form of `completion_body(content, calls)`, split the way the API splits."""
    out = [chunk([delta(role="assistant", content="", refusal=None)])]
    for i in range(0, len(content or ""), 4):
        out.append(chunk([delta(content=(content or "")[i : i + 4])]))
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        out.append(
            chunk([delta(tool_calls=[{**head, "function": {"name": name, "arguments": ""}}])])
        )
        for i in range(0, len(arguments), 7):
            piece = {"index": index, "function": {"arguments": arguments[i : i + 7]}}
            out.append(chunk([delta(tool_calls=[piece])]))
    out.append(chunk([delta("tool_calls" if calls else "stop")]))
    if usage:
        out.append(chunk([], completion_body(None, [])["usage"]))
    return out


def sse(*events: dict[str, Any] | str) -> httpx2.Response:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    body = "".join(lines) + "data: [DONE]\n\n"
    return httpx2.Response(
        200, content=body.encode(), headers={"content-type": "text/event-stream"}
    )


async def collect(p: OpenAIProvider, request: CompletionRequest) -> list[Any]:
    return [event async for event in p.stream(request)]


REQUEST = CompletionRequest(messages=TRANSCRIPT, tools=TOOLS, max_output_tokens=512)
TOOL_REPLY = ("Let me look.", [("call_abc123", "read_file", RAW_ARGUMENTS)])


# -- requests ------------------------------------------------------------------------------------


async def test_complete_sends_messages_tools_and_max_tokens() -> None:
    """`complete` posts the `to_openai` messages, function tools and `max_tokens`."""
    server = Server(httpx2.Response(200, json=completion_body("ok", [])))
    async with provider(server) as p:
        await p.complete(
            CompletionRequest(
                messages=TRANSCRIPT, tools=TOOLS, max_output_tokens=512, temperature=0.2
            )
        )
    assert server.requests[0].url.path == "/v1/chat/completions"
    assert server.body == {
        "model": MODEL,
        "messages": to_openai(TRANSCRIPT),
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                },
            }
        ],
        "max_tokens": 512,
        "temperature": 0.2,
    }


async def test_stream_asks_for_usage_in_the_stream() -> None:
    """`stream` posts `stream: true` with `stream_options.include_usage`."""
    server = Server(sse(*stream_chunks("ok", [])))
    async with provider(server) as p:
        await collect(p, REQUEST)
    assert server.body["stream"] is True
    assert server.body["stream_options"] == {"include_usage": True}
    assert server.body["messages"] == to_openai(TRANSCRIPT)


async def test_max_completion_tokens_field_and_extra_body() -> None:
    """`max_tokens_field` renames the cap; `extra_body` is merged into the body."""
    server = Server(httpx2.Response(200, json=completion_body("ok", [])))
    async with provider(
        server, max_tokens_field="max_completion_tokens", extra_body={"cache_prompt": True}
    ) as p:
        await p.complete(REQUEST)
    assert server.body["max_completion_tokens"] == 512
    assert "max_tokens" not in server.body
    assert server.body["cache_prompt"] is True


async def test_cache_retention_is_ignored() -> None:
    """R27: OpenAI has no "do not write" switch, so `cache_retention="none"` changes nothing."""
    server = Server(*(httpx2.Response(200, json=completion_body("ok", [])) for _ in range(2)))
    bodies = []
    async with provider(server) as p:
        for retention in ("default", "none"):
            await p.complete(
                CompletionRequest(messages=TRANSCRIPT, tools=TOOLS, cache_retention=retention)
            )
            bodies.append(server.body)
    assert bodies[0] == bodies[1]


async def test_what_chat_completions_cannot_carry_degrades() -> None:
    """Messages go out with `lossy=True`: an image in a tool result becomes a text pointer."""
    image = ImagePart(media_type="image/png", data=b"\x89PNG")
    messages = (*TRANSCRIPT[:3], Message.tool("call_0", [image]))
    server = Server(httpx2.Response(200, json=completion_body("ok", [])))
    async with provider(server) as p:
        await p.complete(CompletionRequest(messages=messages))
    assert server.body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": "[image: image/png]",
    }


# -- replies -------------------------------------------------------------------------------------


async def test_complete_parses_text_tool_calls_and_usage() -> None:
    """The reply keeps text and raw argument bytes; usage includes the cached tokens."""
    server = Server(httpx2.Response(200, json=completion_body(*TOOL_REPLY)))
    async with provider(server) as p:
        completion = await p.complete(REQUEST)
    assert completion == Completion(
        message=Message.assistant(
            "Let me look.",
            [ToolCall(id="call_abc123", name="read_file", arguments=RAW_ARGUMENTS)],
        ),
        usage=Usage(prompt_tokens=1117, completion_tokens=46, cached_tokens=1024),
        stop_reason="tool_calls",
        model=MODEL,
    )


@pytest.mark.parametrize(
    ("content", "calls"),
    [
        ("Hello there, how can I help?", []),
        ("", []),
        (None, [("call_1", "read_file", RAW_ARGUMENTS)]),
        TOOL_REPLY,
        (
            "Two at once.",
            [("call_1", "read_file", '{"path": "a"}'), ("call_2", "grep", '{"q":"x"}')],
        ),
    ],
)
async def test_stream_equals_complete(content: str | None, calls: list[Any]) -> None:
    """Streaming the same reply yields its text as deltas and the same `Completion`."""
    server = Server(
        httpx2.Response(200, json=completion_body(content, calls)),
        sse(*stream_chunks(content, calls)),
    )
    async with provider(server) as p:
        whole = await p.complete(REQUEST)
        events = await collect(p, REQUEST)
    assert isinstance(events[-1], StreamDone)
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    assert "".join(e.text for e in events[:-1]) == (content or "")
    assert events[-1].completion == whole


# DeepSeek's usage, as its context-caching guide documents the fields (api-docs.deepseek.com
# guides/kv_cache; docs.stigg.io/documentation/ai-agents/providers/deepseek restates that
# DeepSeek reports cache use in these fields rather than `cached_tokens`).
DEEPSEEK_USAGE = {
    "prompt_tokens": 1100,
    "completion_tokens": 20,
    "total_tokens": 1120,
    "prompt_cache_hit_tokens": 1024,
    "prompt_cache_miss_tokens": 76,
}


async def test_deepseek_cache_hits_are_read_as_cached_tokens() -> None:
    """DeepSeek's `prompt_cache_hit_tokens` is the cached count (whole and streamed)."""
    body = {**completion_body("ok", []), "usage": DEEPSEEK_USAGE}
    server = Server(
        httpx2.Response(200, json=body),
        sse(*stream_chunks("ok", [], usage=False), chunk([], DEEPSEEK_USAGE)),
    )
    async with provider(server) as p:
        whole = await p.complete(REQUEST)
        events = await collect(p, REQUEST)
    expected = Usage(prompt_tokens=1100, completion_tokens=20, cached_tokens=1024)
    assert whole.usage == expected
    assert events[-1].completion.usage == expected


async def test_cached_tokens_details_win_over_deepseeks_field() -> None:
    """When both are present, `prompt_tokens_details.cached_tokens` is read (OpenAI's own)."""
    usage = {**DEEPSEEK_USAGE, "prompt_tokens_details": {"cached_tokens": 512}}
    server = Server(httpx2.Response(200, json={**completion_body("ok", []), "usage": usage}))
    async with provider(server) as p:
        assert (await p.complete(REQUEST)).usage.cached_tokens == 512


async def test_a_bad_deepseek_cache_count_is_a_malformed_reply() -> None:
    """A negative `prompt_cache_hit_tokens` is named in the malformed-reply error."""
    usage = {**DEEPSEEK_USAGE, "prompt_cache_hit_tokens": -3}
    server = Server(httpx2.Response(200, json={**completion_body("ok", []), "usage": usage}))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match=r"usage\.prompt_cache_hit_tokens"):
            await p.complete(REQUEST)


async def test_stream_without_usage_reports_zero_usage() -> None:
    """A server that sends no usage in the stream (older llama.cpp) still completes."""
    server = Server(sse(*stream_chunks("Hi", [], usage=False)))
    async with provider(server) as p:
        events = await collect(p, REQUEST)
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.completion.message == Message.assistant("Hi")
    assert done.completion.usage == Usage(prompt_tokens=0, completion_tokens=0)


async def test_stream_takes_usage_from_a_final_choice_chunk() -> None:
    """Usage sent on the last choice chunk (some servers) is read too."""
    usage = {"prompt_tokens": 12, "completion_tokens": 2, "prompt_tokens_details": None}
    server = Server(sse(chunk([delta(content="Hi")]), chunk([delta("stop")], usage)))
    async with provider(server) as p:
        events = await collect(p, REQUEST)
    assert events[-1].completion.usage == Usage(prompt_tokens=12, completion_tokens=2)


async def test_stream_ignores_other_choices() -> None:
    """Only choice 0 is read; chunks for other choices (`n > 1` servers) are skipped."""
    other = {**delta(content="ignored"), "index": 1}
    server = Server(sse(chunk([delta(content="Hi"), other]), chunk([delta("stop")])))
    async with provider(server) as p:
        events = await collect(p, REQUEST)
    assert [e.text for e in events[:-1]] == ["Hi"]
    assert events[-1].completion.message == Message.assistant("Hi")


async def test_reasoning_content_is_not_kept() -> None:
    """llama.cpp's `reasoning_content` is neither streamed nor kept in the reply."""
    body = completion_body("Answer.", [])
    body["choices"][0]["message"]["reasoning_content"] = "thinking..."
    server = Server(
        httpx2.Response(200, json=body),
        sse(chunk([delta(reasoning_content="thinking...")]), *stream_chunks("Answer.", [])),
    )
    async with provider(server) as p:
        whole = await p.complete(REQUEST)
        events = await collect(p, REQUEST)
    assert whole.message == Message.assistant("Answer.")
    assert events[-1].completion == whole


# -- errors --------------------------------------------------------------------------------------

OPENAI_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, you requested "
        "7639 tokens (7383 in the messages, 256 in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
LLAMA_CPP_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 14429,
        "n_ctx": 8192,
    }
}
LLAMA_CPP_OLD_OVERFLOW = {
    "error": {
        "code": 500,
        "message": "the request exceeds the available context size. try increasing the "
        "context size or enable context shift",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 1407,
        "n_ctx": 256,
    }
}
VLLM_OVERFLOW = {
    "object": "error",
    "message": "This model's maximum context length is 16384 tokens. However, you requested "
    "122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length "
    "of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_MAX_TOKENS_TOO_LARGE = {
    "error": {
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's "
        "maximum context length is 8192 tokens and your request has 1210 input tokens "
        "(8192 > 8192 - 1210).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


VLLM_V1_OVERFLOW = {
    "error": {
        "message": "The decoder prompt (length 12324) is longer than the maximum model length "
        "of 8192.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
TGI_OVERFLOW = {
    "error": "Input validation error: `inputs` must have less than 4096 tokens. Given: 4545",
    "error_type": "validation",
}
INVALID = "invalid_request_error"


def api_error(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, OPENAI_OVERFLOW),
        (400, LLAMA_CPP_OVERFLOW),
        (500, LLAMA_CPP_OLD_OVERFLOW),
        (400, VLLM_OVERFLOW),
        (400, VLLM_V1_OVERFLOW),
        (422, TGI_OVERFLOW),
    ],
    ids=["openai", "llama.cpp", "llama.cpp-500", "vllm", "vllm-v1", "tgi"],
)
async def test_overflow_raises_context_overflow_error(status: int, body: dict[str, Any]) -> None:
    """R13: each server's "too long" reply raises `ContextOverflowError` with its message."""
    server = Server(httpx2.Response(status, json=body), httpx2.Response(status, json=body))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError) as caught:
            await p.complete(REQUEST)
        with pytest.raises(ContextOverflowError):
            await collect(p, REQUEST)
    assert caught.value.status_code == status
    assert caught.value.provider == "openai"
    error = body.get("error", body)
    assert caught.value.message == (error["message"] if isinstance(error, dict) else error)


async def test_vllm_max_tokens_too_large_is_fatal_not_an_overflow() -> None:
    """A vLLM "max_tokens is too large" 400 is a fatal `ProviderError` (issue 14 item 9)."""
    server = Server(httpx2.Response(400, json=VLLM_MAX_TOKENS_TOO_LARGE))
    async with provider(server) as p:
        with pytest.raises(ProviderError) as caught:
            await p.complete(REQUEST)
    assert type(caught.value) is ProviderError
    assert (caught.value.status_code, caught.value.retryable) == (400, False)


async def test_a_proxy_413_page_is_an_overflow() -> None:
    """A reverse proxy's HTML 413 (the request body is too large) raises `ContextOverflowError`."""
    page = "<html><head><title>413 Request Entity Too Large</title></head></html>"
    server = Server(httpx2.Response(413, text=page, headers={"content-type": "text/html"}))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError) as caught:
            await p.complete(REQUEST)
    assert caught.value.status_code == 413


async def test_the_error_type_is_read_when_the_code_is_a_number() -> None:
    """llama.cpp's `type` (its `code` is the HTTP status as a number) is classified too."""
    body = {"error": {"code": 400, "message": "ctx full", "type": "exceed_context_size_error"}}
    server = Server(httpx2.Response(400, json=body))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError) as caught:
            await p.complete(REQUEST)
    assert caught.value.message == "ctx full"


@pytest.mark.parametrize(
    ("status", "body", "retryable"),
    [
        (429, api_error("Rate limit reached for gpt-4o", "requests", "rate_limit_exceeded"), True),
        (500, api_error("The server had an error", "server_error", None), True),
        (502, {"error": {"message": "Bad gateway.", "type": "cf_bad_gateway"}}, True),
        (503, api_error("The engine is currently overloaded", "server_error", None), True),
        (401, api_error("Incorrect API key provided.", INVALID, "invalid_api_key"), False),
        (403, api_error("Country not supported.", INVALID, None), False),
        (404, api_error("The model `gpt-9` does not exist", INVALID, "model_not_found"), False),
        (400, api_error("Invalid value for 'temperature'.", INVALID, None), False),
    ],
)
async def test_http_errors_are_retryable_or_fatal(
    status: int, body: dict[str, Any], retryable: bool
) -> None:
    """429 and 5xx raise a retryable `ProviderError`; other 4xx a fatal one."""
    server = Server(httpx2.Response(status, json=body))
    async with provider(server, name="gateway") as p:
        with pytest.raises(ProviderError) as caught:
            await p.complete(REQUEST)
    assert type(caught.value) is ProviderError
    assert caught.value.retryable is retryable
    assert caught.value.status_code == status
    assert caught.value.provider == "gateway"
    assert caught.value.message == body["error"]["message"]


@pytest.mark.parametrize(
    "failure", [httpx2.ConnectError("connection refused"), httpx2.ReadTimeout("timed out")]
)
async def test_transport_failures_are_retryable(failure: Exception) -> None:
    """Connection errors and timeouts raise a retryable `ProviderError` without status."""

    def fail(request: httpx2.Request) -> httpx2.Response:
        raise failure

    server = Server(fail, fail)
    async with provider(server) as p:
        with pytest.raises(ProviderError) as caught:
            await p.complete(REQUEST)
        with pytest.raises(ProviderError) as streamed:
            await collect(p, REQUEST)
    for error in (caught.value, streamed.value):
        assert error.retryable is True
        assert error.status_code is None


async def test_error_inside_the_stream_is_retryable() -> None:
    """An `error` object inside a 200 stream is classified like a dropped connection."""
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    server = Server(sse(chunk([delta(content="Hi")]), error))
    async with provider(server) as p:
        with pytest.raises(ProviderError) as caught:
            await collect(p, REQUEST)
    assert type(caught.value) is ProviderError
    assert caught.value.retryable is True
    assert caught.value.status_code is None


async def test_overflow_inside_the_stream_is_an_overflow() -> None:
    """R13: an in-stream error reporting overflow raises `ContextOverflowError`."""
    server = Server(sse(OPENAI_OVERFLOW))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError):
            await collect(p, REQUEST)


def _bad_call(**function: Any) -> dict[str, Any]:
    body = completion_body(None, [("call_1", "read_file", "{}")])
    body["choices"][0]["message"]["tool_calls"][0]["function"] = function
    return body


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ({**completion_body("x", []), "choices": []}, "no choices"),
        ({"id": "chatcmpl-1", "object": "chat.completion"}, "no choices"),
        ({**completion_body("x", []), "choices": "oops"}, "no choices"),
        ({**completion_body("x", []), "choices": [{"index": 0}]}, "no message"),
        (_bad_call(name="read_file", arguments={"path": "a"}), "arguments"),
        (_bad_call(arguments="{}"), "name"),
        ({**completion_body("x", []), "usage": {"prompt_tokens": -1}}, "usage.prompt_tokens"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
async def test_malformed_reply_raises_provider_error(body: Any, what: str) -> None:
    """A reply without choices or with a bad tool call raises a fatal `ProviderError`."""
    server = Server(httpx2.Response(200, json=body))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await p.complete(REQUEST)
    assert what in str(caught.value)
    assert caught.value.retryable is False


async def test_strict_validation_failure_raises_provider_error() -> None:
    """An SDK response-validation error (strict clients) becomes a malformed-reply error."""
    server = Server(httpx2.Response(200, json={"id": 3, "choices": "x"}))
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(server)) as http:
        client = openai.AsyncOpenAI(
            api_key="k", http_client=http, max_retries=0, _strict_response_validation=True
        )
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await OpenAIProvider(MODEL, client=client).complete(REQUEST)
    assert caught.value.status_code == 200


async def test_reply_that_is_not_json_raises_provider_error() -> None:
    """A 200 whose body is not JSON raises `ProviderError`, not the SDK's decode error."""
    server = Server(
        httpx2.Response(200, text="<html>", headers={"content-type": "application/json"})
    )
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="not JSON"):
            await p.complete(REQUEST)


@pytest.mark.parametrize(
    ("events", "what"),
    [
        ([chunk([], {"prompt_tokens": 3, "completion_tokens": 0})], "without a choice"),
        ([chunk([delta(tool_calls=[{"function": {"arguments": "{}"}}])])], "integer index"),
        ([chunk([delta(tool_calls=[{"index": 0, "function": {"name": "f"}}])])], "id"),
        ([chunk([delta(tool_calls=[{"index": 0, "function": "f"}])])], "function"),
        ([chunk([{"index": 0, "delta": "x"}])], "delta"),
        ([{**chunk([]), "choices": {"index": 0}}], "choices"),
        ([chunk([cast(Any, "x")])], "choice"),
    ],
)
async def test_malformed_stream_raises_provider_error(
    events: list[dict[str, Any]], what: str
) -> None:
    """A stream without a choice or with a broken tool-call delta raises `ProviderError`."""
    server = Server(sse(*events))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await collect(p, REQUEST)
    assert what in str(caught.value)


async def test_stream_event_that_is_not_json_raises_provider_error() -> None:
    """An SSE `data:` line that is not JSON raises `ProviderError`."""
    server = Server(sse("{not json"))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="not JSON"):
            await collect(p, REQUEST)


# -- construction --------------------------------------------------------------------------------


async def test_provider_protocol_and_owned_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider built from `base_url` alone works without a key and closes its own client."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    p = OpenAIProvider("local", base_url="http://127.0.0.1:8080/v1", name="llama.cpp")
    assert isinstance(p, Provider)
    assert p.name == "llama.cpp"
    await p.aclose()
    assert p._client.is_closed()
    async with httpx2.AsyncClient() as http:
        client = openai.AsyncOpenAI(api_key="k", http_client=http)
        await OpenAIProvider(MODEL, client=client).aclose()
        assert not client.is_closed()


def test_without_a_key_the_error_names_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key and no `base_url`: a `ConfigError` that tells a new user what to set."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError) as caught:
        OpenAIProvider(MODEL)
    assert caught.value.key == "OPENAI_API_KEY"
    text = str(caught.value)
    assert "is not allowed" not in text
    assert "set the OPENAI_API_KEY environment variable" in text
    assert "api_key=" in text and "base_url=" in text
    monkeypatch.setenv("OPENAI_API_KEY", "")  # an empty variable is no key either
    with pytest.raises(ConfigError):
        OpenAIProvider(MODEL)


async def test_a_key_from_the_environment_or_a_base_url_is_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`OPENAI_API_KEY`, or a local server's URL (argument or `OPENAI_BASE_URL`), suffices."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    p = OpenAIProvider(MODEL)
    assert p._client.api_key == "sk-env"
    await p.aclose()
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    p = OpenAIProvider(MODEL)
    assert str(p._client.base_url).startswith("http://127.0.0.1:8080")
    await p.aclose()


async def test_client_and_base_url_are_exclusive() -> None:
    """Passing both a client and `base_url` is a `ConfigError`, not a silent choice."""
    async with httpx2.AsyncClient() as http:
        client = openai.AsyncOpenAI(api_key="sk-test", http_client=http)
        with pytest.raises(ConfigError, match="client"):
            OpenAIProvider(MODEL, client=client, base_url="http://localhost/v1")


def test_max_tokens_field_is_checked() -> None:
    """An unknown `max_tokens_field` is a `ConfigError`."""
    with pytest.raises(ConfigError, match="max_tokens_field"):
        OpenAIProvider(MODEL, api_key="sk-test", max_tokens_field="n_predict")  # type: ignore[arg-type]


def test_importing_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: without the `openai` extra the import error says what to install."""
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "steerable_compaction.providers.openai")
    with pytest.raises(ModuleNotFoundError) as info:
        from steerable_compaction.providers import OpenAIProvider  # noqa: F401
    assert "pip install 'steerable-compaction[openai]'" in str(info.value)
    assert "OpenAIProvider needs the 'openai' package, which is not installed" in str(info.value)
    assert info.value.name == "openai"
