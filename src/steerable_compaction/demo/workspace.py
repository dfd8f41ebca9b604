"""The demo's virtual repository: deterministic modules under `src/` and tests under `tests/`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ..loop import Tool

__all__ = ["Workspace"]

_PACKAGES = ("core", "api", "store", "jobs")
_NAMES = (
    "auth billing cache config events export feeds geo health images invoices jobs ledger "
    "mailer metrics notify orders payments quotas ratelimit reports search sessions storage "
    "tenants tokens uploads users webhooks workers"
).split()
_VERBS = "load save parse render check merge split build apply resolve fetch index".split()
_NOUNS = "record batch entry page token item event frame chunk key window plan".split()


class Workspace:
    """A deterministic in-memory repository: modules under `src/`, their tests under `tests/`."""

    def __init__(self, *, seed: int = 7) -> None:
        rng = random.Random(seed)
        files: dict[str, str] = {}
        for i, name in enumerate(_NAMES):
            package = _PACKAGES[i % len(_PACKAGES)]
            files[f"src/{package}/{name}.py"] = _module(rng, name)
        for name in _NAMES[::3]:
            files[f"tests/test_{name}.py"] = _test_module(rng, name)
        self.files = dict(sorted(files.items()))

    @property
    def paths(self) -> list[str]:
        """Every file path, sorted."""
        return list(self.files)

    def todos(self, path: str) -> list[str]:
        """The TODO lines of one file."""
        return [line.strip() for line in self.files[path].splitlines() if "TODO" in line]

    def tools(self) -> list[Tool]:
        """`list_files`, `read_file` and `grep` over this workspace."""
        return [
            Tool(
                name="list_files",
                fn=self._list_files,
                description="List every file in the repository.",
            ),
            Tool(
                name="read_file",
                fn=self._read_file,
                description="Read one file of the repository.",
                parameters={
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "the file path"}},
                    "required": ["path"],
                },
            ),
            Tool(
                name="grep",
                fn=self._grep,
                description="Find the lines containing a text, with file and line number.",
                parameters={
                    "type": "object",
                    "properties": {"pattern": {"type": "string", "description": "plain text"}},
                    "required": ["pattern"],
                },
            ),
        ]

    async def _list_files(self, arguments: Mapping[str, Any]) -> str:
        return "\n".join(self.paths)

    async def _read_file(self, arguments: Mapping[str, Any]) -> str:
        path = arguments.get("path")
        if not isinstance(path, str) or path not in self.files:
            raise FileNotFoundError(f"no such file: {path!r}")
        return self.files[path]

    async def _grep(self, arguments: Mapping[str, Any]) -> str:
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("pattern must be a non-empty string")
        hits = [
            f"{path}:{n}: {line.strip()}"
            for path, text in self.files.items()
            for n, line in enumerate(text.splitlines(), 1)
            if pattern in line
        ]
        more = f"\n… {len(hits) - 12} more" if len(hits) > 12 else ""
        return "\n".join(hits[:12]) + more if hits else "no matches"


def _module(rng: random.Random, name: str) -> str:
    lines = [f'"""The {name} service: storage, validation and the public API."""', ""]
    lines += ["from __future__ import annotations", "", "import json", "import logging", ""]
    lines += [f'logger = logging.getLogger("app.{name}")', ""]
    pairs = rng.sample([(v, n) for v in _VERBS for n in _NOUNS], rng.randint(3, 5))
    for verb, noun in pairs:
        lines += [
            "",
            f"def {verb}_{noun}(data: dict, *, strict: bool = False) -> dict:",
            f'    """{verb.capitalize()} one {noun} of {name}; raise ValueError when strict."""',
            f'    if strict and "{noun}_id" not in data:',
            f'        raise ValueError("missing {noun}_id")',
            f'    logger.debug("{verb} %s", data.get("{noun}_id"))',
            f'    return {{**data, "{noun}": json.dumps(data, sort_keys=True)}}',
        ]
        if rng.random() < 0.25:
            lines.insert(-1, f"    # TODO: {verb} every {noun} in one batch, not one at a time")
    return "\n".join(lines) + "\n"


def _test_module(rng: random.Random, name: str) -> str:
    lines = [f'"""Tests for the {name} service."""', ""]
    for k in range(rng.randint(2, 4)):
        lines += ["", f"def test_{name}_{k}() -> None:", f"    assert {name!r}.isidentifier()"]
    return "\n".join(lines) + "\n"
