"""Tests for `steerable_compaction.policy`: validation, tiers, threshold, catalogue, round trips."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import policy as policy_module
from steerable_compaction.errors import ConfigError
from steerable_compaction.policy import (
    CompactionPolicy,
    resolve_compaction_policy,
    resolve_context_window,
)

DESKTOP: dict[str, object] = {
    "keep_last_messages": 6,
    "keep_last_tool_results": 2,
    "fold_excerpt_chars": 160,
    "keep_last_images": 1,
    "fold_first": False,
    "retention_token_ratio": 0.3,
}
LARGE: dict[str, object] = {
    "keep_last_messages": 16,
    "keep_last_tool_results": 16,
    "fold_excerpt_chars": 4000,
    "keep_last_images": 4,
    "fold_first": True,
    "retention_token_ratio": 0.1,
}
MODELS = [
    None,
    "unknown-model",
    "gpt-4",
    "gpt-4o",
    "gpt-4.1",
    "gpt-5",
    "o3",
    "claude-3-5-haiku",
    "claude-sonnet-4",
    "deepseek-chat",
    "deepseek-reasoner",
    "qwen2.5-7b-instruct",
    "gemma-3-1b-it",
    "llama3",
    "qwq-32b",
]


def _scaled(window: int, ratio: float) -> int:
    return int(Decimal(window) * Decimal(repr(ratio)))


def _knobs(policy: CompactionPolicy, names: dict[str, object]) -> dict[str, object]:
    return {name: getattr(policy, name) for name in names}


# -- validation ---------------------------------------------------------------------------------

_INT_ALLOWED = {
    "keep_last_messages": "an int >= 1",
    "keep_last_tool_results": "an int >= 0",
    "fold_excerpt_chars": "an int >= 0",
    "keep_last_images": "an int >= 0",
    "micro_compact_interval_rounds": "an int >= 0",
    "rapid_refill_window_rounds": "an int >= 1",
    "max_rapid_refills": "an int >= 1",
    "max_consecutive_failures": "an int >= 1",
    "max_overflow_retries": "an int >= 0",
    "reserved_output_tokens": "an int >= 0 or None",
    "headroom_tokens": "an int >= 0 or None",
    "recall_result_tokens": "an int >= 256",
}
_LOWEST = {key: int(allowed.split(">= ")[1].split()[0]) for key, allowed in _INT_ALLOWED.items()}

BAD_VALUES: list[tuple[str, object, str]] = [
    *[
        (key, bad, allowed)
        for key, allowed in _INT_ALLOWED.items()
        for bad in (True, 2.0, "3", _LOWEST[key] - 1)
    ],
    *[(key, None, allowed) for key, allowed in _INT_ALLOWED.items() if "None" not in allowed],
    *[
        ("max_context_tokens", bad, "an int in [1024, 100000000]")
        for bad in (None, True, 128_000.0, "128000", 0, 1023, 100_000_001)
    ],
    *[
        ("threshold_ratio", bad, "a float in (0, 1]")
        for bad in (0, 0.0, -0.1, 1.5, float("nan"), float("inf"), True, "0.8", None)
    ],
    *[
        ("recompact_margin_ratio", bad, "a float in [0, 1)")
        for bad in (-0.01, 1, 1.0, float("nan"), False, "0.1", None)
    ],
    *[
        ("tail_token_ratio", bad, "a float in (0, 1]")
        for bad in (0, 0.0, -0.5, 1.01, float("nan"), True, "0.25", None)
    ],
    *[
        ("keep_user_messages_ratio", bad, "a float in [0, 1)")
        for bad in (-0.01, 1, 1.0, float("nan"), False, "0.1", None)
    ],
    *[
        ("head_token_ratio", bad, "a float in [0, 1]")
        for bad in (-0.01, 1.01, float("nan"), True, "0.25", None)
    ],
    *[
        ("retention_token_ratio", bad, "a float in [0, 1)")
        for bad in (-0.01, 1, 1.0, float("nan"), False, "0.1", None)
    ],
    *[
        ("summary_chain_ratio", bad, "a float in [0, 1]")
        for bad in (-0.01, -0.5, 1.01, float("nan"), True, "0.25", None)
    ],
    *[
        ("cold_threshold_ratio", bad, "a float in (0, 1]")
        for bad in (0, 0.0, -0.1, 1.01, float("nan"), True, "0.5", None)
    ],
    *[
        ("cache_read_price_ratio", bad, "a float in [0, 1]")
        for bad in (-0.01, 1.5, float("nan"), True, "0.1", None)
    ],
    *[
        ("cache_write_price_ratio", bad, "a float in [1, 10]")
        for bad in (0.5, 11, float("inf"), float("nan"), True, "1.25", None)
    ],
    *[
        ("output_price_ratio", bad, "a float in (0, 100]")
        for bad in (0, -1, 101, float("nan"), True, "5", None)
    ],
    *[
        ("cache_ttl_seconds", bad, "a number of seconds in (0, 604800] or None (unknown)")
        for bad in (0, -1, 604_801, float("inf"), float("nan"), True, "300")
    ],
    *[
        (key, bad, "a bool")
        for key in ("image_offload", "summarizer_enabled", "fold_first")
        for bad in (1, 0, "yes", None)
    ],
]


@pytest.mark.parametrize(("knob", "bad", "allowed"), BAD_VALUES)
def test_every_knob_rejects_bad_values_naming_the_knob_and_range(
    knob: str, bad: object, allowed: str
) -> None:
    """Each bad value raises `ConfigError` with `.key` = the knob and the allowed range."""
    values: dict[str, object] = {"max_context_tokens": 128_000, knob: bad}
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy.from_dict(values)
    assert caught.value.key == knob
    assert allowed in caught.value.allowed
    assert caught.value.allowed in str(caught.value)
    assert knob in str(caught.value)


def test_every_knob_is_covered_by_the_validation_table() -> None:
    """The parametrized bad values above reach every knob of the policy."""
    covered = {knob for knob, _, _ in BAD_VALUES}
    assert covered == {field.name for field in dataclasses.fields(CompactionPolicy)}


def test_ratios_given_as_ints_are_stored_as_floats() -> None:
    """`threshold_ratio=1` (as JSON may deliver it) is kept as the float 1.0."""
    policy = CompactionPolicy(max_context_tokens=8192, threshold_ratio=1, recompact_margin_ratio=0)
    assert type(policy.threshold_ratio) is float and policy.threshold_ratio == 1.0
    assert type(policy.recompact_margin_ratio) is float


def test_r4_defaults_are_the_desktop_tier() -> None:
    """A directly built policy carries the checklist's defaults (the desktop tier)."""
    policy = CompactionPolicy(max_context_tokens=128_000)
    assert _knobs(policy, DESKTOP) == DESKTOP
    assert policy.threshold_ratio == 0.8 and policy.recompact_margin_ratio == 0.1
    assert policy.image_offload and policy.summarizer_enabled
    assert policy.micro_compact_interval_rounds == 0
    assert (policy.rapid_refill_window_rounds, policy.max_rapid_refills) == (3, 3)
    assert (policy.max_consecutive_failures, policy.max_overflow_retries) == (3, 2)
    assert policy.reserved_output_tokens is None and policy.headroom_tokens is None
    assert (policy.tail_token_ratio, policy.keep_user_messages_ratio) == (0.25, 0.125)


def test_recall_result_tokens_defaults_to_2000_and_accepts_256_up() -> None:
    """The history tools' result cap is 2,000 tokens in both tiers; 256 is the least allowed."""
    assert CompactionPolicy(max_context_tokens=8_192).recall_result_tokens == 2000
    assert resolve_compaction_policy("gpt-4.1").recall_result_tokens == 2000
    assert resolve_compaction_policy("gpt-4o", recall_result_tokens=256).recall_result_tokens == 256
    with pytest.raises(ConfigError, match="recall_result_tokens=255"):
        resolve_compaction_policy("gpt-4o", recall_result_tokens=255)


def test_tail_and_user_message_budgets_are_shares_of_the_threshold() -> None:
    """`max_tail_tokens` and `user_message_tokens` scale with the threshold, not the window."""
    policy = resolve_compaction_policy(None, 16_384)
    assert policy.threshold_tokens == 13_107
    assert (policy.max_tail_tokens, policy.user_message_tokens) == (3_276, 1_638)
    off = policy.replace(keep_user_messages_ratio=0, tail_token_ratio=1)
    assert (off.max_tail_tokens, off.user_message_tokens) == (13_107, 0)
    assert type(off.tail_token_ratio) is float
    tiny = resolve_compaction_policy(None, 1_024, threshold_ratio=0.001, tail_token_ratio=0.01)
    assert tiny.threshold_tokens == 1 and tiny.max_tail_tokens == 1  # never a zero cap


# -- threshold (R11) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "threshold"),
    [
        (4_096, 3_276),
        (8_192, 6_553),
        (32_768, 26_214),
        (128_000, 102_400),
        (200_000, 160_000),
        (1_000_000, 800_000),
        (2_000_000, 1_600_000),
    ],
)
def test_r11_threshold_at_typical_windows(window: int, threshold: int) -> None:
    """With derived reserve and headroom the threshold is 0.8 x window from 4k to 2M."""
    assert resolve_compaction_policy(None, window).threshold_tokens == threshold
    assert CompactionPolicy(max_context_tokens=window).threshold_tokens == threshold


@given(window=st.integers(4_096, 2_000_000), model=st.sampled_from(MODELS))
def test_r11_threshold_positive_across_windows(window: int, model: str | None) -> None:
    """Every resolved threshold is positive, <= window x ratio, and leaves reserve + headroom."""
    policy = resolve_compaction_policy(model, window)
    threshold = policy.threshold_tokens
    reserve, headroom = policy.reserved_output_tokens, policy.headroom_tokens
    assert reserve is not None and headroom is not None
    assert 1 <= threshold <= _scaled(window, policy.threshold_ratio)
    assert threshold + reserve + headroom <= window
    assert 0 < reserve and 0 < headroom <= 65_536
    if model != "gpt-5":  # the only catalogued model with a separate input limit
        assert threshold >= min(_scaled(window, policy.threshold_ratio), window * 11 // 16)


@given(window=st.integers(1_024, 2_000_000), ratio=st.floats(0.01, 1.0))
def test_r11_threshold_positive_for_any_ratio(window: int, ratio: float) -> None:
    """A directly built policy keeps a positive threshold within window x ratio."""
    policy = CompactionPolicy(max_context_tokens=window, threshold_ratio=ratio)
    assert 1 <= policy.threshold_tokens <= _scaled(window, ratio)
    assert policy.threshold_tokens >= min(_scaled(window, ratio), window * 11 // 16)


def test_r11_reserve_and_headroom_bind_when_large() -> None:
    """The second term wins when window - reserve - headroom is below window x ratio."""
    policy = CompactionPolicy(
        max_context_tokens=32_768, reserved_output_tokens=8_192, headroom_tokens=2_048
    )
    assert policy.threshold_tokens == 32_768 - 8_192 - 2_048


def test_r11_headroom_scales_with_window_up_to_the_reference_65536() -> None:
    """Derived headroom is window // 16, capped at the reference harness's 65,536."""
    assert CompactionPolicy(max_context_tokens=8_192).effective_headroom_tokens == 512
    assert CompactionPolicy(max_context_tokens=2_000_000).effective_headroom_tokens == 65_536


def test_r11_derived_values_follow_the_window_on_replace() -> None:
    """`None` reserve and headroom are recomputed when `replace` changes the window."""
    small = CompactionPolicy(max_context_tokens=8_192)
    large = small.replace(max_context_tokens=2_000_000)
    assert large.effective_reserved_output_tokens == 32_768
    assert large.threshold_tokens == 1_600_000


def test_r11_explicit_reserve_that_leaves_no_room_raises() -> None:
    """An explicit reserve that eats the window raises, naming the reserve and its range."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy(max_context_tokens=4_096, reserved_output_tokens=4_000)
    assert caught.value.key == "reserved_output_tokens"
    assert "[0, 3839]" in str(caught.value)  # 4096 - derived headroom 256 - 1


def test_r11_explicit_headroom_that_leaves_no_room_raises() -> None:
    """An explicit headroom that eats the window raises, naming the headroom."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy(max_context_tokens=4_096, reserved_output_tokens=96, headroom_tokens=4_000)
    assert caught.value.key == "headroom_tokens"
    assert "[0, 3999]" in str(caught.value)


def test_r11_ratio_too_small_for_the_window_raises() -> None:
    """A ratio whose threshold rounds to zero tokens raises on `threshold_ratio`."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy(max_context_tokens=1_024, threshold_ratio=0.0005)
    assert caught.value.key == "threshold_ratio"


def test_r31_recompact_margin_tokens_is_exact() -> None:
    """`recompact_margin_tokens` is floor(ratio x window) without float drift."""
    assert CompactionPolicy(max_context_tokens=128_000).recompact_margin_tokens == 12_800
    policy = CompactionPolicy(max_context_tokens=100_000, recompact_margin_ratio=0.29)
    assert policy.recompact_margin_tokens == 29_000


def test_r11_input_limited_model_stays_under_its_input_limit() -> None:
    """gpt-5 (400k window, 272k input) gets a threshold below 272k minus headroom."""
    policy = resolve_compaction_policy("gpt-5")
    assert policy.max_context_tokens == 400_000
    assert policy.threshold_tokens == 272_000 - 25_000


# -- tiers and family rules (R4) ----------------------------------------------------------------


def test_r4_tier_boundary_is_exactly_200k() -> None:
    """199,999 tokens is the desktop tier; 200,000 is the large tier."""
    assert _knobs(resolve_compaction_policy(None, 199_999), DESKTOP) == DESKTOP
    assert _knobs(resolve_compaction_policy(None, 200_000), LARGE) == LARGE


def test_r4_catalogue_window_selects_the_tier() -> None:
    """Without an explicit window the catalogue's window picks the tier."""
    assert _knobs(resolve_compaction_policy("gpt-4o"), DESKTOP) == DESKTOP
    assert _knobs(resolve_compaction_policy("claude-sonnet-4-20250514"), LARGE) == LARGE


def test_r4_reserve_follows_the_models_max_output() -> None:
    """A model's catalogued max output sets the reserve; unknown models use window // 8."""
    assert resolve_compaction_policy("claude-3-5-sonnet").reserved_output_tokens == 8_192
    assert resolve_compaction_policy("gpt-4o").reserved_output_tokens == 16_384
    assert resolve_compaction_policy("my-model", 64_000).reserved_output_tokens == 8_000
    assert resolve_compaction_policy("gpt-4").reserved_output_tokens == 8_192 // 4


def test_r4_reasoning_family_rule_reserves_the_output_cap() -> None:
    """The reasoning family rule reserves 32,768 where the catalogue knows no output limit."""
    assert resolve_compaction_policy("qwq-32b", 131_072).reserved_output_tokens == 32_768
    assert resolve_compaction_policy("deepseek-r1:70b", 131_072).reserved_output_tokens == 32_768
    assert resolve_compaction_policy("my-model", 131_072).reserved_output_tokens == 16_384
    # The window clamp still applies to a rule's output need.
    assert resolve_compaction_policy("qwq-32b", 8_192).reserved_output_tokens == 2_048


def test_r4_family_rule_wins_over_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """A family rule's knobs replace the tier's; knobs it leaves alone keep the tier value."""
    rule = policy_module._FamilyRule("test", knobs={"keep_last_messages": 10})
    monkeypatch.setattr(policy_module, "_FAMILY_RULES", (("acme-", rule),))
    policy = resolve_compaction_policy("acme-1", 128_000)
    assert policy.keep_last_messages == 10
    assert policy.keep_last_tool_results == DESKTOP["keep_last_tool_results"]
    assert resolve_compaction_policy("other", 128_000).keep_last_messages == 6


def test_r4_overrides_win_over_family_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit overrides beat both the family rule and the tier."""
    rule = policy_module._FamilyRule("test", knobs={"keep_last_messages": 10})
    monkeypatch.setattr(policy_module, "_FAMILY_RULES", (("acme-", rule),))
    policy = resolve_compaction_policy(
        "acme-1", 128_000, keep_last_messages=3, fold_excerpt_chars=0
    )
    assert (policy.keep_last_messages, policy.fold_excerpt_chars) == (3, 0)


def test_r4_family_rule_table_is_well_formed() -> None:
    """Every family rule and catalogue pattern compiles; rule knobs are real policy knobs."""
    knobs = {field.name for field in dataclasses.fields(CompactionPolicy)}
    for pattern, rule in policy_module._FAMILY_RULES:
        re.compile(pattern)
        assert set(rule.knobs) <= knobs - {"max_context_tokens"}
        assert rule.why
    for pattern, _ in policy_module._CATALOGUE:
        re.compile(pattern)


def test_r4_overrides_are_validated() -> None:
    """A bad override raises `ConfigError` naming that knob."""
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy("gpt-4o", keep_last_messages=0)
    assert caught.value.key == "keep_last_messages"
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy("gpt-4o", reserved_output_tokens=200_000)
    assert caught.value.key == "reserved_output_tokens"


def test_r4_unknown_override_is_named() -> None:
    """An override that is not a knob raises `ConfigError` whose key names it."""
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy("gpt-4o", keep_last=3)
    assert caught.value.key == "keep_last"


def test_r4_override_can_set_reserve_and_headroom() -> None:
    """Explicit reserve and headroom overrides are used as given."""
    policy = resolve_compaction_policy(
        "gpt-4o", reserved_output_tokens=1_000, headroom_tokens=64_000
    )
    assert policy.threshold_tokens == 128_000 - 1_000 - 64_000


# -- catalogue (R5) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o", 128_000),
        ("GPT-4o-mini-2024-07-18", 128_000),
        ("openai/gpt-4.1-mini", 1_047_576),
        ("gpt-4", 8_192),
        ("gpt-5", 400_000),
        ("gpt-5-chat-latest", 128_000),
        ("o3", 200_000),
        ("o4-mini", 200_000),
        ("claude-3-5-sonnet-20241022", 200_000),
        ("anthropic/claude-3.7-sonnet", 200_000),
        ("us.anthropic.claude-opus-4-1-20250805-v1:0", 200_000),
        ("deepseek-chat", 128_000),
        ("deepseek-reasoner", 128_000),
        ("qwen2.5:7b", 32_768),
        ("Qwen/Qwen3-8B", 32_768),
        ("qwen3-coder-480b-a35b-instruct", 262_144),
        ("gemma3:270m", 32_768),
        ("google/gemma-3-1b-it", 32_768),
        ("gemma-3-12b-it", 131_072),
        ("meta-llama/Llama-3.1-8B-Instruct", 131_072),
        ("llama3.2:3b", 131_072),
        ("llama3:8b", 8_192),
        ("Meta-Llama-3-70B-Instruct", 8_192),
    ],
)
def test_r5_catalogue_windows(model: str, window: int) -> None:
    """Models resolve by family pattern, case-insensitively, the longest match winning."""
    assert resolve_context_window(model) == window
    assert resolve_compaction_policy(model).max_context_tokens == window


@pytest.mark.parametrize("model", [None, "", "my-finetune", "macro3", "gpt4all"])
def test_r5_unknown_models_have_no_window(model: str | None) -> None:
    """Unknown names (and names that only contain a family inside a word) have no window."""
    assert resolve_context_window(model) is None


def test_r5_explicit_window_wins() -> None:
    """An explicit `max_context_tokens` beats the catalogue and picks the tier."""
    policy = resolve_compaction_policy("claude-sonnet-4", 64_000)
    assert policy.max_context_tokens == 64_000
    assert _knobs(policy, DESKTOP) == DESKTOP


@pytest.mark.parametrize("model", [None, "my-finetune"])
def test_r5_unknown_model_without_window_raises(model: str | None) -> None:
    """No explicit window and no catalogue entry raises `ConfigError` on the window."""
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy(model)
    assert caught.value.key == "max_context_tokens"
    assert caught.value.value is None


def test_r5_explicit_window_is_validated() -> None:
    """A bad explicit window raises before any tier is chosen."""
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy("gpt-4o", 512)
    assert caught.value.key == "max_context_tokens"


def test_r5_model_must_be_a_string() -> None:
    """A model that is not a string raises `ConfigError` on `model`."""
    with pytest.raises(ConfigError) as caught:
        resolve_compaction_policy(42)  # type: ignore[arg-type]
    assert caught.value.key == "model"


# -- round trips, immutability, pickling --------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-5", "claude-sonnet-4", "qwen2.5-7b"])
def test_to_dict_from_dict_round_trip_through_json(model: str) -> None:
    """`from_dict(to_dict(p)) == p`, also after a trip through JSON text."""
    policy = resolve_compaction_policy(model, micro_compact_interval_rounds=5)
    assert CompactionPolicy.from_dict(policy.to_dict()) == policy
    assert CompactionPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy
    bare = CompactionPolicy(max_context_tokens=8_192, threshold_ratio=1)
    assert CompactionPolicy.from_dict(json.loads(json.dumps(bare.to_dict()))) == bare


def test_from_dict_names_unknown_keys() -> None:
    """Unknown keys raise `ConfigError` whose key lists them all, sorted."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy.from_dict({"max_context_tokens": 8_192, "zeta": 1, "alpha": 2})
    assert caught.value.key == "alpha, zeta"
    assert "keep_last_messages" in caught.value.allowed


def test_from_dict_needs_a_window_and_a_mapping() -> None:
    """A missing window or a non-mapping raises `ConfigError`."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy.from_dict({"threshold_ratio": 0.5})
    assert caught.value.key == "max_context_tokens"
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy.from_dict([("max_context_tokens", 8_192)])  # type: ignore[arg-type]
    assert caught.value.key == "policy"


def test_replace_revalidates() -> None:
    """`replace` applies valid changes and rejects bad values and unknown knobs."""
    policy = CompactionPolicy(max_context_tokens=8_192)
    assert policy.replace(keep_last_messages=9).keep_last_messages == 9
    with pytest.raises(ConfigError) as caught:
        policy.replace(threshold_ratio=2)
    assert caught.value.key == "threshold_ratio"
    with pytest.raises(ConfigError) as caught:
        policy.replace(window=1)
    assert caught.value.key == "window"


def test_policy_is_frozen() -> None:
    """Assigning to a knob raises; the policy is hashable and pickles."""
    policy = resolve_compaction_policy("gpt-4o")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.keep_last_messages = 1  # type: ignore[misc]
    assert hash(policy) == hash(resolve_compaction_policy("gpt-4o"))
    assert pickle.loads(pickle.dumps(policy)) == policy


def test_config_error_pickles() -> None:
    """A `ConfigError` from validation survives pickling with its attributes and message."""
    with pytest.raises(ConfigError) as caught:
        CompactionPolicy(max_context_tokens=8_192, threshold_ratio=1.5)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is ConfigError
    assert (copy.key, copy.value, copy.allowed) == ("threshold_ratio", 1.5, "a float in (0, 1]")
    assert str(copy) == str(caught.value)


def test_the_cache_terms_follow_the_provider_and_yield_to_overrides() -> None:
    """Issue 28: the policy knows each provider's cache lifetime and prices, overridable.

    Anthropic: 5 minutes, reads 0.1x, writes 1.25x, output 5x; OpenAI: no write premium;
    DeepSeek and unknown models publish no lifetime (`None`: only a host's report counts).
    """
    claude = resolve_compaction_policy("claude-sonnet-4-5")
    assert claude.cache_ttl_seconds == 300.0
    assert (claude.cache_read_price_ratio, claude.cache_write_price_ratio) == (0.1, 1.25)
    assert claude.output_price_ratio == 5.0
    gpt = resolve_compaction_policy("openai/gpt-4o")
    assert (gpt.cache_read_price_ratio, gpt.cache_write_price_ratio) == (0.5, 1.0)
    assert resolve_compaction_policy("gpt-5").cache_read_price_ratio == 0.1
    assert resolve_compaction_policy("deepseek-chat").cache_ttl_seconds is None
    assert resolve_compaction_policy(None, 32_000).cache_ttl_seconds is None
    hour = resolve_compaction_policy("claude-opus-4", cache_ttl_seconds=3600)
    assert hour.cache_ttl_seconds == 3600.0 and type(hour.cache_ttl_seconds) is float
    off = resolve_compaction_policy("claude-opus-4", cold_threshold_ratio=1)
    assert off.cold_threshold_tokens == off.threshold_tokens
