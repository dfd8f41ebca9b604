from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall, tokens
from steerable_compaction.tokens import (
    DEFAULT_FAMILY,
    Observation,
    TokenMeter,
    calibration_for,
    estimate_tokens,
)


def transcript(n: int) -> list[Message]:
    out = [Message.system("You are a careful agent."), Message.user("Fix the bug in app.py")]
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}.py"}}')
        out.append(Message.assistant(f"Reading file {i}.", [call]))
        out.append(Message.tool(f"c{i}", f"def f{i}(x):\n    return x * {i}\n"))
    return out


def test_r7_first_request_is_estimated_whole() -> None:
    """Before any observation, pressure is the estimate of the whole transcript."""
    messages = transcript(5)
    meter = TokenMeter("gpt-4o")
    assert meter.last_observed is None
    assert meter.pressure(messages) == estimate_tokens(messages, "gpt-4o") == 378  # golden value
    assert meter.last_observed is None  # the estimate anchors the meter, but nobody billed it


def test_r7_pressure_is_observed_tokens_plus_new_message_estimate() -> None:
    """After `observe`, pressure = billed prompt tokens + estimate of the messages after them."""
    messages = transcript(5)
    meter = TokenMeter("gpt-4o")
    meter.pressure(messages)
    meter.observe(9_000, len(messages))
    assert meter.last_observed == Observation(prompt_tokens=9_000, message_count=12)
    assert meter.pressure(messages) == 9_000
    new = [Message.assistant("Done."), Message.user("Thanks, now run the tests.")]
    assert meter.pressure(messages + new) == 9_000 + estimate_tokens(new, "gpt-4o")
    meter.observe(9_100, len(messages) + 2)  # the observation follows the newest call
    assert meter.last_observed == Observation(prompt_tokens=9_100, message_count=14)


def test_r7_pressure_costs_o_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message is estimated once; after `observe` only messages appended since count."""
    calls: list[Message] = []
    real = tokens.estimate._message_cost

    def counting(message: Message, cal: tokens.Calibration, *price: Any) -> int:
        calls.append(message)
        return real(message, cal, *price)

    monkeypatch.setattr(tokens.meter, "_message_cost", counting)
    messages = transcript(500)
    meter = TokenMeter("gpt-4o")
    meter.observe(250_000, len(messages))
    new = [Message.user(f"step {i}") for i in range(3)]
    assert meter.pressure(messages + new) == 250_000 + sum(
        real(m, calibration_for("gpt-4o")) for m in new
    )
    assert calls == new
    meter.pressure(messages + new)
    assert len(calls) == 3  # cached by identity
    fresh = TokenMeter("gpt-4o")
    fresh.pressure(messages)
    fresh.pressure(messages)
    assert len(calls) == 3 + len(messages)


def test_r9_rewrite_resets_the_observation() -> None:
    """After `rewrite` there is no observation until the next request is observed."""
    messages = transcript(3)
    meter = TokenMeter("gpt-4o")
    meter.observe(5_000, len(messages))
    after = [messages[0], messages[1], Message.user("<compacted-summary>...</compacted-summary>")]
    meter.rewrite(messages, after)
    assert meter.last_observed is None
    meter.observe(1_200, len(after))
    assert meter.last_observed == Observation(prompt_tokens=1_200, message_count=3)
    assert meter.pressure(after) == 1_200


def test_r10_rewrite_keeps_pressure_continuous() -> None:
    """Replaced messages leave at their estimate, the summary enters at its own estimate."""
    messages = transcript(4)  # 10 messages
    meter = TokenMeter("gpt-4o")
    meter.observe(20_000, len(messages))
    summary = Message.user(
        "<compacted-summary>Read f0..f2; nothing broken yet.</compacted-summary>"
    )
    after = [*messages[:2], summary, *messages[8:]]
    removed = messages[2:8]
    expected = 20_000 - estimate_tokens(removed, "gpt-4o") + estimate_tokens(summary, "gpt-4o")
    assert meter.rewrite(messages, after) == expected
    assert meter.pressure(after) == expected
    new = Message.assistant("Next I will run the tests.")
    assert meter.pressure([*after, new]) == expected + estimate_tokens(new, "gpt-4o")


def test_r10_rewrite_compares_by_identity() -> None:
    """An equal but distinct message counts as replaced; kept objects are not re-priced."""
    messages = transcript(2)
    meter = TokenMeter("gpt-4o")
    meter.observe(3_000, len(messages))
    copy = Message.user("Fix the bug in app.py")
    assert copy == messages[1] and copy is not messages[1]
    assert meter.rewrite(messages, [messages[0], copy, *messages[2:]]) == 3_000
    assert meter.pressure([messages[0], copy, *messages[2:]]) == 3_000


def test_r10_rewrite_never_goes_negative() -> None:
    """If the estimate of what left exceeds the carried pressure, pressure floors at zero."""
    messages = transcript(3)
    meter = TokenMeter("gpt-4o")
    meter.observe(10, len(messages))  # a provider that under-reports
    assert meter.rewrite(messages, []) == 0


def test_r7_meter_rejects_bad_input() -> None:
    """Negative counts, non-integers and transcripts shorter than the anchor are refused."""
    meter = TokenMeter()
    with pytest.raises(ValueError, match="prompt_tokens must be >= 0"):
        meter.observe(-1, 0)
    with pytest.raises(ValueError, match="message_count must be >= 0"):
        meter.observe(10, -2)
    with pytest.raises(TypeError, match="prompt_tokens must be an int"):
        meter.observe(True, 1)
    with pytest.raises(TypeError, match="message_count must be an int"):
        meter.observe(10, 1.5)  # type: ignore[arg-type]

    class Count(int):
        """An int subclass (not a bool) is a count too."""

    meter.observe(Count(7), Count(3))
    assert meter.last_observed == Observation(prompt_tokens=7, message_count=3)
    meter.observe(100, 5)
    assert meter.last_observed == Observation(prompt_tokens=100, message_count=5)
    assert repr(meter.last_observed) == repr(Observation(prompt_tokens=100, message_count=5))
    with pytest.raises(ValueError, match=r"has 2 messages but .* first 5; call rewrite\(\)"):
        meter.pressure(transcript(0))


def test_r7_meter_properties() -> None:
    """The meter reports its model, family and (by default fixed) online factor."""
    meter = TokenMeter("claude-sonnet-4-5")
    assert (meter.model, meter.family, meter.calibration) == ("claude-sonnet-4-5", "claude", 1.0)
    assert TokenMeter().family == DEFAULT_FAMILY


_learned_messages: dict[int, list[Message]] = {}


def _learn(meter: TokenMeter, ratio: float, rounds: int) -> None:
    """A first request, then `rounds` more whose new messages were billed `ratio` x estimated."""
    messages = transcript(20)
    meter.pressure(messages)
    meter.observe(10_000, len(messages))
    _learned_messages[id(meter)] = messages
    _continue(meter, ratio, rounds)


def _continue(meter: TokenMeter, ratio: float, rounds: int) -> None:
    messages = _learned_messages[id(meter)]
    observed = meter.last_observed
    assert observed is not None
    billed = observed.prompt_tokens
    for _ in range(rounds):
        new = Message.tool(f"r{len(messages)}", "lorem ipsum dolor sit amet " * 60)
        raw = estimate_tokens(new, meter.model)
        messages = [*messages, new]
        meter.pressure(messages)
        billed += round(raw * ratio)
        meter.observe(billed, len(messages))
    _learned_messages[id(meter)] = messages


def test_r8_online_calibration_learns_from_the_first_span_then_averages() -> None:
    """The first billed span sets the factor (2.0); the next one is averaged in, weighing most."""
    meter = TokenMeter("gpt-4o")
    _learn(meter, 2.0, 1)
    assert meter.calibration == pytest.approx(2.0, abs=1e-3)
    assert meter.calibration_samples == 1
    base = meter.last_observed
    assert base is not None
    new = Message.user("lorem ipsum " * 100)
    probe = [Message.user("p")] * base.message_count + [new]
    raw = estimate_tokens(new, "gpt-4o")
    assert meter.pressure(probe) == base.prompt_tokens + math.ceil(raw * meter.calibration)
    assert meter.estimate(new) == meter.calibrated(raw) == math.ceil(raw * meter.calibration)
    again = TokenMeter("gpt-4o")
    _learn(again, 2.0, 1)
    _continue(again, 1.0, 1)
    assert again.calibration == pytest.approx((2.0 * 0.5 + 1.0) / 1.5, abs=1e-3)


@pytest.mark.parametrize("model", [None, "gpt-4o", "qwen2.5-72b", "some-new-model"])
@given(ratio=st.floats(0.3, 3.0))
def test_r8_calibration_converges_within_three_observations(
    model: str | None, ratio: float
) -> None:
    """For any model, after 3 billed requests new messages are estimated within 0.9-1.1x."""
    meter = TokenMeter(model)
    _learn(meter, ratio, 2)  # observations 1, 2 and 3
    new = Message.tool("next", "the parser reads each token and records its position " * 40)
    billed = estimate_tokens(new, model) * ratio
    assert 0.9 <= meter.estimate(new) / billed <= 1.1


def test_r8_online_calibration_is_bounded_and_ignores_implausible_spans() -> None:
    """Spans billed over 5x or under 0.2x their estimate are not believed; the factor is bounded."""
    for wild in (10.0, 0.01):
        meter = TokenMeter("gpt-4o")
        _learn(meter, wild, 30)
        assert (meter.calibration, meter.calibration_samples) == (1.0, 0)
    high = TokenMeter("gpt-4o")
    _learn(high, 4.8, 30)
    assert high.calibration == 4.0
    low = TokenMeter("gpt-4o")
    _learn(low, 0.21, 30)
    assert low.calibration == 0.25


def test_r8_online_calibration_can_be_turned_off_and_skips_small_samples() -> None:
    """Turned off, the factor stays 1.0; spans under 200 estimated tokens teach nothing."""
    meter = TokenMeter("gpt-4o", online_calibration=False)
    _learn(meter, 2.0, 5)
    assert meter.calibration == 1.0
    learner = TokenMeter("gpt-4o")
    messages = transcript(1)
    learner.pressure(messages)
    learner.observe(1_000, len(messages))
    messages = [*messages, Message.user("short")]
    learner.pressure(messages)
    learner.observe(1_500, len(messages))
    assert learner.calibration == 1.0


def test_r8_counts_without_the_cached_prefix_teach_nothing() -> None:
    """A host passing only uncached tokens (a count that drops, then creeps) leaves the factor."""
    meter = TokenMeter("gpt-4o")
    messages = transcript(20)
    meter.pressure(messages)
    meter.observe(9_000, len(messages))  # cold: the whole prompt
    for i, uncached in enumerate((400, 430, 455)):  # warm: only the new tail is reported
        messages = [*messages, Message.tool(f"r{i}", "lorem ipsum dolor sit amet " * 60)]
        meter.pressure(messages)
        meter.observe(uncached, len(messages))
    assert (meter.calibration, meter.calibration_samples) == (1.0, 0)


def test_r10_a_learned_factor_scales_the_spans_a_rewrite_removes() -> None:
    """Once learned (here 1.5), the factor prices a rewrite's spans; unlearned, never above 1."""
    meter = TokenMeter("gpt-4o")
    _learn(meter, 1.5, 2)
    assert meter.calibration == pytest.approx(1.5, abs=1e-2)
    messages = _learned_messages[id(meter)]
    after = messages[:5] + messages[-2:]
    removed = sum(meter._raw(m) for m in messages[5:-2])
    old = meter.pressure(messages)
    assert meter.preview_rewrite(messages, after) == round(old - meter.calibration * removed)
    static = TokenMeter("gpt-4o", online_calibration=False)
    _learn(static, 1.5, 2)
    assert static.preview_rewrite(messages, after) >= old - removed  # scaled by at most 1.0


def test_r9_online_calibration_ignores_the_request_after_a_rewrite() -> None:
    """The first observation after a rewrite re-anchors without teaching the factor."""
    meter = TokenMeter("gpt-4o", online_calibration=True)
    messages = transcript(2)
    meter.observe(2_000, len(messages))
    after = [messages[0], Message.user("summary " * 300)]
    meter.rewrite(messages, after)
    meter.pressure(after)
    meter.observe(50_000, len(after))
    assert meter.calibration == 1.0


def test_r7_the_first_whole_estimate_anchors_later_calls_before_any_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: without provider usage, later calls still cost O(new messages)."""
    import steerable_compaction.tokens as tokens_module

    meter = tokens_module.TokenMeter()
    messages = [Message.user(f"message {i}") for i in range(50)]
    first = meter.pressure(messages)
    calls: list[Message] = []
    real = tokens_module.estimate._message_cost

    def counting(message: Message, cal: tokens_module.Calibration, *price: Any) -> int:
        calls.append(message)
        return real(message, cal, *price)

    monkeypatch.setattr(tokens_module.meter, "_message_cost", counting)
    meter._cache.clear()
    extra = Message.user("one more")
    assert meter.pressure([*messages, extra]) == first + real(extra, meter._cal)
    assert calls == [extra]
    assert meter.last_observed is None


def test_r10_rewrite_scales_an_over_estimated_span_down_to_billed_units() -> None:
    """Regression: removing a span the estimate over-prices never drives pressure to zero."""
    meter = TokenMeter()
    messages = [Message.user("alpha beta gamma delta " * 50) for _ in range(10)]
    whole = sum(meter.estimate(m) for m in messages)
    meter.observe(whole // 2, len(messages))  # the provider billed half the estimate
    after = messages[5:]
    new = meter.rewrite(messages, after)
    assert new == round(
        whole // 2 - (whole // 2 / whole) * sum(meter.estimate(m) for m in messages[:5])
    )
    assert new > 0
