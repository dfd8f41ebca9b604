"""`steerable-compaction eval`: run the simulator from the command line.

`add_eval_command(subparsers)` adds the `eval` subcommand to the CLI's parser. It runs every
arm on every task (`--tasks`, `--arms`, space- or comma-separated), shows a progress bar on
stderr, prints a table on stdout and writes `results.json` and `eval.png` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from ..errors import ConfigError
from ..harness import read_harness
from ..policy import resolve_compaction_policy
from .metrics import PRIMARY, RULES
from .personalities import PERSONALITIES
from .runner import ARM_NAMES, ARMS, PEER_ARMS, EvalResults, RunResult, run_eval
from .tasks import IDLE_GAPS, TASK_NAMES, build_task

__all__ = ["add_eval_command", "format_table", "run_eval_command", "worst_by_arm"]

_TRACE_SHORT = {
    "bracket_shrinks": "bracket",
    "fold_shrinks": "fold",
    "hysteresis": "hyst",
    "prefix_replay": "prefix",
    "tool_pairs": "pairs",
}


def add_eval_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `eval [--tasks …] [--arms …] [--out DIR] [--seed N] [--harness FILE]` to a CLI."""
    parser = subparsers.add_parser(
        "eval",
        help="run the compaction simulator: every arm on every task, a table, JSON and a chart",
        description="Run simulated agent sessions with planted needles under each context "
        "strategy (arm) and measure needle recall, prompt-cache reads, tokens and billed cost. "
        f"Tasks: {', '.join(TASK_NAMES)}. Arms: {', '.join(ARM_NAMES)}.",
    )
    parser.add_argument(
        "--tasks", nargs="+", default=list(TASK_NAMES), metavar="TASK", help="tasks to run"
    )
    parser.add_argument(
        "--arms", nargs="+", default=list(ARM_NAMES), metavar="ARM", help="arms to run"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("eval-results"),
        metavar="DIR",
        help="where results.json and eval.png go (default: eval-results)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="task seed (default 0)")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        metavar="X",
        help="session length factor, (0, 4] (default 1; tests use less)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model whose policy and token calibration every arm uses "
        "(default: an unknown model)",
    )
    parser.add_argument(
        "--summary-ratio",
        type=int,
        default=16,
        metavar="N",
        help="the simulated summarizer writes about 1/N of the fresh material (default 16)",
    )
    parser.add_argument(
        "--summarizer",
        nargs="+",
        default=["checkpoint"],
        metavar="NAME",
        help="the simulated summarizer's personality: "
        f"{', '.join(PERSONALITIES)}, or all (default checkpoint)",
    )
    parser.add_argument(
        "--provider",
        choices=sorted(RULES),
        default=PRIMARY,
        help=f"the cache rules and prices the sessions run under (default {PRIMARY}); the "
        "engine knows them as a host knows its provider, the others' costs are replayed",
    )
    parser.add_argument(
        "--idle-gaps",
        nargs="*",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the user is away before every turn but the first, these gaps in turn (default "
        f"with the flag alone: {' '.join(f'{g:g}' for g in IDLE_GAPS)}, that is 3, 10 and 60 "
        "minutes); the provider's cache expires in the longer ones",
    )
    parser.add_argument(
        "--harness",
        type=Path,
        default=None,
        metavar="FILE",
        help="a harness YAML for the current arm, to compare your configuration with the "
        "baselines (default: the packaged one; other arms keep the default policy)",
    )
    parser.set_defaults(func=run_eval_command)


def _check_out(out: Path) -> None:
    """Refuse an `--out` that cannot become a directory, before any session runs."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                raise ValueError(f"--out {out}: {path} exists and is not a directory")
            return


def _names(values: Sequence[str], known: Sequence[str], kind: str) -> list[str]:
    names = [n for value in values for n in value.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {kind} {', '.join(unknown)}; known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def _bar(stream: TextIO) -> Callable[[int, int, str, str], None]:
    live = stream.isatty()

    def update(done: int, total: int, task: str, arm: str) -> None:
        width = 30
        filled = width * done // total
        line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {task} / {arm}"
        if live:
            stream.write("\r" + line.ljust(80) + ("\n" if done == total else ""))
        else:
            stream.write(line + "\n")
        stream.flush()

    return update


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(run: RunResult) -> list[str]:
    trace = ", ".join(f"{_TRACE_SHORT.get(k, k)} {v}" for k, v in sorted(run.trace.items()))
    return [
        run.summarizer,
        run.task,
        run.arm,
        f"{run.recall:.2f}",
        f"{run.recall_with_tools:.2f}",
        f"{run.recall_tokens:,}",
        _pct(run.cache_hit_rate),
        _pct(run.summary_cache_hit_rate),
        f"{run.prompt_tokens:,}",
        f"{run.cost_usd['anthropic']:.3f}",
        f"{run.cost_usd['openai']:.3f}",
        f"{run.cost_usd['deepseek']:.4f}",
        str(run.summary_calls),
        str(run.compactions),
        str(run.no_assistant_requests),
        str(run.requests_over_estimate),
        str(run.failed_requests),
        str(run.overflow_deaths) if run.death is None or run.overflow_deaths else "err",
        trace or "ok",
    ]


def _render(rows: list[list[str]], left: int = 2) -> str:
    """`rows` as aligned columns: the first `left` columns to the left, numbers to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = set(range(left, len(rows[0]) - 1))
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


_HEAD = [
    "summarizer",
    "task",
    "arm",
    "recall",
    "w/tools",
    "recall tok",
    "hit",
    "sum-hit",
    "prompt tok",
    "$anthr",
    "$openai",
    "$deepseek",
    "sums",
    "comp",
    "no-asst",
    "over",
    "fail",
    "death",
    "trace",
]


def _totals(label: str, runs: Sequence[RunResult]) -> list[str]:
    found = sum(len(r.recalled) for r in runs)
    needles = sum(r.needles for r in runs)
    return [
        label,
        str(len(runs)),
        f"{sum(r.recall for r in runs) / len(runs):.2f}",
        f"{sum(r.recall_with_tools for r in runs) / len(runs):.2f}",
        f"{found}/{needles}",
        f"{sum(r.recall_tokens for r in runs):,}",
        f"{sum(r.prompt_tokens for r in runs):,}",
        f"{sum(r.cost_usd['anthropic'] for r in runs):.3f}",
        f"{sum(r.cost_usd['openai'] for r in runs):.3f}",
        f"{sum(r.cost_usd['deepseek'] for r in runs):.4f}",
        str(sum(r.summary_calls for r in runs)),
        str(sum(r.no_assistant_requests for r in runs)),
        str(sum(r.requests_over_estimate for r in runs)),
        str(sum(r.failed_requests for r in runs)),
        str(sum(r.death is not None for r in runs)),
        "",
    ]


_TOTALS_HEAD = [
    "arm",
    "tasks",
    "recall",
    "w/tools",
    "needles",
    "recall tok",
    "prompt tok",
    "$anthr",
    "$openai",
    "$deepseek",
    "sums",
    "no-asst",
    "over",
    "fail",
    "deaths",
    "",
]


def worst_by_arm(results: EvalResults) -> dict[str, tuple[str, float]]:
    """Per arm, the summarizer personality it recalled least under, and that mean recall."""
    return results.worst_by_arm()


def format_table(results: EvalResults) -> str:
    """The per-run table, then one line per arm over all tasks (per summarizer, then worst)."""
    rows = [_HEAD] + [_row(r) for r in results.runs]
    blocks = [_render(rows, left=3)]
    for personality in results.summarizers:
        runs = results.under(personality).runs
        by_arm: dict[str, list[RunResult]] = {}
        for run in runs:
            by_arm.setdefault(run.arm, []).append(run)
        totals = [_TOTALS_HEAD] + [_totals(arm, mine) for arm, mine in by_arm.items()]
        title = f"over all tasks, summarizer {personality} (recall: mean of the tasks)"
        blocks.append(f"{title}\n{_render(totals, left=1)}")
    if len(results.summarizers) > 1:
        worst = worst_by_arm(results)
        lines = [["arm", "worst summarizer", "recall"]]
        lines += [[arm, name, f"{recall:.2f}"] for arm, (name, recall) in worst.items()]
        blocks.append("each arm under its worst summarizer\n" + _render(lines, left=2))
    note = (
        "recall: answered from the context alone; w/tools: after searching the history for "
        "unseen facts (arms that offer history_search), recall tok: prompt tokens that search "
        "cost; hit: cached/prompt tokens over all requests, sum-hit: over summarizer requests "
        "(Anthropic cache rules); no-asst: agent requests after the first compaction with no "
        "assistant message after the head; over: requests sent that the arm's own estimate put "
        "over the window (less the output reserve); fail: requests the provider refused; death: "
        "1 = context overflow ended the session, err = another error did; trace: L2 violations "
        "by check (peer arms: " + ", ".join(PEER_ARMS) + ")."
    )
    return "\n\n".join([*blocks, note])


def run_eval_command(
    args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run `eval` for parsed `args`; returns the exit status."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        tasks = _names(args.tasks, TASK_NAMES, "task(s)")
        arms = _names(args.arms, ARM_NAMES, "arm(s)")
        wanted = [n for value in args.summarizer for n in value.split(",") if n]
        if "all" in wanted:
            wanted = list(PERSONALITIES)
        summarizers = _names(wanted, PERSONALITIES, "summarizer(s)")
        if not 0 < args.scale <= 4:
            raise ValueError(f"--scale must be in (0, 4], got {args.scale}")
        gaps: tuple[float, ...] = ()
        if args.idle_gaps is not None:
            gaps = tuple(args.idle_gaps) or IDLE_GAPS
            if any(not 0 <= gap <= 86_400 for gap in gaps):
                raise ValueError(f"--idle-gaps must be seconds in [0, 86400], got {gaps}")
        if args.summary_ratio < 1:
            raise ValueError(f"--summary-ratio must be >= 1, got {args.summary_ratio}")
        _check_out(args.out)
    except ValueError as exc:
        err.write(f"steerable-compaction eval: error: {exc}\n")
        return 2
    try:
        if args.harness is not None:  # a bad file or knob is refused before anything runs
            knobs = read_harness(args.harness)["compaction"]
            for name in tasks:  # knobs range by window: each task's, as `run_eval` checks them
                window = build_task(name, args.seed, scale=args.scale).window
                resolve_compaction_policy(args.model, window, **knobs)
        each = f"{len(tasks)} tasks x {len(arms)} arms"
        if len(summarizers) > 1:
            each += f" x {len(summarizers)} summarizers"
        total = len(tasks) * len(arms) * len(summarizers)
        err.write(f"running {total} sessions ({each})\n")
        results = run_eval(
            tasks,
            arms,
            seed=args.seed,
            scale=args.scale,
            model=args.model,
            summary_ratio=args.summary_ratio,
            progress=_bar(err),
            harness=args.harness,
            summarizers=summarizers,
            idle_gaps=gaps,
            provider=args.provider,
        )
    except ConfigError as exc:
        err.write(f"steerable-compaction eval: error: --harness {args.harness}: {exc}\n")
        return 2
    out.write(format_table(results) + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    document = results.to_json()
    document["arm_sources"] = {name: (ARMS[name].build.__doc__ or "").strip() for name in arms}
    target = args.out / "results.json"
    target.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        from .chart import write_chart

        chart = write_chart(results, args.out / "eval.png")
    except ImportError as exc:  # pragma: no cover - the dev extra installs matplotlib
        err.write(f"note: no chart: {exc}\n")
        chart = None
    out.write(f"\nwrote {target}" + (f" and {chart}" if chart else "") + "\n")
    return 0
