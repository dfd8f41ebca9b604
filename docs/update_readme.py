"""Regenerate every figure in README.md and docs/*.md from the commands that produce them.

Run from anywhere, in the project's virtualenv (`pip install -e '.[dev]'`):

    python docs/update_readme.py                  # re-run the commands, rewrite the blocks
    python docs/update_readme.py --check          # re-run them; exit 1 naming stale blocks
    python docs/update_readme.py --only demo,cli-synopsis

A generated block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->`; edit the
prose around it, never inside. Output (demo, inspect, eval tables, the sidecar transcript, the
CLI synopsis) is re-run on every call; it is deterministic, so `--check` compares it exactly.
Durations vary from run to run: `python docs/measure.py NAME` re-times one and stores it with
its date in `docs/measurements.json`, from which the blocks are rendered (and checked).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MEASUREMENTS = DOCS / "measurements.json"
FILES = (ROOT / "README.md", *sorted(DOCS.glob("*.md")))
_BLOCK = re.compile(
    r"(?P<head><!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
    r"(?P<tail><!-- end: (?P=name) -->)",
    re.S,
)
# Runs the CLI with some modules hidden, as a fresh `pip install -e .` has no extras.
_WITHOUT = (
    "import sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "from steerable_compaction.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)
_NO_PLOT = "matplotlib.backends.backend_agg"


def _env() -> dict[str, str]:
    """This environment minus what would change the output (the summarizer switch)."""
    env = {k: v for k, v in os.environ.items() if k != "STEERABLE_SUMMARIZER"}
    return {**env, "COLUMNS": "100"}


def cli(*args: str, cwd: Path, hide: str = "") -> str:
    """Run `steerable-compaction ARGS` in `cwd` and return its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT, hide, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"steerable-compaction {shlex.join(args)} failed:\n{done.stderr}")
    return done.stdout


def fence(text: str, info: str = "") -> str:
    """`text` in a Markdown code fence."""
    return f"```{info}\n{text.rstrip()}\n```\n"


class Runs:
    """The commands behind the blocks, each run once per call and shared by the blocks."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch

    @functools.cached_property
    def demo(self) -> tuple[Path, str]:
        """The README's first command, as a fresh install runs it (no `plot` extra)."""
        cwd = self.scratch / "demo"
        cwd.mkdir()
        return cwd, cli("demo", cwd=cwd, hide=_NO_PLOT)

    def eval(self, *args: str) -> dict[str, Any]:
        """`eval ARGS`'s `results.json` (the chart is not drawn)."""
        out = self.scratch / f"eval-{len(list(self.scratch.glob('eval-*')))}"
        cli("eval", *args, "--out", str(out), cwd=self.scratch, hide=_NO_PLOT)
        document: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
        return document

    @functools.cached_property
    def suite(self) -> dict[str, Any]:
        """Every arm on every task under every summarizer personality."""
        return self.eval("--summarizer", "all")


# -- the blocks -----------------------------------------------------------------------------------


def block_demo(runs: Runs) -> str:
    """The README's first command and what it prints."""
    _, out = runs.demo
    return fence("$ steerable-compaction demo\n" + out)


def block_demo_inspect(runs: Runs) -> str:
    """`inspect` on the demo's record."""
    cwd, _ = runs.demo
    command = ("inspect", "steerable-demo/session-1.db", "--limit", "3")
    return fence(f"$ steerable-compaction {shlex.join(command)}\n" + cli(*command, cwd=cwd))


def block_cli_synopsis(runs: Runs) -> str:
    """Every command's usage line, from the parser itself (so none can be left out)."""
    os.environ["COLUMNS"] = "100"
    from steerable_compaction.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = ["steerable-compaction --version"]
    for command in sub.choices.values():
        usage = command.format_usage().removeprefix("usage: ").replace(" [-h]", "").rstrip()
        # argparse indents continuation lines under the text after "usage: ", now gone.
        lines.extend(line.removeprefix(" " * len("usage: ")) for line in usage.splitlines())
    return fence("\n".join(lines))


def _arm_totals(document: dict[str, Any]) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    for run in document["runs"]:
        t = totals.setdefault(
            run["arm"],
            {
                "arm": run["arm"],
                "recalls": [],
                "with_tools": [],
                "recall_tokens": 0,
                "found": 0,
                "needles": 0,
                "prompt": 0,
                "cost": {},
                "sums": 0,
                "deaths": 0,
                "over": 0,
                "failed": 0,
                "sum_prompt": 0,
                "sum_cached": 0,
            },
        )
        t["recalls"].append(run["recall"])
        t["with_tools"].append(run["recall_with_tools"])
        t["recall_tokens"] += run["recall_tokens"]
        t["found"] += len(run["recalled"])
        t["needles"] += run["needles"]
        t["prompt"] += run["prompt_tokens"]
        for rules, usd in run["cost_usd"].items():
            t["cost"][rules] = t["cost"].get(rules, 0.0) + usd
        t["sums"] += run["summary_calls"]
        t["deaths"] += run["death"] is not None
        t["over"] += run["requests_over_estimate"]
        t["failed"] += run["failed_requests"]
        t["sum_prompt"] += run["summary_prompt_tokens"]
        t["sum_cached"] += run["summary_cached_tokens"]
    for t in totals.values():
        t["recall"] = sum(t["recalls"]) / len(t["recalls"])
        t["recall_with_tools"] = sum(t["with_tools"]) / len(t["with_tools"])
    return list(totals.values())


def _under(document: dict[str, Any], summarizer: str) -> dict[str, Any]:
    """`document` with only the runs under one summarizer personality."""
    return {**document, "runs": [r for r in document["runs"] if r["summarizer"] == summarizer]}


def _worst_totals(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each arm's totals under the summarizer personality it recalled least under."""
    worst: dict[str, dict[str, Any]] = {}
    for personality in document["summarizers"]:
        for t in _arm_totals(_under(document, personality)):
            if t["arm"] not in worst or t["recall"] < worst[t["arm"]]["recall"]:
                worst[t["arm"]] = {**t, "summarizer": personality}
    return list(worst.values())


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in pairs]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _arms_table(totals: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            "arm",
            "worst summarizer",
            "recall",
            "w/ tools",
            "needles",
            "prompt tokens",
            "$ Anthropic",
            "$/fact",
            "summaries",
            "over",
            "failed",
            "died",
        ]
    ]
    for t in totals:
        rows.append(
            [
                t["arm"],
                t["summarizer"],
                f"{t['recall']:.2f}",
                f"{t['recall_with_tools']:.2f}",
                f"{t['found']}/{t['needles']}",
                f"{t['prompt'] / 1e6:.1f} M",
                f"{t['cost']['anthropic']:.2f}",
                f"{t['cost']['anthropic'] / max(t['found'], 1):.3f}",
                str(t["sums"]),
                str(t["over"]),
                str(t["failed"]),
                str(t["deaths"]),
            ]
        )
    return _table(rows)


def block_eval_summary(runs: Runs) -> str:
    """Each arm under its worst summarizer personality, and what that says about `current`."""
    document = runs.suite
    totals = _worst_totals(document)
    by_arm = {t["arm"]: t for t in totals}
    current = by_arm["current"]
    ranked = sorted(totals, key=lambda t: (-t["recall"], t["cost"]["anthropic"]))
    rank = [t["arm"] for t in ranked].index("current") + 1
    runner_up = next(t for t in ranked if t["arm"] != "current")
    each = {
        p: next(t for t in _arm_totals(_under(document, p)) if t["arm"] == "current")
        for p in document["summarizers"]
    }
    place = "the highest" if rank == 1 else f"number {rank}"
    text = (
        f"Each arm is shown under the summarizer personality it recalled least under. "
        f"`current` has {place} worst-case mean recall of the {len(totals)} arms, "
        f"{current['recall']:.2f} under `{current['summarizer']}` "
        f"({current['found']}/{current['needles']} needles; next: `{runner_up['arm']}`, "
        f"{runner_up['recall']:.2f} under `{runner_up['summarizer']}`). Under each "
        "personality: "
        + ", ".join(f"{p} {t['recall']:.2f}" for p, t in each.items())
        + ". Its summaries read "
        f"{current['sum_cached'] / max(current['sum_prompt'], 1):.0%} of their prompt from "
        f"the cache; it sent {sum(t['over'] for t in each.values())} requests its own estimate "
        f"put over the window and had {sum(t['failed'] for t in each.values())} refused, over "
        f"all {len(each)} personalities. With the history tools it finds "
        f"{current['recall_with_tools']:.2f} of the facts."
    )
    head = (
        f"$ steerable-compaction eval --summarizer all   # {len(document['tasks'])} tasks x "
        f"{len(totals)} arms x {len(document['summarizers'])} summarizers"
    )
    return fence(head + "\n" + _arms_table(totals)) + "\n" + text + "\n"


def block_eval_tasks(runs: Runs) -> str:
    """Recall per task and arm (checkpoint summarizer), then `current` under each one."""
    document = runs.suite
    tasks = list(document["tasks"])
    checkpoint = _under(document, "checkpoint")
    arms = list(dict.fromkeys(r["arm"] for r in checkpoint["runs"]))
    recall = {(r["task"], r["arm"]): r for r in checkpoint["runs"]}
    rows = [["task", *arms]]
    for task in tasks:
        rows.append(
            [task]
            + [
                f"{recall[task, a]['recall']:.2f}" + ("*" if recall[task, a]["death"] else "")
                for a in arms
            ]
        )
    personalities = list(document["summarizers"])
    mine = {(r["task"], r["summarizer"]): r for r in document["runs"] if r["arm"] == "current"}
    per = [["task (current)", *personalities]]
    for task in tasks:
        per.append([task] + [f"{mine[task, p]['recall']:.2f}" for p in personalities])
    return (
        fence(_table(rows))
        + "\n(`*`: the session died early, of a context overflow or an error.)\n\n"
        + "`current` per task under each summarizer personality:\n\n"
        + fence(_table(per))
    )


def block_eval_task_list(runs: Runs) -> str:
    """Every task `eval` plays, with its own description (so none is left unnamed)."""
    from steerable_compaction.sim.tasks import TASK_NAMES, build_task

    rows = ["| task | what it plays |", "|---|---|"]
    rows += [f"| `{name}` | {build_task(name).description} |" for name in TASK_NAMES]
    return "\n".join(rows) + "\n"


ABLATIONS = (
    ("the packaged harness", None),
    ("fold before summarizing", "compaction:\n  fold_first: true\n"),
    ("no retention check", "compaction:\n  retention_token_ratio: 0\n"),
    ("a summary chain (0.3)", "compaction:\n  summary_chain_ratio: 0.3\n"),
    ("no user messages kept verbatim", "compaction:\n  keep_user_messages_ratio: 0\n"),
    ("no cap on the tail", "compaction:\n  tail_token_ratio: 1.0\n"),
)


def block_eval_ablations(runs: Runs) -> str:
    """`current` with one default changed at a time (`--harness`), under its worst summarizer."""
    rows = [
        [
            "harness",
            "worst",
            "recall",
            "w/ tools",
            "needles",
            "prompt tokens",
            "$ Anthropic",
            "compactions",
        ]
    ]
    for label, yaml in ABLATIONS:
        if yaml is None:
            document = runs.suite
        else:
            path = runs.scratch / f"ablation-{len(rows)}.harness.yaml"
            path.write_text(yaml, encoding="utf-8")
            document = runs.eval("--arms", "current", "--summarizer", "all", "--harness", str(path))
        (t,) = [w for w in _worst_totals(document) if w["arm"] == "current"]
        current = [
            r
            for r in document["runs"]
            if r["arm"] == "current" and r["summarizer"] == t["summarizer"]
        ]
        rows.append(
            [
                label,
                t["summarizer"],
                f"{t['recall']:.2f}",
                f"{t['recall_with_tools']:.2f}",
                f"{t['found']}/{t['needles']}",
                f"{t['prompt'] / 1e6:.1f} M",
                f"{t['cost']['anthropic']:.2f}",
                str(sum(r["compactions"] for r in current)),
            ]
        )
    return fence(_table(rows))


_SIDECAR_REQUESTS: tuple[dict[str, Any] | str, ...] = (
    {"method": "agent.chat.send", "params": {"input": "Where are the TODOs? (read 3 files)"}},
    {"method": "agent.chat.compact"},
    {"method": "agent.chat.send", "params": {"input": "Thanks (read 0 files)."}},
    {"method": "agent.chat.status"},
    {"method": "agent.chat.history", "params": {"offset": 2, "limit": 1}},
    {
        "method": "agent.chat.seed",
        "params": {"messages": [{"role": "user", "parts": [{"type": "text", "text": "Hi"}]}]},
    },
    "not json",
    {"method": "agent.chat.stop"},
)


def _shorten(value: Any, key: str = "") -> Any:
    """`value` with long `text` and `reply` strings cut to 40 characters."""
    if isinstance(value, dict):
        return {k: _shorten(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, key) for v in value]
    if isinstance(value, str) and key in ("text", "reply") and len(value) > 40:
        return value[:40] + "…"
    return value


def block_sidecar(runs: Runs) -> str:
    """A `serve` session as a host drives it: each request, then everything written back."""
    cwd = runs.scratch / "sidecar"
    cwd.mkdir()
    lines: list[str] = []
    for request in _SIDECAR_REQUESTS:
        if isinstance(request, str):
            lines.append(request)
            continue
        body = {"jsonrpc": "2.0", "id": len(lines) + 1, **request}
        lines.append(json.dumps(body, separators=(",", ":")))
    transcript = ["$ steerable-compaction serve --record session.jsonl"]
    for request, answers in zip(lines, _serve_one_at_a_time(cwd, lines), strict=True):
        transcript.append("> " + request)
        for answer in answers:
            shown = _shorten(json.loads(answer))
            transcript.append("< " + json.dumps(shown, ensure_ascii=False, separators=(",", ":")))
    return fence("\n".join(transcript))


def _serve_one_at_a_time(cwd: Path, lines: Sequence[str]) -> list[list[str]]:
    """Send each request after the previous one's response arrived (a host's pace)."""
    out: list[list[str]] = []
    with subprocess.Popen(
        [sys.executable, "-m", "steerable_compaction", "serve", "--record", "session.jsonl"],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        for line in lines:
            process.stdin.write(line + "\n")
            process.stdin.flush()
            answers: list[str] = []
            while not answers or "id" not in json.loads(answers[-1]):
                answer = process.stdout.readline()
                if not answer:
                    raise SystemExit("serve ended before it answered " + line)
                answers.append(answer.rstrip("\n"))
            out.append(answers)
        process.stdin.close()
        process.wait(timeout=60)
    return out


# -- measured durations ---------------------------------------------------------------------------


def _load_measurements() -> dict[str, Any]:
    if not MEASUREMENTS.exists():
        return {}
    data: dict[str, Any] = json.loads(MEASUREMENTS.read_text(encoding="utf-8"))
    return data


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def block_durations(runs: Runs) -> str:
    """How long the first command, the tests, CI and `eval` took when last measured."""
    m = _load_measurements()
    first, tests, ci, suite = (m.get(k) for k in ("first-command", "tests", "ci", "eval"))
    parts = []
    if first:
        parts.append(
            f"In a fresh clone and virtualenv the install took {_minutes(first['install'])} and "
            f"the demo {_minutes(first['demo'])}."
        )
    if tests:
        parts.append(
            f"The tests ({tests['passed']:,} passed, {_skipped(tests)}) took "
            f"{_minutes(tests['seconds'])}."
        )
    if ci:
        parts.append(
            f"`.ci/run` took {_minutes(ci['seconds'])}, "
            f"{_minutes(ci['steps'].get('install .[local]', 0))} of it compiling llama.cpp."
        )
    if suite:
        parts.append(f"`steerable-compaction eval` took {_minutes(suite['seconds'])}.")
    measured = [v for v in (first, tests, ci, suite) if v]
    if not measured:
        return "(not measured yet: see docs/development.md)\n"
    machines = sorted({str(v["machine"]) for v in measured})
    dates = sorted({str(v["measured"]) for v in measured})
    parts.append(
        f"Measured on {' and '.join(machines)}, {' to '.join(dates[:: len(dates) - 1 or 1])}."
    )
    return " ".join(parts) + "\n"


def _skipped(tests: dict[str, Any]) -> str:
    """'70 skipped: 62 without a PostgreSQL server, 8 without the `local` extra'."""
    causes = tests.get("skipped_for") or {}
    if not causes:
        return f"{tests['skipped']} skipped"
    listed = ", ".join(f"{n} without {cause}" for cause, n in causes.items())
    return f"{tests['skipped']} skipped: {listed}"


def collected_tests() -> int:
    """How many tests the suite holds now (`pytest --collect-only`)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^(\d+) tests? collected", done.stdout, re.M)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"pytest --collect-only failed:\n{done.stdout[-3000:]}{done.stderr}")
    return int(found[1])


def stale_test_counts(collected: int) -> str | None:
    """Why the measured test counts are not this suite's, or `None` when they are."""
    tests = _load_measurements().get("tests")
    if not tests:
        return None
    measured = tests["passed"] + tests["skipped"]
    if measured == collected:
        return None
    return (
        f"docs/measurements.json counts {measured:,} tests ({tests['measured']}), the suite "
        f"holds {collected:,}: run `python docs/measure.py tests`"
    )


def block_local_cache(runs: Runs) -> str:
    """The last `benchmarks/real_cache.py` run (a real model: `python docs/measure.py local`)."""
    local = _load_measurements().get("local")
    if not local:
        return "(not measured yet: `python docs/measure.py local`)\n"
    return fence("$ python benchmarks/real_cache.py\n" + local["output"]) + (
        f"\n(measured {local['measured']} on {local['machine']})\n"
    )


def block_settings(runs: Runs) -> str:
    """Every policy knob: type, default per tier, allowed values, meaning (docs/settings.toml)."""
    page = _sibling("settings_page")
    return str(page.render())


def _sibling(name: str) -> ModuleType:
    """`docs/NAME.py`, imported (the docs scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BLOCKS: dict[str, Callable[[Runs], str]] = {
    "demo": block_demo,
    "demo-inspect": block_demo_inspect,
    "cli-synopsis": block_cli_synopsis,
    "eval-summary": block_eval_summary,
    "eval-tasks": block_eval_tasks,
    "eval-ablations": block_eval_ablations,
    "sidecar": block_sidecar,
    "durations": block_durations,
    "local-cache": block_local_cache,
    "settings": block_settings,
    "eval-task-list": block_eval_task_list,
}
CHEAP = (
    "demo",
    "demo-inspect",
    "cli-synopsis",
    "sidecar",
    "durations",
    "local-cache",
    "settings",
    "eval-task-list",
)


# -- rewriting ----------------------------------------------------------------------------------


def blocks_in(text: str) -> list[str]:
    """The names of the generated blocks in `text`, in order."""
    return [m["name"] for m in _BLOCK.finditer(text)]


def render(text: str, fresh: dict[str, str]) -> str:
    """`text` with each generated block named in `fresh` replaced by its new body."""

    def swap(m: re.Match[str]) -> str:
        name = m["name"]
        return m["head"] + fresh[name] + m["tail"] if name in fresh else m[0]

    return _BLOCK.sub(swap, text)


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="steerable-readme-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def generate(names: Sequence[str]) -> dict[str, str]:
    """The fresh body of each block in `names`."""
    with _scratch() as scratch:
        runs = Runs(scratch)
        out = {}
        for name in names:
            print(f"generating {name} …", file=sys.stderr)
            out[name] = BLOCKS[name](runs)
        return out


def _rewrite(texts: dict[Path, str], fresh: dict[str, str], *, check: bool) -> list[Path]:
    """Write each text whose blocks changed (or, with `check`, print its diff); those paths."""
    stale = []
    for path, text in texts.items():
        new = render(text, fresh)
        if new == text:
            continue
        stale.append(path)
        if check:
            lines = difflib.unified_diff(
                text.splitlines(), new.splitlines(), str(path), "regenerated", lineterm="", n=1
            )
            print("\n".join(list(lines)[:40]), file=sys.stderr)
        else:
            path.write_text(new, encoding="utf-8")
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (or check) the generated blocks; see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if any block is stale")
    parser.add_argument("--only", default="", help="comma-separated block names")
    args = parser.parse_args(argv)
    wanted = [n for n in args.only.split(",") if n] or list(BLOCKS)
    unknown = sorted(set(wanted) - set(BLOCKS))
    if unknown:
        parser.error(f"unknown block: {', '.join(unknown)}; known: {', '.join(BLOCKS)}")
    texts = {path: path.read_text(encoding="utf-8") for path in FILES}
    used = {n for text in texts.values() for n in blocks_in(text)}
    stale = _rewrite(texts, generate([n for n in wanted if n in used]), check=args.check)
    names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
    # The durations quote the measured test counts: they must be this suite's.
    counts = stale_test_counts(collected_tests()) if "durations" in wanted else None
    if counts is not None:
        print(f"stale: {counts}", file=sys.stderr)
    if args.check and (stale or counts):
        if stale:
            print(f"stale: {names}; run `python docs/update_readme.py`", file=sys.stderr)
        return 1
    print(f"rewrote {names}" if stale else "every generated block is current", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
