from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from steerable_compaction import Message, __version__
from steerable_compaction.cli import describe_message, main
from steerable_compaction.record import (
    JsonlRecord,
    MessageAppended,
    Reminder,
    SqliteRecord,
    Usage,
)

from .record_sessions import small_session


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` prints the installed version and exits 0."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"steerable-compaction {__version__}"


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a command the CLI shows its usage and fails."""
    assert main([]) == 2
    assert "inspect" in capsys.readouterr().out


@pytest.mark.parametrize(("cls", "name"), [(JsonlRecord, "r.jsonl"), (SqliteRecord, "r.db")])
def test_inspect_prints_events_compactions_and_flags_unclosed_brackets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cls: type, name: str
) -> None:
    """`inspect` lists every event, each compaction's pre/post tokens, and unclosed brackets."""
    path = tmp_path / name
    with cls(path) as record:
        for event in small_session():
            record.append(event)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        f"{path}  ({cls.__name__}, 14 events, 9 messages, 3 compactions, 6 messages visible)" in out
    )
    assert "compaction_boundary  closes k1 summarize/pressure 1,200 -> 400 tokens replaced 4" in out
    assert "[prompt 812, cached 640]" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("id "))
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    assert lines[header].split()[:3] == ["id", "bracket", "action"]
    assert rows[0][:7] == ["-", "none", "compact", "pressure", "900", "700", "1"]
    assert rows[1][:7] == ["k1", "closed", "summarize", "pressure", "1,200", "400", "4"]
    assert rows[1][-2:] == ["9/10/11", "-"]  # seqs; no retention check recorded
    assert rows[2][:2] == ["k2", "UNCLOSED"]
    assert "`compact` is a fold: a boundary alone, no LLM call" in out
    assert "warning: bracket k2 is unclosed (without a summary); its span stays visible" in out


def test_inspect_limit_shows_the_last_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--limit N` shows only the newest N events and says so."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        for event in small_session():
            record.append(event)
    assert main(["inspect", str(path), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "(last 2 of 14 events)" in out
    assert "\n12   message" in out
    assert "\n11   " not in out


def test_inspect_reports_a_bad_record_as_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing or corrupt record prints a one-line error naming it and exits 1."""
    missing = tmp_path / "missing.jsonl"
    assert main(["inspect", str(missing)]) == 1
    assert f"error: {missing}: no such record" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nonsense\n")
    assert main(["inspect", str(bad)]) == 1
    assert f"{bad}:1: not valid JSON" in capsys.readouterr().err
    assert bad.read_text() == "nonsense\n"


def test_describe_message_mentions_calls_results_and_images() -> None:
    """The one-line description names tool calls, results, errors and image counts."""
    from steerable_compaction import ImagePart, ToolCall

    call = Message.assistant("go", [ToolCall(id="a", name="grep"), ToolCall(id="b", name="ls")])
    assert describe_message(call) == "assistant  calls grep, ls  2 chars  'go'"
    err = Message.tool("a", "boom", is_error=True)
    assert describe_message(err) == "tool  result a (error)  4 chars  'boom'"
    pic = Message.user([ImagePart(media_type="image/png", data=b"x"), ImagePart(url="https://e/x")])
    assert describe_message(pic) == "user  2 images  0 chars"
    long = Message.user("word " * 40)
    assert describe_message(long).endswith("…'")


def test_module_entry_point_runs_the_cli(tmp_path: Path) -> None:
    """`python -m steerable_compaction inspect` works as a subprocess."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(MessageAppended(message=Message.user("hi"), usage=Usage(prompt_tokens=3)))
    done = subprocess.run(
        [sys.executable, "-m", "steerable_compaction", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "1 events, 1 messages, 0 compactions" in done.stdout
    assert "(none)" in done.stdout


def test_running_the_package_as_a_module_calls_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m steerable_compaction` dispatches to `cli.main` and exits with its status."""
    import runpy

    monkeypatch.setattr(sys, "argv", ["steerable-compaction"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("steerable_compaction", run_name="__main__")
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().out


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`inspect`, `demo` and `serve` each add themselves to the subcommands."""
    from steerable_compaction.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"demo", "inspect", "serve"} <= set(sub.choices)  # `eval` joins with one call too
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "demo" in out and "serve" in out


def test_inspect_chart_draws_the_pressure_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`inspect --chart` keeps the table and writes the chart.

    The threshold line is drawn when the window (or model) is given.
    """
    record_path = tmp_path / "r.jsonl"
    with JsonlRecord(record_path) as record:
        for event in small_session():
            record.append(event)
    chart = tmp_path / "p.png"
    assert main(["inspect", str(record_path), "--chart", str(chart), "--window", "8192"]) == 0
    out = capsys.readouterr().out
    assert "compactions" in out and "warning: bracket k2 is unclosed" in out
    assert out.rstrip().endswith(f"chart: {chart} (1 rounds, 2 compactions)")
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert main(["inspect", str(record_path), "--chart", str(chart)]) == 0
    assert "pass --window or --model for the threshold" in capsys.readouterr().out
    assert main(["inspect", str(record_path), "--chart", str(chart), "--model", "gpt-4o"]) == 0


def test_inspect_chart_without_matplotlib_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the `plot` extra the command fails with the install command."""
    record_path = tmp_path / "r.jsonl"
    with JsonlRecord(record_path) as record:
        record.append_message(Message.user("hi"))
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    assert main(["inspect", str(record_path), "--chart", str(tmp_path / "p.png")]) == 1
    assert "pip install 'steerable-compaction[plot]'" in capsys.readouterr().err


def test_demo_command_runs_a_short_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`demo --turns 1 --reads 14` runs one turn through the loop and reports it."""
    command = ["demo", "--dir", str(tmp_path), "--turns", "1", "--reads", "14", "--window", "8192"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "read 14 files" in out and "compaction before round" in out
    assert "manual" not in out  # the manual compaction belongs to the fourth turn
    assert (tmp_path / "session-1.db").exists() and (tmp_path / "pressure-1.png").exists()
    assert main(["demo", "--dir", str(tmp_path), "--provider", "openai"]) == 1
    assert "a model name for --provider openai" in capsys.readouterr().err


def test_serve_command_answers_stdin_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve` reads JSON-RPC lines from stdin and writes only protocol lines to stdout."""
    import io
    import json

    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "agent.chat.send", "params": {"input": "hi"}},
        {"jsonrpc": "2.0", "id": 2, "method": "agent.chat.status"},
    ]
    data = "".join(json.dumps(r) + "\n" for r in requests).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    record = tmp_path / "s.db"
    before = sys.stdout
    assert main(["serve", "--record", str(record), "--system", "Be brief.", "--tools", "none"]) == 0
    assert sys.stdout is before  # the protocol redirect is undone
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert {line.get("id") for line in lines if "id" in line} == {1, 2}
    reply = next(line for line in lines if line.get("id") == 1)
    assert reply["result"]["reply"] == "I have no tools to read the repository with here."
    assert "provider caching, window 8,192" in captured.err
    with SqliteRecord(record, readonly=True) as again:
        assert again.messages()[0] == Message.system("Be brief.")


def test_an_interrupted_command_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C ends a command with the conventional status, without a traceback."""
    import steerable_compaction.demo

    async def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(steerable_compaction.demo, "run_demo", interrupted)
    assert main(["demo", "--no-chart"]) == 130


def test_inspect_shows_reminders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A reminder is listed with its reason and text."""
    path = tmp_path / "r.jsonl"
    with JsonlRecord(path) as record:
        record.append(Reminder(reason="compaction_thrashing", message=Message.user("slow down")))
    assert main(["inspect", str(path)]) == 0
    assert "reminder  compaction_thrashing: 'slow down'" in capsys.readouterr().out


# -- every failure: one line, a non-zero status, no traceback, nothing left behind ---------------

# Runs the CLI with some modules hidden, as if their extra were not installed.
WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from steerable_compaction.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def run_cli(
    cwd: Path, *args: str, hide: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess in `cwd` (stdin closed), with `hide` modules missing."""
    import os

    environ = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN"))}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, hide, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**environ, **(env or {})},
        check=False,
    )


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


FAILURES = [
    (("demo", "--provider", "local", "--no-chart"), "llama_cpp", "needs llama-cpp-python"),
    (("demo", "--window", "10", "--no-chart"), "", "max_context_tokens=10 is not allowed"),
    (
        ("demo", "--provider", "openai", "--model", "gpt-4o-mini"),
        "",
        "needs an API key: export OPENAI_API_KEY=...",
    ),
    (("inspect", "."), "", "is a directory, not a record file"),
    (("inspect", "missing.jsonl"), "", "missing.jsonl: no such record"),
    (("inspect", "random.db"), "", "random.db: neither an SQLite database nor a JSONL record"),
    (("inspect", "r.jsonl", "--chart", "no/such/x.png"), "", "no such directory 'no/such'"),
    (("inspect", "r.jsonl", "--chart", "."), "", "--chart .: is a directory, not a file"),
    (("serve", "--record", "no/such/x.jsonl"), "", "no such directory 'no/such'"),
    (("serve", "--record", "new.db", "--window", "10"), "", "max_context_tokens=10"),
    (("serve", "--record", "new.jsonl", "--provider", "local"), "llama_cpp", "llama-cpp-python"),
    (("eval", "--harness", "missing.yaml"), "", "--harness missing.yaml"),
    # Issue 26: every argument is checked before any work, and before any file is created.
    (("eval", "--harness", "binary.yaml"), "", "expected a UTF-8 text file (byte 0 is not UTF-8)"),
    (("eval", "--harness", "typo.yaml"), "", "threshold_ratoi"),
    (("eval", "--harness", "zero.yaml"), "", "loop.max_rounds_per_turn=0 is not allowed"),
    (("eval", "--out", "r.jsonl"), "", "--out r.jsonl: r.jsonl exists and is not a directory"),
    (("serve", "--record", "new.jsonl", "--harness", "binary.yaml"), "", "a UTF-8 text file"),
    (("serve", "--record", "new.jsonl", "--record-dir", "r.jsonl"), "", "is not a directory"),
    (("serve", "--record", "new.jsonl", "--max-sessions", "0"), "", "--max-sessions 0: must be"),
    (
        ("serve", "--record", "new.db", "--provider", "openai", "--model", "gpt-4o-mini"),
        "",
        "needs an API key: export OPENAI_API_KEY=...",
    ),
    (("demo", "--reads", "-1", "--no-chart"), "", "--reads -1: must be an integer >= 1"),
    (("inspect", "r.jsonl", "--limit", "-3"), "", "--limit -3: must be an integer >= 1"),
    (("inspect", "r.jsonl", "--window", "10"), "", "max_context_tokens=10 is not allowed"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "hide", "message"), FAILURES, ids=[" ".join(f[0]) for f in FAILURES]
)
def test_every_cli_failure_is_one_line_and_leaves_nothing_behind(
    tmp_path: Path, args: tuple[str, ...], hide: str, message: str
) -> None:
    """Exit status 1 or 2, one line on stderr naming the problem, no traceback, no new file."""
    (tmp_path / "random.db").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x01 binary")
    (tmp_path / "typo.yaml").write_text("compaction: {threshold_ratoi: 0.5}\n", encoding="utf-8")
    (tmp_path / "zero.yaml").write_text("loop: {max_rounds_per_turn: 0}\n", encoding="utf-8")
    with JsonlRecord(tmp_path / "r.jsonl") as record:
        record.append_message(Message.user("hi"))
    before = files_under(tmp_path)
    done = run_cli(tmp_path, *args, hide=hide)
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert lines[0].startswith("steerable-compaction")
    assert done.stdout == ""
    assert files_under(tmp_path) == before


@pytest.mark.slow
def test_a_second_writer_is_told_in_cli_terms_and_the_record_is_untouched(tmp_path: Path) -> None:
    """`serve` on a record another process writes says so in one line, without Python advice."""
    path = tmp_path / "held.jsonl"
    with JsonlRecord(path) as held:  # this process holds the writer lock
        held.append_message(Message.user("hi"))
        before = path.read_bytes()
        done = run_cli(tmp_path, "serve", "--record", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "another writer holds this record (one at a time): stop it first" in line
    assert "readonly=True" not in line
    assert path.read_bytes() == before
    assert files_under(tmp_path) == {"held.jsonl", "held.jsonl.mark"}  # the holder's mark


def test_serve_checks_its_arguments_before_it_opens_the_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: `--record-dir`, counts, the harness and the window, all before any file."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    harness = tmp_path / "binary.yaml"
    harness.write_bytes(b"\xff\xfe")
    record = str(tmp_path / "new.jsonl")
    for extra, message in (
        (["--record-dir", str(blocker / "sub")], f"{str(blocker)!r} is not a directory"),
        (["--max-line-bytes", "0"], "--max-line-bytes 0: must be an integer >= 1"),
        (["--harness", str(harness)], "a UTF-8 text file"),
        (["--window", "10"], "max_context_tokens=10 is not allowed"),
    ):
        assert main(["serve", "--record", record, *extra]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert message in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["binary.yaml", "file"]
    assert main(["serve", "--record", record, "--record-dir", str(tmp_path / "new" / "s")]) == 0
    assert (tmp_path / "new" / "s").is_dir()  # a directory to be is made


@pytest.mark.slow
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """Issue 26: `inspect ... | head -5` ends with status 0 and nothing on stderr."""
    with JsonlRecord(tmp_path / "r.jsonl") as record:
        for i in range(2000):
            record.append_message(Message.user(f"message {i}"))
    child = subprocess.Popen(
        [sys.executable, "-m", "steerable_compaction", "inspect", "r.jsonl"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.read(100)  # like `head`: read a little, then close the pipe
    child.stdout.close()
    status = child.wait()
    err = child.stderr.read().decode()
    child.stderr.close()
    assert status == 0 and err == ""


def test_os_errors_are_one_line_with_the_file_they_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operating-system failure (here `--dir` naming a file) is reported, not raised."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["demo", "--dir", str(blocker / "sub"), "--no-chart"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("steerable-compaction: error: ") and str(blocker) in line


@pytest.mark.slow
def test_only_eval_imports_the_simulator(tmp_path: Path) -> None:
    """`inspect`, `--help` and the other commands never load `steerable_compaction.sim`."""
    with JsonlRecord(tmp_path / "r.jsonl") as record:
        record.append_message(Message.user("hi"))
    probe = (
        "import sys, contextlib, io\n"
        "from steerable_compaction.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "main(['inspect', 'r.jsonl'])\n"
        "print('steerable_compaction.sim' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().endswith("False")


def test_eval_is_listed_with_the_same_help_without_the_simulator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The light parser lists `eval` as the full one does; `eval` itself gets its real flags."""
    from steerable_compaction.cli import build_parser

    def eval_help(parser: argparse.ArgumentParser) -> str | None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return next(c.help for c in sub._choices_actions if c.dest == "eval")

    assert eval_help(build_parser(full_eval=False)) == eval_help(build_parser())
    with pytest.raises(SystemExit) as info:
        main(["eval", "--help"])
    assert info.value.code == 0
    assert "--harness FILE" in capsys.readouterr().out


def test_inspect_shows_abandoned_brackets_and_retained_facts(tmp_path: Path) -> None:
    """An abandoned bracket is a row, not a crash; a summary shows kept/found retained facts."""
    import io

    from steerable_compaction import Message
    from steerable_compaction.cli import inspect_record
    from steerable_compaction.record import (
        CompactionAbandoned,
        CompactionBoundary,
        CompactionStart,
        MemoryRecord,
    )

    record = MemoryRecord()
    for i in range(4):
        record.append_message(Message.user(f"m{i}"))
    record.append(
        CompactionStart(compaction_id="k4", span=(0, 2), pre_tokens=90, action="summarize")
    )
    record.append(CompactionAbandoned(compaction_id="k4", reason="no summary was recorded"))
    record.append(
        CompactionStart(compaction_id="k6", span=(0, 2), pre_tokens=90, action="summarize")
    )
    record.append(
        CompactionBoundary(
            action="summarize",
            pre_tokens=90,
            post_tokens=40,
            replacement_count=2,
            compaction_id="k6",
            span=(0, 2),
            replacement=(Message.user("<compacted-summary>\ns\n</compacted-summary>"),),
            retained=(7, 2),
        )
    )
    out = io.StringIO()
    inspect_record(record, out)
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(("k4", "k6"))}
    assert "abandoned" in rows["k4"]
    assert rows["k6"].rstrip().endswith("2/7")
