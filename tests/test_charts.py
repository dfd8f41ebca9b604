from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from steerable_compaction import Message
from steerable_compaction.charts import (
    CompactionMark,
    MissingExtraError,
    PressureSeries,
    pressure_series,
    render_pressure_chart,
)
from steerable_compaction.record import CompactionBoundary, MemoryRecord, MessageAppended, Reminder
from steerable_compaction.record.events import Usage

from .record_sessions import small_session

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def reply(prompt: int, cached: int = 0) -> MessageAppended:
    return MessageAppended(
        message=Message.assistant("ok"), usage=Usage(prompt_tokens=prompt, cached_tokens=cached)
    )


def timeline() -> MemoryRecord:
    """Two turns of three rounds; a fold before round 3, a manual summary before round 5."""
    record = MemoryRecord()
    record.append_message(Message.user("first"))
    record.append(reply(100))
    record.append(reply(300, 100))
    record.append(
        CompactionBoundary(action="compact", pre_tokens=500, post_tokens=200, replacement_count=0)
    )
    record.append(reply(250, 0))
    record.append_message(Message.user("second"))
    record.append_message(Message.user("and more"))
    record.append(reply(400, 250))
    record.append(Reminder(reason="compaction_thrashing", message=Message.user("slow down")))
    record.append(
        CompactionBoundary(
            action="summarize",
            trigger="manual",
            pre_tokens=450,
            post_tokens=120,
            replacement_count=2,
            span=(0, 2),
            replacement=(Message.user("<compacted-summary>s</compacted-summary>"),),
        )
    )
    record.append(reply(150, 0))
    record.append(reply(300, 150))
    return record


def test_the_series_reads_rounds_boundaries_turns_and_reminders_from_the_record() -> None:
    """Each reply's usage is a round; each boundary sits before the next round."""
    series = pressure_series(timeline().entries)
    assert series.rounds == 6
    assert series.prompt_tokens == (100, 300, 250, 400, 150, 300)
    assert series.cached_tokens == (0, 100, 0, 250, 0, 150)
    assert series.compactions == (
        CompactionMark(
            before_round=3,
            action="compact",
            trigger="pressure",
            pre_tokens=500,
            post_tokens=200,
            seq=3,
        ),
        CompactionMark(
            before_round=5,
            action="summarize",
            trigger="manual",
            pre_tokens=450,
            post_tokens=120,
            seq=9,
        ),
    )
    assert series.turn_starts == (1, 4)  # two user messages in a row start one turn
    assert series.reminders == (5,)


def test_replies_without_usage_are_not_rounds() -> None:
    """Messages written by hand (no usage) do not make up rounds."""
    series = pressure_series(MemoryRecord(small_session()).entries)
    assert series.prompt_tokens == (812,)
    assert [m.before_round for m in series.compactions] == [1, 2]


def test_the_chart_is_a_png(tmp_path: Path) -> None:
    """The chart renders to a PNG, creating its directory, with or without a threshold."""
    series = pressure_series(timeline().entries)
    out = render_pressure_chart(series, tmp_path / "sub" / "p.png", threshold=350, window=500)
    assert out.read_bytes().startswith(PNG_MAGIC)
    bare = render_pressure_chart(PressureSeries(), tmp_path / "empty.png")
    assert bare.read_bytes().startswith(PNG_MAGIC)
    threshold_only = render_pressure_chart(series, tmp_path / "t.png", threshold=350)
    assert threshold_only.stat().st_size > 1000


def test_without_matplotlib_the_chart_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing matplotlib raises `MissingExtraError` with the pip command, writing nothing."""
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(MissingExtraError) as info:
        render_pressure_chart(PressureSeries(), tmp_path / "p.png")
    assert str(info.value) == (
        "the pressure chart needs matplotlib, which is not installed: "
        "pip install 'steerable-compaction[plot]'"
    )
    assert not (tmp_path / "p.png").exists()


def test_missing_extra_error_pickles() -> None:
    """Like every library error, it survives pickling with its attributes."""
    error = MissingExtraError("openai", "openai", "--provider openai")
    back = pickle.loads(pickle.dumps(error))
    assert vars(back) == vars(error) and str(back) == str(error)
