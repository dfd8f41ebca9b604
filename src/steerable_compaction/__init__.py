"""steerable-compaction: keep a long agent turn inside the context window.

The public surface is listed in `__all__`; everything in a module whose name starts with an
underscore is private.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .errors import (
    CompactionError,
    ConfigError,
    ContextOverflowError,
    ConversionError,
    MessageError,
    OverflowRetriesExhaustedError,
    ProviderError,
    RecordError,
    RecordLockedError,
)
from .messages import ImagePart, Message, TextPart, ToolCall, ToolResult

try:
    __version__ = version("steerable-compaction")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "CompactionError",
    "ConfigError",
    "ContextOverflowError",
    "ConversionError",
    "ImagePart",
    "Message",
    "MessageError",
    "OverflowRetriesExhaustedError",
    "ProviderError",
    "RecordError",
    "RecordLockedError",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "__version__",
]
