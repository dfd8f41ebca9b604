"""Re-time what the README and docs quote, into `docs/measurements.json`.

    python docs/measure.py tests            # the README's test command, clean clone, [dev]
    python docs/measure.py first-command    # fresh clone + venv: the README's first command
    python docs/measure.py ci               # CI=true .ci/run in a clean clone, no pip cache
    python docs/measure.py local            # benchmarks/real_cache.py (needs the local extra)
    python docs/measure.py eval             # steerable-compaction eval, the whole suite

Then `python docs/update_readme.py` renders the stored figures into the generated blocks. A
clone is of this checkout's HEAD plus its uncommitted changes (not its untracked files).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "docs" / "measurements.json"
TEST_COMMAND = "python -m pytest --cov=steerable_compaction --cov-branch --cov-fail-under=95"


def _machine() -> str:
    return f"{os.cpu_count()} cores, Python {sys.version_info.major}.{sys.version_info.minor}"


def _clone(into: Path) -> Path:
    """A clean clone of this checkout's HEAD, with the working tree's uncommitted changes."""
    target = into / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    diff = subprocess.run(["git", "diff", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    if diff.stdout:
        subprocess.run(["git", "apply"], cwd=target, input=diff.stdout, check=True)
    return target


def measure_tests() -> dict[str, Any]:
    """The README's test command in a clean clone with a fresh `pip install -e '.[dev]'`."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = _clone(Path(tmp))
        subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=clone, check=True)
        bin_ = clone / ".venv" / "bin"
        subprocess.run([bin_ / "pip", "install", "--quiet", "-e", ".[dev]"], cwd=clone, check=True)
        start = time.monotonic()
        done = subprocess.run(
            [bin_ / "python", *shlex.split(TEST_COMMAND)[1:], "-q"],
            cwd=clone,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - start
    found = re.search(r"(\d+) passed(?:, (\d+) skipped)?", done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the tests failed:\n{done.stdout[-3000:]}")
    return {
        "seconds": round(seconds),
        "passed": int(found[1]),
        "skipped": int(found[2] or 0),
        "skipped_for": skip_reasons(done.stdout),
    }


# What a skipped test lacked, by a phrase of its reason (the tests' own skip messages).
SKIP_CAUSES = {"STEERABLE_TEST_POSTGRES": "a PostgreSQL server", "local extra": "the `local` extra"}


def skip_reasons(output: str) -> dict[str, int]:
    """How many tests skipped for want of what, from pytest's `-ra` summary in `output`.

    A reason matching none of `SKIP_CAUSES` is counted under its own text.
    """
    counts: dict[str, int] = {}
    for count, reason in re.findall(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", output, re.M):
        cause = next((c for phrase, c in SKIP_CAUSES.items() if phrase in reason), reason)
        counts[cause] = counts.get(cause, 0) + int(count)
    return counts


def measure_first_command() -> dict[str, Any]:
    """A fresh clone and virtualenv: `pip install -e .`, then `steerable-compaction demo`."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = _clone(Path(tmp))
        subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=clone, check=True)
        bin_ = clone / ".venv" / "bin"
        env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
        start = time.monotonic()
        subprocess.run(
            [bin_ / "pip", "install", "--quiet", "-e", "."], cwd=clone, env=env, check=True
        )
        install = time.monotonic() - start
        start = time.monotonic()
        out = subprocess.run(
            [bin_ / "steerable-compaction", "demo"],
            cwd=clone,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        demo = time.monotonic() - start
        if "compaction before round" not in out:
            raise SystemExit(f"the first command printed no compaction:\n{out}")
    return {"install": round(install), "demo": round(demo, 1)}


def measure_ci() -> dict[str, Any]:
    """`CI=true .ci/run` in a clean clone, without pip's cache (so llama.cpp is compiled)."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = _clone(Path(tmp))
        start = time.monotonic()
        done = subprocess.run(
            [str(clone / ".ci" / "run")],
            cwd=clone,
            env={**os.environ, "CI": "true", "PIP_NO_CACHE_DIR": "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f".ci/run failed:\n{done.stderr[-3000:]}\n{done.stdout[-3000:]}")
    steps = {m[1]: int(m[2]) for m in re.finditer(r"ci: step (.+) took (\d+) s", done.stderr)}
    return {"seconds": round(seconds), "steps": steps}


def measure_local() -> dict[str, Any]:
    """`benchmarks/real_cache.py` on the local model (needs the `local` extra)."""
    done = subprocess.run(
        [sys.executable, "benchmarks/real_cache.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmarks/real_cache.py failed:\n{done.stderr[-3000:]}")
    return {"output": done.stdout.strip()}


def measure_eval() -> dict[str, Any]:
    """`steerable-compaction eval`: every arm on every task, as the README shows it."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "steerable_compaction", "eval", "--out", tmp],
            capture_output=True,
            check=True,
        )
        return {"seconds": round(time.monotonic() - start)}


MEASURES: dict[str, Callable[[], dict[str, Any]]] = {
    "eval": measure_eval,
    "tests": measure_tests,
    "first-command": measure_first_command,
    "ci": measure_ci,
    "local": measure_local,
}


def load() -> dict[str, Any]:
    """What `docs/measurements.json` holds (empty before the first measurement)."""
    if not MEASUREMENTS.exists():
        return {}
    data: dict[str, Any] = json.loads(MEASUREMENTS.read_text(encoding="utf-8"))
    return data


def measure(names: Sequence[str]) -> None:
    """Re-time `names` and store them in `docs/measurements.json`."""
    data = load()
    for name in names:
        print(f"measuring {name} …", file=sys.stderr)
        value = MEASURES[name]()
        value["measured"] = datetime.date.today().isoformat()
        value["machine"] = _machine()
        data[name] = value
    MEASUREMENTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Re-time the measurements named on the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=list(MEASURES), metavar="NAME")
    measure(parser.parse_args(argv).names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
