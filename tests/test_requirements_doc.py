"""`docs/requirements.md` defines every requirement id that the code and the tests cite."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "requirements.md"
# Requirement ids (R1-R40, R22b) and verification layers (L1, L1.5, L2, L3), as cited in prose,
# and in test names (`test_r22b_...`, `test_l2_...`).
ID = re.compile(r"\b(?:R\d+[a-z]?|L\d(?:\.\d)?)(?!\w)(?!\.\d)")
TEST_NAME_ID = re.compile(r"\btest_([rl]\d+[a-z]?)_")
DEFINITION = re.compile(r"^- \*\*(?P<id>[^*]+)\*\* \S", re.MULTILINE)
TEXT_SUFFIXES = frozenset({".py", ".md", ".yaml", ".yml", ".toml", ".txt"})


def ids_in(line: str) -> list[str]:
    """The ids `line` cites, in prose or in a test name."""
    named = [m[0].upper() + m[1:] for m in TEST_NAME_ID.findall(line)]
    return [*ID.findall(line), *named]


def cited(paths: Iterable[Path], root: Path = ROOT) -> dict[str, list[str]]:
    """Each id cited in `paths`, with every place (`path:line`, relative to `root`) citing it."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for found in ids_in(line):
                out.setdefault(found, []).append(f"{path.relative_to(root)}:{number}")
    return out


def defined(text: str) -> Counter[str]:
    """How many times each id is defined (a `- **ID** text` line) in `text`."""
    return Counter(m.group("id") for m in DEFINITION.finditer(text))


def _sources() -> list[Path]:
    roots = (ROOT / "src" / "steerable_compaction", ROOT / "tests")
    here = Path(__file__).resolve()  # its probes cite undefined ids on purpose
    return sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.is_file() and p.suffix in TEXT_SUFFIXES and p.resolve() != here
    )


def test_every_cited_id_is_defined_in_the_requirements_doc() -> None:
    """Every R-id and L-layer named in `src/` or `tests/` has its line in the doc."""
    known = defined(DOC.read_text(encoding="utf-8"))
    missing = {i: where[:3] for i, where in cited(_sources()).items() if i not in known}
    assert missing == {}, f"ids cited but not in docs/requirements.md: {missing}"


def test_the_doc_defines_each_id_once_and_only_ids() -> None:
    """Each definition line names one id, once; the spec's R1-R40 are all there."""
    known = defined(DOC.read_text(encoding="utf-8"))
    assert [i for i, n in known.items() if n > 1] == []
    assert [i for i in known if not ID.fullmatch(i)] == []
    assert {f"R{n}" for n in range(1, 41)} <= set(known)


def test_the_check_finds_an_undefined_id(tmp_path: Path) -> None:
    """A citation the doc lacks is found; `R22b`, `L1.5` and `test_r42_...` are read whole."""
    cite = tmp_path / "probe.py"
    cite.write_text(
        "def test_r42_x(): ...  # pins R41 and R22b (L1.5), then L2.\nnot PR12, R2D2, L1.5x\n",
        encoding="utf-8",
    )
    found = cited([cite], root=tmp_path)
    assert found == {
        "R41": ["probe.py:1"],
        "R22b": ["probe.py:1"],
        "L1.5": ["probe.py:1"],
        "L2": ["probe.py:1"],
        "R42": ["probe.py:1"],
    }
    assert {"R41", "R42"}.isdisjoint(defined(DOC.read_text(encoding="utf-8")))
    assert defined("- **R1** one\n- **R1** again\n-  **R2** no\n") == Counter({"R1": 2})
