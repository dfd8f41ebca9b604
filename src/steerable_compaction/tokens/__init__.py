"""Token estimates and the usage-anchored pressure meter (R7-R10).

`estimate_tokens` prices text by character class (ASCII words, digits, punctuation, whitespace
runs, CJK ideographs, kana, hangul, other non-ASCII) and adds message framing, tool-call JSON and
images. A per-family `Calibration` scales the classes (R8). `TokenMeter` anchors the estimate on
the provider's billed `prompt_tokens` (R7), resets the anchor on every rewrite (R9) and keeps
pressure continuous across it (R10). `benchmarks/tokens_accuracy.py` measures speed and accuracy
against real tokenizers.

One module per job: `calibration` (the family table), `counting` (character classes and their
cost), `images` (image prices), `estimate` (messages and transcripts), `meter` (the meter).
"""

from __future__ import annotations

from .calibration import (
    DEFAULT_FAMILY,
    FAMILY_CALIBRATIONS,
    Calibration,
    ImageRule,
    calibration_for,
    model_family,
)
from .counting import TextCounts, count_text
from .estimate import estimate_tokens
from .images import image_dimensions, image_tokens
from .meter import Observation, TokenMeter

__all__ = [
    "DEFAULT_FAMILY",
    "FAMILY_CALIBRATIONS",
    "Calibration",
    "ImageRule",
    "Observation",
    "TextCounts",
    "TokenMeter",
    "calibration_for",
    "count_text",
    "estimate_tokens",
    "image_dimensions",
    "image_tokens",
    "model_family",
]
