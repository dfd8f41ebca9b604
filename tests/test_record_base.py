"""Tests for `Record.compactions()` and `CompactionInfo` (`steerable_compaction.record.base`).

The record's storage is tested per store in `test_record_stores.py`; these pin how a record
tells its compactions, refused summaries included.
"""

from __future__ import annotations

import io

from steerable_compaction import Compactor, Message, ToolCall, resolve_compaction_policy
from steerable_compaction.cli import inspect_record
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionStart,
    CompactionSummary,
    MemoryRecord,
)

from .record_sessions import small_session


def refusing_session() -> MemoryRecord:
    """A session whose summarizer answers with nothing: the excerpt stands in, saying why."""

    def summarizer(request: SummaryRequest) -> str:
        return ""

    compactor = Compactor(resolve_compaction_policy(None, 8_000), summarizer=summarizer, env={})
    messages = [Message.system("You are a coding agent."), Message.user("Fix the failing test.")]
    for step in range(40):
        messages = compactor.prepare(messages)
        call = ToolCall(id=f"c{step}", name="read_file", arguments='{"path": "app.py"}')
        messages.append(Message.assistant(None, [call]))
        messages.append(Message.tool(f"c{step}", "def handler(request): ...\n" * 30))
    assert isinstance(compactor.record, MemoryRecord)
    return compactor.record


def test_a_refused_summary_is_listed_as_refused() -> None:
    """A bracket the engine closed at once when its summary was refused is `refused`.

    The engine writes `CompactionAbandoned(cause="refused")` when neither the summary nor the
    excerpt could be written and a fold stood in; the reason comes with it.
    """
    record = MemoryRecord(small_session())
    record.append(
        CompactionStart(compaction_id="k9", span=(2, 4), pre_tokens=5_000, action="summarize")
    )
    record.append(
        CompactionAbandoned(compaction_id="k9", reason="summarizer failed: boom", cause="refused")
    )
    info = record.compactions()[-1]
    assert (info.status, info.action, info.post_tokens) == ("refused", "summarize", None)
    assert info.reason == "summarizer failed: boom"
    assert str(info) == (
        "summarize (pressure) 5,000 tokens: summary refused, the messages stay as they were"
    )


def test_an_excerpt_standing_in_for_a_refused_summary_says_why() -> None:
    """The excerpt replaced a refused summary: the bracket is closed, and the reason shows."""
    first, *_ = refusing_session().compactions()
    assert (first.status, first.action) == ("closed", "excerpt")
    assert first.reason == "summarizer returned an empty summary"


def test_a_bracket_with_nothing_after_it_stays_open_even_with_its_summary() -> None:
    """A crash after `compaction_summary` leaves an open bracket (recovery reuses the summary)."""
    record = MemoryRecord(small_session())
    start = CompactionStart(compaction_id="k9", span=(2, 4), pre_tokens=5_000, action="summarize")
    record.append(start)
    record.append(CompactionSummary(compaction_id="k9", summary="## Current Work\nx"))
    last = record.compactions()[-1]
    assert (last.compaction_id, last.status) == ("k9", "open")
    assert str(last) == (
        "summarize (pressure) 5,000 tokens: unclosed: a crash, or a summary still being written"
    )
    record.append(CompactionAbandoned(compaction_id="k9", reason="no summary"))
    gone = record.compactions()[-1]
    assert gone.status == "abandoned"
    assert str(gone).endswith("abandoned by recovery, the messages stay as they were")


def test_a_closed_compaction_reads_as_its_action_and_tokens() -> None:
    """`str()` of a rewrite names action, trigger and the tokens before and after."""
    fold, closed, _ = MemoryRecord(small_session()).compactions()
    assert str(fold) == "compact (pressure) 900 -> 700 tokens"
    assert str(closed) == "summarize (pressure) 1,200 -> 400 tokens"


def test_inspect_shows_a_refused_summary_as_refused() -> None:
    """The CLI's compaction table names the refused bracket."""
    record = MemoryRecord(small_session())
    record.append(
        CompactionStart(compaction_id="k9", span=(2, 4), pre_tokens=5_000, action="summarize")
    )
    record.append(CompactionAbandoned(compaction_id="k9", reason="boom", cause="refused"))
    out = io.StringIO()
    inspect_record(record, out)
    assert "refused" in out.getvalue()


def test_history_shows_the_reminders_the_model_saw_in_their_place() -> None:
    """Issue 30 item 4: a reminder is in the raw history after the message it followed.

    Pages still count messages only, so a page holds the reminders between its messages;
    `reminders=False` gives the messages alone (what a host seeds).
    """
    from steerable_compaction.record import Reminder

    record = MemoryRecord()
    record.append_message(Message.system("sys"))
    record.append_message(Message.user("goal"))
    note = Reminder(reason="compaction_thrashing", message=Message.user("<system-reminder>x"))
    record.append(note)
    record.append_message(Message.user("next"))
    kinds = [type(e.event).__name__ for e in record.history()]
    assert kinds == ["MessageAppended", "MessageAppended", "Reminder", "MessageAppended"]
    assert [e.seq for e in record.history(1, 1)] == [1, 2]  # the reminder rides with seq 1
    assert [e.seq for e in record.history(2, 1)] == [3]
    assert all(type(e.event).__name__ == "MessageAppended" for e in record.history(reminders=False))
    assert record.message_count == 3


def test_a_v2_boundary_keeps_its_action_and_says_it_came_from_v2() -> None:
    """Issue 30 item 3: a v2 `summarize` boundary stays `summarize`, with status `v2`."""
    from steerable_compaction.record.codec import decode_entry

    record = MemoryRecord()
    record.append_message(Message.user("goal"))
    record.append_message(Message.user("more"))
    line = {
        "v": 2,
        "seq": 2,
        "kind": "compaction_boundary",
        "action": "summarize",
        "pre_tokens": 900,
        "post_tokens": 100,
        "replacement_count": 2,
    }
    record.append(decode_entry(line, projection_len=2).event)
    (info,) = record.compactions()
    assert (info.status, info.action, str(info)) == (
        "v2",
        "summarize",
        "summarize (pressure) 900 -> 100 tokens",
    )
