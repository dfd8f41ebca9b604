from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steerable_compaction import resolve_compaction_policy
from steerable_compaction.compaction.state import (
    EngineState,
    after_forced,
    after_pressure_compaction,
    after_send,
    after_summary_attempt,
    at_step,
    circuit_after_healthy,
    close_after_rounds,
    gate_round,
    healthy,
    micro_due,
    pressure_gate,
    quiet_round,
    quiet_round_into,
    rebase_growth,
    request_manual,
    take_overflow_retry,
)

POLICY = resolve_compaction_policy(None, 10_000, reserved_output_tokens=0, headroom_tokens=0)


def test_policy_numbers_used_here() -> None:
    """The numbers these tests reason with."""
    assert (POLICY.threshold_tokens, POLICY.recompact_margin_tokens) == (8_000, 1_000)


def test_r16_below_threshold_proceeds_and_resets_both_counters() -> None:
    """R16: under threshold nothing happens and both breaker counters reset."""
    state = EngineState(consecutive_failures=2, rapid_refills=2)
    assert pressure_gate(state, POLICY, 7_999) == "below_threshold"
    after = healthy(state, POLICY)
    assert (after.consecutive_failures, after.rapid_refills) == (0, 0)
    assert after == EngineState(healthy_rounds=1)


def test_r33_a_healthy_round_does_not_close_an_open_circuit() -> None:
    """Regression: right after a compaction pressure is low; that must not close the breaker."""
    state = EngineState(rapid_refills=3, circuit="rapid_refill")
    after = healthy(state, POLICY)
    assert after.circuit == "rapid_refill"
    assert pressure_gate(after, POLICY, 9_000) == "circuit_open"


def test_r33_refills_count_from_the_last_successful_compaction() -> None:
    """A failed compaction in between does not make the next success a refill."""
    state = after_pressure_compaction(
        EngineState(round=1), POLICY, post_tokens=2_000, effective=True
    )
    state = after_pressure_compaction(
        replace(state, round=5), POLICY, post_tokens=9_000, effective=False
    )
    state = after_pressure_compaction(
        replace(state, round=7), POLICY, post_tokens=2_000, effective=True
    )
    assert state.rapid_refills == 0
    state = after_pressure_compaction(
        replace(state, round=9), POLICY, post_tokens=2_000, effective=True
    )
    assert state.rapid_refills == 1


def test_r12_at_threshold_the_pressure_path_compacts() -> None:
    """R12: pressure at or above the threshold compacts (no earlier compaction)."""
    assert pressure_gate(EngineState(), POLICY, 8_000) == "compact"


def test_r31_hysteresis_blocks_recompaction_inside_the_margin() -> None:
    """R31: after a compaction, the next needs pressure >= post level + margin."""
    state = EngineState(last_post_tokens=7_500)
    assert pressure_gate(state, POLICY, 8_499) == "hysteresis"
    assert pressure_gate(state, POLICY, 8_500) == "compact"


def test_r32_three_ineffective_compactions_open_the_circuit() -> None:
    """R32: a compaction whose post is still >= threshold is ineffective; 3 in a row open it."""
    state = EngineState()
    for n in range(1, 4):
        state = at_step(state, round_=state.round + 1, turn=0)
        assert not state.circuit_open
        state = after_pressure_compaction(state, POLICY, post_tokens=8_000, effective=True)
        assert state.consecutive_failures == n
    assert state.circuit == "consecutive_failures"
    assert pressure_gate(state, POLICY, POLICY.threshold_tokens) == "circuit_open"
    assert pressure_gate(state, POLICY, POLICY.limit_tokens) == "circuit_open"
    # Counters never pass their limits, however many failures follow.
    for _ in range(5):
        state = after_pressure_compaction(state, POLICY, post_tokens=8_000, effective=False)
    assert state.consecutive_failures == POLICY.max_consecutive_failures


def test_r32_an_effective_compaction_resets_the_failure_count() -> None:
    """R32: a healthy compaction in between breaks the run of failures."""
    state = after_pressure_compaction(EngineState(), POLICY, post_tokens=9_000, effective=True)
    state = after_pressure_compaction(state, POLICY, post_tokens=9_000, effective=False)
    state = after_pressure_compaction(state, POLICY, post_tokens=1_000, effective=True)
    assert state.consecutive_failures == 0
    assert not state.circuit_open


def test_r33_three_rapid_refills_open_the_circuit() -> None:
    """R33: compactions within 3 rounds of the previous one, 3 times in a row, open it."""
    state = EngineState()
    state = after_pressure_compaction(
        replace(state, round=1), POLICY, post_tokens=2_000, effective=True
    )
    assert state.rapid_refills == 0
    for n, round_ in enumerate((4, 7, 10), start=1):
        state = after_pressure_compaction(
            replace(state, round=round_), POLICY, post_tokens=2_000, effective=True
        )
        assert state.rapid_refills == n
    assert state.circuit == "rapid_refill"


def test_r33_a_slow_refill_is_not_a_refill() -> None:
    """R33: four rounds after the previous compaction is outside the window: count resets."""
    state = after_pressure_compaction(
        EngineState(round=1, rapid_refills=2), POLICY, post_tokens=2_000, effective=True
    )
    state = after_pressure_compaction(
        replace(state, round=5), POLICY, post_tokens=2_000, effective=True
    )
    assert state.rapid_refills == 0


def test_r15_manual_resets_counters_and_closes_the_circuit() -> None:
    """R15: a manual compaction resets both counters; it also sets the hysteresis level."""
    state = EngineState(round=9, consecutive_failures=3, circuit="consecutive_failures")
    after = after_forced(state, post_tokens=1_234, manual=True)
    assert after.circuit is None
    assert (after.consecutive_failures, after.rapid_refills) == (0, 0)
    assert (after.last_post_tokens, after.last_compaction_round) == (1_234, 9)


def test_forced_overflow_compaction_keeps_the_counters() -> None:
    """An overflow compaction records its level but leaves the breakers as they are."""
    state = EngineState(round=3, consecutive_failures=2, circuit=None)
    after = after_forced(state, post_tokens=None, manual=False)
    assert after == state
    assert after_forced(state, post_tokens=10, manual=False).consecutive_failures == 2


@pytest.mark.parametrize(
    ("every", "round_", "due"), [(0, 5, False), (3, 3, True), (3, 4, False), (3, 0, False)]
)
def test_r14_micro_compaction_is_due_every_n_rounds(every: int, round_: int, due: bool) -> None:
    """R14: micro-compaction runs on every N-th round, and never when N is 0 (the default)."""
    policy = POLICY.replace(micro_compact_interval_rounds=every)
    assert micro_due(EngineState(round=round_), policy) is due


def test_r13_turns_reset_the_overflow_budget() -> None:
    """R13: the overflow retry budget is per turn."""
    state = at_step(EngineState(turn=1, overflow_retries=2), round_=5, turn=2)
    assert (state.round, state.turn, state.overflow_retries) == (5, 2, 0)
    same_turn = at_step(EngineState(turn=2, overflow_retries=1), round_=6, turn=2)
    assert same_turn.overflow_retries == 1


def test_r13_overflow_retries_are_spent_until_none_is_left() -> None:
    """R13: each overflow compaction spends one retry; past `max_overflow_retries`, `None`."""
    state: EngineState | None = EngineState()
    for spent in (1, 2):
        assert state is not None
        state = take_overflow_retry(state, POLICY)
        assert state is not None and state.overflow_retries == spent
    assert state is not None
    assert take_overflow_retry(state, POLICY) is None


def test_r33_a_healthy_round_inside_the_refill_window_keeps_the_refill_count() -> None:
    """R16 + R33: right after a compaction, low pressure does not reset the refill count.

    Outside the window it does; the failure count resets either way.
    """
    state = EngineState(round=5, last_success_round=3, rapid_refills=2, consecutive_failures=1)
    inside = healthy(state, POLICY)
    assert (inside.rapid_refills, inside.consecutive_failures) == (2, 0)
    outside = healthy(EngineState(round=7, last_success_round=3, rapid_refills=2), POLICY)
    assert outside.rapid_refills == 0


def test_r33_thrash_with_healthy_rounds_in_between_opens_the_circuit() -> None:
    """R33: compactions every 3 rounds, pressure below the threshold in between, trip it."""
    state = EngineState()
    tripped_at = None
    for round_ in range(1, 20):
        state = at_step(state, round_=round_, turn=1)
        pressure = 8_500 if round_ % 3 == 1 else 3_000
        state, gate = gate_round(state, POLICY, pressure)
        if gate == "compact":
            state = after_pressure_compaction(state, POLICY, post_tokens=2_000, effective=True)
        if state.circuit == "rapid_refill":
            tripped_at = round_
            break
    assert tripped_at == 10  # compactions at rounds 1, 4, 7, 10: three refills in a row


def test_an_open_circuit_closes_after_a_healthy_stretch() -> None:
    """The circuit closes after `close_after_rounds` rounds in a row below the threshold."""
    assert close_after_rounds(POLICY) == 9
    state = EngineState(circuit="rapid_refill", rapid_refills=3)
    for n in range(1, 9):
        state, gate = gate_round(state, POLICY, 1_000)
        assert gate == "below_threshold" and state.circuit == "rapid_refill", n
    state, _ = gate_round(state, POLICY, 1_000)
    assert state.circuit is None


def test_a_round_over_the_threshold_restarts_the_healthy_stretch() -> None:
    """Any round at or over the threshold sets the healthy count back to zero."""
    state = EngineState(circuit="consecutive_failures", healthy_rounds=8)
    state, gate = gate_round(state, POLICY, 9_000)
    assert gate == "circuit_open" and state.healthy_rounds == 0
    state, _ = gate_round(state, POLICY, 1_000)
    assert state.circuit == "consecutive_failures"


def test_r15_a_manual_request_is_state_until_the_forced_compaction() -> None:
    """R15: the host's request is part of the state; the manual compaction clears it."""
    state = request_manual(EngineState())
    assert state.manual_requested
    assert not after_forced(state, post_tokens=10, manual=True).manual_requested


def test_summarizer_failure_is_remembered_in_the_state() -> None:
    """A failed summarizer call is state that planning reads; a good call clears it."""
    failed = after_summary_attempt(EngineState(), failed=True)
    assert failed.summarizer_failed
    assert not after_summary_attempt(failed, failed=False).summarizer_failed


def test_r32_r33_one_rule_for_an_open_circuit_compact_only_past_the_limit() -> None:
    """Either breaker: no compaction at the threshold, but one past the limit (never sent).

    The limit is the window less the output reserve: a request over it could only fail. The
    same holds inside the hysteresis margin.
    """
    policy = resolve_compaction_policy(None, 10_000, reserved_output_tokens=1_000)
    assert policy.limit_tokens == 9_000
    for circuit in ("rapid_refill", "consecutive_failures"):
        state = EngineState(circuit=circuit)
        assert pressure_gate(state, policy, policy.threshold_tokens) == "circuit_open"
        assert pressure_gate(state, policy, 9_000) == "circuit_open"
        assert pressure_gate(state, policy, 9_001) == "limit"
    assert pressure_gate(EngineState(), policy, 9_000) == "compact"
    settled = EngineState(last_post_tokens=8_900)  # inside the margin of the last compaction
    assert pressure_gate(settled, policy, 9_000) == "hysteresis"
    assert pressure_gate(settled, policy, 9_001) == "limit"


def test_r33_the_refill_count_is_bounded() -> None:
    """A session that keeps refilling never counts past `max_rapid_refills`."""
    state = EngineState()
    for n in range(10):
        state = at_step(state, round_=n + 1, turn=0)
        state = after_pressure_compaction(state, POLICY, post_tokens=100, effective=True)
    assert state.rapid_refills == POLICY.max_rapid_refills and state.circuit == "rapid_refill"


def test_the_generated_replace_matches_dataclasses_replace_on_every_field() -> None:
    """The state module's fast `replace` sets each field like `dataclasses.replace` does."""
    from dataclasses import fields

    from steerable_compaction.compaction import state as module

    base = EngineState(round=3, turn=2, circuit="rapid_refill", probable_tried=(1, 2))
    values: dict[str, Any] = {
        "circuit": "consecutive_failures",
        "manual_focus": "the port",
        "probable_tried": (4, 5),
    }
    for field in fields(EngineState):
        value = values.get(field.name, 7 if isinstance(getattr(base, field.name), int) else True)
        made = module.replace(base, **{field.name: value})
        assert made == replace(base, **{field.name: value})
        assert type(made) is EngineState
    assert module.replace(base) == base
    with pytest.raises(TypeError):
        module.replace(base, no_such_field=1)


_states = st.builds(
    EngineState,
    round=st.integers(0, 50),
    turn=st.integers(0, 5),
    consecutive_failures=st.integers(0, 3),
    rapid_refills=st.integers(0, 3),
    healthy_rounds=st.integers(0, 12),
    last_success_round=st.none() | st.integers(0, 50),
    last_post_tokens=st.none() | st.integers(0, 10_000),
    overflow_retries=st.integers(0, 2),
    circuit=st.sampled_from([None, "consecutive_failures", "rapid_refill"]),
    last_request_at=st.none() | st.floats(0, 1e6),
    cache_reported_cold=st.booleans(),
    steps=st.integers(0, 100),
    grown_tokens=st.integers(0, 10**6),
    last_sent_tokens=st.none() | st.integers(0, 10_000),
)


@settings(max_examples=300, deadline=None)
@given(
    state=_states,
    round_=st.integers(0, 60),
    turn=st.integers(0, 6),
    pressure=st.integers(0, 12_000),
    at=st.floats(0, 2e6),
)
def test_quiet_round_is_at_step_gate_round_and_after_send_in_one(
    state: EngineState, round_: int, turn: int, pressure: int, at: float
) -> None:
    """The quiet path's one replace leaves the state the three transitions leave."""
    gate = pressure_gate(state, POLICY, pressure)
    stepped = at_step(state, round_=round_, turn=turn)
    chained, chained_gate = gate_round(stepped, POLICY, pressure)
    assert chained_gate == gate
    chained = after_send(chained, at=at, start_tokens=pressure, sent_tokens=pressure)
    one = quiet_round(state, POLICY, round_=round_, turn=turn, gate=gate, pressure=pressure, at=at)
    assert one == chained
    copy = replace(state)
    quiet_round_into(copy, POLICY, round_=round_, turn=turn, gate=gate, pressure=pressure, at=at)
    assert copy == chained  # the owner's in-place write leaves the same state
    if gate == "below_threshold":
        assert circuit_after_healthy(stepped, POLICY) == chained.circuit


def test_a_compaction_between_requests_moves_the_growth_baseline_and_counts_no_request() -> None:
    """Growth up to the compaction counts; the next round's is measured from where it left.

    Before any request there is no baseline to move: the first request starts the count.
    """
    sent = after_send(EngineState(), at=1.0, start_tokens=5_000, sent_tokens=5_000)
    rebased = rebase_growth(sent, start_tokens=5_300, post_tokens=2_000)
    assert (rebased.steps, rebased.grown_tokens, rebased.last_sent_tokens) == (1, 300, 2_000)
    assert rebased.last_request_at == sent.last_request_at
    nxt = after_send(rebased, at=2.0, start_tokens=2_200, sent_tokens=2_200)
    assert nxt.growth_per_round == 500  # one round: 300 before the compaction, 200 after
    assert rebase_growth(EngineState(), start_tokens=10, post_tokens=5) == EngineState()
