from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steerable_compaction import Message
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.record import (
    CompactionAbandoned,
    CompactionStart,
    CompactionSummary,
    JsonlRecord,
    MemoryRecord,
    Record,
    project,
)

from .crash_session import POLICY, SUMMARY, build
from .record_sessions import NO_POSTGRES, POSTGRES_URL

ROOT = Path(__file__).parent.parent


def run_child(tmp: Path, point: str) -> tuple[Path, Path, int]:
    record, paid = tmp / "record.jsonl", tmp / "paid.log"
    done = subprocess.run(
        [sys.executable, "-m", "tests.crash_session", str(record), str(paid), point],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return record, paid, done.returncode


def paid_count(paid: Path) -> int:
    return len(paid.read_text(encoding="utf-8").splitlines()) if paid.exists() else 0


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Message], list[Message]]:
    """The clean run's projections just before and just after its compaction."""
    tmp = tmp_path_factory.mktemp("clean")
    record_path, paid, code = run_child(tmp, "none")
    assert code == 0
    assert paid_count(paid) == 1
    with JsonlRecord(record_path, readonly=True) as record:
        kinds = [e.event.kind for e in record.entries]
        assert kinds[-3:] == ["compaction_start", "compaction_summary", "compaction_boundary"]
        before = project(list(record.entries)[:-3])
        return before, record.messages()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "visible_after_crash"),
    [
        ("torn_start", "before"),
        ("after_start", "before"),
        ("after_summary", "after"),
        ("torn_boundary", "after"),
        ("after_boundary", "after"),
    ],
)
def test_r37_r38_a_killed_compaction_recovers_to_the_clean_projection_paying_once(
    tmp_path: Path,
    clean: tuple[list[Message], list[Message]],
    point: str,
    visible_after_crash: str,
) -> None:
    """R37/R38: a SIGKILL at any write point recovers to the clean run, paying once.

    Reopening replays the clean run's projection at the crash point, and the summarizer is paid
    once across crash + recovery.
    """
    before, after = clean
    record_path, paid, code = run_child(tmp_path, point)
    assert code == -signal.SIGKILL
    assert not Path(str(paid) + ".done").exists()
    # Reopen the way a recovering process does (recovery runs when hooks attach).
    _, _, code = run_child(tmp_path, "none")
    assert code == 0
    with JsonlRecord(record_path, readonly=True) as record:
        assert record.messages() == after
        assert [m.text for m in record.messages()] == [m.text for m in after]
        closed = [c for c in record.compactions() if c.status == "closed"]
        assert len(closed) == 1
        assert not record.projection.open_brackets
    assert paid_count(paid) == 1
    if visible_after_crash == "before":
        # The crash left the span visible: that is what the record projected at the crash.
        with JsonlRecord(record_path, readonly=True) as record:
            first_start = next(e.seq for e in record.entries if e.event.kind == "compaction_start")
            assert project(list(record.entries)[:first_start]) == before


# -- recovery closes every bracket (issue 14, item 11) --------------------------------------------


def bracket(record: Record, cid: str, span: tuple[int, int], summary: str | None) -> None:
    record.append(
        CompactionStart(compaction_id=cid, span=span, pre_tokens=9_000, action="summarize")
    )
    if summary is not None:
        record.append(CompactionSummary(compaction_id=cid, summary=summary))


def built() -> MemoryRecord:
    record = MemoryRecord()
    build(record)
    return record


async def never(request: SummaryRequest) -> str:
    raise AssertionError("recovery must not pay for a summary")


def test_recovery_reuses_the_newest_paid_summary_and_abandons_every_older_bracket() -> None:
    """Every open bracket closes: the newest with its recorded summary, the others abandoned."""
    record = built()
    bracket(record, "k-old", (2, 10), None)
    bracket(record, "k-paid-but-stale", (2, 12), SUMMARY)
    bracket(record, "k-new", (2, 20), SUMMARY)
    hooks = CompactionHooks(record, POLICY, summarizer=never)
    hooks.recover()
    assert not record.projection.open_brackets
    assert hooks.recovered is not None and hooks.recovered.compaction_id == "k-new"
    assert [(c.compaction_id, c.status) for c in record.compactions()] == [
        ("k-old", "abandoned"),
        ("k-paid-but-stale", "abandoned"),
        ("k-new", "closed"),
    ]
    reasons = {
        e.event.compaction_id: e.event.reason
        for e in record.entries
        if isinstance(e.event, CompactionAbandoned)
    }
    assert reasons == {
        "k-old": "no summary was recorded before the run ended",
        "k-paid-but-stale": "the projection was rewritten after the bracket started",
    }


def test_a_bracket_without_a_summary_is_abandoned_leaving_the_projection_as_it_was() -> None:
    """An unpaid bracket cannot be finished: abandoned; its span stays visible, nothing paid."""
    record = built()
    visible = record.messages()
    bracket(record, "k1", (2, 20), None)
    hooks = CompactionHooks(record, POLICY, summarizer=never)
    hooks.recover()
    assert hooks.recovered is None
    assert not record.projection.open_brackets
    assert record.messages() == visible
    assert isinstance(record.entries[-1].event, CompactionAbandoned)


def test_a_read_only_record_is_not_recovered(tmp_path: Path) -> None:
    """A reader never writes: its open brackets stay as the record has them."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        build(record)
        bracket(record, "k1", (2, 20), None)
    with JsonlRecord(path, readonly=True) as reader:
        assert CompactionHooks(reader, POLICY).recover() is None
        assert len(reader.projection.open_brackets) == 1


def test_an_abandon_is_persisted_and_the_reopened_record_has_no_open_bracket(
    tmp_path: Path,
) -> None:
    """The abandon is an event like any other: a later reader sees the bracket closed."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        build(record)
        bracket(record, "k1", (2, 20), None)
    with JsonlRecord(path) as record:
        CompactionHooks(record, POLICY).recover()
    with JsonlRecord(path, readonly=True) as again:
        assert not again.projection.open_brackets
        assert [c.status for c in again.compactions()] == ["abandoned"]


# -- random kills (issue 14, done-when) ------------------------------------------------------------

KILLS = int(os.environ.get("STEERABLE_CRASH_KILLS", "30"))


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True], ids=["per-append", "batched"])
@pytest.mark.parametrize(
    "store",
    [
        "jsonl",
        "sqlite",
        pytest.param(
            "postgres", marks=pytest.mark.skipif(POSTGRES_URL is None, reason=NO_POSTGRES)
        ),
    ],
)
def test_a_writer_killed_at_random_moments_always_reopens_to_a_prefix_and_recovers(
    tmp_path: Path, request: pytest.FixtureRequest, store: str, batched: bool
) -> None:
    """R37/R38: SIGKILL at random moments of a compacting session; every reopen is clean.

    Each crashed record reopens without error, holds exactly a prefix of the clean run's
    entries (so its projection is the clean run's at that point), recovers with no bracket left
    open, and finishes with the clean run's message history. Summaries paid twice (a kill
    between paying the summarizer and recording its summary) are counted and printed.
    With `batched`, each tool round is one group commit (`Record.batch()`).
    `STEERABLE_CRASH_KILLS=200` runs the long version. PostgreSQL: the sessions live in the
    test schema, and the kills fall inside the server's transactions too.
    """
    args = [store, str(KILLS), "7", str(tmp_path), *(["batched"] if batched else [])]
    env = dict(os.environ)
    if store == "postgres":
        env["STEERABLE_TEST_POSTGRES"] = request.getfixturevalue("postgres_url")
    done = subprocess.run(
        [sys.executable, "-m", "tests.crash_session", "drive", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    print(f"crash test: {report}")
    assert report["failures"] == []
    assert report["kills"] == report["clean_reopens"] == KILLS
    assert report["compactions"] >= 3
