from __future__ import annotations

import re
from pathlib import Path

import pytest

from steerable_compaction import Compactor

README = Path(__file__).parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_quickstart_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in the README runs unchanged and the quickstart's claims hold."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    assert blocks, "the README has no Python example"
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # the README is ours to run
    compactor = namespace["compactor"]
    assert isinstance(compactor, Compactor)
    infos = compactor.record.compactions()
    assert infos and all(c.post_tokens is not None and c.post_tokens < c.pre_tokens for c in infos)
    assert compactor.record.message_count == 2 + 2 * 119  # the last round is not prepared yet
    request, raw = namespace["request"], namespace["raw"]
    assert isinstance(request, list) and len(request) == 2
    assert isinstance(raw, list) and len(raw) == 2


def test_readme_names_the_two_commands_that_ci_runs() -> None:
    """The README's install and test commands are the ones `.ci/run` uses."""
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", text)
    install = re.search(r"## Install and run\n\n```bash\n(.+?)\n```", text)
    assert test_command is not None and install is not None
    assert test_command.group(1) in ci.splitlines()
    assert "pip install -e '.[dev]'" in install.group(1)
    assert "pip install --quiet -e '.[dev]'" in ci
