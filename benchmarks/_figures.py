"""The headline-figure line every benchmark prints with `--summary` (read by `run_all.py`).

A helper module, not a benchmark: `run_all.py` skips files whose name starts with `_`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

KEYS = ("benchmark", "figure", "value", "baseline", "ratio", "target", "ok")


def figure(
    benchmark: str,
    name: str,
    value: float,
    baseline: str,
    ratio: float,
    target: str,
    ok: bool,
    *,
    ratio_digits: int = 3,
) -> dict[str, object]:
    """One figure of `benchmark`: `value` and its `ratio` to a baseline measured in the same run."""
    return {
        "benchmark": benchmark,
        "figure": name,
        "value": round(value, 3),
        "baseline": baseline,
        "ratio": round(ratio, ratio_digits),
        "target": target,
        "ok": ok,
    }


def print_figures(figures: Iterable[Mapping[str, object]], *, summary: bool) -> None:
    """JSON lines for `run_all.py` (`summary`), else one "ok"/"MISS" line per figure."""
    if summary:
        for item in figures:
            print(json.dumps(item))
        return
    print()
    for item in figures:
        mark = "ok " if item["ok"] else "MISS"
        print(f"{mark} {item['figure']}: {item['value']} (target {item['target']})")
