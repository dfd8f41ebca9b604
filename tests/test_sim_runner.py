"""`sim.runner`: sessions, their measurements, `run_eval` and the self-check (L1.5)."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from steerable_compaction import Message
from steerable_compaction.compaction import SUMMARY_INSTRUCTION
from steerable_compaction.errors import ConfigError, ProviderError, RecordError
from steerable_compaction.hooks import CompactionOutcome
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import CompactionBoundary, MemoryRecord
from steerable_compaction.sim import (
    ARM_NAMES,
    TASK_NAMES,
    arms,
    build_task,
    run_eval,
    run_session,
    runner,
)
from steerable_compaction.sim.arms import ArmHooks, build_hooks
from steerable_compaction.sim.chart import write_chart
from steerable_compaction.sim.command import format_table
from steerable_compaction.sim.peers import CODEX_PROMPT
from steerable_compaction.sim.runner import ArmSpec, is_summary_call
from steerable_compaction.sim.tasks import IDLE_GAPS, Needle, Step, Task, Turn, with_idle_gaps
from steerable_compaction.spill import SpillHooks

from .sim_helpers import mean_recall, run


def secret_port_task(steps: tuple[Step, ...], name: str = "tiny") -> Task:
    """One work turn of `steps`, then a question turn asking the secret port (40404)."""
    needle = Needle(
        id="n1",
        anchor="secret port",
        value="40404",
        shape=r"\d{5}",
        carrier="tool",
        position="middle",
        step=len(steps) - 1,
    )
    return Task(
        name=name,
        seed=0,
        description=name,
        window=50_000,
        system="sys",
        turns=(
            Turn(user=Message.user("Goal: look"), steps=steps, reply="done"),
            Turn(
                user=Message.user("What is the secret port?"),
                steps=(),
                reply="",
                questions=(needle,),
            ),
        ),
        needles=(needle,),
        tools=("read_file",),
    )


def test_run_metrics_on_a_tiny_session_are_hand_checked() -> None:
    """A two-step session that never fills its window: every needle found, sums consistent."""
    steps = (
        Step(tool="read_file", arguments='{"path": "a"}', thought="Reading a.", output="nothing"),
        Step(
            tool="read_file",
            arguments='{"path": "b"}',
            thought="Reading b.",
            output="x\nnote: the secret port is 40404\ny",
        ),
    )
    task = secret_port_task(steps)
    result = asyncio.run(run_session(task, "current"))
    assert (result.recall, result.recalled, result.recall_by_carrier) == (
        1.0,
        ("n1",),
        {"tool": (1, 1)},
    )
    assert (result.requests, result.rounds, result.planned_rounds) == (4, 4, 4)
    assert result.prompt_tokens == sum(result.pressure) and result.summary_calls == 0
    assert result.compactions == 0 and result.death is None and result.lost == {}
    assert result.no_assistant_requests == 0
    cached = result.cached_tokens
    assert result.cache_hit_rate == pytest.approx(cached / result.prompt_tokens)
    rate = result.cache_hit_rate_by_rules["openai"]
    assert rate is not None
    openai_cached = rate * result.prompt_tokens
    assert result.cost_usd["openai"] == pytest.approx(
        (
            (result.prompt_tokens - openai_cached) * 1.25
            + openai_cached * 0.125
            + result.completion_tokens * 10.0
        )
        / 1e6,
        abs=1e-6,
    )


def test_a_turn_longer_than_the_round_limit_goes_on_after_the_user_says_continue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scaled session's long turn is played whole: the host says to go on, as a user would.

    Before, the loop's round limit ended the turn and its later steps (and their facts) never
    happened: at `--scale 2` every arm lost the needles planted there.
    """
    monkeypatch.setattr(arms, "MAX_ROUNDS_PER_TURN", 3)
    steps = tuple(
        Step(tool="read_file", arguments=f'{{"path": "f{i}"}}', thought=f"Reading f{i}.", output=o)
        for i, o in enumerate(["a", "b", "c", "d", "x\nnote: the secret port is 40404"])
    )
    task = secret_port_task(steps, "long_turn")
    record = MemoryRecord()
    monkeypatch.setattr(runner, "MemoryRecord", lambda: record)
    result = asyncio.run(run_session(task, "none"))  # its loop has the simulator's limit
    assert (result.rounds, result.planned_rounds, result.recall) == (7, 7, 1.0)
    users = [m.text for m in record.messages() if m.role == "user"]
    assert users == ["Goal: look", runner.CONTINUE, "What is the secret port?"]


def test_head_is_the_leading_system_messages_and_the_user_message_after_them() -> None:
    """`head_size` counts system messages, then one user message if one comes next."""
    system, user, reply = Message.system("s"), Message.user("u"), Message.assistant("a")
    assert runner.head_size([system, system, user, user, reply]) == 3
    assert runner.head_size([system, reply, user]) == 1
    assert runner.head_size([user, user]) == 1
    assert runner.head_size([]) == 0


def test_no_assistant_requests_counts_requests_after_the_first_compaction_only() -> None:
    """After the first compaction, each request with no assistant message past its head counts.

    Before any compaction nothing counts.
    """
    record = MemoryRecord()
    watch = runner._AssistantWatch(record)
    system, goal, said = Message.system("s"), Message.user("goal"), Message.user("more")
    bare = CompletionRequest(messages=(system, goal, said, said))
    watch.see(bare)
    assert watch.count == 0  # no compaction yet
    record.append_message(goal)
    record.append(
        CompactionBoundary(action="compact", pre_tokens=9, post_tokens=5, replacement_count=0)
    )
    watch.see(bare)
    watch.see(CompletionRequest(messages=(system, goal, said, Message.assistant("mine"), said)))
    watch.see(CompletionRequest(messages=(system, Message.assistant("mine"), said)))
    watch.see(CompletionRequest(messages=(goal,)))
    assert watch.count == 2


def test_observations_as_user_shows_the_metric_tells_arms_apart() -> None:
    """On the SWE-agent-style task `naive` sends requests with none of the agent's turns.

    `current` keeps the agent's newest turn in every request (issue 18's done criterion).
    """
    assert run("observations_as_user", "naive").no_assistant_requests > 0
    assert run("observations_as_user", "current").no_assistant_requests == 0


def test_is_summary_call_knows_every_arms_way_of_asking() -> None:
    """Engine, Codex-style and cold `<transcript>` requests are summary calls; turns are not."""
    for text in (SUMMARY_INSTRUCTION, CODEX_PROMPT, "x <transcript> y"):
        assert is_summary_call(CompletionRequest(messages=(Message.user(text),)))
    assert not is_summary_call(CompletionRequest(messages=(Message.user("hello"),)))
    assert not is_summary_call(CompletionRequest(messages=(Message.assistant("x"),)))
    assert not is_summary_call(CompletionRequest(messages=()))


def test_a_failing_engine_or_provider_ends_the_session_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Errors other than overflow end a session too, named in `death`, never raised."""

    class Failing(ArmHooks):
        error: Exception = RecordError("broken")

        async def every_step(self) -> CompactionOutcome | None:
            raise self.error

    monkeypatch.setitem(
        runner.ARMS, "failing", ArmSpec(name="failing", build=build_hooks(Failing), summary="")
    )
    task = build_task("light", 0, scale=0.2)
    assert asyncio.run(run_session(task, "failing")).death == "engine error: RecordError: broken"
    Failing.error = ProviderError("teapot", status_code=418)
    assert asyncio.run(run_session(task, "failing")).death == "provider error: teapot"


def test_eval_results_lookup_json_and_table(tmp_path: Path) -> None:
    """`EvalResults.run` finds a run; unknown arms are refused; the table flags errors."""
    results = run_eval(["light"], ["none"], scale=0.3, model="gpt-4o")
    assert results.run("light", "none").model == "gpt-4o"
    with pytest.raises(KeyError):
        results.run("light", "current")
    with pytest.raises(ValueError, match="unknown arm"):
        run_eval(["light"], ["bogus"])
    assert results.to_json()["model"] == "gpt-4o"
    assert "light  none" in format_table(results)
    silent = replace(results, runs=(replace(results.runs[0], pressure=()),))
    assert write_chart(silent, tmp_path / "c.png").exists()  # a run without requests draws


def test_self_check_no_management_is_clearly_worse_than_current() -> None:
    """Self-check: without context management every session dies and recall collapses."""
    for task in TASK_NAMES:
        none = run(task, "none")
        assert none.recall == 0.0 and none.overflow_deaths == 1, task
    assert mean_recall("current") >= mean_recall("none") + 0.25


def test_self_check_naive_is_clearly_worse_than_current() -> None:
    """Self-check: the known-bad `naive` arm must score clearly below `current` on recall."""
    assert mean_recall("naive") <= mean_recall("current") - 0.15


COST_MARGIN = 0.10
"""An arm at least as good on recall may be this much cheaper than `current`, no more."""


def test_self_check_no_arm_recalls_as_much_for_clearly_less_without_breaking_the_session() -> None:
    """Self-check on cost (issue 30 item 2): recall bought, not wasted.

    In each task, an arm with equal or better in-context recall is at most `COST_MARGIN`
    cheaper than `current` (Anthropic prices), unless it got there by breaking the session:
    requests that lost the agent's own newest turn (`no_assistant_requests`, R23: Codex-style
    summaries keep only the user's messages), or requests the provider refused. Measured at
    seed 0 (the same comparison over `run_eval(seed=0)`, every ratio printed):
    `codex` is 11-19 % cheaper on images, giant_tool_output, parallel_screenshots and
    small_window (4 % on findings), each time with requests that had no assistant message
    after the head (and on small_window one refused request); openhands is 7 % cheaper on
    small_window at equal recall (0.33), inside the margin.
    """
    cheaper: list[str] = []
    for task in TASK_NAMES:
        current = run(task, "current")
        for arm in ARM_NAMES:
            other = run(task, arm)
            if arm == "current" or other.death is not None or other.recall < current.recall:
                continue
            if other.cost_usd["anthropic"] >= current.cost_usd["anthropic"] * (1 - COST_MARGIN):
                continue
            broke = other.no_assistant_requests > 0 or other.failed_requests > 0
            assert broke, (task, arm, other.cost_usd, current.cost_usd)
            cheaper.append(f"{task}/{arm}")
    assert len(cheaper) <= 5, cheaper


def test_self_check_known_bad_arms_are_worse_on_recall_or_cost() -> None:
    """Every known-bad arm is clearly worse: 0.15 less recall, or 15 % more cost per fact.

    The spec's known-bad arms (`none`, `naive`, `fold_only`) and the peers that drop facts
    (`masking`, `langchain`); cost per fact is the suite's Anthropic cost over the needles
    recalled in context, where `current` is lowest (seed 0: $0.114 against codex's $0.139 and
    naive's $0.231).
    """

    def per_fact(arm: str) -> float:
        runs = [run(task, arm) for task in TASK_NAMES]
        found = sum(len(r.recalled) for r in runs)
        return sum(r.cost_usd["anthropic"] for r in runs) / max(found, 1)

    current = mean_recall("current")
    for arm in ("none", "naive", "fold_only", "masking", "langchain"):
        worse_recall = mean_recall(arm) <= current - 0.15
        worse_cost = per_fact(arm) >= per_fact("current") * 1.15
        assert worse_recall or worse_cost, arm
    assert per_fact("current") == min(per_fact(arm) for arm in ARM_NAMES if arm != "none")


@pytest.mark.parametrize("seed", [1, 2])
def test_self_check_holds_for_other_seeds(seed: int) -> None:
    """The lead over `naive` is not an accident of seed 0: other plantings keep a clear gap.

    Measured over the 17 tasks: seeds 0-4 give gaps of 0.52, 0.47, 0.43, 0.49, 0.50.
    """
    results = run_eval(arms=["naive", "current"], seed=seed)

    def mean(arm: str) -> float:
        return sum(results.run(task, arm).recall for task in TASK_NAMES) / len(TASK_NAMES)

    assert mean("naive") <= mean("current") - 0.10


def test_eval_harness_replaces_the_current_arms_harness(tmp_path: Path) -> None:
    """A harness without pressure compaction makes `current` behave like `none`: it overflows.

    The packaged harness survives the same session by compacting, so the file really is used.
    """
    path = tmp_path / "spill-only.harness.yaml"
    path.write_text("context: [spill]\n", encoding="utf-8")
    own = run_eval(["light"], ["current"], harness=path)
    packaged = run_eval(["light"], ["current"])
    assert packaged.run("light", "current").death is None
    assert packaged.run("light", "current").compactions > 0
    mine = own.run("light", "current")
    assert mine.death == "overflow" and mine.compactions == 0
    assert own.to_json()["harness"] == str(path) and packaged.to_json()["harness"] is None


def test_eval_harness_knobs_reach_the_engine(tmp_path: Path) -> None:
    """Policy knobs in the harness change what `current` does (here: fold first, R17)."""
    path = tmp_path / "fold-first.harness.yaml"
    path.write_text("compaction:\n  fold_first: true\n", encoding="utf-8")
    mine = run_eval(["light"], ["current"], scale=0.5, harness=path).run("light", "current")
    packaged = run("light", "current", 0.5)
    assert packaged.compactions == packaged.summary_calls > 0  # every compaction a summary
    assert mine.compactions > mine.summary_calls  # some were fold-only


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("compaction:\n  threshold_ratoi: 0.7\n", "threshold_ratoi"),
        ("context: [spill, summarizer]\n", "summarizer"),
        ("retry: {max_retries: many}\n", "retry.max_retries"),
        ("[not, a, mapping]\n", "mapping"),
    ],
)
def test_eval_refuses_a_bad_harness_before_any_session(
    text: str, named: str, tmp_path: Path
) -> None:
    """A bad harness is a `ConfigError` naming what is wrong, raised before anything runs."""
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    started: list[str] = []
    with pytest.raises(ConfigError, match=re.escape(named)):
        run_eval(
            ["light"],
            ["none", "current"],
            scale=0.3,
            harness=path,
            progress=lambda *a: started.append(str(a)),
        )
    assert started == []


def test_recall_with_tools_is_measured_for_current_and_equals_recall_for_peers(
    tmp_path: Path,
) -> None:
    """`current` offers the history tools: it finds what the context lost, at a token cost.

    Without the retention check (`retention_token_ratio: 0`), `heavy`'s summaries lose facts;
    the history tools read them from the record. Peer arms keep their published behaviour (no
    tools): their two recalls are equal.
    """
    path = tmp_path / "no-retention.harness.yaml"
    path.write_text("compaction:\n  retention_token_ratio: 0\n", encoding="utf-8")
    results = run_eval(["heavy"], ["current", "codex"], harness=path)
    current = results.run("heavy", "current")
    assert current.recall_with_tools > current.recall + 0.25
    assert current.recall_requests == 1 and current.recall_tokens > 0
    codex = results.run("heavy", "codex")
    assert codex.recall_with_tools == codex.recall and codex.recall_tokens == 0


def test_a_session_that_spills_gives_the_same_figures_every_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spill pointers show a path: its directory and file names are not random.

    So a session's token counts (and the README's figures) do not change from run to run.
    """
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "steerable-sim-0").mkdir()  # taken: the next number is used, never this one
    written: list[Path] = []
    write = SpillHooks._write

    def spy(hooks: SpillHooks, seq: int, text: str) -> Path:
        written.append(write(hooks, seq, text))
        return written[-1]

    monkeypatch.setattr(SpillHooks, "_write", spy)
    task = build_task("giant_tool_output")
    first = asyncio.run(run_session(task, "current"))
    spilled = [path.name for path in written]
    second = asyncio.run(run_session(task, "current"))
    assert len(spilled) == 2  # both giant results went to files, named alike in both runs
    assert [path.name for path in written[2:]] == spilled
    assert first.prompt_tokens == second.prompt_tokens
    assert first == second
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steerable-sim-0"]  # cleaned up
    with runner.scratch_directory() as scratch:
        assert scratch == str(tmp_path / "steerable-sim-1")
        assert stat.S_IMODE(os.stat(scratch).st_mode) == 0o700


def test_idle_gaps_move_the_clock_before_turns_and_the_cold_rule_compacts() -> None:
    """`with_idle_gaps`: the user away 3, 10, 60 minutes; the provider's cache expires.

    The current arm knows the simulated provider's 5-minute lifetime and compacts on a cold
    cache where it pays (seed 2: once; in most sessions waiting is cheaper, see
    `benchmarks/cold_cache.py`); the same arm with the rule off (ratio 1) never does.
    """
    task = with_idle_gaps(build_task("long_haul", 2, scale=0.5))
    assert task.turns[0].idle_seconds == 0
    assert [t.idle_seconds for t in task.turns[1:4]] == list(IDLE_GAPS)
    assert task.needles == build_task("long_haul", 2, scale=0.5).needles
    on = asyncio.run(run_session(task, "current"))
    assert on.cold_compactions > 0 and on.death is None
    off = asyncio.run(
        run_session(task, "current", harness={"compaction": {"cold_threshold_ratio": 1}})
    )
    assert off.cold_compactions == 0
    plain = run("long_haul", "current", 0.5)
    assert plain.cold_compactions == 0  # without gaps the cache never expires
    with pytest.raises(ValueError, match="non-negative"):
        with_idle_gaps(task, (-1.0,))
    assert with_idle_gaps(task, ()) is task


def test_idle_gaps_are_recorded_in_results_json() -> None:
    results = run_eval(["light"], ["none"], scale=0.3, idle_gaps=(700.0,))
    document = results.to_json()
    assert document["idle_gaps"] == [700.0]
    assert "user away" in document["tasks"]["light"]["description"]
    assert "cold_compactions" in document["runs"][0]
