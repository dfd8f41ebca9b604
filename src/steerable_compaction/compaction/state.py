"""The engine's state and its transitions, as pure functions (the spec's flowchart).

```
pre_step (round N)
 ├─ manual requested? ── yes ─► compact (aggressive) ─► reset both breaker counters   (R15)
 ├─ micro interval hit? ─ yes ─► fold old results, action=micro_compact               (R14)
 └─ pressure ≥ threshold?
      ├─ no ─► both breaker counters reset (the circuit stays as it is), continue      (R16)
      └─ yes ─► circuit open? ─ yes ─► continue
                  └─ no ─► pressure ≥ last post level + margin? ─ no ─► continue      (R31)
                              └─ yes ─► fold or summarize (plan_compaction)           (R17, R20)
                                         ├─ post ≥ threshold ─► failures += 1 ─► 3 in a row:
                                         │                       circuit_open(consecutive_failures)
                                         └─ post < threshold ─► refill within 3 rounds? ─► 3 in a
                                                                row: circuit_open(rapid_refill)
on_request_error(context overflow) ─► retries this turn ≤ max? ─ no ─► loud failure    (R13)
                                       └─ yes ─► compact (aggressive), retry; circuit ignored
```
A refill is measured from the last *successful* compaction. The circuit, once open, stays open
until a manual compaction closes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeAlias

__all__ = [
    "BreakerSettings",
    "CircuitReason",
    "EngineState",
    "Gate",
    "after_forced",
    "after_pressure_compaction",
    "begin_round",
    "begin_turn",
    "healthy",
    "micro_due",
    "pressure_gate",
]

CircuitReason: TypeAlias = Literal["consecutive_failures", "rapid_refill"]
Gate: TypeAlias = Literal["below_threshold", "circuit_open", "hysteresis", "compact"]


class BreakerSettings(Protocol):
    """The knobs the transitions read; `CompactionPolicy` is the usual one."""

    @property
    def threshold_tokens(self) -> int:
        """Pressure at or above which compaction runs."""

    @property
    def recompact_margin_tokens(self) -> int:
        """How far pressure must rise above the last post level before compacting again."""

    @property
    def max_consecutive_failures(self) -> int:
        """Ineffective compactions in a row that open the circuit."""

    @property
    def rapid_refill_window_rounds(self) -> int:
        """A compaction this many rounds after the previous one is a refill."""

    @property
    def max_rapid_refills(self) -> int:
        """Refills in a row that open the circuit."""

    @property
    def micro_compact_interval_rounds(self) -> int:
        """Fold every N rounds regardless of pressure (0 = off)."""


@dataclass(frozen=True, slots=True)
class EngineState:
    """Everything the engine remembers between steps: counters, last compaction, circuit."""

    round: int = 0
    turn: int = 0
    consecutive_failures: int = 0
    rapid_refills: int = 0
    last_compaction_round: int | None = None
    last_success_round: int | None = None
    last_post_tokens: int | None = None
    overflow_retries: int = 0
    circuit: CircuitReason | None = None

    @property
    def circuit_open(self) -> bool:
        """Whether the pressure path is switched off."""
        return self.circuit is not None


def begin_round(state: EngineState) -> EngineState:
    """A model request is about to be made."""
    return replace(state, round=state.round + 1)


def begin_turn(state: EngineState) -> EngineState:
    """A new user turn starts: the overflow retry budget is per turn (R13)."""
    return replace(state, turn=state.turn + 1, overflow_retries=0)


def micro_due(state: EngineState, settings: BreakerSettings) -> bool:
    """Whether this round is a micro-compaction round (R14)."""
    every = settings.micro_compact_interval_rounds
    return every > 0 and state.round > 0 and state.round % every == 0


def pressure_gate(state: EngineState, settings: BreakerSettings, pressure: int) -> Gate:
    """Decide the pressure path for this round (R12, R16, R31, R32, R33)."""
    if pressure < settings.threshold_tokens:
        return "below_threshold"
    if state.circuit_open:
        return "circuit_open"
    if (
        state.last_post_tokens is not None
        and pressure < state.last_post_tokens + settings.recompact_margin_tokens
    ):
        return "hysteresis"
    return "compact"


def healthy(state: EngineState) -> EngineState:
    """Below threshold: both breaker counters reset (R16).

    The circuit stays as it is: right after a compaction pressure is below threshold by design,
    so closing here would undo the rapid-refill breaker one round after it opened. Only a
    manual compaction closes it (R15); the overflow path works while it is open (R13).
    """
    return replace(state, consecutive_failures=0, rapid_refills=0)


def after_pressure_compaction(
    state: EngineState, settings: BreakerSettings, *, post_tokens: int, effective: bool
) -> EngineState:
    """Count an ineffective compaction (R32) or a rapid refill (R33) and maybe open the circuit.

    `effective` is false when the compaction changed nothing or left the estimate at or above
    the threshold, or when its summarizer failed and the excerpt summary took its place (a
    fold written instead of a failed summary is effective when it gets under the threshold).
    """
    base = replace(state, last_compaction_round=state.round, last_post_tokens=post_tokens)
    if not effective or post_tokens >= settings.threshold_tokens:
        failures = state.consecutive_failures + 1
        opened = failures >= settings.max_consecutive_failures
        return replace(
            base,
            consecutive_failures=failures,
            circuit="consecutive_failures" if opened else state.circuit,
        )
    refill = (
        state.last_success_round is not None
        and state.round - state.last_success_round <= settings.rapid_refill_window_rounds
    )
    refills = state.rapid_refills + 1 if refill else 0
    opened = refills >= settings.max_rapid_refills
    return replace(
        base,
        consecutive_failures=0,
        rapid_refills=refills,
        last_success_round=state.round,
        circuit="rapid_refill" if opened else state.circuit,
    )


def after_forced(state: EngineState, *, post_tokens: int | None, manual: bool) -> EngineState:
    """After a manual (R15: resets both counters, closes the circuit) or overflow compaction."""
    base = (
        state
        if post_tokens is None
        else replace(state, last_compaction_round=state.round, last_post_tokens=post_tokens)
    )
    if manual:
        return replace(base, consecutive_failures=0, rapid_refills=0, circuit=None)
    return base
