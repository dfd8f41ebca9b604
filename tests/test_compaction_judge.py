# ruff: noqa: RUF001  (Chinese summaries use full-width punctuation on purpose)
"""`compaction.judge`: a summarizer's answer is judged by its content, never by its layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message
from steerable_compaction.compaction import (
    INCREMENTAL_INSTRUCTION,
    SECTIONS,
    SUMMARY_INSTRUCTION,
    excerpt_summary,
    select_regions,
)
from steerable_compaction.compaction.judge import (
    CONTENT_FLOOR_CHARS,
    content_shortfall,
    distinctive_values,
    judge_summary,
)

from .compaction_helpers import session, tool_round

CHECKPOINT = (
    "## Primary Request\nFix the flaky payments suite.\n## Key Technical Concepts\n"
    "- The staging database port is 41234.\n## Files and Code\n- src/api/retry.py\n"
    "## Errors and Fixes\n- TimeoutError in test_retry\n## Current Work\nReading the tests.\n"
    "## Next Step\nRun them again."
)
ACCEPTED = {
    "checkpoint": CHECKPOINT,
    "prose": (
        "The user wants the flaky payments suite fixed. The retry loop in src/api/retry.py "
        "gives up after 3 attempts; the staging database port is 41234. A TimeoutError in "
        "test_retry remains. Next, run the tests again."
    ),
    "chinese headings": (
        "## 主要请求\n修复不稳定的支付测试。\n## 当前工作\n"
        "正在阅读 src/api/retry.py，端口为 41234。"
    ),
    "json": json.dumps(
        {"request": "Fix the flaky payments suite.", "facts": ["staging db port 41234"]},
        indent=2,
    ),
    "bullets": "- fix the flaky suite\n- port 41234\n- src/api/retry.py retries 3 times",
    "other headings": "# Goal\nFix the suite.\n# Findings\nThe retry loop in src/api/retry.py.",
    "a table": "| file | state |\n|---|---|\n| src/a.py | read |\n| src/b.py | read |",
    "short": "## Primary Request\nfix the positions",
}


@pytest.mark.parametrize("text", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_any_layout_and_language_is_accepted_as_written(text: str) -> None:
    """Prose, other headings, Chinese, JSON, lists, tables: written as they are."""
    verdict = judge_summary(text, instruction=SUMMARY_INSTRUCTION)
    assert verdict.reason is None and verdict.text == text.strip()


ECHO = SUMMARY_INSTRUCTION
REFUSED = {
    "empty": ("  \n ", "it is empty"),
    "fences": (" ".join(["```"] * 256), "it has no words"),
    "ellipsis": ("…", "it has no words"),
    "an answer": ("Done.", "too short"),
    "markup": ("- - - | --- | *** | ## ok | --- | - - - | *** | ---", "it is mostly markup"),
    "a word loop": ("summary " * 80, "it repeats itself"),
    "a token loop": ("ab" * 300, "it repeats itself"),
    "echo": (ECHO, "it echoes the instruction"),
    "echo with a preamble": (f"Sure, here is the summary:\n\n{ECHO}", "it echoes the instruction"),
    "half an echo": (ECHO[: len(ECHO) * 2 // 3], "it echoes the instruction"),
    "think only": ("<think>\nThe Primary Request and Next Step ...\n</think>", "reasoning block"),
    "an unclosed think": ("<think>I should write the Primary Request", "reasoning block"),
    "a role label": ("Assistant: Reading src/app.py next.", "continues the transcript"),
    "a tool call": ('<tool_call>{"name": "read_file"}</tool_call>', "continues the transcript"),
    "JSON tool call": ('{"name": "read_file", "arguments": {"path": "a"}}', "continues the"),
    "a transcript line": ("[assistant] I will read the tests.", "continues the transcript"),
    "a refusal naming a section": (
        "I'm sorry, but I can't help with the Primary Request section.",
        "it is a refusal",
    ),
    "a Chinese refusal": ("抱歉，我无法总结这段对话。", "it is a refusal"),
    "the instruction's headings": ("\n".join(f"## {name}" for name in SECTIONS), "echoes"),
    "bare headings": ("## Goal\n## Findings\n## Next", "nothing under them"),
    "bold headings": ("**Primary Request:**\n**Next Step:**", "nothing under them"),
    "empty keys": ('{\n  "request": [],\n  "files": []\n}', "nothing under them"),
}


@pytest.mark.parametrize(("text", "why"), REFUSED.values(), ids=REFUSED.keys())
def test_garbage_is_refused_with_its_reason(text: str, why: str) -> None:
    """Each kind of garbage a summarizer returns is refused, and the reason says which."""
    verdict = judge_summary(text, instruction=SUMMARY_INSTRUCTION)
    assert verdict.text is None and verdict.reason is not None and why in verdict.reason


def test_an_echo_of_another_instruction_is_judged_against_the_one_sent() -> None:
    """The echo check reads the instruction the request carried (incremental here)."""
    assert judge_summary(INCREMENTAL_INSTRUCTION, instruction=INCREMENTAL_INSTRUCTION).reason
    assert judge_summary(CHECKPOINT, instruction=INCREMENTAL_INSTRUCTION).reason is None


def test_a_reasoning_block_is_left_out_of_an_accepted_summary() -> None:
    """A summary after a reasoning block is accepted without the block, and the note says so."""
    verdict = judge_summary(f"<think>\nwhat matters?\n</think>\n\n{CHECKPOINT}")
    assert verdict.text == CHECKPOINT and "reasoning" in verdict.note
    closing_only = judge_summary(f"what matters? I think the port.</think>\n{CHECKPOINT}")
    assert closing_only.text == CHECKPOINT


@pytest.mark.parametrize("glue", ["\n\n", "\n"])
def test_a_summary_written_three_times_is_kept_once(glue: str) -> None:
    """A loop that is the same summary repeated keeps what exists: one copy."""
    verdict = judge_summary(glue.join([CHECKPOINT] * 3), instruction=SUMMARY_INSTRUCTION)
    assert verdict.text is not None and "repeats" in verdict.note
    assert verdict.text.count("The staging database port is 41234.") == 1
    looped = judge_summary("## Primary Request\n" + "- read_file\n" * 6)
    assert looped.text == "## Primary Request\n- read_file"


def test_what_a_small_model_really_wrote_is_still_refused() -> None:
    """Gemma 3 270M's empty fences and transcript continuations (issue 17) are refused."""
    fixture = Path(__file__).parent / "fixtures" / "degenerate_summaries.json"
    for output in json.loads(fixture.read_text(encoding="utf-8"))["outputs"]:
        verdict = judge_summary(output["text"], instruction=SUMMARY_INSTRUCTION)
        assert verdict.reason in ("it has no words",) or "continues the transcript" in str(
            verdict.reason
        ), verdict


# -- content: the span's distinctive values against the excerpt of the same size -------------


def _span() -> tuple[list[Message], tuple[int, int]]:
    messages = session(1)
    for i in range(12):
        said = f"src/svc/worker_{i}.py: worker_{i} on host-{i}.internal listens on {40000 + i}"
        messages += tool_round(i + 1, said)
    messages += session(3)[2:]
    return messages, select_regions(messages, 2).middle


def test_distinctive_values_leave_out_what_the_head_and_instruction_already_say() -> None:
    """Values stated before the span (the goal) or in the instruction are not the span's."""
    messages = [Message.system("s"), Message.user("Fix src/app.py, port 8443.")]
    messages += [*tool_round(1, "src/app.py answers on port 8443 and 9001; see docs/run.md")]
    values = distinctive_values(messages, (2, 4), known="history seq 12")
    assert "9001" in values and "docs/run.md" in values
    assert "8443" not in values and "src/app.py" not in values


def test_an_answer_that_keeps_none_of_the_spans_values_is_refused() -> None:
    """An answer to the last message keeps clearly fewer values than the excerpt of its size."""
    messages, span = _span()
    values = distinctive_values(messages, span)

    def excerpt(chars: int) -> str:
        return excerpt_summary(messages, span, max_chars=chars)

    why = content_shortfall("Done. I will run the tests next.", values, excerpt)
    assert why is not None and "distinctive values" in why
    kept = "Workers: " + ", ".join(f"worker_{i} port {40000 + i}" for i in range(0, 40, 4))
    assert content_shortfall(kept, values, excerpt) is None
    assert content_shortfall("anything", {"a1", "b2"}, excerpt) is None  # too few to judge


def test_a_short_answer_is_compared_with_the_shortest_useful_excerpt() -> None:
    """Below `CONTENT_FLOOR_CHARS` the excerpt it is compared with keeps that many characters."""
    messages, span = _span()
    sizes: list[int] = []

    def excerpt(chars: int) -> str:
        sizes.append(chars)
        return excerpt_summary(messages, span, max_chars=chars)

    content_shortfall("tiny", distinctive_values(messages, span), excerpt)
    assert sizes == [CONTENT_FLOOR_CHARS]


def _values_reference(text: str) -> set[str]:
    """The value rule as first written: every token judged on its own."""
    import re

    token_re = re.compile(r"[^\s\"'`()\[\]{}<>,;|=\u3000-\u303f\u3040-\u9fff\uff00-\uffef]+")
    error = re.compile(r"[A-Z]\w*(?:Error|Exception|Fault|Failure)")
    dotted = re.compile(r"[A-Za-z_][\w-]*\.[A-Za-z_][\w-]*")
    out = set()
    for raw in token_re.findall(text):
        token = raw.strip(".:!?*#-")
        if len(token) >= 3 and (
            any(c.isdigit() for c in token)
            or "/" in token
            or "_" in token
            or error.fullmatch(token)
            or dotted.search(token)
        ):
            out.add(token)
    return out


_VALUE_TEXT = st.lists(
    st.sampled_from(
        [
            *("ValueError", "Error", "port", "8080", "a.b", "src/x.py", "fn_1", "x²", "ok."),
            *("KeyErrors", "Faults", " ", "\n", "é", "٣٤٥", "TimeoutException!", "(", "-v2-"),
            "db.internal",
        ]
    ),
    max_size=30,
).map(" ".join)


@given(_VALUE_TEXT)
def test_distinctive_values_match_the_rule_token_by_token(text: str) -> None:
    """A repeated token is judged once, a plain word only as an error name: same values."""
    from steerable_compaction.compaction.judge import _values_of

    assert _values_of(text) == _values_reference(text)


@pytest.mark.parametrize(
    "text",
    [
        "Unfortunately, I could not fix test_parse_date in tests/test_dates.py: TimezoneError "
        "when the offset is +14:00; next, try dateutil 2.9.",
        "I cannot reproduce the crash in src/app.py with Python 3.12; the trace names the pool.",
        "Sorry, the build still fails: ImportError in pkg/mod.py after the rename.",
        "User: Ana wants the billing service on Postgres 16, port 5433 on db.internal.",
    ],
)
def test_a_summary_that_opens_like_a_refusal_or_a_turn_is_read_as_a_summary(text: str) -> None:
    """An opening alone refuses nothing when the answer names values; content judges the rest.

    Found in review: a sound summary of a failed attempt ("Unfortunately, I could not fix ...")
    was refused as a refusal, one labelled "User:" as a continuation.
    """
    assert judge_summary(text, instruction=SUMMARY_INSTRUCTION).text == text


def test_a_summary_that_mentions_a_closing_tag_keeps_its_head() -> None:
    """Only a closing tag that ends its line ends a reasoning block without an opening tag."""
    text = "The parser now strips </think> tags from model output; tests/test_parse.py passes."
    assert judge_summary(text).text == text


TEMPLATED = {
    "a Gemma turn": "<start_of_turn>model\n{s}<end_of_turn>",
    "a ChatML turn then the user's": "{s}<|im_end|>\n<|im_start|>user\nThanks! Now fix it.",
    "an opened assistant turn": "<|im_start|>assistant\n{s}",
    "a Llama 3 turn": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n{s}<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\ngo on"
    ),
    "an end marker first": "<|im_end|>\n{s}",
}
SUMMARY = "The user wants the flaky suite fixed; the leak is in src/db/pool.py (RBK-7373)."


@pytest.mark.parametrize("layout", TEMPLATED.values(), ids=TEMPLATED.keys())
def test_leaked_chat_template_markers_are_cleaned_not_refused(layout: str) -> None:
    """A local model run without its template writes the markers; the summary between stays.

    What follows the end of its own turn (a user turn it went on to write) is left out.
    """
    verdict = judge_summary(layout.format(s=SUMMARY), instruction=SUMMARY_INSTRUCTION)
    assert verdict.text == SUMMARY
    assert "chat-template markers" in verdict.note


def test_a_marker_named_inside_a_line_is_text_and_markers_alone_are_empty() -> None:
    """Only a marker that ends its line ends a turn; an answer of markers alone is empty."""
    mention = "We strip <|im_end|> markers from prompts now; the leak is in src/db/pool.py."
    assert judge_summary(mention).text == mention
    verdict = judge_summary("<|im_end|>\n<end_of_turn>")
    assert verdict.text is None and verdict.reason is not None and "empty" in verdict.reason
    verdict = judge_summary("<|im_start|>user\nPlease summarize src/a.py for me.")
    assert verdict.reason is not None and "continues the transcript" in verdict.reason


def test_only_the_summary_block_of_an_analysis_and_summary_answer_is_kept() -> None:
    """`<analysis>` then `<summary>` (or a chatty line around the block): the block is written."""
    analysis = "<analysis>\nChronologically: the user asked, I read pool.py.\n</analysis>\n"
    for answer in (
        f"{analysis}<summary>\n{SUMMARY}\n</summary>",
        f"Here it is:\n<summary>{SUMMARY}</summary>\nLet me know if you need more!",
        f"{analysis}<summary>\n{SUMMARY}",  # cut off before its closing tag
    ):
        verdict = judge_summary(answer, instruction=SUMMARY_INSTRUCTION)
        assert verdict.text == SUMMARY and "<summary> block" in verdict.note
    # A summary block without words is no summary: the rest is judged as it is.
    answer = f"{analysis}<summary></summary>"
    assert judge_summary(answer).text == answer
    # The word inside a line is no block.
    prose = "The <summary> of the session: the leak is in src/db/pool.py and port 8443."
    assert judge_summary(prose).text == prose
