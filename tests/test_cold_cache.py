"""Cache-expiry-aware compaction (issue 28): with the prompt cache cold, compact when it pays.

A clock the test controls stands for the time between requests; the policy's cache lifetime
says when the provider's cache is gone.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from steerable_compaction import (
    CompactionHooks,
    CompactionPolicy,
    Compactor,
    ConfigError,
    MemoryRecord,
    Message,
)
from steerable_compaction.compaction.cold import (
    MAX_HORIZON,
    SAVING_MARGIN,
    ColdVerdict,
    cache_expired,
    price_cold_compaction,
)
from steerable_compaction.compaction.state import EngineState
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import CompactionBoundary, JsonlRecord, Record, SqliteRecord
from steerable_compaction.sim.provider import SimClock

from .compaction_helpers import tool_round
from .test_engine import FakeSummarizer, Session, add_rounds, body, policy, start


class Terms:
    """Anthropic's cache prices and a threshold of 1,000 tokens."""

    cache_read_price_ratio = 0.1
    cache_write_price_ratio = 1.25
    output_price_ratio = 5.0
    threshold_tokens = 1_000


# -- the pure parts ------------------------------------------------------------------------------


def test_the_cache_is_cold_after_its_lifetime_or_when_the_host_says_so() -> None:
    assert cache_expired(0.0, 301.0, 300.0, reported=False)
    assert not cache_expired(0.0, 300.0, 300.0, reported=False)  # exactly the lifetime: warm
    assert not cache_expired(None, 10_000.0, 300.0, reported=False)  # no request yet
    assert not cache_expired(0.0, 10_000.0, None, reported=False)  # lifetime unknown
    assert cache_expired(None, 0.0, None, reported=True)


def test_the_price_counts_reads_saved_against_the_summary_and_the_rewrite() -> None:
    """By hand: prefix 800, compacted 200, summary 100, no growth, threshold 1,000.

    Waiting: 1.25 * 800 now, then 0.1 * 800 a round. Compacting: 1.25 * 800 + 5 * 100 +
    1.25 * 200 now, then 0.1 * 200 a round. Even at 12.5 rounds: 10 rounds wait, 20 compact.
    """
    ten = price_cold_compaction(
        Terms(), pressure=800, post_tokens=200, summary_tokens=100, growth_per_round=0,
        rounds_seen=10, asks_summarizer=True,
    )  # fmt: skip
    assert (ten.wait, ten.now, ten.rounds) == pytest.approx((1_800, 1_950, 10))
    assert not ten.compact
    twenty = price_cold_compaction(
        Terms(), pressure=800, post_tokens=200, summary_tokens=100, growth_per_round=0,
        rounds_seen=20, asks_summarizer=True,
    )  # fmt: skip
    assert (twenty.wait, twenty.now) == pytest.approx((2_600, 2_150))
    assert twenty.saving == pytest.approx(450) and twenty.cost == pytest.approx(750)


def test_waiting_pays_its_own_pressure_compaction_inside_the_horizon() -> None:
    """Growth reaching the threshold makes the waiting branch compact too, warm."""
    verdict = price_cold_compaction(
        Terms(), pressure=900, post_tokens=200, summary_tokens=100, growth_per_round=100,
        rounds_seen=1, asks_summarizer=True,
    )  # fmt: skip
    # Wait: 1.25*900 + (0.1*900 + 1.25*100) + warm compaction (0.1*1000 + 500 + 250).
    assert verdict.wait == pytest.approx(1_125 + 215 + 850)
    # Now: 1.25*900 + 500 + 250, then a round from 200: 0.1*200 + 1.25*100.
    assert verdict.now == pytest.approx(1_875 + 145)
    assert verdict.saving == pytest.approx(170) and verdict.cost == pytest.approx(750)


def test_a_fold_or_the_excerpt_is_priced_without_a_summary_request() -> None:
    """A compaction that asks no summarizer sends nothing but the compacted prompt.

    By hand: prefix 800 folded to 200, no growth, 10 rounds. Waiting: 1.25 * 800 + 10 * 0.1 *
    800. Folding now writes only the folded prompt, 1.25 * 200, then reads 0.1 * 200 a round:
    no cold write of the 800-token prefix, which only a summary request would send.
    """
    fold = price_cold_compaction(
        Terms(), pressure=800, post_tokens=200, summary_tokens=0, growth_per_round=0,
        rounds_seen=10, asks_summarizer=False,
    )  # fmt: skip
    assert (fold.wait, fold.now, fold.cost) == pytest.approx((1_800, 450, 250))
    assert fold.compact
    # Growth to the threshold inside the horizon: the warm compaction is a fold again, which
    # reads no prefix either. Wait: 1.25*900 + (0.1*900 + 1.25*100) + the fold's 1.25*200.
    grown = price_cold_compaction(
        Terms(), pressure=900, post_tokens=200, summary_tokens=0, growth_per_round=100,
        rounds_seen=1, asks_summarizer=False,
    )  # fmt: skip
    assert (grown.wait, grown.now) == pytest.approx((1_125 + 215 + 250, 250 + 145))


def test_an_output_without_a_summary_request_is_refused() -> None:
    """`summary_tokens` is the summarizer's output: a compaction that asks none has 0."""
    with pytest.raises(ConfigError) as info:
        price_cold_compaction(
            Terms(), pressure=800, post_tokens=200, summary_tokens=100, growth_per_round=0,
            rounds_seen=10, asks_summarizer=False,
        )  # fmt: skip
    assert info.value.key == "summary_tokens"


def test_a_saving_must_clear_the_margin_on_the_compactions_own_cost() -> None:
    """The horizon is a guess: a saving smaller than `SAVING_MARGIN` of the cost is declined."""
    assert not ColdVerdict(
        now=1_000, wait=1_000 + 0.9 * SAVING_MARGIN * 500, rounds=5, cost=500
    ).compact
    assert ColdVerdict(
        now=1_000, wait=1_000 + 1.1 * SAVING_MARGIN * 500 + 1e-6, rounds=5, cost=500
    ).compact
    assert not ColdVerdict(now=1_000, wait=1_000, rounds=5, cost=0).compact  # no saving


def test_the_horizon_is_bounded_and_inputs_checked() -> None:
    far = price_cold_compaction(
        Terms(), pressure=800, post_tokens=200, summary_tokens=0, growth_per_round=0,
        rounds_seen=10**9, asks_summarizer=False,
    )  # fmt: skip
    assert far.rounds == MAX_HORIZON


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("growth_per_round", math.nan),
        ("growth_per_round", math.inf),
        ("growth_per_round", -1.0),
        ("pressure", -1),
        ("post_tokens", -1),
        ("summary_tokens", -1),
        ("rounds_seen", -1),
        ("cache_read_price_ratio", math.nan),
        ("output_price_ratio", math.inf),
    ],
)
def test_the_price_refuses_inputs_that_are_not_finite_and_non_negative(
    key: str, value: float
) -> None:
    """NaN, infinity or a negative input raise `ConfigError` naming it, never a silent price.

    A NaN growth made every comparison false: the verdict said "wait" whatever the prices.
    """
    terms = Terms()
    inputs: dict[str, float] = {
        "pressure": 800, "post_tokens": 200, "summary_tokens": 100, "growth_per_round": 0,
        "rounds_seen": 10,
    }  # fmt: skip
    if key in inputs:
        inputs[key] = value
    else:
        setattr(terms, key, value)
    with pytest.raises(ConfigError) as info:
        price_cold_compaction(terms, **inputs, asks_summarizer=True)  # type: ignore[arg-type]
    assert info.value.key == key and "finite" in str(info.value)


# -- the engine ----------------------------------------------------------------------------------


def cold_policy(**knobs: Any) -> CompactionPolicy:
    """The engine tests' 10k window, a 300-second cache lifetime, a cold threshold of 4,000."""
    return policy(**{"cache_ttl_seconds": 300, "cold_threshold_ratio": 0.5, **knobs})


def cold_session(
    clock: SimClock, *, rounds: int = 6, state: EngineState | None = None, **knobs: object
) -> Session:
    """A 10k window (threshold 8,000) at about 5,300 tokens, a 300-second cache lifetime."""
    record = MemoryRecord()
    start(record)
    add_rounds(record, 0, rounds)
    hooks = CompactionHooks(
        record, cold_policy(**knobs), summarizer=FakeSummarizer(), state=state, clock=clock
    )
    return Session(hooks)


async def warm_up(
    s: Session, clock: SimClock, steps: int, *, first: int = 100, tokens: int = 5
) -> None:
    """`steps` requests 8 seconds apart, each after a small round (the session's history)."""
    for i in range(steps):
        add_rounds(s.record, first + i, 1, tokens=tokens)  # 5: about 100 tokens
        clock.now += 8
        action = await s.step()
        assert not action.compactions


def cold_boundaries(s: Session) -> list[CompactionBoundary]:
    return [
        e.event
        for e in s.record.entries
        if isinstance(e.event, CompactionBoundary) and e.event.trigger == "cold_cache"
    ]


async def test_a_request_after_the_cache_expired_compacts_first() -> None:
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await warm_up(s, clock, 20)
    before = s.hooks.pressure()
    assert s.hooks.policy.cold_threshold_tokens <= before < s.hooks.policy.threshold_tokens
    clock.now += 301  # the user was away longer than the cache lives
    action = await s.step()
    assert [o.trigger for o in action.compactions] == ["cold_cache"]
    assert action.gate == "below_threshold"
    assert len(cold_boundaries(s)) == 1
    assert s.hooks.pressure() < before
    state = s.hooks.state
    assert state.last_post_tokens == action.compactions[0].post_tokens  # the hysteresis base
    assert (state.consecutive_failures, state.rapid_refills, state.circuit) == (0, 0, None)
    clock.now += 8
    assert not (await s.step()).compactions  # warm again


async def test_no_cold_compaction_while_the_cache_lives_or_below_the_cold_threshold() -> None:
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await warm_up(s, clock, 20)
    clock.now += 299
    assert not (await s.step()).compactions
    low = cold_session(clock, rounds=1)  # about 3,000 tokens: under the cold threshold
    await warm_up(low, clock, 20)
    assert low.hooks.pressure() < low.hooks.policy.cold_threshold_tokens
    clock.now += 3_600
    assert not (await low.step()).compactions


async def test_a_cold_compaction_must_pay_for_itself() -> None:
    """A short session (eight rounds): as many ahead do not pay back a summary and a rewrite."""
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await warm_up(s, clock, 2)
    clock.now += 3_600
    assert not (await s.step()).compactions
    assert not cold_boundaries(s)


@pytest.mark.parametrize(
    ("knobs", "action"),
    [
        ({"fold_first": True}, "compact"),  # folding the old results frees enough
        ({"summarizer_enabled": False, "keep_last_tool_results": 100}, "excerpt"),  # no fold
    ],
)
async def test_a_fold_or_an_excerpt_pays_at_once_on_a_cold_cache(
    knobs: dict[str, Any], action: str
) -> None:
    """Two rounds seen: a compaction that sends no summary request pays at once.

    It writes the shorter prompt instead of the longer one; a summary request would write the
    longer one and more (its loss is what the cold threshold bounds, not the price).
    """
    clock = SimClock(1_000.0)
    s = cold_session(clock, **knobs)
    await warm_up(s, clock, 2)
    clock.now += 3_600
    compactions = (await s.step()).compactions
    assert [(o.trigger, o.action) for o in compactions] == [("cold_cache", action)]


async def test_the_host_reports_a_cold_cache_and_an_unknown_lifetime_waits_for_it() -> None:
    clock = SimClock(1_000.0)
    s = cold_session(clock, cache_ttl_seconds=None)
    await warm_up(s, clock, 20)
    clock.now += 86_400  # a day: with no known lifetime the clock alone says nothing
    assert not (await s.step()).compactions
    s.hooks.report_cache_cold()
    action = await s.step()
    assert [o.trigger for o in action.compactions] == ["cold_cache"]
    assert not s.hooks.state.cache_reported_cold  # the request warmed it again


async def test_no_cold_compaction_with_a_circuit_open_or_inside_the_hysteresis() -> None:
    clock = SimClock(1_000.0)
    # 30 healthy rounds would close the circuit: it stays open through the 20 here.
    thrashing = cold_session(clock, state=EngineState(circuit="rapid_refill"), max_rapid_refills=10)
    near = cold_session(clock, state=EngineState(last_post_tokens=6_500))  # margin 1,000
    for s in (thrashing, near):
        await warm_up(s, clock, 20)
        clock.now += 3_600
        assert not (await s.step()).compactions, s.hooks.state
    assert thrashing.hooks.state.circuit == "rapid_refill"


async def test_the_quiet_and_the_full_path_agree_on_the_round_a_cold_circuit_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the round that closes an open circuit, the cold rule may compact: on either path.

    `quiet_step` decides with the circuit as the round leaves it (`circuit_after_healthy`),
    as the full path does after `gate_round`; deciding with the circuit as it was, the quiet
    path would let the closing round go by and compact a round late. The same session runs
    twice, once with the quiet path off; every round must end the same.
    """
    runs = []
    for quiet in (True, False):
        clock = SimClock(1_000.0)
        # The circuit closes after 30 healthy rounds (refill window 3 x 10 refills).
        opened = EngineState(circuit="rapid_refill", healthy_rounds=15)
        s = cold_session(clock, state=opened, max_rapid_refills=10)
        if not quiet:
            monkeypatch.setattr(s.hooks, "quiet_step", lambda ctx: None)
        await warm_up(s, clock, 5)
        rounds = []
        for i in range(12):
            add_rounds(s.record, 200 + i, 1, tokens=5)
            clock.now += 301  # every request finds the cache cold
            triggers = [o.trigger for o in (await s.step()).compactions]
            rounds.append((triggers, s.hooks.state))
        runs.append(rounds)
    assert runs[0] == runs[1]
    closing = next(i for i, (_, state) in enumerate(runs[0]) if state.circuit is None)
    assert [i for i, (triggers, _) in enumerate(runs[0]) if triggers] == [closing]
    assert runs[0][closing][0] == ["cold_cache"]


async def test_the_first_request_of_a_process_is_not_known_to_be_cold() -> None:
    """No request yet in this process: the clock says nothing about the provider's cache.

    The record is the one that compacts after an idle hour when its requests were sent by
    this process (the test above), so taken for cold the first request would compact too.
    """
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    add_rounds(s.record, 100, 20, tokens=5)  # the history of `warm_up(s, clock, 20)`
    assert s.hooks.policy.cold_threshold_tokens <= s.hooks.pressure()
    clock.now += 86_400
    assert not (await s.step()).compactions


async def compacted_record(record: Record, clock: SimClock, *, after: int) -> None:
    """Six large rounds compacted by hand (a checkpoint follows the boundary), `after` more."""
    start(record)
    add_rounds(record, 0, 6)
    s = Session(CompactionHooks(record, policy(), summarizer=FakeSummarizer(), clock=clock))
    s.hooks.request_compact()
    assert [o.trigger for o in (await s.step()).compactions] == ["manual"]
    add_rounds(record, 6, after)


@pytest.mark.parametrize("store", [JsonlRecord, SqliteRecord])
async def test_a_resumed_record_that_waits_leaves_its_older_entries_unread(
    tmp_path: Path, store: type[JsonlRecord | SqliteRecord], caplog: pytest.LogCaptureFixture
) -> None:
    """Pricing a cold compaction reads the projection only: a resumed record stays resumed.

    Planning a compaction for real reads each message's round and the goal from the record,
    which loads every entry before the checkpoint; a price that says "wait" must not.
    """
    clock = SimClock(1_000.0)
    path = tmp_path / "session"
    with store(path) as record:
        await compacted_record(record, clock, after=3)
    with store(path) as record:
        assert record.resumed_at is not None
        hooks = CompactionHooks(record, cold_policy(), summarizer=FakeSummarizer(), clock=clock)
        assert hooks.policy.cold_threshold_tokens <= hooks.pressure()
        hooks.report_cache_cold()
        with caplog.at_level(logging.INFO, logger="steerable_compaction.engine"):
            action = await Session(hooks).step()
        assert not action.compactions and "waiting" in caplog.text  # priced, and declined
        assert record.resumed_at is not None


async def test_a_restarted_process_prices_a_cold_cache_as_the_one_that_wrote_the_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The horizon and the growth come from the session's record, not the process's counters.

    The writer's state goes on in one copy of the record; a fresh engine (a restart) opens
    the other, resumed from its checkpoint, with nothing but the record to go by. The host
    says the cache is cold: both price the same, and both compact.
    """
    clock = SimClock(1_000.0)
    written = tmp_path / "written.db"
    with SqliteRecord(written) as record:
        await compacted_record(record, clock, after=0)
        s = Session(
            CompactionHooks(record, cold_policy(), summarizer=FakeSummarizer(), clock=clock)
        )
        await warm_up(s, clock, 20, tokens=50)
        state = s.hooks.state
    shutil.copyfile(written, tmp_path / "restarted.db")
    prices = []
    for name, carried in (("written.db", state), ("restarted.db", None)):
        with SqliteRecord(tmp_path / name) as record:
            assert record.resumed_at is not None
            hooks = CompactionHooks(
                record, cold_policy(), summarizer=FakeSummarizer(), state=carried, clock=clock
            )
            hooks.report_cache_cold()
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="steerable_compaction.engine"):
                action = await Session(hooks).step()
            prices.append([r.getMessage() for r in caplog.records if "cache cold" in r.message])
            assert [o.trigger for o in action.compactions] == ["cold_cache"], prices
    assert prices[0] == prices[1] and len(prices[0]) == 1


async def test_growth_is_measured_from_where_an_overflow_compaction_left_the_context() -> None:
    """The retried request is the shorter one: the next round's growth starts from it.

    Measured from the refused request instead, the round after the overflow added nothing.
    """
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await s.step()
    add_rounds(s.record, 100, 1)
    await s.step()
    one_round = s.hooks.state.growth_per_round
    assert one_round > 500
    retry = await s.overflow()
    assert retry is not None and retry.compactions
    add_rounds(s.record, 101, 1)
    await s.step()
    assert s.hooks.state.growth_per_round == pytest.approx(one_round, rel=0.02)


async def test_a_compaction_between_steps_is_not_a_round() -> None:
    """`compact_now` sends no request: the cache clock, the rounds and the growth stay true.

    A host's `agent.chat.compact` with `now` runs it between turns; counted as a request, it
    warmed a cache nothing read, and split the next round's growth over two rounds.
    """
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await s.step()
    add_rounds(s.record, 100, 1)
    clock.now += 8
    await s.step()
    before = s.hooks.state
    clock.now += 60
    action = await s.hooks.compact_now(StepContext(record=s.record, round=s.round, turn=s.turn))
    assert [o.trigger for o in action.compactions] == ["manual"]
    after = s.hooks.state
    assert (after.steps, after.last_request_at) == (before.steps, before.last_request_at)
    add_rounds(s.record, 101, 1)
    await s.step()
    assert s.hooks.state.growth_per_round == pytest.approx(before.growth_per_round, rel=0.02)


def test_compactor_compacts_on_a_cold_cache() -> None:
    """The sync shell's quiet step hands a cold step to the full one."""
    clock = SimClock(1_000.0)
    record = MemoryRecord()
    compactor = Compactor(
        cold_policy(),
        record=record,
        summarizer=FakeSummarizer(),
        clock=clock,
    )
    opening = [Message.system("You are a careful coding agent."), Message.user("Fix the parser.")]
    compactor.extend([*opening, *(m for i in range(6) for m in tool_round(i, body(600)))])
    for i in range(20):
        clock.now += 8
        compactor.extend(tool_round(100 + i, body(5)))
    assert not record.compactions()
    clock.now += 600
    compactor.extend([Message.user("Back again: where were we?")])
    assert [c.trigger for c in record.compactions()] == ["cold_cache"]


async def test_a_policy_set_on_the_hooks_holds_for_the_cold_rule_too() -> None:
    """A host that turns the rule off by setting a new policy on the hooks turns it off."""
    clock = SimClock(1_000.0)
    s = cold_session(clock)
    await warm_up(s, clock, 20)
    s.hooks.policy = s.hooks.policy.replace(cache_ttl_seconds=None)
    clock.now += 3_600
    action = await s.step()
    assert not action.compactions, [o.trigger for o in action.compactions]
