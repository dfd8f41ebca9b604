from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steerable_compaction import Message
from steerable_compaction.record import JsonlRecord, project

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
        assert not record.projection.open_brackets or point in {"torn_start", "after_start"}
    assert paid_count(paid) == 1
    if visible_after_crash == "before":
        # The crash left the span visible: that is what the record projected at the crash.
        with JsonlRecord(record_path, readonly=True) as record:
            first_start = next(e.seq for e in record.entries if e.event.kind == "compaction_start")
            assert project(list(record.entries)[:first_start]) == before
