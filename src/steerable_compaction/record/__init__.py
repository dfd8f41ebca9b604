"""The append-only record and its projection.

The record is the single source of truth: every message, every compaction bracket and every
boundary, never rewritten. The projection (what the model sees) is a pure fold of it.
"""

from __future__ import annotations

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
