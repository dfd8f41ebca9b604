"""The headline-figure line every benchmark prints with `--summary` (read by `run_all.py`).

A helper module, not a benchmark: `run_all.py` skips files whose name starts with `_`.
"""

from __future__ import annotations

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
