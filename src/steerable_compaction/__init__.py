"""steerable-compaction: keep a long agent turn inside the context window.

The supported surface is this package's `__all__` (pinned by `tests/test_public_api.py`) and
these subpackages: `recall` (history search and tools), `providers` (the provider protocol and
the SDK adapters), `adapters` (framework adapters), `testing` (fakes for your tests) and `sim`
(the evaluation simulator). Every other module is implementation: its names may change without
notice, even where the module lists them in an `__all__` of its own.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .compaction import SummaryRequest
from .compaction.state import EngineState
from .compactor import Compactor
from .engine import CompactionHooks
from .errors import (
    CompactionError,
    ConfigError,
    ContextOverflowError,
    ConversionError,
    MessageError,
    OverflowRetriesExhaustedError,
    ProviderError,
    RecallError,
    RecordConnectionError,
    RecordError,
    RecordLockedError,
    RecordLossError,
    RequestTooLargeError,
)
from .harness import Harness, load_harness
from .hooks import (
    ChainHooks,
    CompactionOutcome,
    Hooks,
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
    Summarizer,
    ToolResultContext,
)
from .loop import CoreLoop, Tool, TurnResult
from .messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from .policy import CompactionPolicy, resolve_compaction_policy, resolve_context_window
from .providers import Completion, CompletionRequest, Provider, ToolSpec
from .recall import read_history, search_history
from .record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
    Reminder,
    SqliteRecord,
    open_record,
    project,
)
from .retry import RetryHooks
from .spill import SpillHooks
from .tokens import TokenMeter, estimate_tokens
from .wire import from_anthropic, from_openai, to_anthropic, to_openai

if TYPE_CHECKING:
    from .providers.anthropic import AnthropicProvider
    from .providers.openai import OpenAIProvider
    from .record.postgres import PostgresRecord

try:
    __version__ = version("steerable-compaction")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "AnthropicProvider",
    "ChainHooks",
    "CompactionAbandoned",
    "CompactionBoundary",
    "CompactionError",
    "CompactionHooks",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionStart",
    "CompactionSummary",
    "Compactor",
    "Completion",
    "CompletionRequest",
    "ConfigError",
    "ContextOverflowError",
    "ConversionError",
    "CoreLoop",
    "EngineState",
    "Harness",
    "Hooks",
    "ImagePart",
    "JsonlRecord",
    "MemoryRecord",
    "Message",
    "MessageAppended",
    "MessageError",
    "OpenAIProvider",
    "OverflowRetriesExhaustedError",
    "PostgresRecord",
    "PreStepAction",
    "Provider",
    "ProviderError",
    "RecallError",
    "Record",
    "RecordConnectionError",
    "RecordError",
    "RecordLockedError",
    "RecordLossError",
    "Reminder",
    "RequestErrorContext",
    "RequestTooLargeError",
    "RetryAction",
    "RetryHooks",
    "SpillHooks",
    "SqliteRecord",
    "StepContext",
    "Summarizer",
    "SummaryRequest",
    "TextPart",
    "TokenMeter",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolResultContext",
    "ToolSpec",
    "TurnResult",
    "__version__",
    "estimate_tokens",
    "from_anthropic",
    "from_openai",
    "load_harness",
    "open_record",
    "project",
    "read_history",
    "resolve_compaction_policy",
    "resolve_context_window",
    "search_history",
    "to_anthropic",
    "to_openai",
]


def __getattr__(name: str) -> Any:
    """The SDK adapters, imported on first use (they need the `openai` / `anthropic` extras)."""
    if name in ("OpenAIProvider", "AnthropicProvider"):
        from . import providers

        return getattr(providers, name)
    # `PostgresRecord` needs psycopg (the `postgres` extra): imported when first named.
    if name == "PostgresRecord":
        from .record.postgres import PostgresRecord

        return PostgresRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
