"""`sim.command`: the `eval` command, its table, progress bar and argument checks."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from steerable_compaction.sim.command import _bar, add_eval_command


def test_eval_command_writes_a_table_results_json_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval` on a throwaway parser: progress on stderr, table on stdout, JSON and PNG on disk."""
    parser = argparse.ArgumentParser(prog="steerable-compaction")
    sub = parser.add_subparsers(dest="command")
    add_eval_command(sub)
    out = tmp_path / "out"
    args = parser.parse_args(
        [
            "eval",
            "--tasks",
            "light,images",
            "--arms",
            "none",
            "naive,current",
            "--out",
            str(out),
            "--seed",
            "1",
            "--scale",
            "0.4",
        ]
    )
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert "running 6 sessions (2 tasks x 3 arms)" in captured.err
    assert "6/6 images / current" in captured.err
    assert captured.out.startswith("summarizer  task ")
    assert "over all tasks, summarizer checkpoint" in captured.out
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert document["format"] == "steerable-compaction-eval/1" and document["seed"] == 1
    assert [(r["task"], r["arm"]) for r in document["runs"]][:3] == [
        ("light", "none"),
        ("light", "naive"),
        ("light", "current"),
    ]
    assert "naive" in document["arm_sources"] and document["tasks"]["light"]["window"] == 16_384
    assert all(isinstance(r["no_assistant_requests"], int) for r in document["runs"])
    assert {r["summarizer"] for r in document["runs"]} == {"checkpoint"}
    assert all(
        isinstance(r["requests_over_estimate"], int) and isinstance(r["failed_requests"], int)
        for r in document["runs"]
    )
    head, *_ = captured.out.splitlines()
    assert head.split()[-6:] == ["comp", "no-asst", "over", "fail", "death", "trace"]
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "nope"], "unknown task(s) nope"),
        (["--arms", "light"], "unknown arm(s) light"),
        (["--scale", "9"], "--scale must be in (0, 4]"),
        (["--summary-ratio", "0"], "--summary-ratio must be >= 1"),
        (["--idle-gaps", "-5"], "--idle-gaps must be seconds in [0, 86400]"),
        (["--idle-gaps", "nan"], "--idle-gaps must be seconds in [0, 86400]"),
        (["--summarizer", "poet"], "unknown summarizer(s) poet"),
    ],
)
def test_eval_command_rejects_bad_arguments(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown names and out-of-range numbers exit 2 with a message on stderr."""
    parser = argparse.ArgumentParser()
    add_eval_command(parser.add_subparsers())
    args = parser.parse_args(["eval", "--out", str(tmp_path), *argv])
    assert args.func(args) == 2
    assert message in capsys.readouterr().err


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    """On a terminal the bar is redrawn with a carriage return and ends with a newline."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    update = _bar(stream)
    update(1, 2, "light", "none")
    update(2, 2, "light", "current")
    text = stream.getvalue()
    assert text.startswith("\r[") and text.count("\r") == 2 and text.endswith("\n")
    assert "2/2 light / current" in text


def test_eval_command_reports_a_bad_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval --harness` with a bad or missing file exits 2, names the file, writes nothing."""
    parser = argparse.ArgumentParser()
    add_eval_command(parser.add_subparsers())
    bad = tmp_path / "bad.yaml"
    bad.write_text("compaction:\n  threshold_ratio: 3\n", encoding="utf-8")
    out = tmp_path / "out"
    for path in (bad, tmp_path / "missing.yaml"):
        args = parser.parse_args(["eval", "--out", str(out), "--harness", str(path)])
        assert args.func(args) == 2
        err = capsys.readouterr().err
        assert f"--harness {path}" in err and "error" in err
    assert not out.exists()


def test_eval_command_runs_every_summarizer_personality_with_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--summarizer all` runs each personality once, tables each, and names each arm's worst."""
    parser = argparse.ArgumentParser()
    add_eval_command(parser.add_subparsers())
    out = tmp_path / "out"
    argv = ["eval", "--tasks", "light", "--arms", "current", "--scale", "0.3", "--out", str(out)]
    args = parser.parse_args([*argv, "--summarizer", "all"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    names = ["checkpoint", "prose", "foreign", "json", "terse", "unruly"]
    assert document["summarizers"] == names
    assert [r["summarizer"] for r in document["runs"]] == names
    for name in names:
        assert f"over all tasks, summarizer {name}" in text
    assert "each arm under its worst summarizer" in text
