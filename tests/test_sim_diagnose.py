"""`sim.diagnose`: naming the rewrite that hid each lost needle."""

from __future__ import annotations

from pathlib import Path

from steerable_compaction.sim import run_eval

from .sim_helpers import run


def test_loss_causes_name_the_rewrite_that_hid_each_needle(tmp_path: Path) -> None:
    """Folds, summaries and spills are blamed for the needles they hid."""
    folded = run("light", "fold_only").lost
    assert folded and all(cause.startswith("compact (pressure, seq ") for cause in folded.values())
    # Without the retention check the packaged harness loses facts its summaries left out.
    path = tmp_path / "no-retention.harness.yaml"
    path.write_text("compaction:\n  retention_token_ratio: 0\n", encoding="utf-8")
    summarized = run_eval(["heavy"], ["current"], harness=path).run("heavy", "current").lost
    assert summarized and all(
        cause.startswith("summarize (pressure, seq ") for cause in summarized.values()
    )
    # A spill that shows nothing of the output (no excerpt, so no lines of note) hides both
    # facts stated in the two giant results before any compaction.
    path = tmp_path / "no-excerpt.harness.yaml"
    path.write_text("spill:\n  excerpt_chars: 0\n", encoding="utf-8")
    giant = run_eval(["giant_tool_output"], ["current"], harness=path)
    causes = giant.run("giant_tool_output", "current").lost
    assert list(causes.values()).count("never visible (cut before it reached the transcript)") == 2
