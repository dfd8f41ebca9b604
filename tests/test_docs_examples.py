"""Every Python block in README.md and docs/*.md runs as written, alone, in an empty directory.

Each block gets a namespace of its own whose `__name__` is not `"__main__"`, so a call a block
guards with `if __name__ == "__main__":` (a paid model's turn) is left out, and the network is
off: an example that connects anywhere fails. A block that needs more than that says so in an
HTML comment on the line before its fence:

- `<!-- example: needs OPENAI_API_KEY -->` (any environment variables): each is set to a
  placeholder when unset, and the block must still import and construct everything;
- `<!-- example: runs in tests/test_record_postgres.py -->`: that module runs it against a real
  server, and names the page it takes it from.

The checks after a run pin what an example says it does.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import Compactor, Harness
from steerable_compaction.record import Record

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_MARKER = re.compile(r"<!-- example: (?:needs (?P<needs>[A-Z0-9_ ]+)|runs in (?P<runs_in>\S+)) -->")


@dataclass(frozen=True)
class Example:
    """One fenced Python block: where it is, its code, and what its marker asks."""

    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    needs: tuple[str, ...] = ()
    runs_in: str | None = None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def examples(path: Path) -> list[Example]:
    """The Python blocks of `path`, with the marker on the line before each fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        end = lines.index("```", i + 1)
        marker = _MARKER.fullmatch(lines[i - 1].strip()) if i else None
        needs = tuple((marker["needs"] or "").split()) if marker else ()
        runs_in = marker["runs_in"] if marker else None
        code = "\n".join(lines[i + 1 : end]) + "\n"
        out.append(Example(path, i + 1, code, needs=needs, runs_in=runs_in))
        i = end + 1
    return out


EXAMPLES = [example for page in PAGES for example in examples(page)]
HERE = [e for e in EXAMPLES if e.runs_in is None]


def _no_network(*args: object, **kwargs: object) -> None:
    raise OSError("the docs examples run offline: this one tried to connect")


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, and no network."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", _no_network)
    return tmp_path


def run(example: Example, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run `example` in a fresh namespace; close what it left open (records, harnesses)."""
    for name in example.needs:
        if name not in os.environ:
            monkeypatch.setenv(name, "placeholder-for-the-docs-test")
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    try:
        exec(compile(example.code, example.name, "exec"), namespace)  # the docs are ours to run
    finally:
        for value in list(namespace.values()):
            if isinstance(value, Harness | Record | Compactor):
                value.close()
    return namespace


def example_with(text: str, page: str = "README.md") -> Example:
    """The one example of `page` whose code contains `text`."""
    (found,) = [e for e in EXAMPLES if e.path.name == page and text in e.code]
    return found


@pytest.mark.parametrize("example", HERE, ids=[e.name for e in HERE])
def test_every_example_runs_alone_as_written(
    example: Example, sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block runs unchanged in an empty directory, offline, with nothing defined before it."""
    run(example, monkeypatch)


def test_the_examples_are_found_on_every_page_that_has_them() -> None:
    """The extraction sees the README's examples and those of the docs pages."""
    pages = {e.path.name for e in EXAMPLES}
    assert {"README.md", "concepts.md", "recall.md", "postgres.md"} <= pages
    assert len([e for e in EXAMPLES if e.path.name == "README.md"]) >= 6


def test_an_example_run_elsewhere_is_run_there() -> None:
    """A block marked `runs in FILE` is taken from its page by that test module."""
    elsewhere = [e for e in EXAMPLES if e.runs_in is not None]
    assert elsewhere, "docs/postgres.md's example is marked to run in its store's tests"
    for example in elsewhere:
        assert example.runs_in is not None
        module = (ROOT / example.runs_in).read_text(encoding="utf-8")
        assert example.path.name in module, f"{example.runs_in} does not run {example.name}"


def test_a_marker_is_read_and_a_block_without_one_needs_nothing(tmp_path: Path) -> None:
    """`needs` names environment variables, `runs in` a test module; no marker, neither."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n"
        "<!-- example: needs OPENAI_API_KEY ANTHROPIC_API_KEY -->\n```python\ny = 2\n```\n"
        "<!-- example: runs in tests/test_x.py -->\n```python\nz = 3\n```\n",
        encoding="utf-8",
    )
    plain, keyed, elsewhere = examples(page)
    assert (plain.code, plain.needs, plain.runs_in) == ("x = 1\n", (), None)
    assert keyed.needs == ("OPENAI_API_KEY", "ANTHROPIC_API_KEY") and keyed.line == 5
    assert elsewhere.runs_in == "tests/test_x.py"


# -- what the examples say they do -------------------------------------------------------------


def test_the_harness_example_builds_the_loop_and_releases_the_record(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key-needing `load_harness` block constructs everything, offline; its record closes."""
    example = example_with("load_harness(")
    assert example.needs == ("OPENAI_API_KEY",)
    harness = run(example, monkeypatch)["harness"]
    assert isinstance(harness, Harness) and harness.compaction is not None
    assert harness.policy.max_context_tokens == 128_000  # gpt-4o-mini, from the catalogue
    assert not list(sandbox.glob("*.writer-lock"))


def test_the_compactor_example_summarizes_and_keeps_every_message(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The own-loop example compacts with the model's summaries and prints each compaction."""
    compactor = run(example_with("Compactor("), monkeypatch)["compactor"]
    assert isinstance(compactor, Compactor)
    infos = compactor.record.compactions()
    assert infos and {(c.action, c.status) for c in infos} == {("summarize", "closed")}
    assert compactor.record.message_count == 2 + 2 * 119  # the last round is not prepared yet
    assert capsys.readouterr().out.splitlines() == [str(c) for c in infos]


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ('iter(["Done."])', "Done. 2"),  # LangChain: the question and the final answer
        ("CompactionSession(", "Done. 2"),
        ("CompactionHistory(", "Done. 2"),
    ],
)
def test_each_adapter_example_records_the_final_reply(
    text: str,
    printed: str,
    sandbox: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each framework example's record holds the question and the reply, as its comment says."""
    example = example_with(text)
    run(example, monkeypatch)
    assert capsys.readouterr().out.strip() == printed
    assert f"# {printed}" in example.code


def test_the_testing_example_compacts_with_the_fakes_summaries(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "Testing your agent" example compacts with the fake's summaries, its script intact."""
    namespace = run(example_with("FakeSummaries("), monkeypatch)
    model, middleware = namespace["model"], namespace["middleware"]
    infos = middleware.record.compactions()
    assert {(c.action, c.status) for c in infos} == {("summarize", "closed")}
    assert len(model.summary_requests) == len(infos)
    assert capsys.readouterr().out.strip() == f"All read. {len(infos)}"
    assert f"# All read. {len(infos)}" in example_with("FakeSummaries(").code  # as it says


def test_the_concepts_and_recall_examples_do_what_they_say(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record example's two views, and a search that finds the hidden log line."""
    concepts = run(example_with("JsonlRecord(", "concepts.md"), monkeypatch)
    assert len(concepts["request"]) == 2 and len(concepts["raw"]) == 2
    hits = run(example_with("search_history(", "recall.md"), monkeypatch)["hits"]
    assert hits and "ConnectionRefusedError" in hits[0].snippet


def test_the_network_is_off_in_the_examples(sandbox: Path) -> None:
    """The sandbox refuses connections, so an example that calls out fails."""
    with pytest.raises(OSError, match="offline"):
        socket.create_connection(("127.0.0.1", 9))
