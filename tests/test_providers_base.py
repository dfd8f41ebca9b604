"""Tests for `steerable_compaction.providers.base`: the error table and the summarizer shell."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.errors import ContextOverflowError, ProviderError
from steerable_compaction.messages import Message, ToolCall
from steerable_compaction.providers import (
    OVERFLOW_PATTERNS,
    Completion,
    CompletionRequest,
    Provider,
    StreamDone,
    StreamEvent,
    ToolSpec,
    classify_error,
    provider_error,
    provider_summarizer,
)
from steerable_compaction.record import Usage

# One real-world message per table entry, as the server words it (label -> (code, message)).
OVERFLOW_CASES: dict[str, tuple[str | None, str]] = {
    "openai code": (
        "context_length_exceeded",
        "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
        "300512 tokens. Please reduce the length of the messages.",
    ),
    "openai message": (
        None,
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130755 tokens. Please reduce the length of the messages.",
    ),
    "anthropic": (
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
    ),
    "anthropic input": (
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ),
    "llama.cpp": (
        "400",
        "the request exceeds the available context size, try increasing it",
    ),
    "llama-cpp-python": (
        None,
        "Requested tokens (2285) exceed context window of 2048",
    ),
    "vllm": (
        "400",
        "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum "
        "context length is 8192 tokens and your request has 1210 input tokens.",
    ),
    "generic": (
        None,
        "Request failed: context window exceeded (32768 tokens)",
    ),
}


def test_every_overflow_pattern_has_a_realistic_case() -> None:
    """The case table below covers exactly the labels of `OVERFLOW_PATTERNS`."""
    assert set(OVERFLOW_CASES) == {label for label, _ in OVERFLOW_PATTERNS}


@pytest.mark.parametrize("label", [label for label, _ in OVERFLOW_PATTERNS])
@pytest.mark.parametrize("status", [400, 413, 500, None])
def test_overflow_patterns_classify_as_overflow(label: str, status: int | None) -> None:
    """R13: each pattern matches its server's wording, and overflow wins over the status."""
    code, message = OVERFLOW_CASES[label]
    pattern = dict(OVERFLOW_PATTERNS)[label]
    assert pattern.search(f"{code or ''} {message}")
    assert classify_error(status_code=status, code=code, message=message) == "overflow"


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529, 599, None])
def test_transient_statuses_are_retryable(status: int | None) -> None:
    """408/409/425/429, every 5xx, 529 and transport failures (no status) are retryable."""
    assert classify_error(status_code=status, message="Overloaded") == "retryable"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_client_errors_are_fatal(status: int) -> None:
    """Other 4xx are fatal: retrying the same request cannot help."""
    assert classify_error(status_code=status, message="invalid x-api-key") == "fatal"


@pytest.mark.parametrize(
    "message",
    [
        "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
        "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000",
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks",
    ],
)
def test_near_misses_are_not_overflow(message: str) -> None:
    """Token-limit wording that is not about the context window does not read as overflow."""
    assert classify_error(status_code=400, message=message) == "fatal"


def test_provider_error_raises_context_overflow_for_overflow() -> None:
    """`provider_error` builds a `ContextOverflowError` (not retryable) for an overflow."""
    code, message = OVERFLOW_CASES["anthropic"]
    error = provider_error("anthropic", status_code=400, code=code, message=message)
    assert type(error) is ContextOverflowError
    assert (error.provider, error.status_code, error.message) == ("anthropic", 400, message)
    assert error.retryable is False


@pytest.mark.parametrize(("status", "retryable"), [(429, True), (None, True), (401, False)])
def test_provider_error_sets_retryable(status: int | None, retryable: bool) -> None:
    """Other failures are a plain `ProviderError` whose `retryable` follows the table."""
    error = provider_error("openai", status_code=status, message="boom")
    assert type(error) is ProviderError
    assert (error.retryable, error.status_code) == (retryable, status)


@pytest.mark.parametrize(
    ("code", "message", "text"),
    [(None, "", "request failed"), ("rate_limit_exceeded", "", "rate_limit_exceeded")],
)
def test_provider_error_message_falls_back_to_code(
    code: str | None, message: str, text: str
) -> None:
    """Without a message the error says the code, or "request failed" without either."""
    assert provider_error("x", status_code=500, code=code, message=message).message == text


# -- provider_summarizer -------------------------------------------------------------------------


class RecordingProvider:
    """A tiny fake `Provider` that records requests and answers with a fixed summary."""

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    @property
    def name(self) -> str:
        return "recording"

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        reply = Message.assistant("## Primary Request\nFix the test.")
        return Completion(message=reply, usage=Usage(prompt_tokens=900, cached_tokens=800))

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        yield StreamDone(await self.complete(request))


SUMMARY_REQUEST = SummaryRequest(
    messages=(
        Message.system("You are a coding agent."),
        Message.user("Fix the failing test."),
        Message.assistant(None, [ToolCall(id="c1", name="read_file", arguments='{"p":"a"}')]),
        Message.tool("c1", "contents"),
        Message.user("Summarize the conversation so far."),
    ),
    span=(2, 4),
)
TOOLS = (ToolSpec(name="read_file", description="Read a file."),)


async def test_summarizer_sends_the_replay_tools_and_no_cache_entry() -> None:
    """R27: it sends `request.messages`, the session's tools and `cache_retention="none"`."""
    provider = RecordingProvider()
    assert isinstance(provider, Provider)
    summarize = provider_summarizer(provider, tools=TOOLS, max_output_tokens=2000)
    text = await summarize(SUMMARY_REQUEST)
    assert text == "## Primary Request\nFix the test."
    assert provider.requests == [
        CompletionRequest(
            messages=SUMMARY_REQUEST.messages,
            tools=TOOLS,
            max_output_tokens=2000,
            cache_retention="none",
        )
    ]


async def test_summarizer_defaults() -> None:
    """Without arguments the summarizer declares no tools and caps the reply at 4096 tokens."""
    provider = RecordingProvider()
    await provider_summarizer(provider)(SUMMARY_REQUEST)
    (request,) = provider.requests
    assert (request.tools, request.max_output_tokens) == ((), 4096)
    assert request.cache_retention == "none"


def test_adapters_load_lazily_from_the_package() -> None:
    """`providers.OpenAIProvider` / `AnthropicProvider` resolve on access; others do not."""
    import steerable_compaction.providers as providers
    from steerable_compaction.providers.anthropic import AnthropicProvider
    from steerable_compaction.providers.openai import OpenAIProvider

    assert providers.OpenAIProvider is OpenAIProvider
    assert providers.AnthropicProvider is AnthropicProvider
    with pytest.raises(AttributeError, match="GeminiProvider"):
        _ = providers.GeminiProvider
