"""Per-family calibration of the estimate (R8): the table, and model name to family.

Each `Calibration` scales the character classes of `counting` for one tokenizer family; the
table lives here, in the measuring layer. Unknown models get `DEFAULT_FAMILY`, which sits above
every family so that it over-estimates rather than under-estimates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Literal, TypeAlias

__all__ = [
    "DEFAULT_FAMILY",
    "FAMILY_CALIBRATIONS",
    "Calibration",
    "ImageRule",
    "calibration_for",
    "model_family",
]

ImageRule: TypeAlias = Literal["tiles", "area", "patch", "gemini", "fixed", "max"]

# -- calibration table (R8) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Per-family costs: `text` scales the ASCII estimate, the rest are tokens per character.

    `digit` prices each digit after the first of a run (about 1/3 when a tokenizer groups
    three digits, 1.0 when it splits them); `other` scales the non-CJK non-ASCII classes.
    `latin_greek`, `arabic`, `indic` and `thai` price those scripts' characters and `emoji` a
    four-byte character (an emoji, mostly); `None` leaves them at the generic `other` cost.
    """

    family: str
    text: float
    digit: float
    han: float
    kana: float
    hangul: float
    other: float
    image: ImageRule
    latin_greek: float | None = None
    arabic: float | None = None
    indic: float | None = None
    thai: float | None = None
    emoji: float | None = None


# Measured rows were fitted against the real tokenizers on `benchmarks/corpora` plus held-out
# text (`benchmarks/tokens_accuracy.py` prints the ratios). The others are set by analogy with a
# tokenizer of the same kind and lean high: an under-estimate overflows the window, an
# over-estimate only compacts a little early.
_Row: TypeAlias = tuple[str, float, float, float, float, float, float, ImageRule]
_TABLE: tuple[_Row, ...] = (
    # (family, text, digit, han, kana, hangul, other, image)
    ("o200k", 0.98, 0.35, 0.89, 0.72, 0.80, 0.70, "tiles"),  # gpt-4o/4.1/5, o-series: measured
    ("cl100k", 0.97, 0.37, 1.39, 0.97, 1.40, 1.30, "tiles"),  # gpt-4, gpt-3.5: measured
    ("qwen", 0.97, 1.24, 0.69, 0.58, 0.90, 0.95, "patch"),  # Qwen2.5 (3.5+ ~10 % less): measured
    ("deepseek", 1.06, 0.20, 0.62, 0.65, 0.92, 0.85, "tiles"),  # DeepSeek-V3: measured
    ("claude", 1.20, 1.00, 1.40, 1.00, 1.40, 1.30, "area"),  # ~10-30 % above cl100k (published)
    ("gemini", 1.05, 1.00, 0.75, 0.75, 0.95, 1.00, "gemini"),  # SentencePiece 256k, split digits
    ("gemma", 1.05, 1.00, 0.75, 0.75, 0.95, 1.00, "fixed"),  # as gemini
    ("llama", 1.00, 1.00, 1.39, 0.97, 1.40, 1.30, "tiles"),  # Llama 3 extends cl100k
    ("mistral", 1.00, 1.00, 1.00, 0.90, 1.10, 1.00, "patch"),  # Tekken, tiktoken-style 131k
)
# Tokens per character of the scripts tokenizers disagree on most, and per four-byte character
# (emoji). Measured rows: each script fitted to 1.04x the real count of its corpus (`ar`, `hi`,
# `th`, `emoji_chat`; Latin and Greek on `eu_mixed`, at 0.97x where the generic cost was under).
# cl100k-like families take the costliest measured value, the multilingual SentencePiece and
# Tekken vocabularies the costliest of the others.
_SCRIPT_COLUMNS = ("latin_greek", "arabic", "indic", "thai", "emoji")
_MEASURED_SCRIPTS: dict[str, tuple[float, float, float, float, float]] = {
    "o200k": (0.175, 0.24, 0.41, 0.41, 2.69),
    "cl100k": (0.73, 0.64, 1.36, 1.00, 3.80),
    "qwen": (0.78, 0.26, 1.24, 0.59, 2.41),
    "deepseek": (0.36, 0.28, 0.79, 0.41, 2.64),
}
_ALL = tuple(map(max, *_MEASURED_SCRIPTS.values()))
_NOT_CL100K = tuple(map(max, *(v for f, v in _MEASURED_SCRIPTS.items() if f != "cl100k")))
_SCRIPTS = _MEASURED_SCRIPTS | {
    "claude": _ALL,
    "llama": _ALL,
    "gemini": _NOT_CL100K,
    "gemma": _NOT_CL100K,
    "mistral": _NOT_CL100K,
}
_FAMILIES: dict[str, Calibration] = {
    f: Calibration(
        family=f,
        text=t,
        digit=d,
        han=h,
        kana=k,
        hangul=g,
        other=o,
        image=i,
        **dict(zip(_SCRIPT_COLUMNS, _SCRIPTS[f], strict=True)),
    )
    for f, t, d, h, k, g, o, i in _TABLE
}

DEFAULT_FAMILY = "default"
_MARGIN = 1.05  # the unknown-model default sits this far above the costliest family


def _top(name: str) -> float:
    return round(max(float(getattr(c, name)) for c in _FAMILIES.values()) * _MARGIN, 3)


_NUMERIC = ("text", "digit", "han", "kana", "hangul", "other", *_SCRIPT_COLUMNS)
_FAMILIES[DEFAULT_FAMILY] = Calibration(
    family=DEFAULT_FAMILY, image="max", **{name: _top(name) for name in _NUMERIC}
)

FAMILY_CALIBRATIONS: Mapping[str, Calibration] = MappingProxyType(_FAMILIES)
"""Every family's `Calibration`, `DEFAULT_FAMILY` included (read-only)."""

# First match wins; patterns see the lower-cased last path segment of the model name, so
# "openai/gpt-4o", "ft:gpt-4o-mini:acme::x1" and "anthropic.claude-3-5-sonnet-v2:0" resolve.
_FAMILY_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), f)
    for p, f in (
        (r"\b(?:chat)?gpt-(?:4o|4\.1|4\.5|5|oss)|\bo\d|\bcodex|\bcomputer-use", "o200k"),
        (r"\bgpt-(?:4|3\.5|35)|\btext-embedding-3", "cl100k"),
        (r"claude", "claude"),
        (r"qwen|qwq", "qwen"),
        (r"deepseek", "deepseek"),
        (r"gemma", "gemma"),
        (r"gemini", "gemini"),
        (r"llama", "llama"),
        (r"mistral|mixtral|codestral|devstral|magistral|ministral|pixtral", "mistral"),
    )
)


@lru_cache(maxsize=256)
def model_family(model: str | None) -> str:
    """The calibration family of `model` or family name (`DEFAULT_FAMILY` when unknown)."""
    if not model:
        return DEFAULT_FAMILY
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name in _FAMILIES:  # a family name is accepted as a model ("o200k", "default")
        return name
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(name):
            return family
    return DEFAULT_FAMILY


def calibration_for(model: str | None) -> Calibration:
    """The `Calibration` used for `model`; unknown models get the conservative default."""
    return _FAMILIES[model_family(model)]
