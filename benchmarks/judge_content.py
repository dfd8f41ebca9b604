"""How much of the span's values the simulated summaries keep, against the excerpt of their size.

Prints, per summarizer personality, the distribution of `ours / theirs` that the engine's
content check (`compaction.judge.content_shortfall`) sees over `eval`'s tasks at seed 0,
and every answer the check refused: the evidence behind `CONTENT_RATIO`.

    python benchmarks/judge_content.py [checkpoint,prose,...]
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from collections.abc import Callable

import steerable_compaction.summaries as summaries
from steerable_compaction.compaction import judge
from steerable_compaction.sim import TASK_NAMES, build_task, run_session
from steerable_compaction.sim.personalities import PERSONALITIES
from steerable_compaction.sim.summarizer import ExtractiveSummarizer


def main(personalities: list[str]) -> None:
    """Run every task under each personality with the content check observed."""
    rows: list[tuple[str, int, int, int, str]] = []
    current = [""]
    original = judge.content_shortfall

    def observed(summary: str, values: set[str], excerpt: Callable[[int], str]) -> str | None:
        reference = excerpt(max(len(summary), judge.CONTENT_FLOOR_CHARS))
        theirs = sum(v in reference for v in values)
        ours = sum(v in summary for v in values)
        rows.append((current[0], ours, theirs, len(summary), summary[:60].replace("\n", " ")))
        return original(summary, values, excerpt)

    setattr(summaries, "content_shortfall", observed)  # noqa: B010 (patching a module)
    for personality in personalities:
        current[0] = personality
        summarizer = ExtractiveSummarizer(personality=personality)
        for task in TASK_NAMES:
            asyncio.run(run_session(build_task(task, 0), "current", summarizer=summarizer))
    shares: dict[str, list[float]] = defaultdict(list)
    for personality, ours, theirs, _, _ in rows:
        if theirs >= judge.CONTENT_MIN_VALUES:
            shares[personality].append(ours / theirs)
    print("summarizer  judged   min   p10  median  (ours / theirs, where theirs >= 6)")
    for personality, values in shares.items():
        values.sort()
        p10, median = values[len(values) // 10], values[len(values) // 2]
        print(f"{personality:10}  {len(values):6}  {values[0]:.2f}  {p10:.2f}  {median:6.2f}")
    refused = [
        r for r in rows if r[2] >= judge.CONTENT_MIN_VALUES and r[1] * judge.CONTENT_RATIO < r[2]
    ]
    print(f"\nrefused by content (ours * {judge.CONTENT_RATIO} < theirs): {len(refused)}")
    for personality, ours, theirs, length, head in refused:
        print(f"  {personality}: {ours} of {theirs} at {length} chars: {head!r}")


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else list(PERSONALITIES))
