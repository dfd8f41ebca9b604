"""Providers: the protocol, error classification, and adapters on the official SDKs.

`OpenAIProvider` and `AnthropicProvider` need the `openai` / `anthropic` extras and are imported
lazily, so `import steerable_compaction.providers` never imports an SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import (
    NOT_OVERFLOW_PATTERNS,
    OVERFLOW_PATTERNS,
    Completion,
    CompletionRequest,
    ErrorClass,
    Provider,
    StreamDone,
    StreamEvent,
    TextDelta,
    ToolSpec,
    classify_error,
    provider_error,
    provider_summarizer,
)

if TYPE_CHECKING:
    from .anthropic import AnthropicProvider
    from .openai import OpenAIProvider

__all__ = [
    "NOT_OVERFLOW_PATTERNS",
    "OVERFLOW_PATTERNS",
    "AnthropicProvider",
    "Completion",
    "CompletionRequest",
    "ErrorClass",
    "OpenAIProvider",
    "Provider",
    "StreamDone",
    "StreamEvent",
    "TextDelta",
    "ToolSpec",
    "classify_error",
    "provider_error",
    "provider_summarizer",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIProvider":
        from .openai import OpenAIProvider

        return OpenAIProvider
    if name == "AnthropicProvider":
        from .anthropic import AnthropicProvider

        return AnthropicProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
