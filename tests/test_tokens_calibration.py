from __future__ import annotations

import math
from dataclasses import fields

import pytest

from steerable_compaction.tokens import (
    DEFAULT_FAMILY,
    FAMILY_CALIBRATIONS,
    calibration_for,
    estimate_tokens,
    model_family,
)

ZH = "我们今天下午在会议室讨论了新版本的发布计划。"  # 21 ideographs + ideographic full stop
EN = "We discussed the release plan for the new version in the meeting room this afternoon."


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "o200k"),
        ("gpt-4o-mini", "o200k"),
        ("openai/gpt-4.1", "o200k"),
        ("gpt-5", "o200k"),
        ("o3-mini", "o200k"),
        ("ft:gpt-4o-mini:acme::x1", "o200k"),
        ("gpt-4", "cl100k"),
        ("gpt-4-turbo", "cl100k"),
        ("gpt-3.5-turbo", "cl100k"),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", "claude"),
        ("claude-opus-4-1", "claude"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen"),
        ("qwen3:8b", "qwen"),
        ("deepseek-ai/DeepSeek-V3", "deepseek"),
        ("gemma-3-27b-it", "gemma"),
        ("gemini-2.5-flash", "gemini"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama"),
        ("mistral-large-latest", "mistral"),
        ("some-new-model", DEFAULT_FAMILY),
        ("", DEFAULT_FAMILY),
        (None, DEFAULT_FAMILY),
    ],
)
def test_r8_model_family_lookup(model: str | None, family: str) -> None:
    """Model names (with provider prefixes and tags) resolve to their calibration family."""
    assert model_family(model) == family
    assert calibration_for(model) is FAMILY_CALIBRATIONS[family]


def test_r8_family_names_resolve_to_themselves() -> None:
    """A family name can stand in for a model name (`TokenMeter("o200k")`)."""
    for family in FAMILY_CALIBRATIONS:
        assert model_family(family) == family
        assert model_family(family.upper()) == family


def test_r8_unknown_model_default_is_at_least_every_family() -> None:
    """The default's every factor is >= every family's, so unknown models over-estimate."""
    default = FAMILY_CALIBRATIONS[DEFAULT_FAMILY]
    numeric = [f.name for f in fields(default) if f.name not in ("family", "image")]
    assert numeric == [
        "text",
        "digit",
        "han",
        "kana",
        "hangul",
        "other",
        "latin_greek",
        "arabic",
        "indic",
        "thai",
        "emoji",
    ]
    for family, cal in FAMILY_CALIBRATIONS.items():
        for name in numeric:
            assert getattr(default, name) >= getattr(cal, name), (family, name)
    assert default.text == pytest.approx(1.2 * 1.05)  # claude's 1.2 plus the 5 % margin


def test_r8_default_estimate_exceeds_every_family_estimate() -> None:
    """On mixed text the unknown-model estimate is the largest of all families."""
    text = "Run `pytest -q` 3 times; 结果\uff1a全部通过。テスト OK 테스트 Привет 🚀\n" * 20
    default = estimate_tokens(text, None)
    for family in FAMILY_CALIBRATIONS:
        if family != DEFAULT_FAMILY:
            assert estimate_tokens(text, family) < default, family


def test_r8_family_factors_order_cjk_costs() -> None:
    """The same Chinese text costs most under cl100k, less under o200k, least under deepseek."""
    text = ZH * 10
    costs = [estimate_tokens(text, m) for m in ("gpt-4", "gpt-4o", "qwen2.5", "deepseek-chat")]
    assert costs == [math.ceil(210 * h + 10) for h in (1.39, 0.89, 0.69, 0.62)]
    assert costs == [302, 197, 155, 141]


def test_r8_calibration_table_is_read_only() -> None:
    """`FAMILY_CALIBRATIONS` cannot be edited by callers."""
    with pytest.raises(TypeError):
        FAMILY_CALIBRATIONS["o200k"] = FAMILY_CALIBRATIONS["cl100k"]  # type: ignore[index]
