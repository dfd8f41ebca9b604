"""The evaluation chart: recall against cost per arm, and pressure over rounds per task.

Needs matplotlib (the `plot` extra); it is imported only when a chart is drawn, and drawn with
the Agg canvas directly, so no global pyplot state or display backend is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .runner import EvalResults, RunResult

__all__ = ["write_chart"]

_COLUMNS = 3


def _by_arm(runs: tuple[RunResult, ...]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for run in runs:
        out.setdefault(run.arm, []).append(run)
    return out


def write_chart(results: EvalResults, path: Path, *, price: str = "anthropic") -> Path:
    """Draw the chart of `results` into the PNG file `path` and return it.

    Raises `ImportError` (naming the extra to install) when matplotlib is missing.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - the dev extra installs matplotlib
        raise ImportError(
            "the eval chart needs matplotlib: pip install 'steerable-compaction[plot]'"
        ) from exc
    arms = _by_arm(results.runs)
    tasks = [t.name for t in results.tasks]
    rows = 1 + -(-len(tasks) // _COLUMNS)
    figure = Figure(figsize=(5 * _COLUMNS, 4 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(rows, _COLUMNS)
    colors: dict[str, Any] = {}
    palette = [f"C{i}" for i in range(10)]
    for i, arm in enumerate(arms):
        colors[arm] = palette[i % len(palette)]

    scatter = figure.add_subplot(grid[0, :])
    for arm, runs in arms.items():
        cost = sum(r.cost_usd[price] for r in runs)
        recall = sum(r.recall for r in runs) / len(runs)
        scatter.scatter([cost], [recall], s=80, color=colors[arm], label=arm)
        scatter.annotate(arm, (cost, recall), textcoords="offset points", xytext=(6, 4))
    scatter.set_xlabel(f"billed cost over all tasks, USD ({price} prices)")
    scatter.set_ylabel("mean needle recall")
    scatter.set_ylim(-0.05, 1.05)
    scatter.set_title(f"Recall vs cost per arm ({len(tasks)} tasks, seed {results.seed})")
    scatter.grid(alpha=0.3)

    for k, task in enumerate(tasks):
        axes = figure.add_subplot(grid[1 + k // _COLUMNS, k % _COLUMNS])
        first = next(r for r in results.runs if r.task == task)
        drawn = False
        for arm, runs in arms.items():
            run = next((r for r in runs if r.task == task), None)
            if run is None or not run.pressure:
                continue
            axes.plot(
                range(1, len(run.pressure) + 1),
                [p / run.window for p in run.pressure],
                color=colors[arm],
                linewidth=1,
                label=arm,
            )
            drawn = True
        axes.axhline(1.0, color="black", linewidth=0.8)
        axes.axhline(first.threshold / first.window, color="grey", linestyle="--", linewidth=0.8)
        axes.set_title(f"{task}: prompt / window per round")
        axes.set_xlabel("agent request")
        axes.set_ylim(0, 1.1)
        axes.grid(alpha=0.3)
        if k == 0 and drawn:
            axes.legend(fontsize="small", ncols=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path
