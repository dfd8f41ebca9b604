from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from steerable_compaction import Message, __version__
from steerable_compaction.cli import describe_message, main
from steerable_compaction.record import JsonlRecord, MessageAppended, SqliteRecord, Usage

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
    assert rows[0][:7] == ["-", "fold", "compact", "pressure", "900", "700", "1"]
    assert rows[1][:7] == ["k1", "closed", "summarize", "pressure", "1,200", "400", "4"]
    assert rows[1][-1] == "9/10/11"
    assert rows[2][:2] == ["k2", "UNCLOSED"]
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
