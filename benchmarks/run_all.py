"""Run every benchmark and print one table of its headline figures, each a ratio to a baseline.

Run: `python benchmarks/run_all.py [--only NAME ...] [--timeout SECONDS] [--strict]`.

Every script in `benchmarks/` that supports `--summary` is run as
`python benchmarks/X.py --summary`; it prints one JSON line per headline figure:
`{"benchmark", "figure", "value", "baseline", "ratio", "target", "ok"}`, where `ratio` is the
figure against a baseline measured in the same run (`baseline` says which). Scripts without
`--summary` are listed as skipped; a script that fails (a missing extra, a crash) is listed with
its last error line, and the others still run. `--strict` exits 1 when a figure misses its
target or a script fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _figures import KEYS

HERE = Path(__file__).resolve().parent


@dataclass
class Outcome:
    """What one script gave: its figures, or why it gave none."""

    script: str
    figures: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ran"  # "ran", "skipped" or "failed"
    note: str = ""
    seconds: float = 0.0


def scripts(only: Sequence[str]) -> list[Path]:
    """The benchmark scripts, by name (this runner and private helpers left out)."""
    found = [
        path
        for path in sorted(HERE.glob("*.py"))
        if path.name != Path(__file__).name and not path.name.startswith("_")
    ]
    if only:
        found = [path for path in found if path.stem in only]
    return found


def parse(stdout: str) -> list[dict[str, Any]]:
    """The figure lines of a `--summary` run (other lines are ignored)."""
    figures = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and all(key in value for key in KEYS):
            figures.append(value)
    return figures


def run(path: Path, timeout: float) -> Outcome:
    """Run one script with `--summary` and collect its figures."""
    outcome = Outcome(script=path.stem)
    if "--summary" not in path.read_text(encoding="utf-8"):
        outcome.status, outcome.note = "skipped", "no --summary support"
        return outcome
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(path), "--summary"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        outcome.status, outcome.note = "failed", f"timed out after {timeout:.0f} s"
        return outcome
    outcome.seconds = time.perf_counter() - start
    outcome.figures = parse(done.stdout)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        outcome.status = "failed"
        outcome.note = f"exit {done.returncode}: {lines[-1] if lines else 'no error output'}"
    elif not outcome.figures:
        outcome.status, outcome.note = "failed", "printed no figure lines"
    return outcome


def number(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def table(outcomes: Sequence[Outcome]) -> str:
    """The summary table: one row per figure, then the baselines, then skipped and failed."""
    rows = [("benchmark", "figure", "value", "ratio", "target", "ok")]
    baselines: list[str] = []
    for outcome in outcomes:
        for f in outcome.figures:
            rows.append(
                (
                    str(f["benchmark"]),
                    str(f["figure"]),
                    number(f["value"]),
                    number(f["ratio"]),
                    str(f["target"]),
                    "yes" if f["ok"] else "NO",
                )
            )
            baselines.append(f"  {f['benchmark']}.{f['figure']}: ratio against {f['baseline']}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if baselines:
        lines += ["", "baselines (measured in the same run):", *baselines]
    others = [o for o in outcomes if o.status != "ran"]
    if others:
        lines += ["", "not measured:"]
        lines += [f"  {o.script}: {o.status} ({o.note})" for o in others]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=(), help="run only these scripts (stems)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per script")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    outcomes = []
    for path in scripts(args.only):
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        outcome = run(path, args.timeout)
        print(f"  {outcome.status} in {outcome.seconds:.0f} s", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    print(table(outcomes))
    missed = any(o.status == "failed" for o in outcomes) or any(
        not f["ok"] for o in outcomes for f in o.figures
    )
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
