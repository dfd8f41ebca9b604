"""`sim.tasks`: the scripted sessions, their needles, questions and answers (L1.5)."""

from __future__ import annotations

import pytest

from steerable_compaction.sim import TASK_NAMES, build_task
from steerable_compaction.sim.tasks import Needle, find_answer

from .sim_helpers import statements


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_is_deterministic_for_a_seed(name: str) -> None:
    """The same name and seed build the same session byte for byte; another seed differs."""
    assert build_task(name, 3) == build_task(name, 3)
    assert build_task(name, 3) != build_task(name, 4)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_needle_is_stated_once_and_asked_at_the_end(name: str) -> None:
    """Each needle's value appears on exactly one line of the session; the last turn asks it."""
    task = build_task(name, 0)
    lines = statements(task)
    for needle in task.needles:
        stated = [line for line in lines if needle.value in line]
        assert len(stated) == 1, (needle, stated)
        assert find_answer(needle, lines) == needle.value
    assert task.turns[-1].questions == task.needles
    assert task.description.endswith(f"{len(task.needles)} needles")


def test_long_haul_runs_past_a_thousand_rounds() -> None:
    """`long_haul` makes at least 1,000 agent requests."""
    assert build_task("long_haul", 0).rounds >= 1000


def test_scale_shortens_a_task_but_keeps_its_needles() -> None:
    """`scale` changes the session length, never the set of planted needles."""
    full, short = build_task("light", 0), build_task("light", 0, scale=0.3)
    assert short.rounds < full.rounds
    assert [n.carrier for n in short.needles] == [n.carrier for n in full.needles]


def test_build_task_rejects_unknown_names_and_scales() -> None:
    """Unknown tasks and out-of-range scales raise `ValueError` naming the choices."""
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        build_task("nope")
    with pytest.raises(ValueError, match="scale"):
        build_task("light", scale=0)


def test_questions_and_answers_follow_the_needle_language() -> None:
    """Questions are asked in the needle's language; the newest matching statement wins."""
    kw = {"value": "12345", "shape": r"\d{5}", "carrier": "tool", "position": "head", "step": 0}
    zh = Needle(id="a", anchor="端口", language="zh", **kw)  # type: ignore[arg-type]
    ja = Needle(id="b", anchor="ポート", language="ja", **kw)  # type: ignore[arg-type]
    en = Needle(id="c", anchor="db port", **kw)  # type: ignore[arg-type]
    assert (zh.question, ja.question, en.question) == (
        "端口是多少？",  # noqa: RUF001
        "ポートは何ですか？",  # noqa: RUF001
        "What is the db port?",
    )
    lines = ["the DB port is 11111.", "noise 99999", "the db port is now 22222 (moved)"]
    assert find_answer(en, lines) == "22222"
    assert find_answer(en, ["the db port is unknown"]) is None
