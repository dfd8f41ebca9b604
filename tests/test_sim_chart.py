from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction.sim import run_eval
from steerable_compaction.sim.chart import best_other_arm, write_chart
from steerable_compaction.sim.runner import RunResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def result(arm: str, recall: float, cost: float) -> RunResult:
    """A run with only the fields the chart reads filled in meaningfully."""
    return RunResult(
        task="light",
        arm=arm,
        seed=0,
        window=1000,
        threshold=800,
        rounds=3,
        planned_rounds=3,
        needles=4,
        recalled=(),
        recall=recall,
        recall_by_carrier={},
        recall_with_tools=recall,
        recall_requests=0,
        recall_tokens=0,
        requests=3,
        prompt_tokens=0,
        cached_tokens=0,
        completion_tokens=0,
        cache_hit_rate=None,
        summary_calls=0,
        summary_prompt_tokens=0,
        summary_cached_tokens=0,
        summary_cache_hit_rate=None,
        compactions=0,
        no_assistant_requests=0,
        overflow_deaths=0,
        death=None,
        cost_usd={"anthropic": cost},
        cache_hit_rate_by_rules={},
        pressure=(100, 500, 900),
    )


def test_the_best_other_arm_is_the_best_recall_then_the_cheapest() -> None:
    """`current` and `naive` are drawn anyway; of the rest, recall wins, then the lower cost."""
    runs = [
        result("current", 1.0, 1.0),
        result("naive", 0.9, 1.0),
        result("codex", 0.75, 2.0),
        result("openhands", 0.75, 1.5),
        result("masking", 0.5, 0.1),
    ]
    best = best_other_arm(runs)
    assert best is not None and best.arm == "openhands"
    assert best_other_arm(runs[:2]) is None


def test_the_chart_draws_small_and_single_arm_runs(tmp_path: Path) -> None:
    """A two-task run draws into a new directory; so does a run of `current` alone."""
    results = run_eval(["light", "cjk"], ["none", "naive", "current"], scale=0.3)
    out = write_chart(results, tmp_path / "deep" / "eval.png")
    assert out.read_bytes().startswith(PNG_MAGIC)
    lone = replace(results, runs=tuple(r for r in results.runs if r.arm == "current"))
    assert write_chart(lone, tmp_path / "lone.png").read_bytes().startswith(PNG_MAGIC)


def test_under_several_summarizers_the_chart_draws_one_set_of_panels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two personalities: the panels hold the first one's runs, the scatter each arm's worst."""
    import steerable_compaction.sim.chart as chart

    results = run_eval(["light"], ["naive", "current"], scale=0.3, summarizers=("prose", "terse"))
    panels: list[tuple[str, list[str]]] = []
    real = chart._task_panel

    def spy(figure: Any, cell: Any, runs: list[Any], task: str, price: str) -> None:
        panels.append((task, [f"{r.arm}/{r.summarizer}" for r in runs]))
        real(figure, cell, runs, task, price)

    monkeypatch.setattr(chart, "_task_panel", spy)
    assert write_chart(results, tmp_path / "two.png").read_bytes().startswith(PNG_MAGIC)
    assert panels == [("light (prose)", ["naive/prose", "current/prose"])]
    worst = results.worst_by_arm()
    assert set(worst) == {"naive", "current"} and {p for p, _ in worst.values()} <= {
        "prose",
        "terse",
    }
