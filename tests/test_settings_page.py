"""Tests for `docs/settings_page.py`: the settings page comes from the policy and its meanings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from steerable_compaction.policy import CompactionPolicy

from .test_readme import docs_script


@pytest.fixture
def page() -> ModuleType:
    return docs_script("settings_page")


def test_every_knob_is_on_the_page_with_its_default_in_each_tier(page: ModuleType) -> None:
    """One row per policy field: its type, its two tier defaults, what it allows, its meaning."""
    text = page.render()
    rows = {
        line.split(" | ")[0].strip("| `"): line for line in text.splitlines()[2:] if "|" in line
    }
    assert list(rows) == [f.name for f in dataclasses.fields(CompactionPolicy)]
    assert rows["keep_last_messages"].split(" | ")[1:5] == ["`int`", "`6`", "`16`", "an int >= 1"]
    assert "[R11](requirements.md)" in rows["threshold_ratio"]
    assert "`int \\| None`" in rows["headroom_tokens"]  # a bare `|` would split the cell
    assert "- `headroom_tokens`: " in text and "Default: min(window // 16" in text


def meanings(
    tmp_path: Path, page: ModuleType, monkeypatch: pytest.MonkeyPatch, edit: Callable[[str], str]
) -> None:
    """Point the page at a copy of the meanings file, changed by `edit`."""
    path = tmp_path / "settings.toml"
    path.write_text(edit(page.MEANINGS.read_text(encoding="utf-8")), encoding="utf-8")
    monkeypatch.setattr(page, "MEANINGS", path)


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda real: real + '[keep_last_everything]\nmeaning = "x"\n', "unknown .'keep_last_"),
        (lambda real: real[: real.index("[recall_result_tokens]")], "missing .'recall_result_"),
        (lambda real: real.replace('"R5"', '"X9"'), "max_context_tokens: X9 is not in"),
        (lambda real: real.replace('requirement = "R5"', "since = 1"), "max_context_tokens: an"),
    ],
    ids=["a meaning without its knob", "a knob without its meaning", "unknown id", "stray field"],
)
def test_meanings_that_disagree_with_the_policy_fail(
    edit: Callable[[str], str],
    error: str,
    page: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page fails naming the knob: every knob has one meaning, every id is a requirement."""
    meanings(tmp_path, page, monkeypatch, edit)
    with pytest.raises(SystemExit, match=error):
        page.render()


def test_a_default_that_depends_on_the_window_needs_its_rule(
    page: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A knob whose value differs within a tier, with no rule written, fails naming it."""
    monkeypatch.setitem(page.TIERS, "desktop", (32_768, 1_000_000))  # straddles the tiers
    with pytest.raises(SystemExit, match="keep_last_messages's desktop default depends"):
        page.render()
