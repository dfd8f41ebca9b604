"""The append-only record and its projection.

The record is the single source of truth: every message, every compaction bracket and every
boundary, never rewritten. The projection (what the model sees) is a pure fold of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import CompactionInfo, FsyncPolicy, Record
from .codec import SCHEMA_VERSION, decode_entry, encode_entry
from .events import (
    CompactionAbandoned,
    CompactionAction,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    CompactionTrigger,
    Edit,
    Entry,
    Event,
    MessageAppended,
    Reminder,
    SummarySource,
    Usage,
)
from .jsonl import JsonlRecord
from .memory import MemoryRecord
from .projection import OpenBracket, Projection, project
from .sqlite import SqliteRecord
from .stores import open_record

if TYPE_CHECKING:
    from .postgres import PostgresRecord

__all__ = [
    "SCHEMA_VERSION",
    "CompactionAbandoned",
    "CompactionAction",
    "CompactionBoundary",
    "CompactionInfo",
    "CompactionStart",
    "CompactionSummary",
    "CompactionTrigger",
    "Edit",
    "Entry",
    "Event",
    "FsyncPolicy",
    "JsonlRecord",
    "MemoryRecord",
    "MessageAppended",
    "OpenBracket",
    "PostgresRecord",
    "Projection",
    "Record",
    "Reminder",
    "SqliteRecord",
    "SummarySource",
    "Usage",
    "decode_entry",
    "encode_entry",
    "open_record",
    "project",
]


def __getattr__(name: str) -> Any:
    # `PostgresRecord` needs psycopg (the `postgres` extra): imported when first named.
    if name == "PostgresRecord":
        from .postgres import PostgresRecord

        return PostgresRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
