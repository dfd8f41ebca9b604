"""`sim.summarizer`: the extractive summarizer every arm's summary call reaches."""

from __future__ import annotations

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import build_summary_request
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.sim import build_task
from steerable_compaction.sim.agent import visible_lines
from steerable_compaction.sim.content import screenshot
from steerable_compaction.sim.summarizer import (
    ExtractiveSummarizer,
    Unit,
    flatten,
    units_from_messages,
    units_from_text,
)
from steerable_compaction.sim.tasks import find_answer
from steerable_compaction.tokens import estimate_tokens


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


def test_a_focus_weighs_the_lines_that_name_it_not_its_glue_words() -> None:
    """Asked to focus on billing, the summarizer keeps billing lines a plain summary drops.

    "everything about billing": only "billing" counts; "about" and "everything" would make
    almost every line look on-subject.
    """
    lines = ["The billing export job id is BX-4471.", "The billing retry limit is 17."]
    lines += [
        f"The deploy shard {i} answers on port {9000 + i} about everything." for i in range(8)
    ]
    units = [Unit("tool", text, source=k) for k, text in enumerate(lines)]
    summarizer = ExtractiveSummarizer()
    room = sum(estimate_tokens(f"- {line}") + 1 for line in lines[:2])  # two lines' worth
    budget = estimate_tokens(summarizer.summarize([], 10_000)) + 8 + room
    plain = summarizer.summarize(units, budget)
    steered = summarizer.summarize(units, budget, frozenset({"billing"}))
    assert "BX-4471" not in plain and "limit is 17" not in plain  # the older lines lose
    assert "BX-4471" in steered and "limit is 17" in steered
    from steerable_compaction.sim.summarizer import _words

    assert _words("everything about billing") == frozenset({"billing"})
