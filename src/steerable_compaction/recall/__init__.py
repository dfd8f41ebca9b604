"""Recall: the record as the model's long-term memory.

Compaction folds and summarizes old messages out of the projection, but the record keeps every
one of them. Recall searches and reads those raw messages that the projection no longer shows:

- `search_history(record, query, limit=5)` → ranked `HistoryHit`s;
- `read_history(record, seq, offset=0, max_tokens=...)` → a `HistoryPage` of one message
  (its images too, on the first page);
- `hidden_image_messages(record)` → the hidden messages that hold images, newest first: text
  search cannot see into an image, so a fact only in its pixels is found by looking again;
- `prepare_index(record)`: bring the index wholly up to date now (searches otherwise catch it
  up a slice at a time, `CATCH_UP_SECONDS` each);
- the same as the model's tools `history_search` / `history_read`: `history_tools` (the
  fields of a `loop.Tool`, for `CoreLoop`), `openai_tool_schemas` / `anthropic_tool_schemas`
  with `execute_history_tool` (for your own loop).

Matching (see `recall.text`): every query term must occur in the message, case-insensitively;
a `"quoted phrase"` is one term; nothing else in a query is syntax. `SqliteRecord` searches an
FTS5 trigram table kept in its database; other records an in-memory word index built on first
use. Both give the same hits. See `docs/recall.md`.
"""

from __future__ import annotations

from .search import (
    CATCH_UP_SECONDS,
    DEFAULT_READ_TOKENS,
    MAX_IMAGE_MESSAGES,
    MAX_LIMIT,
    RANK_WINDOW,
    SCAN_LIMIT,
    HistoryHit,
    HistoryPage,
    hidden_image_messages,
    hidden_seqs,
    prepare_index,
    read_history,
    search_history,
)
from .text import HISTORY_TOOL_NAMES, MAX_QUERY_CHARS, MAX_TERMS, parse_query
from .tools import (
    HISTORY_READ,
    HISTORY_SEARCH,
    MAX_TOOL_LIMIT,
    MIN_RESULT_TOKENS,
    HistoryTool,
    anthropic_tool_schemas,
    execute_history_tool,
    history_tools,
    openai_tool_schemas,
)

__all__ = [
    "CATCH_UP_SECONDS",
    "DEFAULT_READ_TOKENS",
    "HISTORY_READ",
    "HISTORY_SEARCH",
    "HISTORY_TOOL_NAMES",
    "MAX_IMAGE_MESSAGES",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "MAX_TOOL_LIMIT",
    "MIN_RESULT_TOKENS",
    "RANK_WINDOW",
    "SCAN_LIMIT",
    "HistoryHit",
    "HistoryPage",
    "HistoryTool",
    "anthropic_tool_schemas",
    "execute_history_tool",
    "hidden_image_messages",
    "hidden_seqs",
    "history_tools",
    "openai_tool_schemas",
    "parse_query",
    "prepare_index",
    "read_history",
    "search_history",
]
