"""`sim.personalities`: the summarizer personalities, their mischief, and reading them back."""

from __future__ import annotations

import json

import pytest

from steerable_compaction.compaction import SECTIONS, SUMMARY_INSTRUCTION
from steerable_compaction.messages import Message, ToolCall
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.sim.personalities import (
    PERSONALITIES,
    carried_lines,
    check_personality,
    mischief,
    render,
    terse_budget,
)
from steerable_compaction.sim.summarizer import ExtractiveSummarizer

SECTIONS_IN = {
    "Primary Request": ["- Fix the flaky payments suite."],
    "Key Technical Concepts": ["- The staging database port is 41234."],
    "Files and Code": ["- src/api/retry.py holds the retry loop."],
    "Errors and Fixes": [],
    "Current Work": ["- Reading the retry tests."],
    "Next Step": ["Run the tests again."],
}


@pytest.mark.parametrize("personality", PERSONALITIES)
def test_every_personality_keeps_the_chosen_lines_and_reads_back(personality: str) -> None:
    """Whatever the layout, each chosen line is in the text and comes back as a carried line."""
    text = render(personality, SECTIONS_IN, SECTIONS)
    lines = [line for line, _ in carried_lines(text)]
    for chosen in ("Fix the flaky payments suite", "The staging database port is 41234"):
        assert chosen in text
        assert any(chosen in line for line in lines)
    goal = [line for line, is_goal in carried_lines(text) if is_goal]
    assert any("Fix the flaky payments suite" in line for line in goal)


def test_layouts_differ_as_their_personalities_say() -> None:
    """Prose has no headings, foreign has Chinese headings, JSON parses, terse is checkpoint."""
    prose = render("prose", SECTIONS_IN, SECTIONS)
    assert "#" not in prose and not any(name in prose for name in SECTIONS)
    foreign = render("foreign", SECTIONS_IN, SECTIONS)
    assert "## 主要请求" in foreign and "Primary Request" not in foreign
    document = json.loads(render("json", SECTIONS_IN, SECTIONS))
    assert document["context"] == ["The staging database port is 41234."]
    assert render("terse", SECTIONS_IN, SECTIONS) == render("checkpoint", SECTIONS_IN, SECTIONS)
    unruly = render("unruly", SECTIONS_IN, SECTIONS)
    assert unruly.startswith("<think>") and "Sure!" in unruly
    assert terse_budget(1000) == 250


def test_a_paragraph_is_read_back_sentence_by_sentence() -> None:
    """A long prose line becomes one carried line per sentence."""
    paragraph = "Important context: " + "; ".join(f"the value {i} is {1000 + i}" for i in range(30))
    lines = carried_lines(paragraph + ".")
    assert len(lines) == 30 and lines[-1][0] == "the value 29 is 1029."


def _request(tail: str) -> list[Message]:
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "src/app.py"}')
    return [
        Message.user("Fix the bug."),
        Message.assistant(f"Checking src/app.py {tail}.", [call]),
        Message.tool("c1", "def handler(): ..."),
        Message.user(SUMMARY_INSTRUCTION),
    ]


def test_mischief_is_deterministic_and_comes_about_one_request_in_three() -> None:
    """The same request always gets the same answer; about a third of requests misbehave."""
    requests = [_request(str(i)) for i in range(300)]
    answers = [mischief(r) for r in requests]
    assert answers == [mischief(r) for r in requests]
    bad = [a for a in answers if a is not None]
    assert 70 <= len(bad) <= 130
    kinds = {
        "echo": any(a == SUMMARY_INSTRUCTION for a in bad),
        "preamble echo": any(a.startswith("Sure, here is the summary:") for a in bad),
        "tool call": any("<tool_call>" in a for a in bad),
        "think only": any(a.startswith("<think>") and a.endswith("</think>") for a in bad),
        "refusal": any(a.startswith("I'm sorry") for a in bad),
    }
    assert all(kinds.values()), kinds


def test_unruly_summarizer_answers_its_mischief_and_otherwise_a_summary() -> None:
    """`ExtractiveSummarizer(personality="unruly")` returns the mischief where there is one."""
    summarizer = ExtractiveSummarizer(personality="unruly")
    for i in range(30):
        messages = _request(str(i))
        answer = summarizer(CompletionRequest(messages=tuple(messages)))
        expected = mischief(messages)
        if expected is not None:
            assert answer == expected
        else:
            assert answer.startswith("<think>") and "## Primary Request" in answer


def test_terse_writes_a_quarter_of_the_checkpoint() -> None:
    """On the same long request, `terse` writes at most about a quarter of `checkpoint`."""
    messages = [Message.user("Goal: map the repository.")]
    for i in range(60):
        call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "src/m{i}.py"}}')
        messages += [
            Message.assistant(f"Reading src/m{i}.py.", [call]),
            Message.tool(f"c{i}", f"note: the limit of module {i} is {4000 + i} requests."),
        ]
    request = CompletionRequest(messages=(*messages, Message.user(SUMMARY_INSTRUCTION)))
    full = ExtractiveSummarizer()(request)
    terse = ExtractiveSummarizer(personality="terse")(request)
    assert len(terse) * 3 < len(full)


def test_unknown_personality_is_refused() -> None:
    """A name that is no personality is a `ValueError` listing the known ones."""
    with pytest.raises(ValueError, match="known: checkpoint, prose"):
        check_personality("poet")
    with pytest.raises(ValueError, match="unknown summarizer"):
        ExtractiveSummarizer(personality="poet")
