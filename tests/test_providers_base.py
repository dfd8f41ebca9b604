"""Tests for `steerable_compaction.providers.base`: the error table and the summarizer shell."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.errors import ContextOverflowError, ProviderError
from steerable_compaction.messages import Message, ToolCall
from steerable_compaction.providers import (
    NOT_OVERFLOW_PATTERNS,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Wording:
    """One provider's overflow reply: status, code (or error type), message, and its source."""

    status: int | None
    code: str | None
    message: str
    source: str


# Each entry of `OVERFLOW_PATTERNS`, with the wording its provider sends and where that wording
# is documented or reported (facts gathered with the search tool; no text copied beyond the
# error strings themselves).
OVERFLOW_CASES: dict[str, tuple[Wording, ...]] = {
    "openai code": (
        Wording(
            status=400,
            code="context_length_exceeded",
            message="Please reduce the length of the messages or completion.",
            source="OpenAI error code `context_length_exceeded` "
            "(manifest.build/errors/openai/400-context-length-exceeded); this bare message "
            "with that code from Groq's OpenAI API: github.com/OpenHands/OpenHands/issues/1902",
        ),
    ),
    "openai message": (
        Wording(
            status=400,
            code=None,
            message="This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 142537 tokens. Please reduce the length of the messages.",
            source="OpenAI Chat Completions 400, as the SDK reports it: "
            "fixerror-dev.pages.dev/openai/context-length-exceeded",
        ),
        Wording(
            status=400,
            code="400",
            message="This model's maximum context length is 16384 tokens. However, you "
            "requested 122946 tokens (112946 in the messages, 10000 in the completion). "
            "Please reduce the length of the messages or completion.",
            source="vLLM's OpenAI server: github.com/vllm-project/vllm/issues/20409",
        ),
        Wording(
            status=400,
            code=None,
            message="This endpoint's maximum context length is 16384 tokens. However, you "
            "requested about 94307 tokens (94307 of text input). Please reduce the length of "
            'either one, or use the "middle-out" transform to compress your prompt '
            "automatically.",
            source="OpenRouter: github.com/topoteretes/cognee/issues/1061",
        ),
    ),
    "openai input limit": (
        Wording(
            status=400,
            code=None,
            message="Input tokens exceed the configured limit of 272000 tokens. Your messages "
            "resulted in 300512 tokens. Please reduce the length of the messages.",
            source="OpenAI GPT-5 family without the code (a proxy that drops it): quoted in "
            "many agent repositories, e.g. the `_MESSAGES_SIZED` wording found by search",
        ),
    ),
    "openai context window": (
        Wording(
            status=400,
            code=None,
            message="Your input exceeds the context window of this model. Please adjust your "
            "input and try again.",
            source="OpenAI Responses / embeddings 400 (code context_length_exceeded, dropped "
            "here): github.com/the-open-agent/openagent/issues/2344",
        ),
    ),
    "anthropic": (
        Wording(
            status=400,
            code="invalid_request_error",
            message="prompt is too long: 210000 tokens > 200000 maximum",
            source="Anthropic 400 invalid_request_error (platform.claude.com/docs/en/api/"
            "errors); wording: portkey.ai/error-library/input-length-error-10153",
        ),
    ),
    "anthropic input": (
        Wording(
            status=400,
            code="invalid_request_error",
            message="input length and `max_tokens` exceed context limit: 188240 + 21333 > "
            "200000, decrease input length or `max_tokens` and try again",
            source="Anthropic Messages API: github.com/continuedev/continue/issues/6080",
        ),
    ),
    "anthropic 413": (
        Wording(
            status=413,
            code="request_too_large",
            message="Request exceeds the maximum allowed number of bytes.",
            source="Anthropic 413 request_too_large, 32 MB Messages API limit: "
            "platform.claude.com/docs/en/api/errors",
        ),
    ),
    "llama.cpp": (
        Wording(
            status=400,
            code="exceed_context_size_error",
            message="request (4476 tokens) exceeds the available context size (4096 tokens), "
            "try increasing it",
            source="llama.cpp llama-server (tools/server), error type "
            "exceed_context_size_error with n_prompt_tokens and n_ctx",
        ),
        Wording(
            status=400,
            code="400",
            message="the request exceeds the available context size, try increasing it",
            source="older llama-server builds (same error type)",
        ),
    ),
    "llama-cpp-python": (
        Wording(
            status=None,
            code=None,
            message="Requested tokens (2285) exceed context window of 2048",
            source="llama-cpp-python `Llama.create_completion` ValueError "
            "(`providers.llamacpp` words its own check the same way)",
        ),
    ),
    "vllm": (
        Wording(
            status=400,
            code=None,
            message="The decoder prompt (length 12324) is longer than the maximum model length "
            "of 8192. Make sure that `max_model_len` is no smaller than the number of text "
            "tokens.",
            source="vLLM V1 input processor: github.com/vllm-project/vllm/issues/12165 and "
            "github.com/EleutherAI/lm-evaluation-harness/issues/2880",
        ),
        Wording(
            status=400,
            code=None,
            message="Prompt length of 5016 is longer than the maximum model length of 4096.",
            source="vLLM >= 0.8: github.com/hiyouga/LlamaFactory/issues/7723",
        ),
    ),
    "vllm scheduler": (
        Wording(
            status=400,
            code=None,
            message="Input prompt (35247 tokens) is too long and exceeds limit of 1000",
            source="vLLM V0 scheduler: github.com/vllm-project/vllm/issues/10440",
        ),
    ),
    "ollama": (
        Wording(
            status=400,
            code=None,
            message="the input length exceeds the context length",
            source="Ollama API 400 with truncation off: github.com/nano-step/nano-brain/issues/208",
        ),
    ),
    "tgi": (
        Wording(
            status=422,
            code="validation",
            message="Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
            "1512. Given: 1000 `inputs` tokens and 1024 `max_new_tokens`",
            source="text-generation-inference 422: github.com/huggingface/chat-ui/issues/340 "
            "(max_total_tokens check, huggingface/text-generation-inference PR 68)",
        ),
        Wording(
            status=422,
            code="validation",
            message="Input validation error: `inputs` must have less than 4096 tokens. Given: 4545",
            source="text-generation-inference 422: github.com/meta-llama/llama/issues/1103",
        ),
    ),
    "gemini": (
        Wording(
            status=400,
            code="INVALID_ARGUMENT",
            message="The input token count (1200293) exceeds the maximum number of tokens "
            "allowed (1048576).",
            source="Gemini API 400 INVALID_ARGUMENT: "
            "github.com/google-gemini/gemini-cli/issues/6678",
        ),
    ),
    "bedrock": (
        Wording(
            status=400,
            code="ValidationException",
            message="The model returned the following errors: Input is too long for "
            "requested model.",
            source="Amazon Bedrock Converse ValidationException: "
            "github.com/aws-solutions/generative-ai-application-builder-on-aws/issues/207",
        ),
    ),
    "xai": (
        Wording(
            status=400,
            code=None,
            message="This model's maximum prompt length is 131072 but the request contains "
            "136973 tokens.",
            source="xAI API (grok-3): github.com/cline/cline/issues/3120",
        ),
    ),
    "http 413": (
        Wording(
            status=413,
            code=None,
            message="Error code: 413 - <html><head><title>413 Request Entity Too Large"
            "</title></head><body><center><h1>413 Request Entity Too Large</h1></center>"
            "<hr><center>nginx</center></body></html>",
            source="a reverse proxy's 413 (RFC 9110 section 15.5.14, 413 Content Too Large; "
            "nginx's client_max_body_size page), as the openai SDK wraps a non-JSON body",
        ),
    ),
    "generic": (
        Wording(
            status=None,
            code=None,
            message="Request failed: context window exceeded (32768 tokens)",
            source="a catch-all for gateways that paraphrase (kept from the first table)",
        ),
    ),
}

ALL_WORDINGS = [
    pytest.param(label, wording, id=f"{label}-{n}")
    for label, wordings in OVERFLOW_CASES.items()
    for n, wording in enumerate(wordings)
]


def test_every_overflow_pattern_has_a_cited_case() -> None:
    """The case table covers exactly the labels of `OVERFLOW_PATTERNS`, each with a source."""
    assert set(OVERFLOW_CASES) == {label for label, _ in OVERFLOW_PATTERNS}
    assert all(w.source for wordings in OVERFLOW_CASES.values() for w in wordings)


@pytest.mark.parametrize(("label", "wording"), ALL_WORDINGS)
def test_overflow_wordings_classify_as_overflow(label: str, wording: Wording) -> None:
    """R13: each provider's own wording is an overflow, matched by its own table entry."""
    pattern = dict(OVERFLOW_PATTERNS)[label]
    assert pattern.search(f"{wording.code or ''} {wording.message}")
    kind = classify_error(status_code=wording.status, code=wording.code, message=wording.message)
    assert kind == "overflow"


@pytest.mark.parametrize(("label", "wording"), ALL_WORDINGS)
@pytest.mark.parametrize("status", [400, 413, 422, 500, None])
def test_overflow_wins_over_the_status(label: str, wording: Wording, status: int | None) -> None:
    """Overflow is read from the text, whatever status carries it (even a 5xx or none)."""
    kind = classify_error(status_code=status, code=wording.code, message=wording.message)
    assert kind == "overflow"


# vLLM's refusal of an output cap that cannot fit beside a prompt that does fit: its text names
# the context length, yet compaction is not the answer (github.com/andrewcho-dev/opsconductor-ng
# vLLM_transition/TOKEN_LIMIT_FIX.md quotes it; vLLM's serving layer words it).
VLLM_MAX_TOKENS = (
    "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context "
    "length is 8192 tokens and your request has 1210 input tokens (8192 > 8192 - 1210)."
)


@pytest.mark.parametrize(
    "message",
    [
        VLLM_MAX_TOKENS,
        "'max_tokens' is too large: 8000. This model's maximum context length is 4096 tokens "
        "and your request has 2778 input tokens (8000 > 4096 - 2778).",
    ],
)
def test_vllm_max_tokens_too_large_is_not_an_overflow(message: str) -> None:
    """The "max_tokens is too large" refusal of vLLM is fatal, not an overflow (issue 14 item 9)."""
    assert any(p.search(message) for _, p in NOT_OVERFLOW_PATTERNS)
    assert classify_error(status_code=400, code="400", message=message) == "fatal"


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
        # Groq's per-minute budget (a rate limit, github.com/ITSpecialist111/
        # ai_automation_suggester/issues/61), Bedrock's output cap (github.com/aws-samples/
        # bedrock-access-gateway/issues/41) and TGI's output cap (github.com/huggingface/
        # transformers/issues/28523): none is about the prompt's length.
        "Request too large for model `llama-3.3-70b-versatile` in organization `org_01` "
        "service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 14810",
        "The maximum tokens you requested exceeds the model limit of 2048. Try again with a "
        "maximum tokens value that is lower than 2048.",
        "Input validation error: `max_new_tokens` must be <= 192. Given: 500",
    ],
)
def test_near_misses_are_not_overflow(message: str) -> None:
    """Token-limit wording that is not about the context window does not read as overflow."""
    assert classify_error(status_code=400, message=message) == "fatal"


def test_provider_error_raises_context_overflow_for_overflow() -> None:
    """`provider_error` builds a `ContextOverflowError` (not retryable) for an overflow."""
    (wording,) = OVERFLOW_CASES["anthropic"]
    code, message = wording.code, wording.message
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


def test_the_sdk_adapters_share_one_skeleton() -> None:
    """Issue 20: OpenAI and Anthropic adapters inherit `complete`/`stream` from `SdkProvider`."""
    from steerable_compaction.providers.anthropic import AnthropicProvider
    from steerable_compaction.providers.openai import OpenAIProvider
    from steerable_compaction.providers.sdk import SdkProvider

    for adapter in (OpenAIProvider, AnthropicProvider):
        assert issubclass(adapter, SdkProvider)
        assert not {"complete", "stream", "aclose", "_as_dict"} & set(vars(adapter))


def test_base_imports_nothing_above_the_hook_protocol() -> None:
    """Issue 20: `providers/base.py` needs values, errors and the hook protocol, not the engine."""
    import ast
    from pathlib import Path

    import steerable_compaction.providers.base as base

    tree = ast.parse(Path(base.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module
    }
    assert imported <= {"compaction", "errors", "hooks", "messages", "record"}
    assert not imported & {"engine", "loop", "compactor", "harness", "sidecar"}
