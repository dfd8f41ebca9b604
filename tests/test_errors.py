from __future__ import annotations

import pickle

import pytest

from steerable_compaction import (
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
    RecordLossError,
)
from steerable_compaction.errors import RecallError

EXAMPLES: list[CompactionError] = [
    ConfigError("threshold_ratio", 1.5, "a float in (0, 1]"),
    MessageError("bad base64", index=3, field="parts[0].data"),
    ConversionError("images cannot ride in OpenAI tool results", index=1, field="parts[0]"),
    RecordError("not valid JSON", path="/r.jsonl", line=9),
    RecordLockedError("another writer", path="/r.jsonl"),
    ProviderError("rate limited", provider="openai", status_code=429),
    ContextOverflowError("prompt is too long", provider="anthropic", status_code=400),
    OverflowRetriesExhaustedError(2, "prompt is too long"),
    ConfigError("OPENAI_API_KEY", None, "an API key", message="no OpenAI API key: set it"),
    RecallError("no entry with seq 9"),
    RecordConnectionError("postgresql://u@h:5432/db?session=s: the connection broke", line=3),
    RecordLossError("seqs 7 to 9 are missing", path="/r.db", found=7, written=10, synced=4),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_attributes_and_message(error: CompactionError) -> None:
    """Errors cross process boundaries intact: same type, attributes and text."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
    assert isinstance(back, CompactionError)


def test_messages_name_what_was_wrong_and_where() -> None:
    """Each error's text carries its location and quotes values with repr."""
    assert str(EXAMPLES[0]) == "threshold_ratio=1.5 is not allowed: expected a float in (0, 1]"
    assert str(EXAMPLES[1]) == "message 3, field 'parts[0].data': bad base64"
    assert str(MessageError("plain")) == "plain"
    assert str(RecordError("gone", line=4)) == "line 4: gone"
    assert str(RecordError("gone")) == "gone"
    assert str(EXAMPLES[5]) == "openai (HTTP 429): rate limited"
    assert str(ProviderError("boom")) == "unknown: boom"
    assert str(EXAMPLES[7]) == (
        "context overflow persisted after 2 compaction retries: prompt is too long"
    )
    assert str(EXAMPLES[8]) == "no OpenAI API key: set it"  # a sentence replaces the form


def test_the_tree_matches_the_docstring() -> None:
    """Overflow is a provider error; a lock conflict is a record error; one root for all."""
    assert issubclass(ContextOverflowError, ProviderError)
    assert issubclass(RecordLockedError, RecordError)
    assert issubclass(RecordConnectionError, RecordError)
    assert issubclass(RecordLossError, RecordError)
    assert issubclass(ConversionError, MessageError)
    for error in EXAMPLES:
        assert isinstance(error, CompactionError)
