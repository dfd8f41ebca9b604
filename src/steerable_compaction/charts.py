"""Pressure per round, read from a record, and its PNG chart (matplotlib, extra `plot`).

A round is one turn-model request: every assistant reply in the record carries the usage its
request was billed (`prompt_tokens`, `cached_tokens`), so the record alone gives the pressure
timeline. Each boundary sits between two rounds and draws a drop from its `pre_tokens` to its
`post_tokens`. `pressure_series` is pure; `render_pressure_chart` imports matplotlib lazily and
raises `MissingExtraError` with the install command when it is absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CompactionError
from .record import CompactionBoundary, Entry, MessageAppended, Reminder

__all__ = [
    "CompactionMark",
    "MissingExtraError",
    "PressureSeries",
    "pressure_series",
    "render_pressure_chart",
]


class MissingExtraError(CompactionError):
    """An optional dependency is not installed; the message says which extra provides it."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        self.purpose = purpose
        super().__init__(
            f"{purpose} needs {package}, which is not installed: "
            f"pip install 'steerable-compaction[{extra}]'"
        )

    def __reduce__(self) -> tuple[type[MissingExtraError], tuple[str, str, str]]:
        return (type(self), (self.package, self.extra, self.purpose))


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionMark:
    """A boundary: written before round `before_round`, from `pre_tokens` to `post_tokens`."""

    before_round: int
    action: str
    trigger: str
    pre_tokens: int
    post_tokens: int
    seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PressureSeries:
    """Prompt and cached tokens per round (rounds count from 1), boundaries and turn starts."""

    prompt_tokens: tuple[int, ...] = ()
    cached_tokens: tuple[int, ...] = ()
    compactions: tuple[CompactionMark, ...] = ()
    turn_starts: tuple[int, ...] = field(default=())  # the first round of each user turn
    reminders: tuple[int, ...] = ()  # rounds before which a reminder was appended

    @property
    def rounds(self) -> int:
        """How many rounds the series holds."""
        return len(self.prompt_tokens)


def pressure_series(entries: Iterable[Entry]) -> PressureSeries:
    """The pressure timeline of a record's entries (a pure function of the record)."""
    prompt: list[int] = []
    cached: list[int] = []
    marks: list[CompactionMark] = []
    turns: list[int] = []
    reminders: list[int] = []
    for entry in entries:
        event = entry.event
        if isinstance(event, MessageAppended):
            message = event.message
            if message.role == "assistant" and event.usage is not None:
                prompt.append(event.usage.prompt_tokens)
                cached.append(event.usage.cached_tokens)
            elif message.role == "user" and (not turns or turns[-1] != len(prompt) + 1):
                turns.append(len(prompt) + 1)
        elif isinstance(event, CompactionBoundary):
            marks.append(
                CompactionMark(
                    before_round=len(prompt) + 1,
                    action=event.action,
                    trigger=event.trigger,
                    pre_tokens=event.pre_tokens,
                    post_tokens=event.post_tokens,
                    seq=entry.seq,
                )
            )
        elif isinstance(event, Reminder):
            reminders.append(len(prompt) + 1)
    return PressureSeries(
        prompt_tokens=tuple(prompt),
        cached_tokens=tuple(cached),
        compactions=tuple(marks),
        turn_starts=tuple(turns),
        reminders=tuple(reminders),
    )


_COLORS = {
    "compact": "#2b8a3e",
    "micro_compact": "#66a80f",
    "summarize": "#1c7ed6",
    "excerpt": "#e8590c",
}


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "plot", "the pressure chart") from exc
    return Figure, FigureCanvasAgg


def render_pressure_chart(
    series: PressureSeries,
    path: str | os.PathLike[str],
    *,
    threshold: int | None = None,
    window: int | None = None,
    title: str = "Context pressure per round",
) -> Path:
    """Write `series` as a PNG: prompt tokens per round, cached share, compactions, threshold.

    Raises:
        MissingExtraError: matplotlib is not installed (extra `plot`).
    """
    figure_cls, canvas_cls = _matplotlib()
    out = Path(path)
    fig = figure_cls(figsize=(11, 4.8), dpi=110)
    canvas_cls(fig)
    ax = fig.add_subplot(1, 1, 1)
    rounds = list(range(1, series.rounds + 1))
    if rounds:
        ax.fill_between(
            rounds,
            series.cached_tokens,
            step="mid",
            color="#a5d8ff",
            alpha=0.6,
            label="cached prompt tokens",
        )
        ax.plot(rounds, series.prompt_tokens, color="#343a40", linewidth=1.4, label="prompt tokens")
    for number, start in enumerate(series.turn_starts, 1):
        if start > 1:
            ax.axvline(start - 0.5, color="#ced4da", linewidth=0.8, zorder=0)
        ax.annotate(
            f"turn {number}",
            xy=(start - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -11),
            textcoords="offset points",
            fontsize=7,
            color="#868e96",
        )
    labelled: set[str] = set()
    for mark in series.compactions:
        x = mark.before_round - 0.5
        color = _COLORS.get(mark.action, "#862e9c")
        label = None if mark.action in labelled else f"{mark.action} (pre → post)"
        labelled.add(mark.action)
        ax.annotate(
            "",
            xy=(x, mark.post_tokens),
            xytext=(x, mark.pre_tokens),
            arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 1.6},
        )
        ax.scatter([x], [mark.pre_tokens], color=color, s=18, zorder=3, label=label)
        if mark.trigger not in ("pressure", "micro"):
            # Up and to the right of the point, boxed: compactions sit close together and
            # a centred label ran across the previous one's arrow.
            ax.annotate(
                mark.trigger,
                xy=(x, mark.pre_tokens),
                xytext=(5, 9),
                textcoords="offset points",
                ha="left",
                fontsize=8,
                color=color,
                zorder=4,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": color},
                arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.6},
            )
    for x in series.reminders:
        ax.axvline(x - 0.5, color="#c92a2a", linestyle=":", linewidth=1.0)
    if threshold is not None:
        ax.axhline(
            threshold,
            color="#e03131",
            linestyle="--",
            linewidth=1.1,
            label=f"threshold {threshold:,}",
        )
    if window is not None:
        ax.axhline(
            window, color="#868e96", linestyle=":", linewidth=1.0, label=f"window {window:,}"
        )
    top = max([*series.prompt_tokens, *(m.pre_tokens for m in series.compactions), 1])
    if window is not None:
        top = max(top, window)
    elif threshold is not None:
        top = max(top, threshold)
    ax.set_ylim(0, top * 1.08)
    ax.set_xlim(0.5, max(series.rounds, 1) + 0.5)
    ax.set_xlabel("round (model request)")
    ax.set_ylabel("tokens")
    ax.set_title(title)
    ax.grid(axis="y", color="#f1f3f5")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
