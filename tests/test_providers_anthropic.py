"""Tests for `steerable_compaction.providers.anthropic` against the real SDK and a mock transport.

The SDK runs on `httpx2`, so the fake server is an `httpx2.MockTransport`; the payloads follow
the documented Messages API shapes (message object, SSE events, error bodies).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anthropic
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.errors import ConfigError, ContextOverflowError, ProviderError
from steerable_compaction.messages import Message, ToolCall
from steerable_compaction.providers import (
    Completion,
    CompletionRequest,
    Provider,
    StreamDone,
    TextDelta,
    ToolSpec,
    provider_summarizer,
)
from steerable_compaction.providers.anthropic import AnthropicProvider, _cache_breakpoints
from steerable_compaction.record import Usage
from steerable_compaction.wire import to_anthropic
from tests import strategies as sts

MODEL = "claude-test-model"  # not a real model name: the SDK warns on deprecated ones
EPHEMERAL = {"type": "ephemeral"}
GOAL = "Fix the failing test in src/app.py."
TRANSCRIPT = (
    Message.system("You are a coding agent."),
    Message.user(GOAL),
    Message.assistant("Reading it.", [ToolCall(id="toolu_0", name="read_file", arguments="{}")]),
    Message.tool("toolu_0", "def main(): ..."),
    Message.assistant(
        None,
        [
            ToolCall(id="toolu_1", name="grep", arguments='{"q":"main"}'),
            ToolCall(id="toolu_2", name="grep", arguments='{"q":"test"}'),
        ],
    ),
    Message.tool("toolu_1", "src/app.py:1"),
    Message.tool("toolu_2", "tests/test_app.py:3"),
)
TOOLS = (
    ToolSpec(
        name="read_file",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
    ToolSpec(name="grep"),
)
REQUEST = CompletionRequest(messages=TRANSCRIPT, tools=TOOLS)


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
async def provider(server: Server, **kwargs: Any) -> AsyncIterator[AnthropicProvider]:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(server)) as http:
        client = anthropic.AsyncAnthropic(
            api_key="sk-ant-test", base_url="https://api.test", http_client=http, max_retries=0
        )
        yield AnthropicProvider(MODEL, client=client, **kwargs)


def ok(**kwargs: Any) -> httpx2.Response:
    return httpx2.Response(200, json=message_body(**kwargs))


def message_body(
    content: list[dict[str, Any]] | None = None, stop_reason: str = "end_turn"
) -> dict[str, Any]:
    """A Messages API `message` object as documented, with a prompt-cache hit."""
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content if content is not None else [{"type": "text", "text": "Done."}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 3,
            "cache_creation_input_tokens": 248,
            "cache_read_input_tokens": 180000,
            "cache_creation": {"ephemeral_5m_input_tokens": 248, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 503,
            "service_tier": "standard",
        },
    }


def stream_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events that stream `body`, split the way the API splits text and tool input."""
    start = {**body, "content": [], "stop_reason": None}
    start["usage"] = {**body["usage"], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(body["content"]):
        events.extend(_block_events(index, block))
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": body["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    def delta(**fields: Any) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": fields}

    kind = block["type"]
    if kind == "text":
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {**block, "text": ""},
        }
        yield {"type": "ping"}
        for i in range(0, len(block["text"]), 5):
            yield delta(type="text_delta", text=block["text"][i : i + 5])
    elif kind == "tool_use":
        start = {**block, "input": {}}
        yield {"type": "content_block_start", "index": index, "content_block": start}
        raw = json.dumps(block["input"], indent=1)  # the stream's spelling differs from JSON's
        yield delta(type="input_json_delta", partial_json="")
        for i in range(0, len(raw), 6):
            yield delta(type="input_json_delta", partial_json=raw[i : i + 6])
    else:  # thinking
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {**block, "thinking": ""},
        }
        yield delta(type="thinking_delta", thinking=block["thinking"])
        yield delta(type="signature_delta", signature=block["signature"])


def sse(*events: dict[str, Any]) -> httpx2.Response:
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return httpx2.Response(
        200, content=body.encode(), headers={"content-type": "text/event-stream"}
    )


async def collect(p: AnthropicProvider, request: CompletionRequest) -> list[Any]:
    return [event async for event in p.stream(request)]


def marks(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where `body` carries `cache_control`: ("system"|"tools"|"messages", index, block)."""
    out = []
    system = body.get("system")
    for j, block in enumerate(system if isinstance(system, list) else []):
        if "cache_control" in block:
            out.append(("system", 0, j))
    for j, tool in enumerate(body.get("tools", [])):
        if "cache_control" in tool:
            out.append(("tools", 0, j))
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        for j, block in enumerate(content if isinstance(content, list) else []):
            if "cache_control" in block:
                assert block["cache_control"] == EPHEMERAL
                out.append(("messages", i, j))
    return out


def cache_entries(body: dict[str, Any]) -> list[tuple[tuple[str, int, int], Any]]:
    """Each breakpoint of `body` with the prefix it closes (tools and system, then messages)."""
    out = []
    for mark in marks(body):
        messages = body["messages"][: mark[1] + 1] if mark[0] == "messages" else []
        out.append((mark, (body.get("tools"), body.get("system"), messages)))
    return out


# -- requests and cache breakpoints -------------------------------------------------------------


async def test_request_body_splits_system_and_sends_tools() -> None:
    """The body has `system`, `to_anthropic` messages, tools with `input_schema`, `max_tokens`."""
    server = Server(ok(), ok())
    async with provider(server) as p:
        await p.complete(REQUEST)
        default_cap = server.body["max_tokens"]
        await p.complete(
            CompletionRequest(messages=TRANSCRIPT, max_output_tokens=100, temperature=0.0)
        )
    assert default_cap == 4096
    assert server.requests[0].url.path == "/v1/messages"
    body = json.loads(server.requests[0].content)
    assert body["model"] == MODEL
    assert body["system"] == [
        {"type": "text", "text": "You are a coding agent.", "cache_control": EPHEMERAL}
    ]
    assert body["tools"] == [
        {
            "name": "read_file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "description": "Read a file.",
        },
        {"name": "grep", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert server.body["max_tokens"] == 100
    assert server.body["temperature"] == 0.0
    assert "tools" not in server.body


async def test_default_request_places_four_breakpoints() -> None:
    """System, the goal, the previous turn's end and the last block carry `cache_control`."""
    server = Server(ok())
    async with provider(server) as p:
        await p.complete(REQUEST)
    body = server.body
    assert marks(body) == [
        ("system", 0, 0),
        ("messages", 0, 0),  # the goal
        ("messages", 2, 0),  # the previous request ended on this tool result
        ("messages", 4, 1),  # the last block of the new turn
    ]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": GOAL, "cache_control": EPHEMERAL}
    ]
    assert "cache_control" not in body["messages"][4]["content"][0]


async def test_cache_retention_none_adds_no_breakpoint_on_the_instruction() -> None:
    """R27: a `cache_retention="none"` request leaves its final message without a breakpoint."""
    instruction = Message.user("Summarize the conversation so far.")
    server = Server(ok())
    async with provider(server) as p:
        await p.complete(
            CompletionRequest(
                messages=(*TRANSCRIPT, instruction), tools=TOOLS, cache_retention="none"
            )
        )
    body = server.body
    assert body["messages"][-1] == {"role": "user", "content": instruction.text}
    assert marks(body) == [("system", 0, 0), ("messages", 0, 0), ("messages", 4, 1)]


async def test_summary_request_reads_only_entries_the_loop_wrote() -> None:
    """R27: each breakpoint of the "none" replay sits where an earlier loop request put one."""
    turns = [TRANSCRIPT[:2], TRANSCRIPT[:4], TRANSCRIPT]  # each turn's request, in order
    summary = (*TRANSCRIPT[:4], Message.user("Summarize."))
    server = Server(*(ok() for _ in range(len(turns) + 1)))
    async with provider(server) as p:
        for messages in turns:
            await p.complete(CompletionRequest(messages=messages, tools=TOOLS))
        await p.complete(CompletionRequest(messages=summary, tools=TOOLS, cache_retention="none"))
    bodies = [json.loads(r.content) for r in server.requests]
    written = [entry for body in bodies[:-1] for entry in cache_entries(body)]
    read = cache_entries(bodies[-1])
    assert read
    for entry in read:
        assert entry in written, entry[0]


async def test_without_system_the_last_tool_is_marked() -> None:
    """With no system prompt the stable-prefix breakpoint goes on the last tool."""
    server = Server(ok())
    async with provider(server) as p:
        await p.complete(CompletionRequest(messages=TRANSCRIPT[1:], tools=TOOLS))
    assert server.body["tools"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in server.body["tools"][0]
    assert "system" not in server.body


async def test_provider_summarizer_writes_no_entry_for_the_instruction() -> None:
    """R27 end to end: `provider_summarizer` over this adapter marks nothing after the replay."""
    request = SummaryRequest(messages=(*TRANSCRIPT, Message.user("Summarize.")), span=(2, 7))
    server = Server(ok())
    async with provider(server) as p:
        assert await provider_summarizer(p, tools=TOOLS)(request) == "Done."
    assert marks(server.body) == [("system", 0, 0), ("messages", 0, 0), ("messages", 4, 1)]
    assert server.body["messages"][-1] == {"role": "user", "content": "Summarize."}
    assert len(server.body["tools"]) == 2


def test_breakpoint_skips_blocks_that_cannot_carry_one() -> None:
    """An empty text block is passed over for the block before it; an empty string stays."""
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": blocks},
    ]
    system, marked, tools = _cache_breakpoints("", messages, [], new_suffix=True)
    assert system == ""
    assert tools == []
    assert marked[0] == {"role": "user", "content": ""}
    assert marked[1]["content"] == [
        {"type": "text", "text": "a", "cache_control": EPHEMERAL},
        {"type": "text", "text": ""},
    ]
    assert messages[1]["content"][0] == {"type": "text", "text": "a"}  # inputs are not mutated


def test_no_messages_only_marks_the_prefix() -> None:
    """A request without messages marks only the system prompt."""
    system, messages, tools = _cache_breakpoints("sys", [], [], new_suffix=True)
    assert (system, messages, tools) == (
        [{"type": "text", "text": "sys", "cache_control": EPHEMERAL}],
        [],
        [],
    )


def _unmarked(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
    if len(blocks) == 1 and blocks[0].get("type") == "text" and "cache_control" in content[0]:
        return blocks[0]["text"]  # a string content that was made a block to carry the mark
    return blocks


@settings(max_examples=150)
@given(sts.transcripts("anthropic"), st.sampled_from(["default", "none"]), st.booleans())
def test_breakpoints_never_exceed_four_and_change_nothing_else(
    transcript: list[Message], retention: Literal["default", "none"], with_tools: bool
) -> None:
    """At most 4 breakpoints; "none" never marks the final message; content is unchanged."""
    system, messages = to_anthropic(transcript)
    tools = [{"name": "t", "input_schema": {"type": "object"}}] if with_tools else []
    new_system, new_messages, new_tools = _cache_breakpoints(
        system, messages, tools, new_suffix=retention == "default"
    )
    body = {"system": new_system, "messages": new_messages, "tools": new_tools}
    assert len(marks(body)) <= 4
    if retention == "none" and new_messages:
        assert all(m[1] != len(new_messages) - 1 for m in marks(body) if m[0] == "messages")
    assert _unmarked(new_system) == system
    assert [{k: v for k, v in t.items() if k != "cache_control"} for t in new_tools] == tools
    assert all(t["cache_control"] == EPHEMERAL for t in new_tools if "cache_control" in t)
    assert [{**m, "content": _unmarked(m["content"])} for m in new_messages] == messages


# -- replies -------------------------------------------------------------------------------------

TOOL_CONTENT: list[dict[str, Any]] = [
    {"type": "text", "text": "I'll read the file."},
    {
        "type": "tool_use",
        "id": "toolu_01A09q90qw90lq917835lq9",
        "name": "read_file",
        "input": {"path": "src/app.py", "limit": 40, "note": "café"},
    },
]
TOOL_MESSAGE = Message.assistant(
    "I'll read the file.",
    [
        ToolCall(
            id="toolu_01A09q90qw90lq917835lq9",
            name="read_file",
            arguments='{"path":"src/app.py","limit":40,"note":"café"}',
        )
    ],
)


async def test_complete_parses_text_tool_use_and_cache_usage() -> None:
    """Text and tool_use become the reply; prompt tokens add the cached ones back in."""
    server = Server(ok(content=TOOL_CONTENT, stop_reason="tool_use"))
    async with provider(server) as p:
        completion = await p.complete(REQUEST)
    assert completion == Completion(
        message=TOOL_MESSAGE,
        usage=Usage(
            prompt_tokens=3 + 180000 + 248,
            completion_tokens=503,
            cached_tokens=180000,
            cache_write_tokens=248,
        ),
        stop_reason="tool_use",
        model=MODEL,
    )


THINKING: dict[str, Any] = {
    "type": "thinking",
    "thinking": "Let me think.",
    "signature": "EqQBCgIYAhIM",
}


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "Hello! How can I help?"}],
        TOOL_CONTENT,
        [THINKING, *TOOL_CONTENT],
        [TOOL_CONTENT[1], {**TOOL_CONTENT[1], "id": "toolu_2", "input": {}}],
        [],
    ],
    ids=["text", "tool_use", "thinking", "parallel", "empty"],
)
async def test_stream_equals_complete(content: list[dict[str, Any]]) -> None:
    """Streaming the same reply yields its text as deltas and the same `Completion`."""
    body = message_body(content, stop_reason="tool_use")
    server = Server(httpx2.Response(200, json=body), sse(*stream_events(body)))
    async with provider(server) as p:
        whole = await p.complete(REQUEST)
        events = await collect(p, REQUEST)
    assert isinstance(events[-1], StreamDone)
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    text = "".join(b["text"] for b in content if b["type"] == "text")
    assert "".join(e.text for e in events[:-1]) == text
    assert events[-1].completion == whole
    assert server.requests[1].headers["accept"] == "application/json"
    assert json.loads(server.requests[1].content)["stream"] is True


async def test_thinking_blocks_are_dropped() -> None:
    """Only text and tool_use blocks reach the neutral reply."""
    server = Server(ok(content=[THINKING, *TOOL_CONTENT]))
    async with provider(server) as p:
        completion = await p.complete(REQUEST)
    assert completion.message == TOOL_MESSAGE


async def test_usage_without_cache_fields_counts_zero_cache() -> None:
    """A reply whose usage omits the cache fields (no caching) reports zero cache tokens."""
    server = Server(
        httpx2.Response(
            200, json={**message_body(), "usage": {"input_tokens": 20, "output_tokens": 5}}
        ),
        httpx2.Response(200, json={**message_body(), "usage": None}),
    )
    async with provider(server) as p:
        first = await p.complete(REQUEST)
        second = await p.complete(REQUEST)
    assert first.usage == Usage(prompt_tokens=20, completion_tokens=5)
    assert second.usage == Usage(prompt_tokens=0)


async def test_stream_usage_takes_the_latest_counts() -> None:
    """`message_delta` usage (cumulative) overrides `message_start` usage field by field."""
    events = stream_events(message_body())
    events[-2]["usage"] = {"input_tokens": 10, "cache_read_input_tokens": None, "output_tokens": 7}
    server = Server(sse(*events))
    async with provider(server) as p:
        done = (await collect(p, REQUEST))[-1]
    assert done.completion.usage == Usage(
        prompt_tokens=10 + 180000 + 248,
        completion_tokens=7,
        cached_tokens=180000,
        cache_write_tokens=248,
    )


# -- errors --------------------------------------------------------------------------------------


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ],
)
async def test_prompt_too_long_raises_context_overflow_error(message: str) -> None:
    """R13: Anthropic's "prompt is too long" 400 raises `ContextOverflowError`."""
    body = error_body("invalid_request_error", message)
    server = Server(httpx2.Response(400, json=body), httpx2.Response(400, json=body))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError) as caught:
            await p.complete(REQUEST)
        with pytest.raises(ContextOverflowError):
            await collect(p, REQUEST)
    assert caught.value.message == message
    assert caught.value.status_code == 400
    assert caught.value.provider == "anthropic"


async def test_request_too_large_413_raises_context_overflow_error() -> None:
    """Anthropic's 413 `request_too_large` (over the 32 MB request limit) is an overflow."""
    body = error_body("request_too_large", "Request exceeds the maximum allowed number of bytes.")
    server = Server(httpx2.Response(413, json=body))
    async with provider(server) as p:
        with pytest.raises(ContextOverflowError) as caught:
            await p.complete(REQUEST)
    assert caught.value.status_code == 413


@pytest.mark.parametrize(
    ("status", "kind", "message", "retryable"),
    [
        (429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", True),
        (500, "api_error", "Internal server error", True),
        (529, "overloaded_error", "Overloaded", True),
        (401, "authentication_error", "invalid x-api-key", False),
        (403, "permission_error", "Your API key does not have permission", False),
        (404, "not_found_error", "model: claude-nonexistent", False),
        (400, "invalid_request_error", "messages.2: unexpected `tool_use_id`", False),
    ],
)
async def test_http_errors_are_retryable_or_fatal(
    status: int, kind: str, message: str, retryable: bool
) -> None:
    """429, 500 and 529 overloaded raise a retryable `ProviderError`; other 4xx a fatal one."""
    server = Server(httpx2.Response(status, json=error_body(kind, message)))
    async with provider(server) as p:
        with pytest.raises(ProviderError) as caught:
            await p.complete(REQUEST)
    assert type(caught.value) is ProviderError
    assert (caught.value.retryable, caught.value.status_code) == (retryable, status)
    assert caught.value.message == message


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
        assert (error.retryable, error.status_code) == (True, None)


async def test_overloaded_event_inside_the_stream_is_retryable() -> None:
    """An `error` event (overloaded_error) inside a 200 stream raises a retryable error."""
    events = stream_events(message_body())[:3]
    server = Server(sse(*events, error_body("overloaded_error", "Overloaded")))
    async with provider(server) as p:
        with pytest.raises(ProviderError) as caught:
            await collect(p, REQUEST)
    assert (type(caught.value), caught.value.retryable) == (ProviderError, True)
    assert (caught.value.status_code, caught.value.message) == (None, "Overloaded")


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("just text", "content must be a list"),
        (["text"], "content[0] is not an object"),
        ([{**TOOL_CONTENT[1], "input": "{}"}], "expected an object"),
        ([{**TOOL_CONTENT[1], "id": ""}], "'id' must not be empty"),
        ([{"type": "text", "text": 3}], "expected a string"),
    ],
)
async def test_malformed_reply_raises_provider_error(content: Any, what: str) -> None:
    """Content that is not a list of well-formed blocks raises a fatal `ProviderError`."""
    server = Server(httpx2.Response(200, json={**message_body(), "content": content}))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await p.complete(REQUEST)
    assert what in str(caught.value)
    assert caught.value.retryable is False


async def test_malformed_usage_raises_provider_error() -> None:
    """A negative token count is reported as a malformed reply, naming the field."""
    body = message_body()
    body["usage"]["cache_read_input_tokens"] = -5
    server = Server(httpx2.Response(200, json=body))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match=r"usage\.cache_read_input_tokens"):
            await p.complete(REQUEST)


def _start() -> dict[str, Any]:
    return stream_events(message_body())[0]


def _block_start(block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": 0, "content_block": block}


def _tool_start() -> dict[str, Any]:
    return _block_start({**TOOL_CONTENT[1], "input": {}})


def _text_delta(text: str) -> dict[str, Any]:
    delta = {"type": "text_delta", "text": text}
    return {"type": "content_block_delta", "index": 0, "delta": delta}


def _json_delta(text: str, index: int = 0) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": text}
    return {"type": "content_block_delta", "index": index, "delta": delta}


@pytest.mark.parametrize(
    ("events", "what"),
    [
        ([{"type": "message_stop"}], "without message_start"),
        ([{"type": "message_start", "message": "x"}], "no message object"),
        ([_start(), {"type": "content_block_start", "index": 0}], "no content_block"),
        ([_start(), {"type": "content_block_stop"}, _json_delta("{")], "unknown block 0"),
        ([_start(), _tool_start(), _json_delta('{"path": ')], "input is not JSON"),
        ([_start(), _tool_start(), _json_delta("[1]")], "expected an object"),
        ([_start(), _tool_start(), {"type": "content_block_delta", "delta": {}}], "integer index"),
        ([_start(), _tool_start(), _text_delta("x")], "is not text"),
        ([_start(), _block_start({"type": "text", "text": ""}), _json_delta("{}")], "not tool_use"),
    ],
)
async def test_malformed_stream_raises_provider_error(
    events: list[dict[str, Any]], what: str
) -> None:
    """A stream missing its start or with broken block deltas raises `ProviderError`."""
    server = Server(sse(*events))
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await collect(p, REQUEST)
    assert what in str(caught.value)


async def test_reply_that_is_not_an_object_raises_provider_error() -> None:
    """A JSON reply that is not an object (or an invalid one, under strict validation) fails."""
    async with provider(Server(httpx2.Response(200, json=["a"]))) as p:
        with pytest.raises(ProviderError, match="expected a JSON object"):
            await p.complete(REQUEST)
    server = Server(httpx2.Response(200, json={"id": 3}))
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(server)) as http:
        client = anthropic.AsyncAnthropic(
            api_key="k", http_client=http, max_retries=0, _strict_response_validation=True
        )
        with pytest.raises(ProviderError, match="malformed reply") as caught:
            await AnthropicProvider(MODEL, client=client).complete(REQUEST)
    assert caught.value.status_code == 200


async def test_stream_event_that_is_not_json_raises_provider_error() -> None:
    """An SSE event whose data is not JSON raises `ProviderError`."""
    body = b"event: message_start\ndata: {not json\n\n"
    server = Server(
        httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
    )
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="not JSON"):
            await collect(p, REQUEST)


async def test_reply_that_is_not_json_raises_provider_error() -> None:
    """A 200 whose body is not JSON raises `ProviderError`, not the SDK's decode error."""
    server = Server(
        httpx2.Response(200, text="<html>", headers={"content-type": "application/json"})
    )
    async with provider(server) as p:
        with pytest.raises(ProviderError, match="not JSON"):
            await p.complete(REQUEST)


# -- construction --------------------------------------------------------------------------------


async def test_provider_protocol_and_owned_client() -> None:
    """A provider closes the client it built and leaves a passed client open."""
    p = AnthropicProvider(MODEL, api_key="sk-ant-test", name="claude")
    assert isinstance(p, Provider)
    assert p.name == "claude"
    await p.aclose()
    assert p._client.is_closed()
    async with httpx2.AsyncClient() as http:
        client = anthropic.AsyncAnthropic(api_key="k", http_client=http)
        await AnthropicProvider(MODEL, client=client).aclose()
        assert not client.is_closed()


def test_without_a_key_the_error_names_anthropic_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key anywhere: a `ConfigError` naming `ANTHROPIC_API_KEY`, not the SDK's `TypeError`."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ConfigError) as caught:
        AnthropicProvider(MODEL)
    assert caught.value.key == "ANTHROPIC_API_KEY"
    assert "set the ANTHROPIC_API_KEY environment variable" in str(caught.value)
    assert "AnthropicProvider(api_key=...)" in str(caught.value)


@pytest.mark.parametrize("variable", ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
async def test_a_key_or_token_from_the_environment_is_enough(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The SDK's own variables (a key, or a bearer token) are accepted."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv(variable, "sk-ant-env")
    p = AnthropicProvider(MODEL)
    await p.aclose()
    assert p._client.is_closed()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"base_url": "https://proxy.test"}, "client"),
        ({"api_key": "k"}, "client"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": True}, "max_output_tokens"),
    ],
)
async def test_bad_construction_is_a_config_error(kwargs: dict[str, Any], key: str) -> None:
    """A client together with `api_key`/`base_url`, or a bad output cap, is a `ConfigError`."""
    async with httpx2.AsyncClient() as http:
        client = anthropic.AsyncAnthropic(api_key="k", http_client=http)
        with pytest.raises(ConfigError) as caught:
            AnthropicProvider(MODEL, client=client if key == "client" else None, **kwargs)
    assert caught.value.key == key


def test_importing_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: without the `anthropic` extra the import error says what to install."""
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "steerable_compaction.providers.anthropic")
    with pytest.raises(ModuleNotFoundError) as info:
        from steerable_compaction.providers import AnthropicProvider  # noqa: F401
    assert "pip install 'steerable-compaction[anthropic]'" in str(info.value)
    assert "AnthropicProvider needs the 'anthropic' package, which is not installed" in str(
        info.value
    )
    assert info.value.name == "anthropic"
