"""Tests for `docs/settings_page.py`: the settings page comes from the policy and its meanings."""

from __future__ import annotations

import dataclasses
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


def entries(tmp_path: Path, page: ModuleType, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Point the page at a meanings file holding the real one plus `text`."""
    real = page.MEANINGS.read_text(encoding="utf-8")
    path = tmp_path / "settings.toml"
    path.write_text(real + text, encoding="utf-8")
    monkeypatch.setattr(page, "MEANINGS", path)


def test_a_meaning_without_its_knob_fails(
    page: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry for no knob fails naming it: the page cannot describe a knob that is gone."""
    entries(tmp_path, page, monkeypatch, '[keep_last_everything]\nmeaning = "x"\n')
    with pytest.raises(SystemExit, match=r"unknown \['keep_last_everything'\]"):
        page.render()


def test_a_knob_without_its_meaning_fails(
    page: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy field the meanings file lacks fails naming it."""
    real = page.MEANINGS.read_text(encoding="utf-8")
    start = real.index("[recall_result_tokens]")
    path = tmp_path / "settings.toml"
    path.write_text(real[:start], encoding="utf-8")
    monkeypatch.setattr(page, "MEANINGS", path)
    with pytest.raises(SystemExit, match=r"missing \['recall_result_tokens'\]"):
        page.render()


def test_an_unknown_requirement_or_field_fails(
    page: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requirement id the requirements page lacks, or a stray field, fails naming the knob."""
    real = page.MEANINGS.read_text(encoding="utf-8")
    path = tmp_path / "settings.toml"
    monkeypatch.setattr(page, "MEANINGS", path)
    path.write_text(real.replace('requirement = "R5"', 'requirement = "R99"'), encoding="utf-8")
    with pytest.raises(SystemExit, match="max_context_tokens: R99"):
        page.render()
    path.write_text(real.replace('requirement = "R5"', 'since = "0.1"'), encoding="utf-8")
    with pytest.raises(SystemExit, match="max_context_tokens: an entry"):
        page.render()


def test_a_default_that_depends_on_the_window_needs_its_rule(
    page: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A knob whose value differs within a tier, with no rule written, fails naming it."""
    monkeypatch.setitem(page.TIERS, "desktop", (32_768, 1_000_000))  # straddles the tiers
    with pytest.raises(SystemExit, match="keep_last_messages's desktop default depends"):
        page.render()
