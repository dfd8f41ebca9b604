from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from steerable_compaction import resolve_compaction_policy
from steerable_compaction.demo import DEMO_WINDOW

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def docs_script(name: str) -> ModuleType:
    """`docs/NAME.py`, imported as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def update_readme() -> ModuleType:
    return docs_script("update_readme")


def test_the_first_command_runs_the_demo_and_the_test_command_is_cis() -> None:
    """The first block installs and runs `demo`; the test block's command is a line of `.ci/run`."""
    text = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    first = re.search(r"## Try it\n.*?```bash\n(.+?)\n```", text, flags=re.S)
    tests = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", text, flags=re.S)
    assert first is not None and tests is not None
    assert first.group(1).splitlines()[-1] == "pip install -e . && steerable-compaction demo"
    install, command = tests.group(1).splitlines()
    assert install == "pip install -e '.[dev]'"
    assert command == docs_script("measure").TEST_COMMAND
    assert command in ci.splitlines()
    assert "EXTRAS=(dev local)" in ci and "python docs/update_readme.py --check" in ci


def test_the_readmes_stated_defaults_are_the_codes() -> None:
    """The prose's few constants (threshold share, demo window) are the code's."""
    text = README.read_text(encoding="utf-8")
    policy = resolve_compaction_policy(None, 100_000, reserved_output_tokens=0, headroom_tokens=0)
    assert f"{policy.threshold_tokens / 1000:.0f} %" in text  # 80 % of a 100k window
    assert f"{DEMO_WINDOW // 1024}k-token window" in text


def test_every_local_link_in_the_docs_resolves() -> None:
    """Links between README, docs and files of the repository point at something."""
    for path in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{path.name}: {target}"


def test_the_docs_need_nothing_outside_the_repository_to_be_read() -> None:
    """No requirement ids, spec layers or a "spec" a reader cannot find here.

    `docs/requirements.md` is where the ids the code and tests cite are defined, so it names
    them; every other page names one only as a link to it (the settings page does).
    """
    for path in [README, *DOCS]:
        if path.name == "requirements.md":
            continue
        text = re.sub(r"\[R\d{1,2}b?\]\(requirements\.md\)", "", path.read_text(encoding="utf-8"))
        assert not re.search(r"\bR\d{1,2}b?\b|\bL1\.5\b|\bL[23]\b|the spec\b", text), path.name


def test_the_docs_index_lists_every_page() -> None:
    """docs/README.md links each page of docs/ (and no page links there that is not one)."""
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    assert linked == {p.name for p in DOCS if p.name != "README.md"}


@pytest.mark.slow
def test_the_cheap_generated_blocks_are_current() -> None:
    """Demo, inspect, CLI synopsis, sidecar and durations match a fresh run of their commands.

    (CI checks the `eval` blocks too: `python docs/update_readme.py --check`.)
    """
    module = update_readme()
    fresh = module.generate(module.CHEAP)
    for path in [README, *DOCS]:
        text = path.read_text(encoding="utf-8")
        assert module.render(text, fresh) == text, (
            f"{path.name} is stale: run `python docs/update_readme.py`"
        )
    names = {n for p in [README, *DOCS] for n in module.blocks_in(p.read_text(encoding="utf-8"))}
    assert names == set(module.BLOCKS)  # every block is used, none is unknown


def test_render_replaces_only_the_named_blocks() -> None:
    """A block's body is swapped between its markers; prose and other blocks are untouched."""
    module = update_readme()
    text = (
        "a\n<!-- generated: x -->\nold\n<!-- end: x -->\n"
        "b\n<!-- generated: y -->\nkeep\n<!-- end: y -->\n"
    )
    assert module.render(text, {"x": "new\n"}) == text.replace("old", "new")
    assert module.blocks_in(text) == ["x", "y"]


def test_skipped_tests_are_counted_by_what_they_lacked() -> None:
    """`measure.skip_reasons` groups pytest's `-ra` summary by the tests' own skip messages."""
    output = (
        "SKIPPED [3] tests/test_a.py:12: STEERABLE_TEST_POSTGRES is unset: set it to a URL\n"
        "SKIPPED [1] tests/test_b.py:40: STEERABLE_TEST_POSTGRES is unset: set it to a URL\n"
        "SKIPPED [2] tests/test_c.py:7: needs the local extra (pip install -e '.[local]')\n"
        "SKIPPED [1] tests/test_d.py:9: flaky on this kernel\n"
        "3 passed, 7 skipped in 1.00s\n"
    )
    assert docs_script("measure").skip_reasons(output) == {
        "a PostgreSQL server": 4,
        "the `local` extra": 2,
        "flaky on this kernel": 1,
    }


def test_the_durations_say_what_the_skipped_tests_lacked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered test counts explain every skip (a measurement from before says less)."""
    module = update_readme()
    tests = {"passed": 1963, "skipped": 70, "seconds": 420, "measured": "d", "machine": "m"}
    causes = {"a PostgreSQL server": 62, "the `local` extra": 8}
    monkeypatch.setattr(module, "_load_measurements", lambda: {"tests": tests})
    assert "(1,963 passed, 70 skipped) took 7 min." in module.block_durations(None)
    tests["skipped_for"] = causes
    assert (
        "(1,963 passed, 70 skipped: 62 without a PostgreSQL server, 8 without the `local` "
        "extra) took 7 min." in module.block_durations(None)
    )


def test_measured_test_counts_must_be_the_suites(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--check` fails when the measured run counted another number of tests than the suite."""
    module = update_readme()
    tests = {"passed": 1963, "skipped": 70, "measured": "2026-12-01"}
    monkeypatch.setattr(module, "_load_measurements", lambda: {"tests": tests})
    assert module.stale_test_counts(2033) is None
    assert module.stale_test_counts(2040) == (
        "docs/measurements.json counts 2,033 tests (2026-12-01), the suite holds 2,040: "
        "run `python docs/measure.py tests`"
    )
    monkeypatch.setattr(module, "_load_measurements", dict)
    assert module.stale_test_counts(2040) is None  # nothing measured, nothing quoted


def test_the_suites_size_is_counted_by_collecting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`collected_tests` asks pytest how many tests the project holds (parametrized ones too)."""
    module = update_readme()
    (tmp_path / "test_few.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_b(n):\n    pass\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.collected_tests() == 3


def test_the_task_list_names_every_task_eval_plays() -> None:
    """docs/eval.md's task table has one row per task, in the simulator's order."""
    from steerable_compaction.sim.tasks import TASK_NAMES

    rows = update_readme().block_eval_task_list(None).splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(TASK_NAMES)
