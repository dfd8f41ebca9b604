"""The evaluation chart: recall against cost per arm, and pressure over rounds per task.

Each task panel stacks three strips, `current`, the best other arm on that task (by recall) and
`naive`, so no line hides another even on a 1,000-round session; one legend, in the grid cell
the tasks leave free, serves every panel; every arm is in the scatter and the table. Run under
several summarizer personalities, the scatter shows each arm under the one it recalled least
under (as the README's table does), and the task panels show the first personality's runs,
named in their titles. Needs matplotlib (the `plot` extra), imported only when a chart is
drawn, with the Agg canvas directly (no pyplot state, no display backend).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .runner import EvalResults, RunResult

__all__ = ["best_other_arm", "write_chart"]

_COLUMNS = 4
_FOCUS = {"current": "#d6336c", "naive": "#f08c00"}
_BEST = "#1971c2"
_ALWAYS = ("current", "naive")


def _by_arm(runs: tuple[RunResult, ...]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for run in runs:
        out.setdefault(run.arm, []).append(run)
    return out


def best_other_arm(runs: Sequence[RunResult], price: str = "anthropic") -> RunResult | None:
    """The run with the best recall among arms other than `current` and `naive` (then cheapest)."""
    others = [r for r in runs if r.arm not in _ALWAYS]
    if not others:
        return None
    return max(others, key=lambda r: (r.recall, -r.cost_usd[price]))


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
    tasks = [t.name for t in results.tasks]
    first = results.under(results.summarizers[0]) if results.summarizers else results
    rows = 1 + -(-(len(tasks) + 1) // _COLUMNS)  # the scatter, then tasks and the legend cell
    figure = Figure(figsize=(4.6 * _COLUMNS, 3.2 + 4.4 * (rows - 1)), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(rows, _COLUMNS, height_ratios=[3.2] + [4.4] * (rows - 1))
    _scatter(figure.add_subplot(grid[0, :]), results, price)
    for k, task in enumerate(tasks):
        cell = grid[1 + k // _COLUMNS, k % _COLUMNS]
        runs = [r for r in first.runs if r.task == task]
        label = task if len(results.summarizers) < 2 else f"{task} ({results.summarizers[0]})"
        _task_panel(figure, cell, runs, label, price)
    k = len(tasks)
    _legend(figure.add_subplot(grid[1 + k // _COLUMNS, k % _COLUMNS]), price)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _scatter(axes: Any, results: EvalResults, price: str) -> None:
    """Each arm's cost and mean recall, under its worst summarizer when there are several."""
    several = len(results.summarizers) > 1
    worst = results.worst_by_arm() if several else {}
    for arm, runs in _by_arm(results.runs).items():
        if several:
            runs = [r for r in runs if r.summarizer == worst[arm][0]]
        cost = sum(r.cost_usd[price] for r in runs)
        recall = sum(r.recall for r in runs) / len(runs)
        color = _FOCUS.get(arm, "#495057")
        name = f"{arm} ({worst[arm][0]})" if several else arm
        axes.scatter([cost], [recall], s=70, color=color, zorder=3)
        axes.annotate(name, (cost, recall), textcoords="offset points", xytext=(7, -3), color=color)
    under = ", each arm under its worst summarizer" if several else ""
    axes.set_xlabel(f"billed cost over all tasks{under}, USD ({price} prices)")
    axes.set_ylabel("mean needle recall")
    axes.set_ylim(-0.05, 1.05)
    axes.set_title(
        f"Recall against cost per arm ({len(results.tasks)} tasks, seed {results.seed}): "
        "up and to the left is better"
    )
    axes.grid(alpha=0.3)


def _task_panel(figure: Any, cell: Any, runs: list[RunResult], task: str, price: str) -> None:
    """One strip per focus arm (`current`, the best other arm, `naive`), sharing the x axis."""
    best = best_other_arm(runs, price)
    chosen = [r for r in runs if r.arm == "current"]
    chosen += [best] if best is not None else []
    chosen += [r for r in runs if r.arm == "naive"]
    strips = cell.subgridspec(len(chosen), 1)
    longest = max((len(r.pressure) for r in runs), default=1)
    width = 1.3 if longest < 300 else 0.7
    first: Any = None
    for i, run in enumerate(chosen):
        axes = figure.add_subplot(strips[i, 0], sharex=first)
        first = first or axes
        color = _FOCUS.get(run.arm, _BEST)
        axes.plot(
            range(1, len(run.pressure) + 1),
            [p / run.window for p in run.pressure],
            color=color,
            linewidth=width,
        )
        axes.axhline(run.threshold / run.window, color="grey", linestyle="--", linewidth=0.8)
        axes.axhline(1.0, color="black", linewidth=0.8)
        axes.set_ylim(0, 1.1)
        axes.set_xlim(0, longest + 1)
        axes.set_yticks([0, 0.5, 1.0])
        axes.tick_params(labelsize=8)
        axes.grid(alpha=0.3)
        died = "" if run.death is None else ", died"
        axes.set_title(
            f"{run.arm}: recall {run.recall:.2f}, ${run.cost_usd[price]:.2f}{died}",
            loc="left",
            fontsize=8,
            color=color,
            pad=2,
        )
        if i == 0:
            axes.set_title(task, loc="right", fontsize=10, fontweight="bold", pad=2)
        if i < len(chosen) - 1:
            axes.tick_params(labelbottom=False)
        else:
            axes.set_xlabel("agent request", fontsize=9)


def _legend(axes: Any, price: str) -> None:
    """How to read the task panels, in the grid cell the tasks leave free."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=_FOCUS["current"], linewidth=2, label="current (this library)"),
        Line2D([], [], color=_BEST, linewidth=2, label="the best other arm on that task"),
        Line2D([], [], color=_FOCUS["naive"], linewidth=2, label="naive (one cold summary)"),
        Line2D([], [], color="grey", linestyle="--", linewidth=1, label="compaction threshold"),
        Line2D([], [], color="black", linewidth=1, label="context window"),
    ]
    axes.legend(
        handles=handles,
        loc="center",
        frameon=False,
        fontsize=10,
        title=f"Per task: prompt / window per request\n(recall and {price}-priced cost per strip)",
        title_fontsize=10,
    )
    axes.set_axis_off()
