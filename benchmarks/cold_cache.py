"""What the cold-cache rule saves against waiting for pressure, per provider, in `eval` sessions.

Run: `python benchmarks/cold_cache.py [--seeds 0 1 2] [--gaps 180 600 3600] [--summary]`.

Every task of the simulator runs with the user away between turns (`--idle-gaps`: 3, 10 and
60 minutes in turn), under each provider's cache rules and prices (`eval --provider`), twice
in the same run: the `current` arm as shipped, and the same arm with the rule off
(`cold_threshold_ratio: 1`). The figures are the cost with the rule over the cost without it
(below 1: the rule saves), summed over every task and seed, with in-context recall beside it;
the target is a ratio at most 1 with recall no lower.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml

from _figures import figure, print_figures
from steerable_compaction.harness import default_harness_text
from steerable_compaction.sim import TASK_NAMES, run_eval

PROVIDERS = ("anthropic", "openai")


def harness(directory: Path, ratio: float | None) -> Path | None:
    """The packaged harness with `cold_threshold_ratio` set (`None`: the packaged file)."""
    if ratio is None:
        return None
    config = yaml.safe_load(default_harness_text())
    config.setdefault("compaction", {})["cold_threshold_ratio"] = ratio
    path = directory / f"cold-{ratio}.harness.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def measure(seeds: list[int], gaps: tuple[float, ...]) -> list[dict[str, object]]:
    """One figure per provider: cost with the rule over cost without it."""
    figures = []
    with tempfile.TemporaryDirectory() as scratch:
        off = harness(Path(scratch), 1.0)
        for provider in PROVIDERS:
            cost: dict[bool, float] = {True: 0.0, False: 0.0}
            recall: dict[bool, list[float]] = {True: [], False: []}
            cold = 0
            for seed in seeds:
                for on in (True, False):
                    results = run_eval(
                        TASK_NAMES,
                        ["current"],
                        seed=seed,
                        harness=None if on else off,
                        idle_gaps=gaps,
                        provider=provider,
                    )
                    for run in results.runs:
                        cost[on] += run.cost_usd[provider]
                        recall[on].append(run.recall)
                        cold += run.cold_compactions if on else 0
            ratio = cost[True] / cost[False]
            mean_on, mean_off = statistics.mean(recall[True]), statistics.mean(recall[False])
            figures.append(
                figure(
                    "cold_cache",
                    f"cost_with_rule_{provider}",
                    cost[True],
                    f"the same sessions without the rule, ${cost[False]:.4f} (seeds "
                    f"{','.join(map(str, seeds))}, {len(TASK_NAMES)} tasks; {cold} cold "
                    f"compactions; recall {mean_on:.4f} vs {mean_off:.4f})",
                    ratio,
                    "<= 1.0 with recall no lower",
                    ratio <= 1.0 and mean_on >= mean_off,
                    ratio_digits=4,
                )
            )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print JSON lines of figures")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="N")
    parser.add_argument(
        "--gaps", type=float, nargs="+", default=[180.0, 600.0, 3600.0], metavar="SECONDS"
    )
    args = parser.parse_args()
    figures = measure(args.seeds, tuple(args.gaps))
    if not args.summary:
        for item in figures:
            print(f"{item['figure']}: ${item['value']} = {item['ratio']}x {item['baseline']}")
    print_figures(figures, summary=args.summary)


if __name__ == "__main__":
    main()
