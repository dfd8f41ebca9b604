from __future__ import annotations

import pytest
from hypothesis import given

from steerable_compaction import Message, RecordError
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Entry,
    Event,
    MessageAppended,
    Projection,
    Reminder,
    project,
)

from .record_sessions import event_sequences, small_session


def entries(events: list[Event]) -> list[Entry]:
    return [Entry(i, e) for i, e in enumerate(events)]


def texts(messages: object) -> list[str]:
    assert isinstance(messages, list | tuple)
    return [m.text for m in messages]


def test_messages_and_reminders_append_in_order_with_their_seqs() -> None:
    """Messages and reminders join the projection in record order; `seqs` name their entries."""
    events: list[Event] = [
        MessageAppended(message=Message.user("a")),
        Reminder(reason="r", message=Message.user("remember")),
        MessageAppended(message=Message.assistant("b")),
    ]
    p = Projection()
    for e in entries(events):
        p.apply(e)
    assert texts(list(p.messages)) == ["a", "remember", "b"]
    assert list(p.seqs) == [0, 1, 2]


def test_r37_closed_bracket_splices_summary_in_place_of_its_span() -> None:
    """R37: a closed bracket replaces `[head_end, tail_start)` with its replacement message."""
    result = project(entries(small_session()))
    assert texts(result) == [
        "You are a careful agent.",
        "Fix the bug in f2.py",
        "<compacted-summary>\nRead f0, f1.\n</compacted-summary>",
        "",
        "def f():\n    return 1 / 0\n",
        "The division by zero is the bug.",
    ]


def test_r37_unclosed_bracket_is_ignored_but_listed_for_recovery() -> None:
    """R37: a start without a boundary changes nothing visible and stays in `open_brackets`."""
    events = small_session()
    p = Projection()
    for e in entries(events[:-1]):
        p.apply(e)
    before = list(p.messages)
    p.apply(Entry(len(events) - 1, events[-1]))
    assert list(p.messages) == before
    (bracket,) = p.open_brackets
    assert bracket.start.compaction_id == "k2"
    assert bracket.summary is None
    p.apply(Entry(len(events), CompactionSummary(compaction_id="k2", summary="paid")))
    assert p.open_brackets[0].summary is not None
    assert p.open_brackets[0].summary.summary == "paid"
    assert list(p.messages) == before


def test_fold_boundary_edits_reproduce_the_rewrite_exactly_and_keep_the_source_seq() -> None:
    """A fold-only boundary's edits rewrite exactly the messages they name, nothing else."""
    events = small_session()[:7]
    p = Projection()
    for e in entries(events):
        p.apply(e)
    assert p.messages[3] == Message.tool("c0", "[folded: read_file, 280 chars]")
    assert list(p.seqs) == [0, 1, 2, 3, 4, 5]
    untouched = project(entries(events[:6]))
    assert [m for i, m in enumerate(p.messages) if i != 3] == [
        m for i, m in enumerate(untouched) if i != 3
    ]


def test_summary_replacement_entries_take_the_boundary_seq() -> None:
    """Messages put in place by a boundary are attributed to that boundary's seq."""
    p = Projection()
    for e in entries(small_session()):
        p.apply(e)
    assert list(p.seqs) == [0, 1, 11, 7, 8, 12]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (
            CompactionBoundary(
                action="summarize",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=0,
                compaction_id="nope",
                span=(0, 1),
            ),
            "unknown bracket",
        ),
        (CompactionSummary(compaction_id="nope", summary="s"), "unknown bracket"),
        (
            CompactionStart(compaction_id="x", span=(0, 99), pre_tokens=1, action="summarize"),
            "reaches past",
        ),
        (
            CompactionBoundary(
                action="compact",
                pre_tokens=1,
                post_tokens=1,
                replacement_count=1,
                edits=(Edit(index=50, message=Message.user("x")),),
            ),
            "past the projection",
        ),
        (
            CompactionBoundary(
                action="compact", pre_tokens=1, post_tokens=1, replacement_count=0, span=(1, 40)
            ),
            "reaches past",
        ),
    ],
)
def test_invalid_events_raise_record_error_and_change_nothing(event: Event, reason: str) -> None:
    """An event that breaks an invariant raises `RecordError` and leaves the projection as is."""
    p = Projection()
    for e in entries(small_session()):
        p.apply(e)
    before = (list(p.messages), list(p.seqs), p.open_brackets)
    with pytest.raises(RecordError, match=reason):
        p.apply(Entry(99, event))
    assert (list(p.messages), list(p.seqs), p.open_brackets) == before


def test_boundary_span_must_match_its_bracket() -> None:
    """Closing a bracket with a different span than it opened with is an invariant violation."""
    p = Projection()
    for e in entries(small_session()):
        p.apply(e)
    bad = CompactionBoundary(
        action="summarize",
        pre_tokens=1,
        post_tokens=1,
        replacement_count=2,
        compaction_id="k2",
        span=(2, 4),
    )
    with pytest.raises(RecordError, match="differs from bracket"):
        p.apply(Entry(99, bad))


def test_duplicate_bracket_and_second_summary_are_rejected() -> None:
    """A bracket id opens once and records one summary."""
    p = Projection()
    for e in entries(small_session()):
        p.apply(e)
    again = CompactionStart(compaction_id="k2", span=(0, 1), pre_tokens=1, action="summarize")
    with pytest.raises(RecordError, match="already open"):
        p.apply(Entry(99, again))
    p.apply(Entry(99, CompactionSummary(compaction_id="k2", summary="one")))
    with pytest.raises(RecordError, match="already has a summary"):
        p.apply(Entry(100, CompactionSummary(compaction_id="k2", summary="two")))


@given(event_sequences())
def test_projection_is_deterministic_and_incremental_equals_from_scratch(
    events: list[Event],
) -> None:
    """Folding the same entries twice, or one at a time, gives the same projection."""
    es = entries(events)
    incremental = Projection()
    for i, e in enumerate(es):
        incremental.apply(e)
        if i % 5 == 0:
            assert list(incremental.messages) == project(es[: i + 1])
    assert project(es) == project(es) == list(incremental.messages)


@given(event_sequences())
def test_copy_is_independent(events: list[Event]) -> None:
    """A copied projection does not change when the original does."""
    p = Projection()
    for e in entries(events):
        p.apply(e)
    snapshot = list(p.messages)
    c = p.copy()
    p.apply(Entry(len(events), MessageAppended(message=Message.user("later"))))
    assert list(c.messages) == snapshot
    assert len(c) == len(p) - 1


def test_appending_a_message_extends_the_live_list_without_refolding() -> None:
    """Appending a message extends the same list in place: the log is not folded again."""
    p = Projection()
    for e in entries(small_session()):
        p.apply(e)
    live = p.messages
    p.apply(Entry(20, MessageAppended(message=Message.user("next"))))
    assert p.messages is live
    assert live[-1].text == "next"


def test_an_abandon_closes_its_bracket_and_changes_nothing_visible() -> None:
    """`compaction_abandoned` ends a bracket, no rewrite; one for no open bracket is refused."""
    events = small_session()
    p = Projection()
    for e in entries(events):
        p.apply(e)
    before = list(p.messages)
    assert [b.start.compaction_id for b in p.open_brackets] == ["k2"]
    p.apply(Entry(len(events), CompactionAbandoned(compaction_id="k2", reason="crashed")))
    assert p.open_brackets == ()
    assert list(p.messages) == before
    with pytest.raises(RecordError, match="abandon of unknown bracket 'k2'"):
        p.apply(Entry(len(events) + 1, CompactionAbandoned(compaction_id="k2", reason="again")))


@given(event_sequences())
def test_rewrites_counts_the_boundaries_and_nothing_else(events: list[Event]) -> None:
    """`rewrites` grows by one per boundary folded in; messages, brackets and copies keep it."""
    p = Projection()
    for i, e in enumerate(entries(events)):
        before = p.rewrites
        p.apply(e)
        assert p.rewrites == before + isinstance(e.event, CompactionBoundary), i
    assert p.rewrites == sum(isinstance(e, CompactionBoundary) for e in events)
    assert p.copy().rewrites == p.rewrites


def test_a_record_message_append_takes_the_same_path_as_apply() -> None:
    """`append(seq, message)` leaves the projection as `apply` of its message entry would."""
    message = Message.user("next")
    by_apply, by_append = Projection(), Projection()
    by_apply.apply(Entry(7, MessageAppended(message=message)))
    by_append.append(7, message)
    assert list(by_append.messages) == list(by_apply.messages) == [message]
    assert list(by_append.seqs) == list(by_apply.seqs) == [7]
    assert by_append.rewrites == by_apply.rewrites == 0
