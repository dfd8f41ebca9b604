"""steerable-compaction: keep a long agent turn inside the context window.

The public surface is listed in `__all__`; names not listed there (and modules whose name starts
with an underscore) may change without notice.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

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
    RecordConnectionError,
    RecordError,
    RecordLockedError,
)
from .harness import Harness, load_harness
from .hooks import ChainHooks
from .loop import CoreLoop, Tool, TurnResult
from .messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from .policy import CompactionPolicy, resolve_compaction_policy, resolve_context_window
from .providers import Completion, CompletionRequest, Provider, ToolSpec
from .record import (
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
    from .record.postgres import PostgresRecord

try:
    __version__ = version("steerable-compaction")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "ChainHooks",
    "CompactionBoundary",
    "CompactionError",
    "CompactionHooks",
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
    "Harness",
    "ImagePart",
    "JsonlRecord",
    "MemoryRecord",
    "Message",
    "MessageAppended",
    "MessageError",
    "OverflowRetriesExhaustedError",
    "PostgresRecord",
    "Provider",
    "ProviderError",
    "Record",
    "RecordConnectionError",
    "RecordError",
    "RecordLockedError",
    "Reminder",
    "RetryHooks",
    "SpillHooks",
    "SqliteRecord",
    "TextPart",
    "TokenMeter",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TurnResult",
    "__version__",
    "estimate_tokens",
    "from_anthropic",
    "from_openai",
    "load_harness",
    "open_record",
    "project",
    "resolve_compaction_policy",
    "resolve_context_window",
    "to_anthropic",
    "to_openai",
]


def __getattr__(name: str) -> Any:
    # `PostgresRecord` needs psycopg (the `postgres` extra): imported when first named.
    if name == "PostgresRecord":
        from .record.postgres import PostgresRecord

        return PostgresRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
