"""The engine's state and its transitions, as pure functions (the spec's flowchart).

```
pre_step (round N)
 ├─ manual requested? ── yes ─► compact ─► reset both breaker counters, close the circuit (R15)
 ├─ micro interval hit? ─ yes ─► fold old results, action=micro_compact               (R14)
 ├─ pressure ≥ threshold?
 │    ├─ no ─► both breaker counters reset (the circuit stays as it is), continue      (R16)
 │    └─ yes ─► next request over the limit? ─ yes ─► compact                  (gate `limit`)
 │               └─ no ─► circuit open? ─ yes ─► continue                              (R32, R33)
 │                         └─ no ─► pressure ≥ last post level + margin? ─ no ─► continue (R31)
 │                                   └─ yes ─► fold or summarize (plan_compaction)   (R17, R20)
 │                                              ├─ nothing compactable ─► no change at all
 │                                              ├─ post ≥ threshold ─► failures += 1 ─► 3 in a
 │                                              │                      row: circuit_open(
 │                                              │                      consecutive_failures)
 │                                              └─ post < threshold ─► refill within 3 rounds?
 │                                                 ─► 3 in a row: circuit_open(rapid_refill)
 └─ still over the limit? ─► escalate, cheapest loss first; nothing left ─► RequestTooLargeError
on_request_error(context overflow) ─► retries this turn ≤ max? ─ no ─► loud failure    (R13)
                                       └─ yes ─► compact, retry; circuit ignored
```
A refill is measured from the last *successful* compaction.

**One rule for an open circuit, whichever breaker opened it.** The pressure path no longer
compacts at the threshold; it compacts only when the next request would not fit: the estimate
is over `limit_tokens`, the window less the output reserve (gate `limit`). Such a request
could only fail and come back through the overflow path, so the engine never sends it: it
compacts first, whatever the breakers, the hysteresis or a cooldown say, and escalates if that
is not enough. The thrashing reminder says exactly this, and stays visible to the model while
the rapid-refill circuit is open. Breaker counters never exceed their limits.

How R16 and R33 combine: a round below the threshold resets the failure count at once, but the
refill count only once the refill window has passed since the last successful compaction (right
after a compaction, pressure is below the threshold by design: that is not a sign of health, and
resetting there would keep the rapid-refill breaker from ever tripping).

When an open circuit closes: at a manual compaction (R15), or after `close_after_rounds(...)`
rounds in a row below the threshold (the window times the refills that open it: 9 by default),
which a thrashing session never reaches.

A compaction that finds nothing compactable changes no state: it is neither a failure nor the
hysteresis baseline. Everything the engine decides from lives in `EngineState`, including a
pending manual request and whether the last summarizer call failed (while the failure circuit
is open, compactions at the limit then use the excerpt instead of asking again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, TypeAlias

from ..messages import Message
from ..record.events import Reminder
from .regions import REMINDER_TAG

__all__ = [
    "THRASHING_REASON",
    "THRASHING_TEXT",
    "BreakerSettings",
    "CircuitReason",
    "EngineState",
    "Gate",
    "after_forced",
    "after_pressure_compaction",
    "after_send",
    "after_summary_attempt",
    "at_step",
    "circuit_after_healthy",
    "close_after_rounds",
    "compaction_thrashing_reminder",
    "gate_round",
    "healthy",
    "micro_due",
    "micro_due_at",
    "pressure_gate",
    "quiet_round",
    "quiet_round_into",
    "rebase_growth",
    "report_cold",
    "request_manual",
    "take_overflow_retry",
]

CircuitReason: TypeAlias = Literal["consecutive_failures", "rapid_refill"]
Gate: TypeAlias = Literal["below_threshold", "circuit_open", "hysteresis", "compact", "limit"]


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

    @property
    def limit_tokens(self) -> int:
        """The most a request may carry: the window less the output room it keeps."""

    @property
    def max_overflow_retries(self) -> int:
        """Overflow compactions allowed per user turn (R13)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineState:
    """Everything the engine decides from between steps: counters, last compaction, circuit.

    `manual_requested` is a compaction the host asked for (R15), run at the next `pre_step`,
    with `manual_focus` the subject its summary must keep in full, when the host named one;
    `summarizer_failed` says the last summarizer call failed (see the module docstring);
    `healthy_rounds` counts rounds in a row below the threshold;
    `probable_tried` is the (turn, round) whose unrecognized error was last tried as a probable
    overflow (once per request). For the cold-cache rule (`compaction.cold`): `last_request_at`
    is when the last request left (the engine's clock; `None`: none in this process),
    `cache_reported_cold` that the host said the cache is cold, `steps` the requests sent,
    `grown_tokens` what they added in all (pressure at a step's start over the last one sent),
    `last_sent_tokens` the pressure of the last request sent, or where a compaction between
    two requests left it (`rebase_growth`).
    """

    round: int = 0
    turn: int = 0
    consecutive_failures: int = 0
    rapid_refills: int = 0
    healthy_rounds: int = 0
    last_compaction_round: int | None = None
    last_success_round: int | None = None
    last_post_tokens: int | None = None
    overflow_retries: int = 0
    circuit: CircuitReason | None = None
    manual_requested: bool = False
    manual_focus: str | None = None
    summarizer_failed: bool = False
    probable_tried: tuple[int, int] | None = None
    last_request_at: float | None = None
    cache_reported_cold: bool = False
    steps: int = 0
    grown_tokens: int = 0
    last_sent_tokens: int | None = None

    @property
    def circuit_open(self) -> bool:
        """Whether the pressure path is switched off."""
        return self.circuit is not None

    @property
    def growth_per_round(self) -> float:
        """What a round added to the pressure on average (0 before the second request)."""
        counted = self.steps - 1  # the first request has no previous one to grow from
        return self.grown_tokens / counted if counted > 0 else 0.0


def _replacer() -> Callable[..., EngineState]:
    """`dataclasses.replace` for `EngineState`, generated once (every step makes two states).

    The generic one inspects the fields on each call, about 3x the cost of this.
    """
    names = [f.name for f in fields(EngineState)]
    assert not hasattr(EngineState, "__post_init__")  # the slots are set directly below
    scope: dict[str, Any] = {"_missing": object(), "_new": object.__new__, "_cls": EngineState}
    lines = ["def replace(state, /, *, " + ", ".join(f"{n}=_missing" for n in names) + "):"]
    lines.append("    new = _new(_cls)")
    for i, name in enumerate(names):
        scope[f"_set{i}"] = getattr(EngineState, name).__set__
        lines.append(f"    _set{i}(new, state.{name} if {name} is _missing else {name})")
    lines.append("    return new")
    exec("\n".join(lines), scope)
    made: Callable[..., EngineState] = scope["replace"]
    return made


replace = _replacer()


def close_after_rounds(settings: BreakerSettings) -> int:
    """Rounds in a row below the threshold that close an open circuit."""
    return max(settings.rapid_refill_window_rounds * settings.max_rapid_refills, 1)


def at_step(state: EngineState, *, round_: int, turn: int) -> EngineState:
    """The loop's round and turn numbers for this call; a new turn refills the R13 budget."""
    if turn != state.turn:
        state = replace(state, turn=turn, overflow_retries=0)
    return replace(state, round=round_)


def after_send(
    state: EngineState, *, at: float, start_tokens: int, sent_tokens: int
) -> EngineState:
    """A request leaves now: the cache is warm again, and the round's growth is counted.

    `start_tokens` is the pressure when the step began (before any compaction), `sent_tokens`
    what the request carries.
    """
    return replace(
        state,
        last_request_at=at,
        cache_reported_cold=False,
        steps=state.steps + 1,
        grown_tokens=_grown(state, start_tokens),
        last_sent_tokens=sent_tokens,
    )


def _grown(state: EngineState, start: int) -> int:
    """`grown_tokens` once a step that began at `start` tokens is counted."""
    if state.last_sent_tokens is None:
        return state.grown_tokens
    return state.grown_tokens + max(start - state.last_sent_tokens, 0)


def rebase_growth(state: EngineState, *, start_tokens: int, post_tokens: int) -> EngineState:
    """A compaction between two requests: an overflow retry, or a manual one between steps.

    No request is counted. The growth up to `start_tokens` (the pressure before it) is, and the
    next round's is measured from `post_tokens`, where it left the context.
    """
    if state.last_sent_tokens is None:
        return state  # no request yet: the first one starts the count
    return replace(state, grown_tokens=_grown(state, start_tokens), last_sent_tokens=post_tokens)


def quiet_round(
    state: EngineState,
    settings: BreakerSettings,
    *,
    round_: int,
    turn: int,
    gate: Gate,
    pressure: int,
    at: float,
) -> EngineState:
    """`at_step`, `gate_round` and `after_send` of a step that compacts nothing, in one replace.

    `gate` is `pressure_gate(state, settings, pressure)` (the round and turn do not change it);
    the request leaves carrying `pressure`. The same state as the three in a row, for the
    quiet path's cost (every step of a long session takes it).
    """
    new = replace(state)
    quiet_round_into(new, settings, round_=round_, turn=turn, gate=gate, pressure=pressure, at=at)
    return new


def quiet_round_into(
    state: EngineState,
    settings: BreakerSettings,
    *,
    round_: int,
    turn: int,
    gate: Gate,
    pressure: int,
    at: float,
) -> None:
    """`quiet_round` written into `state` itself, not into a copy.

    `EngineState` is a value: only its owner may call this, an engine that made `state` and
    never handed it out (its quiet path, every step of a long session: no copy of 19 fields).
    """
    if gate == "below_threshold":  # `healthy`, at the new round
        failures, rounds = 0, state.healthy_rounds + 1
        refills = _refills_after_healthy(state, settings, round_)
        circuit = circuit_after_healthy(state, settings)
    else:
        failures, refills, rounds = state.consecutive_failures, state.rapid_refills, 0
        circuit = state.circuit
    _write_quiet(  # every value is read from `state` before the first is written
        state,
        round_,
        turn,
        0 if turn != state.turn else state.overflow_retries,
        failures,
        refills,
        rounds,
        circuit,
        at,  # `after_send`: the request leaves now, the cache is warm again
        False,
        state.steps + 1,
        _grown(state, pressure),
        pressure,
    )


_QUIET_FIELDS = (
    "round",
    "turn",
    "overflow_retries",
    "consecutive_failures",
    "rapid_refills",
    "healthy_rounds",
    "circuit",
    "last_request_at",
    "cache_reported_cold",
    "steps",
    "grown_tokens",
    "last_sent_tokens",
)


def _quiet_writer() -> Callable[..., None]:
    """Sets the `_QUIET_FIELDS` of a state in place, by their slot setters (generated once)."""
    scope: dict[str, Any] = {}
    lines = [f"def write(state, {', '.join(_QUIET_FIELDS)}):"]
    for i, name in enumerate(_QUIET_FIELDS):
        scope[f"_set{i}"] = getattr(EngineState, name).__set__
        lines.append(f"    _set{i}(state, {name})")
    exec("\n".join(lines), scope)
    made: Callable[..., None] = scope["write"]
    return made


_write_quiet = _quiet_writer()


def report_cold(state: EngineState) -> EngineState:
    """The host says the provider's cache is cold (evicted, another region, a restart)."""
    return replace(state, cache_reported_cold=True)


def request_manual(state: EngineState, focus: str | None = None) -> EngineState:
    """The host asked for a compaction at the next `pre_step` (R15), steered by `focus`."""
    return replace(state, manual_requested=True, manual_focus=focus or state.manual_focus)


def micro_due(state: EngineState, settings: BreakerSettings) -> bool:
    """Whether this round is a micro-compaction round (R14)."""
    return micro_due_at(state.round, settings)


def micro_due_at(round_: int, settings: BreakerSettings) -> bool:
    """Whether round `round_` is a micro-compaction round (R14)."""
    every = settings.micro_compact_interval_rounds
    return every > 0 and round_ > 0 and round_ % every == 0


def pressure_gate(state: EngineState, settings: BreakerSettings, pressure: int) -> Gate:
    """Decide the pressure path for this round (R12, R16, R31, R32, R33)."""
    if pressure < settings.threshold_tokens:
        return "below_threshold"
    if pressure > settings.limit_tokens:
        return "limit"  # never sent over the window, whatever the breakers and the hysteresis
    if state.circuit_open:
        return "circuit_open"
    if (
        state.last_post_tokens is not None
        and pressure < state.last_post_tokens + settings.recompact_margin_tokens
    ):
        return "hysteresis"
    return "compact"


def gate_round(
    state: EngineState, settings: BreakerSettings, pressure: int
) -> tuple[EngineState, Gate]:
    """The pressure gate for this round and the state after it (healthy rounds counted)."""
    gate = pressure_gate(state, settings, pressure)
    if gate == "below_threshold":
        return healthy(state, settings), gate
    return replace(state, healthy_rounds=0), gate


def healthy(state: EngineState, settings: BreakerSettings) -> EngineState:
    """A round below the threshold (R16, combined with R33 as the module docstring says)."""
    return replace(
        state,
        consecutive_failures=0,
        rapid_refills=_refills_after_healthy(state, settings, state.round),
        healthy_rounds=state.healthy_rounds + 1,
        circuit=circuit_after_healthy(state, settings),
    )


def circuit_after_healthy(state: EngineState, settings: BreakerSettings) -> CircuitReason | None:
    """The circuit once this round counts as healthy (it closes after enough of them)."""
    circuit = state.circuit
    if circuit is not None and state.healthy_rounds + 1 >= close_after_rounds(settings):
        return None
    return circuit


def _refills_after_healthy(state: EngineState, settings: BreakerSettings, round_: int) -> int:
    """The refill count after a healthy round `round_`: reset once the refill window passed."""
    since = None if state.last_success_round is None else round_ - state.last_success_round
    if since is None or since > settings.rapid_refill_window_rounds:
        return 0
    return state.rapid_refills


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
        failures = min(state.consecutive_failures + 1, settings.max_consecutive_failures)
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
    refills = min(state.rapid_refills + 1, settings.max_rapid_refills) if refill else 0
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
        return replace(
            base,
            consecutive_failures=0,
            rapid_refills=0,
            circuit=None,
            manual_requested=False,
            manual_focus=None,
        )
    return base


def take_overflow_retry(state: EngineState, settings: BreakerSettings) -> EngineState | None:
    """Spend one of this turn's overflow retries (R13); `None` when none is left."""
    if state.overflow_retries >= settings.max_overflow_retries:
        return None
    return replace(state, overflow_retries=state.overflow_retries + 1)


def after_summary_attempt(state: EngineState, *, failed: bool) -> EngineState:
    """Remember whether the summarizer's last call failed (see the module docstring)."""
    return replace(state, summarizer_failed=failed)


THRASHING_REASON = "compaction_thrashing"
THRASHING_TEXT = "Context compaction is thrashing:"


def compaction_thrashing_reminder(refills: int, window: int) -> Reminder:
    """The `CompactionThrashingReminder` (R33): a notice for the model and the host."""
    text = (
        f"{REMINDER_TAG}\n"
        f"{THRASHING_TEXT} the context filled up again within {window} rounds of the previous "
        f"compaction, {refills} times in a row. Until it settles, the context is compacted only "
        "when the next request would not fit the window, no longer at the usual threshold, so "
        "older messages may disappear with little warning. Work in smaller steps: read only "
        "what you need, prefer targeted searches to whole files, and write down findings "
        "instead of re-reading.\n"
        "</system-reminder>"
    )
    return Reminder(reason=THRASHING_REASON, message=Message.user(text))
