"""`sim.builder`: how needles are planted into a session."""

from __future__ import annotations

import pytest

from steerable_compaction.sim.builder import SessionBuilder
from steerable_compaction.sim.content import screenshot
from steerable_compaction.sim.tasks import Step


def test_needles_are_planted_in_text_output_only() -> None:
    """Planting a text needle into a screenshot's parts is refused."""
    builder = SessionBuilder("x", 0)
    shot = Step(tool="screenshot", arguments="{}", thought="t", output=(screenshot(10, 10, "x"),))
    with pytest.raises(ValueError, match="text outputs only"):
        builder.plant(shot, builder.needle("tool", "head", 0))
