"""The simulator (L1.5): tasks, the summarizer, arms, metrics, the self-check and `eval`."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path

import pytest

from steerable_compaction import ImagePart, Message, ToolCall
from steerable_compaction.compaction import build_summary_request, newest_turn
from steerable_compaction.errors import ConfigError, ContextOverflowError, ProviderError
from steerable_compaction.hooks import CompactionOutcome, ToolResultContext
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import MemoryRecord, Usage
from steerable_compaction.sim import ARM_NAMES, TASK_NAMES, build_task, run_eval, run_session
from steerable_compaction.sim.agent import ScriptedAgent, visible_lines
from steerable_compaction.sim.arms import (
    ArmContext,
    ArmHooks,
    FoldOnlyArm,
    NaiveArm,
    build_hooks,
    leading_system,
)
from steerable_compaction.sim.command import add_eval_command, format_table
from steerable_compaction.sim.content import image_text, png_image, screenshot
from steerable_compaction.sim.metrics import PRICES, billed_cost, cache_hit_rate, replay_usage
from steerable_compaction.sim.peers import (
    CodexArm,
    LangChainArm,
    OpenHandsArm,
    approx_tokens,
    head_tail,
    trim_last,
)
from steerable_compaction.sim.provider import SimClock, SimProvider
from steerable_compaction.sim.runner import ArmSpec, RunResult, is_summary_call
from steerable_compaction.sim.summarizer import (
    ExtractiveSummarizer,
    Unit,
    flatten,
    units_from_messages,
    units_from_text,
)
from steerable_compaction.sim.tasks import Needle, Step, Task, Turn, find_answer
from steerable_compaction.testing import CacheRules
from steerable_compaction.tokens import estimate_tokens, image_dimensions

_CACHE: dict[tuple[str, str, float], RunResult] = {}


def run(task: str, arm: str, scale: float = 1.0) -> RunResult:
    """One simulated session, memoized for the module (sessions are deterministic)."""
    key = (task, arm, scale)
    if key not in _CACHE:
        _CACHE[key] = asyncio.run(run_session(build_task(task, 0, scale=scale), arm))
    return _CACHE[key]


def statements(task: Task) -> list[str]:
    """Every line the session states, as the agent could see it uncompacted."""
    messages = [Message.system(task.system), *task.restored]
    for turn in task.turns:
        messages.append(turn.user)
        for step in turn.steps:
            output = step.output if isinstance(step.output, str) else list(step.output)
            messages.append(Message.tool("c", output))
    return visible_lines(messages)


# -- tasks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_is_deterministic_for_a_seed(name: str) -> None:
    """The same name and seed build the same session byte for byte; another seed differs."""
    assert build_task(name, 3) == build_task(name, 3)
    assert build_task(name, 3) != build_task(name, 4)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_needle_is_stated_once_and_asked_at_the_end(name: str) -> None:
    """Each needle's value appears on exactly one line of the session; the last turn asks it."""
    task = build_task(name, 0)
    lines = statements(task)
    for needle in task.needles:
        stated = [line for line in lines if needle.value in line]
        assert len(stated) == 1, (needle, stated)
        assert find_answer(needle, lines) == needle.value
    assert task.turns[-1].questions == task.needles
    assert task.description.endswith(f"{len(task.needles)} needles")


def test_long_haul_runs_past_a_thousand_rounds() -> None:
    """`long_haul` makes at least 1,000 agent requests."""
    assert build_task("long_haul", 0).rounds >= 1000


def test_scale_shortens_a_task_but_keeps_its_needles() -> None:
    """`scale` changes the session length, never the set of planted needles."""
    full, short = build_task("light", 0), build_task("light", 0, scale=0.3)
    assert short.rounds < full.rounds
    assert [n.carrier for n in short.needles] == [n.carrier for n in full.needles]


def test_build_task_rejects_unknown_names_and_scales() -> None:
    """Unknown tasks and out-of-range scales raise `ValueError` naming the choices."""
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        build_task("nope")
    with pytest.raises(ValueError, match="scale"):
        build_task("light", scale=0)


def test_questions_and_answers_follow_the_needle_language() -> None:
    """Questions are asked in the needle's language; the newest matching statement wins."""
    kw = {"value": "12345", "shape": r"\d{5}", "carrier": "tool", "position": "head", "step": 0}
    zh = Needle(id="a", anchor="端口", language="zh", **kw)  # type: ignore[arg-type]
    ja = Needle(id="b", anchor="ポート", language="ja", **kw)  # type: ignore[arg-type]
    en = Needle(id="c", anchor="db port", **kw)  # type: ignore[arg-type]
    assert (zh.question, ja.question, en.question) == (
        "端口是多少？",  # noqa: RUF001
        "ポートは何ですか？",  # noqa: RUF001
        "What is the db port?",
    )
    lines = ["the DB port is 11111.", "noise 99999", "the db port is now 22222 (moved)"]
    assert find_answer(en, lines) == "22222"
    assert find_answer(en, ["the db port is unknown"]) is None


def test_screenshots_are_real_pngs_whose_content_the_agent_can_read() -> None:
    """A simulated screenshot has its stated size; vision reads its text; others read nothing."""
    data = png_image(800, 600, "Banner: incident INC-12345")
    assert image_dimensions(data) == (800, 600)
    assert image_text(screenshot(800, 600, "Banner: x")) == "Banner: x"
    assert image_text(ImagePart(media_type="image/jpeg", data=b"\xff\xd8rest")) is None
    assert image_text(ImagePart(url="https://example.test/a.png")) is None
    assert (
        image_text(ImagePart(media_type="image/png", data=data.replace(b"tEXt", b"zTXt"))) is None
    )


# -- the summarizer ---------------------------------------------------------------------------


def test_summarizer_is_lossy_on_a_heavy_span_and_stays_within_budget() -> None:
    """On a heavy span it keeps the goal and user facts, drops some tool facts, fits the budget."""
    task = build_task("heavy", 0)
    messages = [Message.system(task.system)]
    for turn in task.turns[:2]:
        messages.append(turn.user)
        for i, step in enumerate(turn.steps):
            call = ToolCall(id=f"c{len(messages)}{i}", name=step.tool, arguments=step.arguments)
            messages += [
                Message.assistant(step.thought, [call]),
                Message.tool(call.id, str(step.output)),
            ]
    request = build_summary_request(messages, (2, len(messages) - 4))
    present = [
        n for n in task.needles if find_answer(n, visible_lines(request.messages)) == n.value
    ]
    summarizer = ExtractiveSummarizer()
    summary = summarizer(CompletionRequest(messages=request.messages, max_output_tokens=2048))
    kept = [n for n in present if find_answer(n, summary.split("\n")) == n.value]
    fresh = estimate_tokens(list(request.messages))
    assert estimate_tokens(summary) <= summarizer.budget(fresh, 0, 2048)
    assert len(present) >= 5 and 0 < len(kept) < len(present)
    assert any(n.carrier == "user" for n in kept)
    assert summary.startswith("## Primary Request\n- Goal: stabilise")


def test_summarizer_budget_grows_with_the_carried_summary_up_to_the_cap() -> None:
    """Budget: most of the carried summary plus 1/ratio of the fresh material, in [floor, cap]."""
    s = ExtractiveSummarizer(ratio=10, carry=0.5, floor=100)
    assert s.budget(fresh_tokens=10_000, carried_tokens=0, max_output_tokens=4096) == 1000
    assert s.budget(fresh_tokens=10_000, carried_tokens=1000, max_output_tokens=4096) == 1500
    assert s.budget(fresh_tokens=10, carried_tokens=0, max_output_tokens=None) == 100
    assert s.budget(fresh_tokens=10**6, carried_tokens=0, max_output_tokens=None) == 2048


def test_summarizer_reads_warm_replays_with_images_and_previous_summaries() -> None:
    """The first user line is the goal, a previous summary's lines carry over, images are read."""
    shot = screenshot(100, 100, "Banner: the banner id is B-77")
    messages = [
        Message.system("sys"),
        Message.user("Goal: fix it\nwith care"),
        Message.user(
            "<compacted-summary>\n## Primary Request\n- old goal\n## Current Work\n"
            "- the port is 4242\n</compacted-summary>"
        ),
        Message.assistant("looking", [ToolCall(id="c1", name="shot", arguments="{}")]),
        Message.tool("c1", [shot]),
        Message.tool("c2", "[folded tool result: read, 9 chars; the full result is in the record]"),
    ]
    units = units_from_messages(messages)
    assert units[0] == Unit("goal", "Goal: fix it", 1)
    assert Unit("user", "with care", 1) in units
    assert Unit("goal", "old goal", 2) in units and Unit("summary", "the port is 4242", 2) in units
    assert Unit("image", "[image] Banner: the banner id is B-77", 4) in units
    assert any(u.stub for u in units)
    assert "- [image] Banner: the banner id is B-77" in ExtractiveSummarizer().summarize(units, 500)


def test_cold_requests_are_parsed_from_the_flattened_transcript() -> None:
    """Peers' `<transcript>` bodies (roles, events, a previous summary) become the same units."""
    body = flatten(
        [
            Message.user("Goal: ship"),
            Message.assistant("reading", [ToolCall(id="c1", name="read", arguments='{"p": 1}')]),
            Message.tool("c1", [screenshot(10, 10, "secret pixels")]),
            Message.tool("c2", "x" * 50),
        ],
        max_chars=20,
    )
    assert '→ read {"p": 1}' in body and "[image]" in body and "x" * 21 not in body
    text = (
        "prompt words\n<transcript>\n<PREVIOUS SUMMARY>\n## Current Work\n- kept 7\n"
        f"</PREVIOUS SUMMARY>\n<EVENT id=3>\n[system]\nsys\n{body}\n</EVENT>\n"
        "[tool c9]\n[folded tool result: read, 9 chars; the full result is in the record]\n"
        "[user]\nHere is a summary of the conversation to date:\n- carried 9\n</transcript>\nend"
    )
    units = units_from_text(text)
    roles = [(u.role, u.text) for u in units]
    assert roles[0] == ("summary", "kept 7")
    assert ("goal", "Goal: ship") in roles and ("summary", "- carried 9") in roles
    assert ("tool", "[image]") in roles and all("sys" != t for _, t in roles)
    assert "prompt words" not in [t for _, t in roles]
    assert [u.stub for u in units if u.text.startswith("[folded")] == [True]


# -- the agent, the provider and the metrics ----------------------------------------------------


async def test_agent_fails_loudly_off_script() -> None:
    """A request before `begin`, or a tool the agent did not call, is a bug in the harness."""
    agent = ScriptedAgent(build_task("light", 0, scale=0.2))
    with pytest.raises(RuntimeError, match="begin"):
        agent.respond(CompletionRequest(messages=(Message.user("hi"),)))
    with pytest.raises(RuntimeError, match="pending"):
        await agent.run_tool("read_file", {})


async def test_sim_provider_rejects_broken_tool_pairs_and_logs_every_exchange() -> None:
    """Orphan results get a non-overflow 400, like a real provider; all requests are logged."""
    clock = SimClock(5.0)
    provider = SimProvider(lambda r: "ok", window=10_000, rules=CacheRules.openai(), clock=clock)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(CompletionRequest(messages=(Message.tool("gone", "x"),)))
    assert caught.value.status_code == 400 and not isinstance(caught.value, ContextOverflowError)
    clock.advance(2)
    done = await provider.complete(CompletionRequest(messages=(Message.user("hi"),)))
    assert done.message.text == "ok"
    assert [(e.error is None, e.at) for e in provider.exchanges] == [(False, 5.0), (True, 7.0)]


def test_billed_cost_is_hand_checked_for_each_price_table() -> None:
    """Uncached input, cache reads, cache writes and output at the table's prices."""
    usage = Usage(
        prompt_tokens=1_000_000,
        cached_tokens=400_000,
        cache_write_tokens=100_000,
        completion_tokens=10_000,
    )
    assert billed_cost([usage], PRICES["anthropic"]) == pytest.approx(
        0.5 * 3.00 + 0.4 * 0.30 + 0.1 * 3.75 + 0.01 * 15.00
    )
    plain = Usage(prompt_tokens=1_000_000, cached_tokens=400_000, completion_tokens=10_000)
    assert billed_cost([plain], PRICES["openai"]) == pytest.approx(0.6 * 1.25 + 0.4 * 0.125 + 0.1)
    assert billed_cost([plain], PRICES["deepseek"]) == pytest.approx(
        0.6 * 0.28 + 0.4 * 0.028 + 0.01 * 0.42
    )
    assert cache_hit_rate([plain, Usage(prompt_tokens=1_000_000)]) == pytest.approx(0.2)
    assert cache_hit_rate([]) is None


async def test_replay_under_other_rules_is_hand_checked() -> None:
    """A replay rebills the same requests: DeepSeek reads the shared prefix in 64-token units."""
    clock = SimClock()
    provider = SimProvider(lambda r: "ok", window=50_000, rules=CacheRules.anthropic(), clock=clock)
    first = CompletionRequest(messages=(Message.user("word " * 300),))
    second = CompletionRequest(
        messages=(*first.messages, Message.assistant("a"), Message.user("b"))
    )
    for request in (first, second):
        clock.advance(1)
        await provider.complete(request)
    shared = provider.count_tokens(first)
    usages = await replay_usage(provider.exchanges, CacheRules.deepseek(), 50_000)
    assert [u.prompt_tokens for u in usages] == [shared, provider.count_tokens(second)]
    assert [u.cached_tokens for u in usages] == [0, shared // 64 * 64]
    assert [u.completion_tokens for u in usages] == [
        e.completion.usage.completion_tokens for e in provider.exchanges if e.completion
    ]


def test_run_metrics_on_a_tiny_session_are_hand_checked() -> None:
    """A two-step session that never fills its window: every needle found, sums consistent."""
    needle = Needle(
        id="n1",
        anchor="secret port",
        value="40404",
        shape=r"\d{5}",
        carrier="tool",
        position="middle",
        step=1,
    )
    steps = (
        Step(tool="read_file", arguments='{"path": "a"}', thought="Reading a.", output="nothing"),
        Step(
            tool="read_file",
            arguments='{"path": "b"}',
            thought="Reading b.",
            output="x\nnote: the secret port is 40404\ny",
        ),
    )
    task = Task(
        name="tiny",
        seed=0,
        description="tiny",
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
    result = asyncio.run(run_session(task, "current"))
    assert (result.recall, result.recalled, result.recall_by_carrier) == (
        1.0,
        ("n1",),
        {"tool": (1, 1)},
    )
    assert (result.requests, result.rounds, result.planned_rounds) == (4, 4, 4)
    assert result.prompt_tokens == sum(result.pressure) and result.summary_calls == 0
    assert result.compactions == 0 and result.death is None and result.lost == {}
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


# -- arms -------------------------------------------------------------------------------------


@pytest.mark.parametrize("arm", ARM_NAMES)
def test_each_arm_runs_a_small_task(arm: str) -> None:
    """Every arm plays a shortened session to the end and is measured and traced."""
    result = run("light", arm, 0.6)
    assert result.arm == arm and result.requests > 0 and 0.0 <= result.recall <= 1.0
    assert result.rounds == result.planned_rounds or result.death is not None
    assert set(result.cost_usd) == {"anthropic", "openai", "deepseek"}
    assert len(result.pressure) + result.summary_calls >= result.requests


def test_current_keeps_a_clean_trace_and_pays_summaries_from_the_cache() -> None:
    """The engine's run passes every L2 assertion; its summaries are read from the cache."""
    result = run("light", "current")
    assert result.trace == {} and result.summary_calls >= 1
    assert result.summary_cache_hit_rate is not None and result.summary_cache_hit_rate >= 0.95


def test_cold_arms_fail_the_prefix_replay_assertion_on_every_summary() -> None:
    """A cold summary request is never a prefix replay: the trace flags each one."""
    result = run("light", "naive")
    assert result.summary_calls >= 1
    assert result.trace == {"prefix_replay": result.summary_calls}
    assert result.summary_cache_hit_rate == 0.0


def test_no_context_management_dies_of_overflow_and_answers_nothing() -> None:
    """`none` overflows the window; needles it never reached are reported as such."""
    result = run("light", "none")
    assert (result.death, result.overflow_deaths, result.recall) == ("overflow", 1, 0.0)
    assert "not reached (the session ended first)" in result.lost.values()


def test_loss_causes_name_the_rewrite_that_hid_each_needle() -> None:
    """Folds, summaries and spills are blamed for the needles they hid."""
    light = run("light", "current").lost
    assert light and all(
        cause.split(" ")[0] in ("compact", "summarize") for cause in light.values()
    )
    giant = run("giant_tool_output", "current").lost
    assert "never visible (cut before it reached the transcript)" in giant.values()


def mean_recall(arm: str) -> float:
    """`arm`'s recall averaged over every task of the suite (full length, seed 0)."""
    return sum(run(task, arm).recall for task in TASK_NAMES) / len(TASK_NAMES)


def test_self_check_no_management_is_clearly_worse_than_current() -> None:
    """Self-check: without context management every session dies and recall collapses."""
    for task in TASK_NAMES:
        none = run(task, "none")
        assert none.recall == 0.0 and none.overflow_deaths == 1, task
    assert mean_recall("current") >= mean_recall("none") + 0.25


def test_self_check_naive_is_clearly_worse_than_current() -> None:
    """Self-check: the known-bad `naive` arm must score clearly below `current` on recall."""
    assert mean_recall("naive") <= mean_recall("current") - 0.15


@pytest.mark.parametrize("seed", [1, 2])
def test_self_check_holds_for_other_seeds(seed: int) -> None:
    """The lead over `naive` is not an accident of seed 0: other plantings keep a clear gap.

    Measured: seeds 0-4 give gaps of 0.19, 0.12, 0.12, 0.14, 0.22.
    """
    results = run_eval(arms=["naive", "current"], seed=seed)

    def mean(arm: str) -> float:
        return sum(results.run(task, arm).recall for task in TASK_NAMES) / len(TASK_NAMES)

    assert mean("naive") <= mean("current") - 0.10


def test_current_survives_the_heavy_task() -> None:
    """The engine survives large tool outputs with an unknown model's (high) calibration.

    Found by this suite: a fold's post tokens went negative (billed pressure minus estimated
    savings) and the boundary was refused; fixed by recording post tokens in billed units.
    """
    result = run("heavy", "current")
    assert result.death is None and result.trace == {}


def test_current_summary_requests_never_carry_broken_tool_pairs() -> None:
    """R22b holds for summarizer requests too, also when the session resumes a cut log.

    Found by this suite: the replay was the raw projection while turn requests were repaired.
    """
    assert "tool_pairs" not in run("restored_orphans", "current").trace


# -- peers' building blocks ---------------------------------------------------------------------


def test_head_tail_and_langchain_trimming() -> None:
    """Head+tail cuts keep both ends; trimming keeps the newest messages from a user turn."""
    assert head_tail("abcdefghij", 4, "|") == "ab|ij" and head_tail("abc", 4, "|") == "abc"
    assert approx_tokens(Message.user("x" * 40)) == 13
    history = [
        Message.user("old question"),
        Message.assistant("a" * 400),
        Message.user("line one\nline two\nline three"),
        Message.assistant("answer"),
    ]
    assert trim_last(history, 1_000) == history
    assert trim_last(history, 11) == [Message.user("line three"), history[3]]
    assert trim_last(history[1:2], 1_000) == []  # no user message left: nothing to summarize


def _ctx(window: int = 16_384) -> ArmContext:
    policy = resolve_compaction_policy(None, window)
    provider = SimProvider(
        lambda r: "s", window=window, rules=CacheRules.openai(), clock=SimClock()
    )
    return ArmContext(
        record=MemoryRecord(),
        provider=provider,
        policy=policy,
        tools=(),
        spill_dir=Path("."),
        summary_max_tokens=2048,
    )


async def test_peers_cut_oversized_tool_output_like_their_sources() -> None:
    """Codex keeps about 10 kB of head and tail; OpenHands cuts observations over 30,000 chars."""
    big = Message.tool("c", "h" * 20_000 + "t" * 20_000).tool_result
    assert big is not None
    ctx = _ctx()
    tool_ctx = ToolResultContext(record=ctx.record, tool_name="read", result=big)
    codex = (await CodexArm(ctx).post_tool_result(tool_ctx)).text
    assert codex.startswith("h" * 5_000) and codex.endswith("t" * 5_000)
    assert "…7500 tokens truncated…" in codex
    openhands = (await OpenHandsArm(ctx).post_tool_result(tool_ctx)).text
    assert len(openhands) < 30_100 and "Observation truncated" in openhands
    tiny = Message.tool("c", "x").tool_result
    assert tiny is not None
    small = ToolResultContext(record=ctx.record, tool_name="read", result=tiny)
    assert (await CodexArm(ctx).post_tool_result(small)).text == "x"


def test_helpers_find_the_newest_turn_and_the_system_prefix() -> None:
    """The newest assistant turn with its results is protected; leading systems are counted."""
    messages = [
        Message.system("s"),
        Message.system("t"),
        Message.user("u"),
        Message.assistant(None, [ToolCall(id="a", name="r")]),
        Message.tool("a", "x"),
    ]
    assert leading_system(messages) == 2
    assert newest_turn(messages) == frozenset({3, 4})
    assert newest_turn([*messages, Message.assistant("done")]) == frozenset()
    assert newest_turn(messages[:3]) == frozenset()


def test_is_summary_call_knows_every_arms_way_of_asking() -> None:
    """Engine, Codex-style and cold `<transcript>` requests are summary calls; turns are not."""
    from steerable_compaction.compaction import SUMMARY_INSTRUCTION
    from steerable_compaction.sim.peers import CODEX_PROMPT

    for text in (SUMMARY_INSTRUCTION, CODEX_PROMPT, "x <transcript> y"):
        assert is_summary_call(CompletionRequest(messages=(Message.user(text),)))
    assert not is_summary_call(CompletionRequest(messages=(Message.user("hello"),)))
    assert not is_summary_call(CompletionRequest(messages=(Message.assistant("x"),)))
    assert not is_summary_call(CompletionRequest(messages=()))


# -- the eval command -----------------------------------------------------------------------------


def test_eval_command_writes_a_table_results_json_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval` on a throwaway parser: progress on stderr, table on stdout, JSON and PNG on disk."""
    parser = argparse.ArgumentParser(prog="steerable-compaction")
    sub = parser.add_subparsers(dest="command")
    add_eval_command(sub)
    out = tmp_path / "out"
    args = parser.parse_args(
        [
            "eval",
            "--tasks",
            "light,images",
            "--arms",
            "none",
            "naive,current",
            "--out",
            str(out),
            "--seed",
            "1",
            "--scale",
            "0.4",
        ]
    )
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert "running 6 sessions (2 tasks x 3 arms)" in captured.err
    assert "6/6 images / current" in captured.err
    assert captured.out.startswith("task ")
    assert "over all tasks" in captured.out
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert document["format"] == "steerable-compaction-eval/1" and document["seed"] == 1
    assert [(r["task"], r["arm"]) for r in document["runs"]][:3] == [
        ("light", "none"),
        ("light", "naive"),
        ("light", "current"),
    ]
    assert "naive" in document["arm_sources"] and document["tasks"]["light"]["window"] == 16_384
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "nope"], "unknown task(s) nope"),
        (["--arms", "light"], "unknown arm(s) light"),
        (["--scale", "9"], "--scale must be in (0, 4]"),
        (["--summary-ratio", "0"], "--summary-ratio must be >= 1"),
    ],
)
def test_eval_command_rejects_bad_arguments(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown names and out-of-range numbers exit 2 with a message on stderr."""
    parser = argparse.ArgumentParser()
    add_eval_command(parser.add_subparsers())
    args = parser.parse_args(["eval", "--out", str(tmp_path), *argv])
    assert args.func(args) == 2
    assert message in capsys.readouterr().err


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
    from dataclasses import replace

    from steerable_compaction.sim.chart import write_chart

    silent = replace(results, runs=(replace(results.runs[0], pressure=()),))
    assert write_chart(silent, tmp_path / "c.png").exists()  # a run without requests draws


@pytest.mark.parametrize(
    ("arm", "survives"),
    [
        ("naive", True),
        ("openhands", True),
        ("codex", True),
        ("fold_only", False),
        ("masking", False),
        ("langchain", False),
    ],
)
def test_heavy_outputs_end_the_sessions_of_arms_that_never_summarize_enough(
    arm: str, survives: bool
) -> None:
    """On heavy tool output, arms that only fold, mask or keep 20 messages run out of room."""
    result = run("heavy", arm)
    assert (result.death is None) is survives
    assert result.overflow_deaths == (0 if survives else 1)


def _filled(ctx: ArmContext, pairs: int, size: int) -> None:
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("Goal: " + "g" * 40))
    for i in range(pairs):
        call = ToolCall(id=f"c{i}", name="read", arguments="{}")
        ctx.record.append_message(Message.assistant(f"step {i}", [call]))
        ctx.record.append_message(Message.tool(f"c{i}", f"out {i} " + "word " * size))


async def test_codex_drops_the_oldest_items_until_the_compaction_request_fits() -> None:
    """A compaction request over the window loses its oldest items and is retried (Codex)."""
    ctx = _ctx(window=4096)
    _filled(ctx, pairs=12, size=200)
    outcome = await CodexArm(ctx).compact("pressure", 5_000)
    assert outcome is not None and outcome.written and outcome.summarizer_called
    provider = ctx.provider
    assert isinstance(provider, SimProvider)
    tries = [e for e in provider.exchanges if is_summary_call(e.request)]
    assert len(tries) > 1 and tries[-1].completion is not None
    assert all(isinstance(e.error, ContextOverflowError) for e in tries[:-1])
    assert len(tries[-1].request.messages) < len(tries[0].request.messages)
    kept = ctx.record.messages()
    assert [m.role for m in kept] == ["system", "user", "user"]  # goal, then the summary


async def test_codex_gives_up_when_even_one_item_does_not_fit() -> None:
    """With nothing left to drop, the overflow propagates (the session dies)."""
    ctx = _ctx(window=1024)
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("goal"))
    ctx.record.append_message(Message.user("word " * 2000))
    with pytest.raises(ContextOverflowError):
        await CodexArm(ctx).compact("pressure", 3_000)


def test_codex_keeps_the_newest_user_messages_within_its_budget() -> None:
    """Recent user messages are kept newest first; the one that overflows is cut head+tail."""
    arm = CodexArm(_ctx(window=8192))  # budget: 8192 // 8 = 1024 approximate tokens
    messages = [Message.user("a" * 8000), Message.user("b" * 2000), Message.user("c" * 100)]
    kept = arm._user_messages(messages)
    assert [m.text[0] for m in kept] == ["a", "b", "c"]
    assert len(kept[0].text) < 2200 and "tokens truncated" in kept[0].text
    assert kept[1:] == messages[1:]


@pytest.mark.parametrize("kind", [NaiveArm, FoldOnlyArm, OpenHandsArm, LangChainArm, CodexArm])
async def test_arms_do_nothing_when_there_is_nothing_to_compact(kind: type[ArmHooks]) -> None:
    """A transcript too short to compact is left alone (`None`, nothing written)."""
    ctx = _ctx()
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("goal"))
    assert await kind(ctx).compact("pressure", 20_000) is None
    assert len(ctx.record) == 2


def test_a_failing_engine_or_provider_ends_the_session_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Errors other than overflow end a session too, named in `death`, never raised."""
    from steerable_compaction.errors import RecordError
    from steerable_compaction.sim import runner

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


def test_needles_are_planted_in_text_output_only() -> None:
    """Planting a text needle into a screenshot's parts is refused."""
    from steerable_compaction.sim.builder import SessionBuilder

    builder = SessionBuilder("x", 0)
    shot = Step(tool="screenshot", arguments="{}", thought="t", output=(screenshot(10, 10, "x"),))
    with pytest.raises(ValueError, match="text outputs only"):
        builder.plant(shot, builder.needle("tool", "head", 0))


async def test_overflow_retries_are_bounded_per_turn() -> None:
    """An arm compacts on an overflow at most twice a turn, and never on other errors."""
    from steerable_compaction.hooks import RequestErrorContext

    ctx = _ctx()
    _filled(ctx, pairs=4, size=50)
    arm = NaiveArm(ctx)
    overflow = ContextOverflowError("too long")

    def error(turn: int, exc: Exception = overflow) -> RequestErrorContext:
        return RequestErrorContext(record=ctx.record, round=1, turn=turn, error=exc, attempt=1)

    assert await arm.on_request_error(error(1, ProviderError("teapot"))) is None
    assert await arm.on_request_error(error(1)) is not None  # summarized everything
    assert await arm.on_request_error(error(1)) is None  # nothing left to compact
    assert await arm.on_request_error(error(1)) is None  # budget of two used up
    _filled(ctx, pairs=4, size=50)
    assert await arm.on_request_error(error(2)) is not None  # a new turn, a new budget


async def test_langchain_keeps_twenty_messages_and_never_splits_a_tool_pair() -> None:
    """The cut moves back off a tool result; the summary replaces everything before it."""
    ctx = _ctx()
    _filled(ctx, pairs=12, size=5)
    ctx.record.append_message(Message.user("and now?"))
    outcome = await LangChainArm(ctx).compact("pressure", 14_000)
    assert outcome is not None and outcome.written
    kept = ctx.record.messages()
    assert kept[1].text.startswith("Here is a summary of the conversation to date:")
    assert kept[2].role == "assistant" and len(kept) == 2 + 21


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    """On a terminal the bar is redrawn with a carriage return and ends with a newline."""
    import io

    from steerable_compaction.sim.command import _bar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    update = _bar(stream)
    update(1, 2, "light", "none")
    update(2, 2, "light", "current")
    text = stream.getvalue()
    assert text.startswith("\r[") and text.count("\r") == 2 and text.endswith("\n")
    assert "2/2 light / current" in text


# -- eval --harness: your configuration against the same baselines ------------------------------


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


def test_eval_command_reports_a_bad_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval --harness` with a bad or missing file exits 2, names the file, writes nothing."""
    parser = argparse.ArgumentParser()
    add_eval_command(parser.add_subparsers())
    bad = tmp_path / "bad.yaml"
    bad.write_text("compaction:\n  threshold_ratio: 3\n", encoding="utf-8")
    out = tmp_path / "out"
    for path in (bad, tmp_path / "missing.yaml"):
        args = parser.parse_args(["eval", "--out", str(out), "--harness", str(path)])
        assert args.func(args) == 2
        err = capsys.readouterr().err
        assert f"--harness {path}" in err and "error" in err
    assert not out.exists()
