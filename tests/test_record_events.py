from __future__ import annotations

import pytest

from steerable_compaction import Message, RecordError
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Usage,
)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: Usage(prompt_tokens=-1), "prompt_tokens must be a non-negative integer"),
        (lambda: Usage(prompt_tokens=True), "prompt_tokens must be a non-negative integer"),
        (lambda: Usage(prompt_tokens=1, cached_tokens=-2), "cached_tokens"),
        (
            lambda: CompactionStart(
                compaction_id="", span=(0, 1), pre_tokens=1, action="summarize"
            ),
            "compaction_id",
        ),
        (
            lambda: CompactionStart(
                compaction_id="k", span=(2, 1), pre_tokens=1, action="summarize"
            ),
            "span must be",
        ),
        (
            lambda: CompactionStart(compaction_id="k", span=(0,), pre_tokens=1, action="summarize"),  # type: ignore[arg-type]
            "span must be",
        ),
        (
            lambda: CompactionStart(compaction_id="k", span=(0, 1), pre_tokens=1, action="nap"),  # type: ignore[arg-type]
            "action must be one of",
        ),
        (
            lambda: CompactionStart(
                compaction_id="k",
                span=(0, 1),
                pre_tokens=1,
                action="compact",
                trigger="whim",  # type: ignore[arg-type]
            ),
            "trigger must be one of",
        ),
        *[
            (
                lambda kept=kept: CompactionStart(
                    compaction_id="k", span=(2, 5), pre_tokens=1, action="summarize", kept=kept
                ),
                "kept must be increasing indices inside span",
            )
            for kept in [(1,), (5,), (3, 3), (4, 3), (True,), ("2",), ("a", 3), (3, None)]
        ],
        (lambda: CompactionSummary(compaction_id="", summary="s"), "compaction_id"),
        (lambda: Edit(index=-1, message=Message.user("x")), "edit index"),
        (
            lambda: CompactionBoundary(
                action="compact",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=0,
                replacement=(Message.user("x"),),
            ),
            "needs a span",
        ),
        (
            lambda: CompactionBoundary(
                action="summarize",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=0,
                compaction_id="k",
            ),
            "needs its span",
        ),
        (
            lambda: CompactionBoundary(
                action="compact",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=0,
                compaction_id="",
            ),
            "None or a non-empty string",
        ),
        (
            lambda: CompactionBoundary(
                action="compact",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=2,
                edits=(
                    Edit(index=1, message=Message.user("a")),
                    Edit(index=1, message=Message.user("b")),
                ),
            ),
            "at most once",
        ),
        (
            lambda: CompactionBoundary(
                action="compact", pre_tokens=1, post_tokens=-5, replacement_count=0
            ),
            "post_tokens",
        ),
        (lambda: CompactionAbandoned(compaction_id="", reason="r"), "compaction_id"),
    ],
)
def test_events_validate_their_fields_on_construction(build: object, reason: str) -> None:
    """A malformed event cannot even be built: `RecordError` names the field."""
    assert callable(build)
    with pytest.raises(RecordError, match=reason):
        build()


def test_boundary_accepts_lists_and_stores_tuples() -> None:
    """Edits and replacements given as lists are frozen into tuples (events stay hashable)."""
    boundary = CompactionBoundary(
        action="summarize",
        pre_tokens=10,
        post_tokens=2,
        replacement_count=3,
        span=(1, 4),
        edits=[Edit(index=0, message=Message.user("a"))],  # type: ignore[arg-type]
        replacement=[Message.user("s")],  # type: ignore[arg-type]
    )
    assert isinstance(boundary.edits, tuple)
    assert isinstance(boundary.replacement, tuple)
    assert {boundary: 1}[boundary] == 1  # hashable: a list field would raise TypeError here
