"""The provider protocol, its request and reply values, and the one error pattern table.

A provider answers a `CompletionRequest` (provider-neutral messages, tool specs, a cache hint)
with a `Completion` (an assistant `Message` and its `Usage`), whole (`complete`) or as a stream
of `StreamEvent`s ending in `StreamDone`. Adapters raise `ContextOverflowError` when the request
is too long and `ProviderError` (with `retryable`) for everything else, classified in one place:
`classify_error`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from ..compaction import SummaryRequest
from ..errors import ContextOverflowError, ProviderError
from ..hooks import Summarizer
from ..messages import Message
from ..record import Usage

__all__ = [
    "NOT_OVERFLOW_PATTERNS",
    "OVERFLOW_PATTERNS",
    "Completion",
    "CompletionRequest",
    "ErrorClass",
    "Provider",
    "StreamDone",
    "StreamEvent",
    "TextDelta",
    "ToolSpec",
    "classify_error",
    "malformed_reply",
    "provider_error",
    "provider_summarizer",
    "reply_count",
    "str_or_none",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool the model may call: its name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionRequest:
    """One model request.

    `cache_retention="none"` asks the adapter not to add a new prompt-cache entry for this
    request (R27: summary requests are throwaway suffixes of a warm prefix).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    cache_retention: Literal["default", "none"] = "default"


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """A provider's reply: the assistant message and what the request cost."""

    message: Message
    usage: Usage
    stop_reason: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, as it streams."""

    text: str


@dataclass(frozen=True, slots=True)
class StreamDone:
    """The end of a stream: the whole completion."""

    completion: Completion


StreamEvent: TypeAlias = TextDelta | StreamDone


@runtime_checkable
class Provider(Protocol):
    """What the loop and the summarizer call."""

    @property
    def name(self) -> str:
        """A short name for errors and logs (e.g. `openai`)."""

    async def complete(self, request: CompletionRequest) -> Completion:
        """The whole reply at once."""

    def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """The reply as it is produced, ending with one `StreamDone`."""


# -- the one error pattern table -----------------------------------------------------------------

ErrorClass: TypeAlias = Literal["overflow", "retryable", "fatal"]

OVERFLOW_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("openai code", re.compile(r"context_length_exceeded")),
    ("openai message", re.compile(r"maximum context length", re.I)),
    ("openai input limit", re.compile(r"input tokens exceed the configured limit", re.I)),
    ("openai context window", re.compile(r"exceeds the context window", re.I)),
    ("anthropic", re.compile(r"prompt is too long", re.I)),
    ("anthropic input", re.compile(r"input length and `?max_tokens`? exceed context limit", re.I)),
    ("anthropic 413", re.compile(r"request_too_large")),
    ("anthropic size", re.compile(r"request size exceeds model context window", re.I)),
    (
        "llama.cpp",
        re.compile(r"exceed_context_size_error|exceeds? the available context size", re.I),
    ),
    ("llama.cpp n_keep", re.compile(r"cannot truncate prompt with n_keep \(\d+\) >= n_ctx", re.I)),
    ("llama-cpp-python", re.compile(r"exceed context window of \d+", re.I)),
    ("lm studio keep", re.compile(r"trying to keep the first \d+ tokens when context", re.I)),
    (
        "lm studio n_keep",
        re.compile(r"tokens to keep from the initial prompt is greater than the context", re.I),
    ),
    ("lm studio input", re.compile(r"input length \d+ exceeds context length", re.I)),
    ("lm studio generation", re.compile(r"reached context length of \d+ tokens", re.I)),
    ("vllm", re.compile(r"longer than the maximum model length", re.I)),
    ("vllm scheduler", re.compile(r"input prompt \(\d+ tokens\) is too long", re.I)),
    ("ollama", re.compile(r"\binput (?:length )?exceeds (?:the )?context length", re.I)),
    ("tgi", re.compile(r"`inputs` (?:tokens \+ `max_new_tokens` must be <=|must have less than)")),
    (
        "gemini",
        re.compile(r"input token count (?:\(\d+\) )?exceeds the maximum number of tokens", re.I),
    ),
    ("vertex", re.compile(r"input token count is \d+ but model only supports up to", re.I)),
    ("gemini payload", re.compile(r"request payload size exceeds the limit", re.I)),
    ("cohere", re.compile(r"too many tokens: total number of tokens.{0,40} cannot exceed", re.I)),
    ("max_seq_len", re.compile(r"prompt_tokens \(\d+\) must be less than max_seq_len", re.I)),
    ("max_prompt_tokens", re.compile(r"input tokens \(\d+\) has exceeded max_prompt_tokens", re.I)),
    ("bedrock", re.compile(r"input is too long for requested model", re.I)),
    ("xai", re.compile(r"maximum prompt length is \d+", re.I)),
    (
        "http 413",
        re.compile(r"(?:request entity|payload|content) too large|request body size", re.I),
    ),
    ("generic", re.compile(r"context (?:window|length) (?:exceeded|is exceeded)", re.I)),
)
"""Which provider error texts (code, type or message) mean "the request is too long".

A limit on the whole request's bytes (`request_too_large`, an HTTP 413 from a proxy, Gemini's
"Request payload size exceeds the limit") counts: compaction folds old tool output and offloads
old images, which is what makes a long session's request large. A request too large in its
newest message alone stays too large, and the overflow retries end in
`OverflowRetriesExhaustedError`, which says so.
"""

NOT_OVERFLOW_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM refuses an output cap that cannot fit beside the prompt. With the numbers in the text
    # `classify_error` decides by them (`_OUTPUT_CAP`); this entry covers the rest.
    (
        "vllm max_tokens",
        re.compile(r"max_(?:completion_)?tokens'?(?: or '?max_completion_tokens'?)? is too large"),
    ),
)
"""Texts that read like an overflow but are not one; they win over `OVERFLOW_PATTERNS`."""

# vLLM: "'max_tokens' is too large: N. This model's maximum context length is W tokens and your
# request has P input tokens (N > W - P)". N >= W cannot fit beside any prompt (fatal); else the
# prompt is what crowds it out, and a shorter one makes room (overflow).
_OUTPUT_CAP = re.compile(
    r"is too large: (?P<cap>\d+)\. This model's maximum context length is (?P<window>\d+) tokens"
)

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def classify_error(
    *, status_code: int | None, code: str | None = None, message: str = ""
) -> ErrorClass:
    """Classify a provider failure from its HTTP status, error code and message.

    Context overflow wins over the status (providers report it as 400, 413, 422 or even 500),
    unless a `NOT_OVERFLOW_PATTERNS` text says otherwise; then 408/409/425/429/5xx/529 and
    transport failures (`status_code=None`) are retryable; the rest fatal. Decided cases: a
    per-minute token budget is a rate limit, never an overflow, even when one request exceeds
    it alone (Groq's 413 "Request too large ... on tokens per minute"): no pattern reads it as
    one, and its status decides (429 retryable, 413 fatal); vLLM's "max_tokens is too large" is
    an overflow only when the cap is below the window (a shorter prompt makes room); a
    whole-request size limit (Gemini's "Request payload size exceeds the limit") is one.
    """
    text = f"{code or ''} {message}"
    capped = _OUTPUT_CAP.search(text)
    if capped is not None:
        overflow = int(capped["cap"]) < int(capped["window"])
    else:
        overflow = not any(p.search(text) for _, p in NOT_OVERFLOW_PATTERNS) and any(
            p.search(text) for _, p in OVERFLOW_PATTERNS
        )
    if overflow:
        return "overflow"
    if status_code is None or status_code in _RETRYABLE_STATUS or status_code >= 500:
        return "retryable"
    return "fatal"


def provider_error(
    provider: str, *, status_code: int | None, code: str | None = None, message: str = ""
) -> ProviderError:
    """The error to raise for a classified failure (`ContextOverflowError` for overflow)."""
    kind = classify_error(status_code=status_code, code=code, message=message)
    text = message or (code or "request failed")
    if kind == "overflow":
        return ContextOverflowError(text, provider=provider, status_code=status_code)
    return ProviderError(
        text, provider=provider, status_code=status_code, retryable=kind == "retryable"
    )


def malformed_reply(provider: str, what: str, *, status_code: int | None = None) -> ProviderError:
    """The error for a reply that does not have the shape its API documents (not retryable)."""
    return ProviderError(f"malformed reply: {what}", provider=provider, status_code=status_code)


def reply_count(value: Any, where: str, provider: str) -> int:
    """A token count from a reply: absent is 0; anything but a non-negative int is malformed."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed_reply(provider, f"{where} must be a non-negative integer, got {value!r}")
    return value


def str_or_none(value: Any) -> str | None:
    """`value` if it is a string, else `None` (optional string fields of a reply)."""
    return value if isinstance(value, str) else None


def provider_summarizer(
    provider: Provider,
    *,
    tools: Sequence[ToolSpec] | Callable[[], Sequence[ToolSpec]] = (),
    max_output_tokens: int | None = 4096,
) -> Summarizer:
    """A summarizer that sends the warm-prefix replay to `provider` with no new cache entry.

    Pass the session's `tools` (or a function returning them, for a loop whose tools change):
    they are part of the cached prefix (and some providers refuse tool calls in a transcript
    whose request declares no tools).
    """

    async def summarize(request: SummaryRequest) -> str:
        limit = max_output_tokens
        if request.max_output_tokens is not None:
            limit = min(limit or request.max_output_tokens, request.max_output_tokens)
        completion = await provider.complete(
            CompletionRequest(
                messages=request.messages,
                tools=tuple(tools() if callable(tools) else tools),
                max_output_tokens=limit,
                cache_retention=request.cache_retention,
            )
        )
        return completion.message.text

    return summarize
