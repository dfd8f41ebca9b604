"""The package's imports point one way, down the layers in `LAYERS`, and pure code does no I/O.

Read from the source with `ast` (nothing is imported or run). Every import counts, including
imports inside functions and under `TYPE_CHECKING`: a lazy import that points up is still an
arrow back. A module joins the layer whose entry is its longest dotted prefix, so a new file or
package (`host/`, `adapters/`, `tokens/`, `record/postgres.py`) slots in by its name alone.
Purity is about what a module names: Python still runs each package's `__init__` on the way
to a submodule.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "steerable_compaction"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """A named layer: a module may import its own layer and any layer of a lower rank."""

    name: str
    rank: int
    prefixes: tuple[str, ...]  # dotted names inside the package; "" is the package root only
    pure: bool = False  # no I/O: it reaches none of `IO_MODULES`, directly or through imports


# Lowest first. Layers sharing a rank (hosts and sim) may not import each other.
LAYERS = (
    Layer(
        name="values", rank=0, prefixes=("errors", "messages", "wire", "record.events"), pure=True
    ),
    Layer(
        name="record/tokens/policy", rank=1, prefixes=("record", "tokens", "policy", "spillfile")
    ),
    Layer(name="planning", rank=2, prefixes=("compaction",), pure=True),
    Layer(name="recall", rank=3, prefixes=("recall",)),  # search over the record, for engine/loop
    Layer(
        name="engine",
        rank=4,
        prefixes=(
            "engine",
            "brackets",
            "coldcache",
            "cursors",
            "summaries",
            "writer",
            "hooks",
            "retry",
            "spill",
        ),
    ),
    Layer(
        name="loop/providers/compactor",
        rank=5,
        prefixes=("loop", "providers", "compactor", "testing", "trace"),
    ),
    Layer(name="assembly", rank=6, prefixes=("harness",)),
    Layer(
        name="hosts",
        rank=7,
        prefixes=("host", "sidecar", "reconcile", "demo", "charts", "adapters"),
    ),
    Layer(name="sim", rank=7, prefixes=("sim",)),
    Layer(name="entry points", rank=8, prefixes=("cli", "__main__", "")),
)

# Standard-library and third-party modules that touch files, processes, threads or the network.
IO_MODULES = frozenset(
    {
        "anthropic",
        "asyncio",
        "fcntl",
        "httpx",
        "llama_cpp",
        "matplotlib",
        "openai",
        "os",
        "psycopg",
        "shutil",
        "socket",
        "sqlite3",
        "subprocess",
        "tempfile",
        "threading",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Import:
    """One import statement's target, as a module name, and where it stands."""

    importer: str
    target: str  # a module of the package, or the top-level name of an outside module
    where: str  # "path:line"
    text: str  # the statement, for the failure message


def module_name(path: Path, src: Path = SRC) -> str:
    """`src/steerable_compaction/record/events.py` -> `steerable_compaction.record.events`."""
    parts = [src.name, *path.relative_to(src).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_sources(src: Path = SRC) -> dict[str, tuple[str, str, bool]]:
    """Every module of the package: name -> (display path, source, whether a package)."""
    return {
        module_name(path, src): (
            str(path.relative_to(src.parents[1])),
            path.read_text(encoding="utf-8"),
            path.name == "__init__.py",
        )
        for path in sorted(src.rglob("*.py"))
    }


def find_imports(sources: Mapping[str, tuple[str, str, bool]]) -> list[Import]:
    """Every import of every module, resolved to a module of the package or an outside name."""
    found: list[Import] = []
    for module, (path, text, is_package) in sources.items():
        package = module if is_package else module.rpartition(".")[0]
        source_lines = text.splitlines()
        for node in ast.walk(ast.parse(text, filename=path)):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            lines = source_lines[node.lineno - 1 : node.end_lineno]
            statement = " ".join(line.strip() for line in lines).replace("( ", "(")
            for target in dict.fromkeys(_targets(node, package, sources)):
                found.append(
                    Import(
                        importer=module,
                        target=target,
                        where=f"{path}:{node.lineno}",
                        text=statement.replace(", )", ")"),
                    )
                )
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str, modules: Iterable[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [_outside_or_inside(alias.name) for alias in node.names]
    if node.level == 0:
        base = node.module or ""
        if not base.startswith(PACKAGE):
            return [base.partition(".")[0]]
    else:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    # `from . import runner` names a module; `from ..record import Edit` names the package.
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


def _outside_or_inside(name: str) -> str:
    return name if name.startswith(PACKAGE) else name.partition(".")[0]


def layer_of(module: str) -> Layer | None:
    """The layer whose longest prefix matches `module` (a name inside the package or the root)."""
    inner = module.removeprefix(PACKAGE).removeprefix(".")
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.prefixes:
            matches = inner == prefix or (prefix != "" and inner.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def wrong_way(imports: Iterable[Import]) -> list[str]:
    """One line per import that points up the layers or across to a sibling layer."""
    out: list[str] = []
    for imp in imports:
        if not imp.target.startswith(PACKAGE):
            continue
        source, target = layer_of(imp.importer), layer_of(imp.target)
        if source is None or target is None or source is target or source.rank > target.rank:
            continue
        way = "up" if target.rank > source.rank else "across"
        out.append(
            f"{imp.where}: `{imp.text}` points {way}: {imp.importer} ({source.name}) imports "
            f"{imp.target} ({target.name})"
        )
    return out


def impure(imports: Iterable[Import]) -> list[str]:
    """One line per import by which a pure-layer module reaches an I/O module, with the chain.

    Only the import that leaves the pure layers (or names the I/O module) is reported: the pure
    modules that reach I/O through it are not repeated.
    """
    imports = list(imports)
    graph: dict[str, list[str]] = {}
    for imp in imports:
        graph.setdefault(imp.importer, []).append(imp.target)
    out: list[str] = []
    for imp in imports:
        layer, target = layer_of(imp.importer), layer_of(imp.target)
        if layer is None or not layer.pure or (target is not None and target.pure):
            continue
        chain = _chain_to_io(imp.target, graph)
        if chain is not None:
            via = " -> ".join(chain)
            out.append(
                f"{imp.where}: `{imp.text}` makes pure {imp.importer} ({layer.name}) reach "
                f"{chain[-1]} (via {via})"
            )
    return out


def _chain_to_io(start: str, graph: Mapping[str, list[str]]) -> list[str] | None:
    """The shortest import chain from `start` to an I/O module, or `None`."""
    seen = {start}
    queue: deque[list[str]] = deque([[start]])
    while queue:
        chain = queue.popleft()
        if chain[-1] in IO_MODULES:
            return chain
        for nxt in graph.get(chain[-1], ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append([*chain, nxt])
    return None


@functools.cache
def package_imports() -> tuple[Import, ...]:
    """Every import in the package's source (read once per test run)."""
    return tuple(find_imports(read_sources()))


def test_every_module_has_a_layer() -> None:
    """Each module of the package falls in exactly one layer of the map, by its name."""
    homeless = [m for m in read_sources() if layer_of(m) is None]
    assert homeless == [], f"modules in no layer (add a prefix to LAYERS): {homeless}"


def test_imports_point_down_the_layers() -> None:
    """No import points up the layers, and hosts and the simulator never import each other."""
    problems = wrong_way(package_imports())
    assert problems == [], "imports against the layers:\n" + "\n".join(problems)


def test_planning_and_values_reach_no_io() -> None:
    """Values and the planner import nothing that reaches files, threads or the network."""
    problems = impure(package_imports())
    assert problems == [], "pure code reaching I/O:\n" + "\n".join(problems)


def _fake(files: Mapping[str, str]) -> dict[str, tuple[str, str, bool]]:
    return {
        f"{PACKAGE}.{name}".removesuffix(".__init__"): (
            f"src/{PACKAGE}/{name.replace('.', '/')}.py",
            text,
            name.endswith("__init__"),
        )
        for name, text in files.items()
    }


def test_the_checks_name_the_offending_import() -> None:
    """A wrong-way, a sideways and an impure import each fail, naming file, line and layers."""
    sources = _fake(
        {
            "compaction.plan": "import re\n\ndef f():\n    from ..engine import newest_usage\n",
            "sim.runner": "from ..host import session\n",
            "host.__init__": "",
            "host.session": "",
            "record.__init__": "from .stores import Record\n",
            "record.stores": "import sqlite3\n",
            "compaction.prune": "from ..record import Edit\nfrom ..record.events import Edit\n",
        }
    )
    imports = find_imports(sources)
    assert wrong_way(imports) == [
        f"src/{PACKAGE}/compaction/plan.py:4: `from ..engine import newest_usage` points up: "
        f"{PACKAGE}.compaction.plan (planning) imports {PACKAGE}.engine (engine)",
        f"src/{PACKAGE}/sim/runner.py:1: `from ..host import session` points across: "
        f"{PACKAGE}.sim.runner (sim) imports {PACKAGE}.host.session (hosts)",
    ]
    assert impure(imports) == [
        f"src/{PACKAGE}/compaction/prune.py:1: `from ..record import Edit` makes pure "
        f"{PACKAGE}.compaction.prune (planning) reach sqlite3 (via {PACKAGE}.record -> "
        f"{PACKAGE}.record.stores -> sqlite3)"
    ]
    assert layer_of(f"{PACKAGE}.tokens.meter") is layer_of(f"{PACKAGE}.policy")
    assert layer_of(f"{PACKAGE}.record.events") is LAYERS[0]
    assert layer_of(PACKAGE) is LAYERS[-1] and layer_of(f"{PACKAGE}.nowhere") is None
