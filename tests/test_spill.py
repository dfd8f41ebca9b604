from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import ConfigError, ImagePart, Message, TextPart, ToolResult
from steerable_compaction.compaction.atoms import SALIENT_SCAN_CHARS, salient_lines
from steerable_compaction.hooks import RequestErrorContext, StepContext, ToolResultContext
from steerable_compaction.record import MemoryRecord, MessageAppended
from steerable_compaction.spill import SPILL_PREFIX, UNSPILLED_PREFIX, SpillHooks, excerpt


def ctx(result: ToolResult, record: MemoryRecord | None = None) -> ToolResultContext:
    return ToolResultContext(record=record or MemoryRecord(), tool_name="cat", result=result)


async def test_r2_small_results_pass_untouched(tmp_path: Path) -> None:
    """R2: a result within the limit is returned as the same object; nothing is written."""
    hooks = SpillHooks(tmp_path / "spill", max_chars=100, excerpt_chars=10)
    result = ToolResult(call_id="c", content=(TextPart(text="x" * 100),))
    assert await hooks.post_tool_result(ctx(result)) is result
    assert not (tmp_path / "spill").exists()


async def test_r2_oversized_result_is_spilled_with_a_pointer_and_excerpts(tmp_path: Path) -> None:
    """R2: the full text goes to a 0600 file named by seq + hash; the pointer keeps head/tail."""
    record = MemoryRecord([])
    for _ in range(7):
        record.append_message(Message.user("u"))
    text = "HEAD" + "m" * 500 + "TAIL"
    shot = ImagePart(media_type="image/png", data=b"png")
    result = ToolResult(call_id="c", content=(TextPart(text=text), shot), is_error=True)
    hooks = SpillHooks(tmp_path / "spill", max_chars=100, excerpt_chars=8)
    spilled = await hooks.post_tool_result(ctx(result, record))
    (path,) = (tmp_path / "spill").iterdir()
    assert path.name.startswith("0000000007-") and path.suffix == ".txt"
    assert path.read_text(encoding="utf-8") == text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert spilled.call_id == "c" and spilled.is_error
    assert spilled.content[1] is shot
    assert spilled.text == (
        f"{SPILL_PREFIX}508 chars from cat saved to {path}; read that file for the rest]\n"
        "HEAD\n…\nTAIL"
    )


def _log(lines: int, at: int, said: str) -> str:
    """A templated log of `lines` lines, `said` as line `at` (from 1)."""
    rows = [
        f"2025-03-03T10:{i % 60:02d}:07Z INFO  web-3 reads node {i} in 12ms" for i in range(lines)
    ]
    rows[at - 1] = said
    return "\n".join(rows)


def test_the_excerpt_shows_a_statement_from_the_middle_by_its_line_number() -> None:
    """A value stated once deep in a templated log shows between the head and the tail."""
    text = _log(2000, 1234, "2025-03-03T10:00:07Z WARN  ops-2 the staging database port is 27998")
    shown = excerpt(text, 400)
    assert shown.startswith(text[:200]) and shown.endswith(text[-200:])
    assert "\n1234: WARN  ops-2 the staging database port is 27998\n" in shown
    assert "reads node 1000 " not in shown  # the template's rows stay in the file
    assert len(shown) < 400 + 400 + 100


def test_an_excerpt_with_nothing_of_note_is_head_and_tail() -> None:
    """Templated rows, bare numbers and code: no lines of note, the plain excerpt."""
    text = _log(300, 150, "2025-03-03T10:00:07Z INFO  total 48213 in 9ms") + "\n    return x;"
    assert excerpt(text, 40) == f"{text[:20]}\n…\n{text[-20:]}"


def test_the_excerpt_never_shows_a_line_the_head_or_tail_cuts() -> None:
    """The lines of note come from lines wholly between the head and the tail."""
    said = "note: the rollback ticket is RBK-7373"
    text = "\n".join(["x" * 90, said + " and more", "y" * 10, said + " too", "z" * 90])
    # The head ends inside line 2, the tail starts inside line 4: neither is a line of note,
    # though each would fit the budget whole.
    shown = excerpt(text, 200)
    assert "lines of note" not in shown
    lines = "\n".join([*(f"row {i} of the dump" for i in range(40)), said, "tail " * 20])
    assert f"\n41: {said}\n" in excerpt(lines, 200)


async def test_r2_file_names_never_come_from_tool_output(tmp_path: Path) -> None:
    """A tool output that looks like a path cannot steer where the file goes."""
    hooks = SpillHooks(tmp_path / "spill", max_chars=10, excerpt_chars=2)
    evil = ToolResult(call_id="../../etc/passwd", content=(TextPart(text="../../x" * 20),))
    await hooks.post_tool_result(
        ToolResultContext(record=MemoryRecord(), tool_name="../../../tmp/evil", result=evil)
    )
    (path,) = (tmp_path / "spill").iterdir()
    assert path.parent == tmp_path / "spill"
    assert path.name[:10].isdigit()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_chars": 0}, "spill.max_chars"),
        ({"excerpt_chars": -1}, "spill.excerpt_chars"),
        ({"max_chars": 10, "excerpt_chars": 10}, "spill.excerpt_chars"),
    ],
)
def test_bad_settings_raise_config_error(tmp_path: Path, kwargs: dict[str, Any], key: str) -> None:
    """Bad spill settings name the knob."""
    with pytest.raises(ConfigError) as info:
        SpillHooks(tmp_path, **kwargs)
    assert info.value.key == key


async def test_spill_does_nothing_before_requests_or_on_errors(tmp_path: Path) -> None:
    """Spill only acts on tool results."""
    hooks = SpillHooks(tmp_path)
    record = MemoryRecord()
    assert (await hooks.pre_step(StepContext(record=record, round=1, turn=1))).compactions == ()
    err = RequestErrorContext(record=record, round=1, turn=1, error=ValueError(), attempt=1)
    assert await hooks.on_request_error(err) is None


async def test_spill_file_names_are_not_predictable(tmp_path: Path) -> None:
    """The same output spilled twice at the same seq gets two different names."""
    hooks = SpillHooks(tmp_path / "spill", max_chars=10, excerpt_chars=2)
    result = ToolResult(call_id="c", content=(TextPart(text="y" * 50),))
    await hooks.post_tool_result(ctx(result))
    await hooks.post_tool_result(ctx(result))
    names = sorted(p.name for p in (tmp_path / "spill").iterdir())
    assert len(names) == 2 and names[0] != names[1]


@pytest.mark.parametrize("planted", ["hardlink", "symlink", "fifo", "directory"])
async def test_a_planted_file_at_the_chosen_name_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """Whatever sits at a name (a link to a victim, a FIFO, a directory) is left alone.

    The spill takes another name: the victim keeps its bytes and nothing blocks.
    """
    import os
    import secrets

    directory = tmp_path / "spill"
    directory.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    tokens = iter(["aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(tokens))
    hooks = SpillHooks(directory, max_chars=10, excerpt_chars=2)
    text = "z" * 50
    import hashlib

    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    trap = directory / f"0000000000-{digest}-aaaaaaaa.txt"
    if planted == "hardlink":
        os.link(victim, trap)
    elif planted == "symlink":
        trap.symlink_to(victim)
    elif planted == "fifo":
        os.mkfifo(trap)
    else:
        trap.mkdir()
    result = await hooks.post_tool_result(
        ctx(ToolResult(call_id="c", content=(TextPart(text=text),)))
    )
    assert result.text.startswith(SPILL_PREFIX)
    name = result.text.split(" saved to ")[1].split(";")[0]
    assert name.endswith("-bbbbbbbb.txt")
    assert (directory / Path(name).name).read_bytes() == text.encode()
    assert victim.read_bytes() == b"precious"


@pytest.mark.parametrize("unsafe", ["symlink", "world_writable", "file"])
def test_an_unsafe_spill_directory_is_refused(tmp_path: Path, unsafe: str) -> None:
    """A symlinked, other-writable or non-directory spill path is a `ConfigError` naming it."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    path = tmp_path / "spill"
    if unsafe == "symlink":
        path.symlink_to(real)
    elif unsafe == "world_writable":
        path.mkdir()
        path.chmod(0o777)
    else:
        path.write_text("not a directory", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"spill\.directory"):
        SpillHooks(path, max_chars=10, excerpt_chars=2)


async def test_a_result_that_cannot_be_spilled_still_answers_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk, or a directory made unsafe after start: the call gets head and tail."""
    hooks = SpillHooks(tmp_path / "spill", max_chars=10, excerpt_chars=4)
    (tmp_path / "spill").mkdir(mode=0o700)
    (tmp_path / "spill").chmod(0o777)  # changed under the running session
    text = "HEAD" + "m" * 100 + "TAIL"
    result = await hooks.post_tool_result(
        ctx(ToolResult(call_id="c", content=(TextPart(text=text),)))
    )
    assert result.call_id == "c"
    assert result.text.startswith("[tool output too large to keep whole: 108 chars from cat")
    assert result.text.endswith("HE\n…\nIL")
    (tmp_path / "spill").chmod(0o700)

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("steerable_compaction.spill.os.open", full)
    result = await hooks.post_tool_result(
        ctx(ToolResult(call_id="d", content=(TextPart(text=text),)))
    )
    assert "No space left on device" in result.text and result.call_id == "d"


async def test_the_name_token_source_can_be_given_and_a_bad_token_still_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`name_token` names the files (the simulator counts up).

    A token that is not 8 lowercase hex digits is refused, and the call still gets its head and
    tail.
    """
    tokens = iter(["0000002a", "../../x"])
    hooks = SpillHooks(
        tmp_path / "spill", max_chars=10, excerpt_chars=2, name_token=lambda: next(tokens)
    )
    big = ToolResult(call_id="c", content=(TextPart(text="y" * 50),))
    first = await hooks.post_tool_result(ctx(big))
    assert first.text.startswith(SPILL_PREFIX) and "-0000002a.txt; " in first.text
    second = await hooks.post_tool_result(ctx(big))
    assert second.text.startswith(UNSPILLED_PREFIX)
    assert "spill.name_token" in caplog.text and "8 lowercase hex digits" in caplog.text
    assert [p.name.endswith("-0000002a.txt") for p in (tmp_path / "spill").iterdir()] == [True]


def test_a_directory_under_a_symlinked_parent_is_refused(tmp_path: Path) -> None:
    """Issue 26: a path that resolves elsewhere is refused, existing or not: nothing is written."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    (tmp_path / "via" / "spill").mkdir(mode=0o700)  # one that exists, reached through the link
    for directory in (tmp_path / "via" / "spill", tmp_path / "via" / "new" / "spill"):
        with pytest.raises(ConfigError, match="leads through a symlink to"):
            SpillHooks(directory, max_chars=10, excerpt_chars=2)
    assert [p.name for p in real.iterdir()] == ["spill"]  # nothing new was made


async def test_a_parent_symlinked_later_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    """Issue 26: checked at each spill too, before `mkdir` could create through the link."""
    hooks = SpillHooks(tmp_path / "parent" / "spill", max_chars=10, excerpt_chars=2)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "parent").symlink_to(real)
    result = await hooks.post_tool_result(
        ctx(ToolResult(call_id="c", content=(TextPart(text="z" * 50),)))
    )
    assert result.text.startswith(UNSPILLED_PREFIX) and "leads through a symlink" in result.text
    assert list(real.iterdir()) == []


async def test_the_first_spill_sets_the_records_spill_directory(tmp_path: Path) -> None:
    """Recall reads spill files from `record.spill_directory`; a stage writing elsewhere is refused.

    A second stage with another directory would leave pointers recall never reads: its results
    keep head and tail instead.
    """
    record = MemoryRecord([MessageAppended(message=Message.user("go"))])
    big = ToolResult(call_id="c", content=(TextPart(text="w" * 50),))
    first = SpillHooks(tmp_path / "a", max_chars=10, excerpt_chars=2)
    assert (await first.post_tool_result(ctx(big, record))).text.startswith(SPILL_PREFIX)
    assert record.spill_directory == tmp_path / "a"
    other = SpillHooks(tmp_path / "b", max_chars=10, excerpt_chars=2)
    refused = await other.post_tool_result(ctx(big, record))
    assert refused.text.startswith(UNSPILLED_PREFIX) and "the record's own spill" in refused.text
    assert not (tmp_path / "b").exists()
    same = SpillHooks(tmp_path / "x" / ".." / "a", max_chars=10, excerpt_chars=2)
    assert (await same.post_tool_result(ctx(big, record))).text.startswith(SPILL_PREFIX)


def test_a_directory_path_holding_a_nul_character_is_refused() -> None:
    """A path no system call takes is a `ConfigError`, not a `ValueError` from deep inside."""
    with pytest.raises(ConfigError, match="a directory path"):
        SpillHooks("spill\x00dir", max_chars=10, excerpt_chars=2)


def test_the_lines_of_note_of_a_huge_text_come_from_its_ends_only() -> None:
    """Past `SALIENT_SCAN_CHARS` only the lines wholly in its first and last halves are read.

    A line that crosses into the last half is not read (it may be most of the text).
    """
    half = SALIENT_SCAN_CHARS // 2
    said = "note: the staging database port is 27998"
    text = "\n".join(["a row"] * 10 + ["x" * (2 * half) + said] + ["a row"] * 10)
    assert salient_lines(text, 1_000) == []
    lines = ["a row"] * 10 + [said] + ["x" * (2 * half)] + ["a row"] * 10
    assert salient_lines("\n".join(lines), 1_000) == [(11, said)]


async def test_a_spill_pointer_stays_within_half_the_token_bound(tmp_path: Path) -> None:
    """Head, tail and lines of note together keep to `max_tokens // 2` characters."""
    rows = [f"row {i} of the dump" for i in range(400)]
    rows[150] = "note: the staging database port is 27998"
    rows[250] = "The nightly job stopped with a TimeoutError in the export step."
    text = "\n".join(rows)
    result = ToolResult(call_id="c", content=(TextPart(text=text),))
    wide = SpillHooks(tmp_path / "wide", max_chars=1_000, excerpt_chars=200, max_tokens=1_000)
    spilled = await wide.post_tool_result(ctx(result))  # 200 of head and tail, 300 of note
    assert "\n151: note: the staging database port is 27998\n" in spilled.text
    narrow = SpillHooks(tmp_path / "narrow", max_chars=1_000, excerpt_chars=200, max_tokens=400)
    shown = (await narrow.post_tool_result(ctx(result))).text.split("]\n", 1)[1]
    assert len(shown) <= 200 + len("\n…\n")  # head and tail fill the bound: no lines of note


def test_indented_code_is_no_line_of_note() -> None:
    """Code is told apart as the retention check tells it: on the line as written."""
    source = "\n".join(
        [
            "def check(port):",
            "    if port < 0:",
            '        raise ValueError("the port value must not be negative here")',
            "    return port",
        ]
    )
    assert salient_lines(source, 1_000) == []


def test_a_long_line_of_note_is_cut_around_its_value_not_its_subject() -> None:
    """Of two paths the later is the value ("moved from A ... to B"): the cut keeps it."""
    filler = " ".join(["while the old service kept answering on its usual route"] * 5)
    line = (
        "note: the config moved from src/legacy/settings.yaml "
        f"{filler} and now lives in deploy/prod/settings.yaml"
    )
    text = "\n".join(["a row"] * 5 + [line] + ["b row"] * 5)
    ((n, kept),) = salient_lines(text, 1_000)
    assert n == 6 and kept.endswith("now lives in deploy/prod/settings.yaml")


def test_a_measurement_named_only_by_an_identifier_is_still_a_data_row() -> None:
    """Numbers with no path, quote or stated value beside them are rows, whatever their order."""
    rows = ["worker_3 processed 14500 rows", "14500 rows processed by worker_3"]
    for row in rows:
        assert salient_lines("\n".join(["x y"] * 3 + [row]), 1_000) == []
