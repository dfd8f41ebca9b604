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
        Wording(
            status=400,
            code="context_length_exceeded",
            message="This model's maximum context length is 8192 tokens. However, your "
            "messages resulted in 8227 tokens. Please reduce the length of the messages.",
            source="OpenAI Chat Completions: github.com/crewAIInc/crewAI-examples/issues/121",
        ),
        Wording(
            status=400,
            code=None,
            message="This model's maximum context length is 4097 tokens, however you requested "
            "4162 tokens (1090 in your prompt; 3072 for the completion). Please reduce your "
            "prompt; or completion length.",
            source="OpenAI Completions (older wording): github.com/tatsu-lab/stanford_alpaca/"
            "issues/47",
        ),
        Wording(
            status=400,
            code="invalid_request_error",
            message="This model's maximum context length is 131072 tokens. However, you "
            "requested 194606 tokens (194606 in the messages, 0 in the completion). Please "
            "reduce the length of the messages or completion.",
            source="DeepSeek API: github.com/Anxcye/anx-reader/issues/710",
        ),
        Wording(
            status=400,
            code=None,
            message="This model's maximum context length is 128000 tokens. However, you "
            "requested 65535 output tokens and your prompt contains at least 62466 input "
            "tokens, for a total of at least 128001 tokens.",
            source="vLLM after its rewording (vllm-project/vllm PR 36197): github.com/"
            "vllm-project/vllm/issues/42474",
        ),
        Wording(
            status=400,
            code="invalid_request_error",
            message="The prompt is too long: 40177, model maximum context length: 32767",
            source="Fireworks AI: github.com/fw-ai/cookbook/issues/134",
        ),
        Wording(
            status=400,
            code=None,
            message="Prompt exceeds maximum context length",
            source="mlx-serve's Anthropic-compatible API: github.com/ddalcu/mlx-serve/issues/66",
        ),
        Wording(
            status=400,
            code="400",
            message="'max_tokens' or 'max_completion_tokens' is too large: 47186. This model's "
            "maximum context length is 131072 tokens and your request has 86565 input tokens "
            "(47186 > 131072 - 86565).",
            source="vLLM behind OpenRouter (provider Venice), quoted in a public document "
            "found by code search; the cap fits the window, the prompt crowds it out (decided "
            "in `classify_error`; context: github.com/openclaw/openclaw/issues/38168)",
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
        Wording(
            status=413,
            code="413",
            message='{"type":"error","error":{"type":"invalid_request_error","message":"Prompt '
            'is too long"}}',
            source="Claude on Vertex AI, a 413: github.com/anthropics/claude-code/issues/2569",
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
        Wording(
            status=400,
            code=None,
            message="input length and max_tokens exceed context limit: 86888 + 119866 > "
            "204648, decrease input length or max_tokens and try again",
            source="the same without backticks: github.com/stackblitz/bolt.new/issues/7422",
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
            source="llama-server, OpenAI API: github.com/ggml-org/llama.cpp/issues/17284",
        ),
    ),
    "anthropic size": (
        Wording(
            status=413,
            code="invalid_request_error",
            message="Request size exceeds model context window",
            source="Anthropic API 413: github.com/anthropics/claude-code/issues/6368 (and "
            "issues 6366, 6380 there)",
        ),
    ),
    "llama.cpp n_keep": (
        Wording(
            status=400,
            code=None,
            message="Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)",
            source="llama.cpp under LM Studio: github.com/anomalyco/opencode/issues/11141",
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
    "lm studio keep": (
        Wording(
            status=400,
            code=None,
            message="Trying to keep the first 111490 tokens when context the overflows. "
            "However, the model is loaded with context length of only 32768 tokens, which is "
            "not enough. Try to load the model with a larger context length, or provide a "
            "shorter input.",
            source="LM Studio: github.com/lmstudio-ai/lmstudio-bug-tracker/issues/546",
        ),
        Wording(
            status=400,
            code=None,
            message="Trying to keep the first 6547 tokens when context overflows. However, the "
            "model is loaded with a context length of only 4096 tokens, which is not enough.",
            source="LM Studio (another build's wording): github.com/n4ze3m/page-assist/issues/356",
        ),
    ),
    "lm studio n_keep": (
        Wording(
            status=400,
            code=None,
            message="The number of tokens to keep from the initial prompt is greater than the "
            "context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger "
            "context length, or provide a shorter input.",
            source="LM Studio: github.com/Gitlawb/openclaude/issues/353 and "
            "github.com/logancyang/obsidian-copilot/issues/962",
        ),
    ),
    "lm studio input": (
        Wording(
            status=None,
            code=None,
            message="[ERROR] Error: Input length 6491 exceeds context length 1500",
            source="LM Studio's server log: github.com/lmstudio-ai/examples/issues/29",
        ),
    ),
    "lm studio generation": (
        Wording(
            status=400,
            code=None,
            message="Reached context length of 32000 tokens with model (arch: gpt-oss) that "
            "does not currently support mid-generation context overflow. Try reloading with a "
            "larger context length or shortening the prompt/chat.",
            source="LM Studio: github.com/lmstudio-ai/lmstudio-bug-tracker/issues/1024",
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
        Wording(
            status=None,
            code=None,
            message="Input prompt (2664 tokens) is too long and exceeds limit of 2048",
            source="vLLM scheduler warning: github.com/vllm-project/vllm/issues/525",
        ),
    ),
    "ollama": (
        Wording(
            status=400,
            code=None,
            message="the input length exceeds the context length",
            source="Ollama API 400 with truncation off: github.com/nano-step/nano-brain/issues/208",
        ),
        Wording(
            status=500,
            code=None,
            message='msg="input exceeds context length" prompt=2782 limit=2048',
            source="Ollama's runner, answered with a 500: github.com/ITSpecialist111/"
            "ai_automation_suggester/issues/37",
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
        Wording(
            status=400,
            code="INVALID_ARGUMENT",
            message="The input token count exceeds the maximum number of tokens allowed (1048576).",
            source="Gemini without the count: github.com/arkavo-org/arkavo-edge/issues/371",
        ),
        Wording(
            status=400,
            code="INVALID_ARGUMENT",
            message="The input token count exceeds the maximum number of tokens allowed 1048576.",
            source="Vertex AI Gemini: github.com/warpdotdev/warp/issues/15662 and "
            "github.com/google-gemini/gemini-cli/issues/22609",
        ),
        Wording(
            status=400,
            code="INVALID_ARGUMENT",
            message="The input token count (25270) exceeds the maximum number of tokens allowed "
            "(4000).",
            source="Vertex AI RAG Engine: github.com/googleapis/python-genai/issues/2050",
        ),
    ),
    "vertex": (
        Wording(
            status=400,
            code=None,
            message="Unable to submit request because the input token count is 1251952 but "
            "model only supports up to 1048576. Reduce the input token count and try again.",
            source="Vertex AI: github.com/google-gemini/gemini-cli/issues/19727",
        ),
    ),
    "gemini payload": (
        # Decided: a limit on the whole request's bytes is an overflow (module docstring).
        Wording(
            status=400,
            code="INVALID_ARGUMENT",
            message="Request payload size exceeds the limit: 4194304 bytes.",
            source="Gemini API: github.com/google-gemini/deprecated-generative-ai-android/"
            "issues/26",
        ),
    ),
    "cohere": (
        Wording(
            status=400,
            code=None,
            message="too many tokens: total number of tokens (prompt and prediction) cannot "
            "exceed 2048 - received 6354. Try using a shorter prompt or a smaller max_tokens "
            "value.",
            source="Cohere generate: github.com/cohere-ai/sandbox-topically/issues/4",
        ),
    ),
    "max_seq_len": (
        Wording(
            status=400,
            code=None,
            message="length of prompt_tokens (57535) must be less than max_seq_len (32768)",
            source="SiliconFlow: github.com/langgenius/dify/issues/19394",
        ),
    ),
    "max_prompt_tokens": (
        Wording(
            status=400,
            code="20015",
            message="number of input tokens (204703) has exceeded max_prompt_tokens (202752) "
            "limit.",
            source="GLM-5.1 over an OpenAI-compatible API: github.com/leookun/cursor-byok/"
            "issues/129",
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
        Wording(
            status=413,
            code=None,
            message="Maximum request body size 1048576 exceeded, actual body size 1056562",
            source="Gemini CLI's endpoint, a 413: github.com/google-gemini/gemini-cli/issues/13776",
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


# vLLM's refusal of an output cap that cannot fit beside the prompt. A cap at or above the window
# fits beside no prompt: compaction is not the answer (issue 14 item 9). A cap below it is crowded
# out by the prompt, and a shorter prompt makes room: an overflow (issue 26; see OVERFLOW_CASES).
VLLM_MAX_TOKENS = (
    "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context "
    "length is 8192 tokens and your request has 1210 input tokens (8192 > 8192 - 1210)."
)


@pytest.mark.parametrize(
    "message",
    [
        # github.com/andrewcho-dev/opsconductor-ng vLLM_transition/TOKEN_LIMIT_FIX.md quotes it
        VLLM_MAX_TOKENS,
        "'max_tokens' is too large: 8000. This model's maximum context length is 4096 tokens "
        "and your request has 2778 input tokens (8000 > 4096 - 2778).",
        # without the numbers (github.com/stepfun-ai/Step-Audio-R1/issues/3): not an overflow
        "ValueError: 'max_tokens' or 'max_completion_tokens' is too large: 32000",
    ],
)
def test_vllm_max_tokens_at_or_above_the_window_is_not_an_overflow(message: str) -> None:
    """The "max_tokens is too large" of vLLM with a cap no prompt leaves room for is fatal."""
    assert classify_error(status_code=400, code="400", message=message) == "fatal"


def test_vllm_max_tokens_below_the_window_is_an_overflow() -> None:
    """Issue 26: the same refusal with a cap below the window: compacting the prompt helps."""
    (wording,) = [w for w in OVERFLOW_CASES["openai message"] if "47186" in w.message]
    assert any(p.search(wording.message) for _, p in NOT_OVERFLOW_PATTERNS)  # the numbers win
    assert classify_error(status_code=400, code="400", message=wording.message) == "overflow"
    just_at = wording.message.replace("47186", "131072")
    assert classify_error(status_code=400, code="400", message=just_at) == "fatal"


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529, 599, None])
def test_transient_statuses_are_retryable(status: int | None) -> None:
    """408/409/425/429, every 5xx, 529 and transport failures (no status) are retryable."""
    assert classify_error(status_code=status, message="Overloaded") == "retryable"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_client_errors_are_fatal(status: int) -> None:
    """Other 4xx are fatal: retrying the same request cannot help."""
    assert classify_error(status_code=status, message="invalid x-api-key") == "fatal"


# Wordings near an overflow's that are not one: rate limits and per-minute token budgets (status
# decides: 429 retryable, 413 fatal), output caps, per-item size limits, malformed requests.
NEAR_MISSES = [
    Wording(
        status=429,
        code="rate_limit_exceeded",
        message="Request too large for gpt-4o in organization org-VDAWofJASuLH0vVz8o9tiQZr on "
        "tokens per min (TPM): Limit 30000, Requested 30601. The input or output tokens must "
        "be reduced in order to run successfully.",
        source="OpenAI TPM, one request over it: github.com/vanderschaarlab/climb/issues/1",
    ),
    Wording(
        status=429,
        code=None,
        message="Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000",
        source="OpenAI TPM (kept from the first table)",
    ),
    Wording(
        status=413,
        code=None,
        message="Request too large for model `llama-3.3-70b-versatile` in organization `org_01` "
        "service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 14810",
        source="Groq's 413 for a per-minute budget (decided: a rate limit, fatal as it stands): "
        "github.com/ITSpecialist111/ai_automation_suggester/issues/61",
    ),
    Wording(
        status=429,
        code="rate_limit_error",
        message="This request would exceed the rate limit for your organization (0dccdde6) of "
        "20,000 input tokens per minute. For details, refer to: https://docs.anthropic.com/en/"
        "api/rate-limits. You can see the response headers for current usage. Please reduce the "
        "prompt length or the maximum tokens requested, or try again later.",
        source="Anthropic: github.com/OpenHands/OpenHands/issues/9259",
    ),
    Wording(
        status=429,
        code="429",
        message="Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
        "2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 pricing "
        "tier. Please retry after 86400 seconds.",
        source="Azure OpenAI: github.com/alex-wolf-ps/dbchatprov2/issues/2",
    ),
    Wording(
        status=429,
        code="ThrottlingException",
        message="Too many tokens, please wait before trying again.",
        source="Amazon Bedrock: github.com/anthropics/claude-code/issues/236 (misread as an "
        "overflow elsewhere: github.com/anomalyco/opencode/pull/39621)",
    ),
    Wording(
        status=429,
        code="ThrottlingException",
        message="Too many tokens per day, please wait before trying again.",
        source="Amazon Bedrock daily quota: github.com/minorun365/agent-book/issues/29",
    ),
    Wording(
        status=429,
        code="RESOURCE_EXHAUSTED",
        message="You exceeded your current quota, please check your plan and billing details. "
        "For more information on this error, head to: https://ai.google.dev/gemini-api/docs/"
        "rate-limits.",
        source="Gemini free tier (quota metric input_token_count): github.com/google-gemini/"
        "gemini-cli/issues/8437",
    ),
    Wording(
        status=429,
        code="RESOURCE_EXHAUSTED",
        message="Resource exhausted. Please try again later. Please refer to https://cloud."
        "google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
        source="Vertex AI: github.com/google-gemini/gemini-cli/issues/14811",
    ),
    Wording(
        status=429,
        code="RATE_LIMITED",
        message="The system is currently experiencing high demand and cannot process your "
        "request. Your request exceeds the maximum usage size allowed during peak load.",
        source="Azure OpenAI at peak load: github.com/pollinations/pollinations/issues/6260",
    ),
    Wording(
        status=400,
        code="invalid_value",
        message="max_tokens is too large: 20480. This model supports at most 16384 completion "
        "tokens, whereas you provided 20480.",
        source="OpenAI output cap: github.com/tailcallhq/forgecode/issues/1185",
    ),
    Wording(
        status=400,
        code=None,
        message="max_tokens is too large: 8192. This model supports at most 4096 completion "
        "tokens, whereas you provided 8192.",
        source="OpenAI output cap: github.com/ChatGPTNextWeb/NextChat/issues/3195",
    ),
    Wording(
        status=400,
        code="unsupported_parameter",
        message="Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.",
        source="OpenAI reasoning models: github.com/teilomillet/gollm/issues/33",
    ),
    Wording(
        status=400,
        code="InvalidParameter",
        message="The parameter `max_completion_tokens` specified in the request are not valid: "
        "integer above maximum value, expected a value <= 12288, but got 32000 instead.",
        source="Volcengine Doubao: github.com/Gitlawb/openclaude/issues/331",
    ),
    Wording(
        status=400,
        code="invalid_request_error",
        message="max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens",
        source="Anthropic output cap (kept from the first table)",
    ),
    Wording(
        status=400,
        code="ValidationException",
        message="The maximum tokens you requested exceeds the model limit of 2048. Try again "
        "with a maximum tokens value that is lower than 2048.",
        source="Amazon Bedrock output cap: github.com/aws-samples/bedrock-access-gateway/issues/41",
    ),
    Wording(
        status=422,
        code="validation",
        message="Input validation error: `max_new_tokens` must be <= 192. Given: 500",
        source="text-generation-inference output cap: github.com/huggingface/transformers/"
        "issues/28523",
    ),
    Wording(
        status=400,
        code="invalid_request_error",
        message="messages.0.content.2.image.source.base64: image exceeds 5 MB maximum: "
        "15908784 bytes > 5242880 bytes",
        source="Anthropic, one image too large: github.com/anthropics/claude-code/issues/10612",
    ),
    Wording(
        status=400,
        code="invalid_request_error",
        message="messages.7.content.2.image.source.base64.data: At least one of the image "
        "dimensions exceed max allowed size: 8000 pixels",
        source="Anthropic, one image too wide: github.com/anthropics/claude-code/issues/4778",
    ),
    Wording(
        status=400,
        code=None,
        message="Invalid 'messages[17].content': string too long. Expected a string with "
        "maximum length 1048576, but got a string with length 1744259 instead.",
        source="OpenAI, one message too long: github.com/gptscript-ai/clio/issues/41",
    ),
    Wording(
        status=400,
        code="string_above_max_length",
        message="Invalid 'input[0].content': string too long. Expected a string with maximum "
        "length 10485760, but got a string with length 62114761 instead.",
        source="OpenAI Responses: github.com/VectorlyApp/bluebox/issues/31",
    ),
    Wording(
        status=413,
        code="message_length_exceeds_limit",
        message="The message you submitted was too long, please reload the conversation and "
        "submit something shorter.",
        source="ChatGPT's web backend, one message: github.com/xtekky/gpt4free/issues/2534",
    ),
    Wording(
        status=400,
        code=None,
        message="String value length (20054016) exceeds the maximum allowed (20000000, from "
        "`StreamReadConstraints.getMaxStringLength()`)",
        source="a JSON parser's limit on one string: github.com/QwenLM/qwen-code/issues/747",
    ),
    Wording(
        status=400,
        code="invalid_request_error",
        message="messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks",
        source="Anthropic tool pairing, a malformed request (kept from the first table)",
    ),
]


@pytest.mark.parametrize("wording", NEAR_MISSES, ids=lambda w: w.message[:40])
def test_near_misses_are_not_overflow(wording: Wording) -> None:
    """Issue 26: limits that are not the context window never read as overflow.

    Their status decides the rest: 429 is retryable, other 4xx fatal.
    """
    kind = classify_error(status_code=wording.status, code=wording.code, message=wording.message)
    assert kind == ("retryable" if wording.status == 429 else "fatal")
    assert wording.source


def test_the_tables_hold_the_wordings_issue_26_asks_for() -> None:
    """At least 35 overflow wordings and 20 near misses, each with its source."""
    overflows = [w for wordings in OVERFLOW_CASES.values() for w in wordings]
    assert len(overflows) >= 35 and len(NEAR_MISSES) >= 20
    assert all(w.source for w in [*overflows, *NEAR_MISSES])


def test_provider_error_raises_context_overflow_for_overflow() -> None:
    """`provider_error` builds a `ContextOverflowError` (not retryable) for an overflow."""
    wording = OVERFLOW_CASES["anthropic"][0]
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
