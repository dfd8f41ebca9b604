from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import pair_issues, repair_tool_pairs
from steerable_compaction.compaction.pairs import PairedProjection, PairRepair
from steerable_compaction.record import (
    CompactionBoundary,
    Edit,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Reminder,
)

from .record_sessions import write_summarized_jsonl

# A few ids and names, so that calls are answered late, twice, never, re-issued under another
# name, and results arrive for calls that a cut log lost.
IDS = st.sampled_from(["a", "b", "c", "d"])
NAMES = st.sampled_from(["read_file", "bash"])


@st.composite
def hostile_messages(draw: st.DrawFn) -> Message:
    """A message of any role; calls and results draw from a handful of ids."""
    kind = draw(st.sampled_from(["user", "system", "text", "empty", "calls", "result", "result"]))
    if kind == "user":
        return Message.user(draw(st.sampled_from(["go", "more", "<compacted-summary>\nx"])))
    if kind == "system":
        return Message.system("s")
    if kind == "text":
        return Message.assistant("thinking")
    if kind == "empty":
        return Message(role="assistant", parts=())
    if kind == "calls":
        calls = draw(st.lists(st.builds(_call, IDS, NAMES), min_size=1, max_size=3, unique_by=_id))
        return Message.assistant(draw(st.sampled_from([None, "calling"])), calls)
    return Message.tool(draw(IDS), "out", is_error=draw(st.booleans()))


def _call(call_id: str, name: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments="{}")


def _id(call: ToolCall) -> str:
    return call.id


@dataclass(frozen=True)
class Rewrite:
    """Replace `[start, end)` (fractions of the length) by `replacement`, edit one message."""

    start: float
    end: float
    replacement: tuple[Message, ...]
    edit_at: float | None
    edit: Message


rewrites = st.builds(
    Rewrite,
    st.floats(0, 1),
    st.floats(0, 1),
    st.lists(hostile_messages(), max_size=2).map(tuple),
    st.one_of(st.none(), st.floats(0, 1)),
    hostile_messages(),
)
steps = st.lists(
    st.one_of(st.lists(hostile_messages(), min_size=1, max_size=4), rewrites), max_size=14
)


def _bounds(rewrite: Rewrite, length: int) -> tuple[int, int, int | None]:
    start, end = sorted((int(rewrite.start * length), int(rewrite.end * length)))
    edit = None if rewrite.edit_at is None or not length else int(rewrite.edit_at * length)
    return start, end, None if edit is None else min(edit, length - 1)


@given(st.lists(hostile_messages(), max_size=12), steps)
def test_r22b_incremental_repair_equals_a_full_repair_after_every_step(
    first: list[Message], plan: list[list[Message] | Rewrite]
) -> None:
    """R22b: appending and rewriting in any order, the repair equals `repair_tool_pairs`."""
    source = list(first)
    repair = PairRepair(source)
    assert list(repair.messages) == repair_tool_pairs(source)
    for step in plan:
        if isinstance(step, Rewrite):
            start, end, edit = _bounds(step, len(source))
            if edit is not None:
                source[edit] = step.edit
            source[start:end] = step.replacement
            repair.reset(source)
        else:
            source.extend(step)
            repair.extend(step)
        assert list(repair.messages) == repair_tool_pairs(source)
        assert repair.source_length == len(source)
        assert not pair_issues(repair.messages)


@given(st.lists(hostile_messages(), max_size=10), st.lists(hostile_messages(), max_size=6))
def test_changed_from_says_when_the_last_list_is_still_a_prefix(
    first: list[Message], more: list[Message]
) -> None:
    """After `mark()`, a `changed_from` at or past the old length means nothing before moved."""
    repair = PairRepair(first)
    repair.mark()
    before = list(repair.messages)
    assert repair.changed_from == len(before)
    repair.extend(more)
    if repair.changed_from >= len(before):
        assert list(repair.messages[: len(before)]) == before
    assert repair.changed_from <= len(repair.messages)


def test_r22b_a_late_result_removes_the_no_result_answer_of_an_older_turn() -> None:
    """A call answered after a later message loses its `no result` answer, wherever it is."""
    call = Message.assistant(None, [_call("a", "bash")])
    repair = PairRepair([Message.user("go"), call, Message.user("interrupt")])
    assert [m.role for m in repair.messages] == ["user", "assistant", "tool", "user"]
    assert repair.messages[2].text.startswith("[no result recorded for bash call 'a'")
    repair.mark()
    late = Message.tool("a", "finally")
    repair.extend([late])
    assert list(repair.messages) == [Message.user("go"), call, Message.user("interrupt"), late]
    assert repair.changed_from == 2


def test_r22b_the_same_no_result_message_is_handed_out_while_the_call_stays_open() -> None:
    """The answer of a still-open call is one object across steps, so identity checks hold."""
    repair = PairRepair([Message.user("go"), Message.assistant(None, [_call("a", "bash")])])
    first = repair.messages[-1]
    repair.extend([Message.user("still waiting")])
    assert repair.messages[2] is first


@st.composite
def record_steps(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Appends, reminders, fold edits and span rewrites, as the engine writes them."""
    out: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["message", "message", "reminder", "boundary", "bracket"]))
        if kind in ("message", "reminder"):
            out.append((kind, draw(hostile_messages())))
        else:
            out.append((kind, draw(rewrites)))
    return out


@given(st.lists(hostile_messages(), max_size=8), record_steps())
def test_r22b_paired_projection_follows_the_record(
    first: list[Message], plan: list[tuple[str, object]]
) -> None:
    """R22b: after any record event the paired view equals a full repair of the projection."""
    record = MemoryRecord()
    view = PairedProjection(record)
    for message in first:
        record.append(MessageAppended(message=message))
    assert list(view.sync()) == repair_tool_pairs(record.projection.messages)
    for kind, value in plan:
        if kind == "message":
            assert isinstance(value, Message)
            record.append(MessageAppended(message=value))
        elif kind == "reminder":
            assert isinstance(value, Message)
            record.append(Reminder(reason="test", message=value))
        else:
            assert isinstance(value, Rewrite)
            start, end, edit = _bounds(value, len(record.projection))
            edits = () if edit is None else (Edit(index=edit, message=value.edit),)
            span = (start, end) if kind == "bracket" else None
            record.append(
                CompactionBoundary(
                    action="compact",
                    pre_tokens=10,
                    post_tokens=5,
                    replacement_count=end - start,
                    edits=edits,
                    span=span,
                    replacement=value.replacement if span is not None else (),
                )
            )
        assert list(view.sync()) == repair_tool_pairs(record.projection.messages)


def test_paired_projection_reads_only_the_new_entries_when_nothing_was_rewritten() -> None:
    """Without a boundary, `sync` extends the repair; a boundary recomputes it once."""
    record = MemoryRecord()
    view = PairedProjection(record)
    record.append_message(Message.user("go"))
    view.sync()
    repair = view.repair
    record.append_message(Message.assistant("ok"))
    assert list(view.sync()) == [Message.user("go"), Message.assistant("ok")]
    assert view.repair is repair and repair.source_length == 2
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=2,
            post_tokens=1,
            replacement_count=1,
            edits=(Edit(index=1, message=Message.assistant("folded")),),
        )
    )
    assert list(view.sync()) == [Message.user("go"), Message.assistant("folded")]
    assert repair.changed_from == 0


def test_paired_projection_recomputes_after_a_rewrite_that_keeps_the_length() -> None:
    """An edit-only boundary changes no length: the projection's `rewrites` still resets it."""
    record = MemoryRecord()
    view = PairedProjection(record)
    call = Message.assistant(None, [_call("a", "bash")])
    record.append_messages([Message.user("go"), call, Message.tool("a", "out")])
    assert list(view.sync()) == [Message.user("go"), call, Message.tool("a", "out")]
    folded = Message.tool("b", "[folded]")  # answers no call: an orphan once it stands there
    record.append(
        CompactionBoundary(
            action="compact",
            pre_tokens=3,
            post_tokens=2,
            replacement_count=1,
            edits=(Edit(index=2, message=folded),),
        )
    )
    assert len(record.projection.messages) == 3
    assert list(view.sync()) == repair_tool_pairs(record.projection.messages)
    assert view.sync()[2] != Message.tool("a", "out")


def test_r22b_a_call_issued_again_is_answered_after_its_newest_turn() -> None:
    """An open call issued again (a cut log) moves its answer, named after the newest issue."""
    messages = [
        Message.user("go"),
        Message.assistant(None, [_call("a", "bash")]),
        Message.user("again"),
        Message.assistant(None, [_call("b", "bash"), _call("a", "read_file")]),
    ]
    repair = PairRepair(messages[:3])
    repair.extend(messages[3:])
    assert list(repair.messages) == repair_tool_pairs(messages)
    assert [m.text for m in repair.messages[4:]] == [
        "[no result recorded for read_file call 'a']",
        "[no result recorded for bash call 'b']",
    ]


def test_paired_projection_of_a_resumed_record_reads_nothing_before_its_checkpoint(
    tmp_path: Path,
) -> None:
    """A record resumed from a checkpoint keeps its older entries unread through every sync."""
    path = tmp_path / "session.jsonl"
    write_summarized_jsonl(path, "<summary>m0-m2</summary>")
    with JsonlRecord(path) as record:
        assert record.resumed_at is not None
        view = PairedProjection(record)
        assert list(view.sync()) == repair_tool_pairs(record.projection.messages)
        record.append_message(Message.assistant(None, [_call("a", "bash")]))
        assert list(view.sync()) == repair_tool_pairs(record.projection.messages)
        record.append_message(Message.tool("a", "out"))
        assert list(view.sync()) == repair_tool_pairs(record.projection.messages)
        assert record.resumed_at is not None
