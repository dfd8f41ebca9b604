"""`sim.diagnose`: naming the rewrite that hid each lost needle."""

from __future__ import annotations

from .sim_helpers import run


def test_loss_causes_name_the_rewrite_that_hid_each_needle() -> None:
    """Folds, summaries and spills are blamed for the needles they hid."""
    light = run("light", "current").lost
    assert light and all(
        cause.split(" ")[0] in ("compact", "summarize") for cause in light.values()
    )
    giant = run("giant_tool_output", "current").lost
    assert "never visible (cut before it reached the transcript)" in giant.values()
