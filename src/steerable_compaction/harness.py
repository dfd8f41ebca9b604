"""Assembling a loop from a harness file: hooks in order, policy resolved once (R3-R6).

`load_harness(path, provider=..., record=..., model=...)` reads a YAML harness (the packaged
`default.harness.yaml` when `path` is `None`), validates every key with a `ConfigError` that
names it, resolves the compaction policy once from the model and window (an explicit
`max_context_tokens` wins, else the model catalogue, R5), and builds the hook chain in the
file's `context` order with retry last. `STEERABLE_SIDECAR_SUMMARIZER=0` in the environment
turns the LLM summarizer off, so compaction falls back to the deterministic excerpt (R6); the
older name `STEERABLE_SUMMARIZER` is still read when the new one is not set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .compactor import SUMMARIZER_ENV, summarizer_switched_off
from .engine import CompactionHooks
from .errors import ConfigError
from .hooks import Hooks
from .loop import CoreLoop, Tool
from .policy import CompactionPolicy, resolve_compaction_policy
from .providers.base import Provider, ToolSpec, provider_summarizer
from .record import Record
from .retry import RetryHooks
from .spill import SpillHooks

__all__ = ["SUMMARIZER_ENV", "Harness", "default_harness_text", "load_harness", "read_harness"]

_DEFAULT_SPILL_DIR = ".steerable/spill"  # relative to the working directory
_CONTEXT_HOOKS = ("pressure_compaction", "spill")
_SECTIONS: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    # section -> key -> (accepted types, may be null)
    "spill": {
        "directory": (str, False),
        "max_chars": (int, False),
        "excerpt_chars": (int, False),
        "max_tokens": (int, True),
    },
    "retry": {
        "max_retries": (int, False),
        "base_delay_s": ((int, float), False),
        "max_delay_s": ((int, float), False),
    },
    "loop": {
        "max_rounds_per_turn": (int, False),
        "max_output_tokens": (int, True),
        "history_tools": (bool, False),
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Harness:
    """An assembled loop and the parts it was built from.

    `close()`, or leaving `with load_harness(...) as harness:`, closes the record it runs on,
    which releases a file record's writer lock.
    """

    loop: CoreLoop
    policy: CompactionPolicy
    compaction: CompactionHooks | None
    spill: SpillHooks | None
    retry: RetryHooks
    config: Mapping[str, Any]

    def close(self) -> None:
        """Close the loop's record (flushed, writer lock released); closing again does nothing."""
        self.loop.record.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def default_harness_text() -> str:
    """The packaged `default.harness.yaml`."""
    return (resources.files(__package__) / "default.harness.yaml").read_text(encoding="utf-8")


def _read(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    where = "default.harness.yaml" if path is None else str(path)
    try:
        text = default_harness_text() if path is None else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("harness", where, f"a readable file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "harness", where, f"a UTF-8 text file (byte {exc.start} is not UTF-8)"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("harness", where, f"valid YAML ({_yaml_problem(exc)})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("harness", where, f"a YAML mapping, not {type(data).__name__}")
    return data


def _validate_context(data: Mapping[str, Any]) -> list[str]:
    """The `context` hook names, each known and at most once (default: every hook)."""
    context = data.get("context", list(_CONTEXT_HOOKS))
    if not isinstance(context, list) or not all(isinstance(c, str) for c in context):
        raise ConfigError("context", context, f"a list of hook names from {list(_CONTEXT_HOOKS)}")
    for name in context:
        if name not in _CONTEXT_HOOKS:
            raise ConfigError("context", name, f"one of {list(_CONTEXT_HOOKS)}")
    if len(set(context)) != len(context):
        raise ConfigError("context", context, "each hook at most once")
    return context


def _validate_compaction(data: Mapping[str, Any]) -> dict[str, Any]:
    """The `compaction` knobs as given; their values are checked when a policy is resolved."""
    compaction = data.get("compaction") or {}
    if not isinstance(compaction, dict):
        raise ConfigError("compaction", compaction, "a mapping of policy knobs")
    if "max_context_tokens" in compaction:  # the caller's or the catalogue's, never the file's
        raise ConfigError(
            "compaction.max_context_tokens",
            compaction["max_context_tokens"],
            "no window in a harness file: pass max_context_tokens to load_harness",
        )
    return dict(compaction)


def _validate_section(
    section: str, values: Any, spec: Mapping[str, tuple[type | tuple[type, ...], bool]]
) -> dict[str, Any]:
    """One typed section (`spill`, `retry`, `loop`): known keys, each of an accepted type."""
    if not isinstance(values, dict):
        raise ConfigError(section, values, "a mapping")
    extra = sorted(set(values) - set(spec))
    if extra:
        raise ConfigError(f"{section}.{extra[0]}", values[extra[0]], f"one of {sorted(spec)}")
    for key, value in values.items():
        types, nullable = spec[key]
        if value is None and nullable:
            continue
        wrong = isinstance(value, bool) != (types is bool)  # a bool is an int in Python
        if wrong or not isinstance(value, types):
            raise ConfigError(f"{section}.{key}", value, _kind(types, nullable))
    return dict(values)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The YAML error on one line: what is wrong and where (PyYAML spreads it over several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _validate(
    data: Mapping[str, Any], spill_directory: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    known = {"context", "compaction", *_SECTIONS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(", ".join(unknown), "(unknown)", f"one of {sorted(known)}")
    out: dict[str, Any] = {
        "context": _validate_context(data),
        "compaction": _validate_compaction(data),
    }
    for section, spec in _SECTIONS.items():
        out[section] = _validate_section(section, data.get(section) or {}, spec)
    _check_values(out, spill_directory)
    return out


def _spill_config(
    config: Mapping[str, Any], spill_directory: str | os.PathLike[str] | None
) -> dict[str, Any]:
    """The `SpillHooks` arguments: the file's, its directory replaced if one is given."""
    spill_cfg = {"directory": _DEFAULT_SPILL_DIR, **config["spill"]}
    if spill_directory is not None:
        spill_cfg["directory"] = spill_directory
    return spill_cfg


def _check_values(
    config: Mapping[str, Any], spill_directory: str | os.PathLike[str] | None
) -> None:
    """Refuse values out of range now, not when a loop is built (the hooks check their own)."""
    if "spill" in config["context"]:
        SpillHooks(**_spill_config(config, spill_directory))
    RetryHooks(**config["retry"])
    loop = config["loop"]
    for key, low in (("max_rounds_per_turn", 1), ("max_output_tokens", 1)):
        value = loop.get(key)
        if value is not None and value < low:
            raise ConfigError(f"loop.{key}", value, f"an integer >= {low}")


def read_harness(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The harness file at `path` (`None`: the packaged one), validated, as plain data.

    Raises `ConfigError` naming the first unreadable or non-UTF-8 file, bad YAML, unknown or
    mistyped key, or value out of range (the spill directory included); the compaction knobs
    are checked when a policy is resolved from them (their range depends on the window).
    """
    return _validate(_read(path))


def _kind(types: type | tuple[type, ...], nullable: bool) -> str:
    names = [t.__name__ for t in (types if isinstance(types, tuple) else (types,))]
    return " or ".join(names + (["null"] if nullable else []))


def load_harness(
    path: str | os.PathLike[str] | None = None,
    *,
    provider: Provider,
    record: Record,
    model: str | None,
    max_context_tokens: int | None = None,
    tools: Sequence[Tool] = (),
    replay_images: bool = True,
    env: Mapping[str, str] | None = None,
    spill_directory: str | os.PathLike[str] | None = None,
    clock: Callable[[], float] | None = None,
) -> Harness:
    """Build a `CoreLoop` for `record` and `provider` from a harness file (see module doc).

    The summarizer is the turn provider itself (`replay_images=True`: it saw the images, so
    they replay verbatim and the cache stays warm, R28). `spill_directory` replaces the file's
    `spill.directory`; with a spill stage, the record's `spill_directory` is set to it, so the
    history tools read the files of earlier runs too. `clock` is the engine's clock for the
    cold-cache rule (default `time.monotonic`).
    """
    config = _validate(_read(path), spill_directory)
    environ = os.environ if env is None else env
    overrides = dict(config["compaction"])
    if summarizer_switched_off(environ):
        overrides["summarizer_enabled"] = False
    policy = resolve_compaction_policy(model, max_context_tokens, **overrides)
    loop_cfg = config["loop"]
    retry = RetryHooks(**config["retry"])
    chain: list[Hooks] = []
    compaction: CompactionHooks | None = None
    spill: SpillHooks | None = None
    built: list[CoreLoop] = []  # the loop, once built: the summarizer replays its tools
    specs = tuple(tool.spec for tool in tools)

    def current_tools() -> tuple[ToolSpec, ...]:
        # The summary request replays the turn's own tools (its cached prefix), the history
        # tools included once the loop offers them.
        return built[0].tool_specs if built else specs

    for name in config["context"]:
        if name == "pressure_compaction":
            compaction = CompactionHooks(
                record,
                policy,
                summarizer=provider_summarizer(
                    provider,
                    tools=current_tools,
                    # A summary must fit the output room the policy keeps free.
                    max_output_tokens=min(4096, policy.effective_reserved_output_tokens),
                ),
                model=model,
                replay_images=replay_images,
                clock=clock,
            )
            chain.append(compaction)
        else:
            spill_cfg = _spill_config(config, spill_directory)
            if spill_cfg.get("max_tokens") is None:
                # Oversized follows the window: half of what a request may carry.
                spill_cfg["max_tokens"] = max(policy.limit_tokens // 2, 1)
            spill = SpillHooks(**spill_cfg)
            record.spill_directory = spill.directory
            chain.append(spill)
    chain.append(retry)
    loop = CoreLoop(
        provider,
        record,
        hooks=chain,
        tools=tools,
        max_rounds_per_turn=loop_cfg.get("max_rounds_per_turn", 50),
        max_output_tokens=loop_cfg.get("max_output_tokens"),
        history_tokens=policy.recall_result_tokens if loop_cfg.get("history_tools", True) else None,
    )
    built.append(loop)
    return Harness(
        loop=loop, policy=policy, compaction=compaction, spill=spill, retry=retry, config=config
    )
