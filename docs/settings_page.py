"""The body of docs/settings.md: every `CompactionPolicy` knob, from the policy itself.

Name, type, allowed values (the policy's own `ConfigError` wording) and the default in each
window tier come from the code; what a knob means and the requirement it serves come from
`docs/settings.toml`. `render()` fails, naming the knob, when the two disagree: a knob without
an entry, an entry without a knob, an unknown requirement id, or a default that depends on the
window but has no rule written for it. `docs/update_readme.py` calls it for the `settings` block.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from steerable_compaction import ConfigError, resolve_compaction_policy
from steerable_compaction.policy import CompactionPolicy

DOCS = Path(__file__).resolve().parent
MEANINGS = DOCS / "settings.toml"
REQUIREMENTS = DOCS / "requirements.md"
# Two windows per tier: a default that differs between them depends on the window.
TIERS = {"desktop": (32_768, 128_000), "large": (200_000, 1_000_000)}


class SettingsError(SystemExit):
    """`docs/settings.toml` and `CompactionPolicy` disagree."""


def _allowed(name: str) -> str:
    """What the policy accepts for `name`, in its own words (from the `ConfigError` it raises)."""
    policy = resolve_compaction_policy(None, 128_000)
    try:
        policy.replace(**{name: object()})
    except ConfigError as exc:
        return exc.allowed
    raise SettingsError(f"{name} accepts any value: the settings page cannot say what is allowed")


def _default(name: str, entry: dict[str, Any], tier: str) -> str:
    if "default" in entry:
        return "see below"
    values = {getattr(resolve_compaction_policy(None, w), name) for w in TIERS[tier]}
    if len(values) != 1:
        raise SettingsError(
            f"{name}'s {tier} default depends on the window ({sorted(map(repr, values))}): "
            f"write its rule as `default` in {MEANINGS.name}"
        )
    return f"`{values.pop()!r}`"


def _check(entries: dict[str, Any], names: list[str]) -> None:
    missing = [n for n in names if n not in entries]
    unknown = [n for n in entries if n not in names]
    if missing or unknown:
        raise SettingsError(
            f"{MEANINGS.name} must describe every CompactionPolicy knob and no other: "
            f"missing {missing}, unknown {unknown}"
        )
    defined = set(re.findall(r"^- \*\*(\S+?)\*\*", REQUIREMENTS.read_text("utf-8"), re.M))
    for name, entry in entries.items():
        if set(entry) - {"meaning", "requirement", "default"} or "meaning" not in entry:
            raise SettingsError(f"{name}: an entry has a meaning, and maybe requirement, default")
        if entry.get("requirement", "R1") not in defined:
            raise SettingsError(f"{name}: {entry['requirement']} is not in {REQUIREMENTS.name}")


def render() -> str:
    """The knobs table, then what each knob means, as Markdown."""
    entries: dict[str, Any] = tomllib.loads(MEANINGS.read_text(encoding="utf-8"))
    fields = dataclasses.fields(CompactionPolicy)
    _check(entries, [f.name for f in fields])
    rows = [
        "| knob | type | desktop (< 200,000) | large (>= 200,000) | allowed | requirement |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for field in fields:
        entry = entries[field.name]
        requirement = entry.get("requirement")
        cells = [
            f"`{field.name}`",
            f"`{field.type}`",
            _default(field.name, entry, "desktop"),
            _default(field.name, entry, "large"),
            _allowed(field.name),
            f"[{requirement}]({REQUIREMENTS.name})" if requirement else "-",
        ]
        # A `|` inside a table cell ends the cell, code span or not.
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        rule = f" Default: {entry['default']}." if "default" in entry else ""
        notes.append(f"- `{field.name}`: {entry['meaning']}{rule}")
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"
