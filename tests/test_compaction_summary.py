# ruff: noqa: RUF001, RUF002  (Chinese output uses full-width punctuation on purpose)
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import ImagePart, Message, TextPart, ToolCall
from steerable_compaction.compaction import (
    SECTIONS,
    SUMMARY_INSTRUCTION,
    build_summary_request,
    excerpt_summary,
    image_pointer,
    kept_user_messages,
    select_regions,
    summary_message,
    text_pointer_span,
)

from .compaction_helpers import PNG, est, image_message, session, tool_round
from .strategies import agent_transcripts


def test_r24_request_is_head_plus_middle_verbatim_plus_one_instruction() -> None:
    """R24: the replay is the session's own messages (same objects), then one user instruction."""
    messages = session(6)
    span = select_regions(messages, 4).middle
    request = build_summary_request(messages, span)
    assert request.replay == tuple(messages[: span[1]])
    assert all(a is b for a, b in zip(request.replay, messages, strict=False))
    assert request.instruction == Message.user(SUMMARY_INSTRUCTION)
    assert request.messages[-1].role == "user"
    assert [m.role for m in request.messages].count("system") == 1  # no foreign system prompt
    assert request.span == span


def test_r26_no_message_is_truncated() -> None:
    """R26: a 300k-character tool result reaches the summarizer whole."""
    messages = [*session(1), *tool_round(9, "z" * 300_000), *session(3)[2:]]
    request = build_summary_request(messages, select_regions(messages, 2).middle)
    assert any(m.text == "z" * 300_000 for m in request.messages)


def test_r27_the_request_asks_for_no_new_cache_entry() -> None:
    """R27: summary requests carry `cache_retention="none"`."""
    request = build_summary_request(session(3), (2, 6))
    assert request.cache_retention == "none"


def test_r28_images_become_pointers_for_a_text_only_summarizer() -> None:
    """R28: no image bytes reach a text-only summarizer; text-only messages pass untouched."""
    shot = ImagePart(media_type="image/png", data=PNG)
    messages = [*session(1), image_message("x"), Message.tool("call_0", [TextPart(text="t"), shot])]
    messages[3] = messages.pop()  # the result now carries an image
    messages += session(3)[2:]
    span = select_regions(messages, 2).middle
    request = build_summary_request(messages, span, rounds=list(range(len(messages))))
    assert not any(m.images for m in request.messages)
    assert request.messages[4] == Message.user(image_pointer(messages[4].images[0], 4))
    result = request.messages[3].tool_result
    assert result is not None
    assert result.content == (TextPart(text="t"), TextPart(text=image_pointer(shot, 3)))
    assert request.messages[2] is messages[2]


def test_r28_the_turn_model_itself_gets_images_verbatim() -> None:
    """R28: when the summarizer is the turn model, images replay as they were (cache stays warm)."""
    messages = [*session(1), image_message("x"), *tool_round(5, "a"), *tool_round(6, "b")]
    span = select_regions(messages, 2).middle
    request = build_summary_request(messages, span, replay_images=True)
    assert request.replay == tuple(messages[: span[1]])


def test_text_pointer_span_keeps_text_only_messages_as_the_same_objects() -> None:
    """Pure text spans pass through byte-identical (the same objects)."""
    messages = session(3)
    assert all(a is b for a, b in zip(text_pointer_span(messages), messages, strict=True))


def test_a_span_that_does_not_fit_is_a_value_error() -> None:
    """A span beyond the transcript is a programming error, reported as such."""
    with pytest.raises(ValueError, match="does not fit"):
        build_summary_request(session(1), (2, 9))


def test_r29_the_instruction_asks_for_the_fixed_checkpoint_sections_text_only() -> None:
    """R29: the instruction names every checkpoint section in order and asks for text only."""
    positions = [SUMMARY_INSTRUCTION.index(f"## {name}") for name in SECTIONS]
    assert positions == sorted(positions)
    assert SECTIONS == (
        "Primary Request",
        "Key Technical Concepts",
        "Files and Code",
        "Errors and Fixes",
        "Current Work",
        "Next Step",
    )
    assert "text only" in SUMMARY_INSTRUCTION


def test_r30_replacement_is_a_user_message_wrapping_the_summary() -> None:
    """R30: the replacement is a user message in `<compacted-summary>` with a count line."""
    message = summary_message("  ## Primary Request\nfix it\n", 7)
    assert message.role == "user"
    assert message.text == (
        "<compacted-summary>\n## Primary Request\nfix it\n</compacted-summary>\n\n"
        "(This summary replaces 7 earlier messages of this conversation; the originals remain "
        "in the record. Continue the work from here.)"
    )
    assert "replaces 1 earlier message of" in summary_message("s", 1).text
    one = summary_message("s", 5, kept=1).text
    assert (
        "(This summary replaces 5 earlier messages of this conversation; the user's message " in one
    )
    assert "above is kept from them word for word, and the originals remain in the record." in one
    assert "the user's 3 messages above are kept" in summary_message("s", 9, kept=3).text


def test_kept_user_messages_are_the_users_words_within_budget_and_half_the_span() -> None:
    """Newest first; summaries and reminders are not the user's; never over half the span."""
    goal = Message.user("goal")
    words = [Message.user(f"constraint {i}: " + "w" * 36) for i in range(4)]  # 16 tokens each
    reminder = Message.user("<system-reminder>slow down</system-reminder>")
    summary = summary_message("earlier", 3)
    span = [summary, words[0], reminder, words[1], *tool_round(1, "r" * 400), words[2], words[3]]
    messages = [goal, *span]
    whole = (1, len(messages))

    def kept(budget: int) -> list[Message]:
        prices = [est(m) for m in messages[1:]]
        return [messages[i] for i in kept_user_messages(messages, whole, budget, prices)]

    assert kept(10**6) == words  # the tool round makes half the span larger than all four
    assert kept(32) == words[2:]
    assert kept(0) == []
    bulky = [goal, *words]  # only user words: the summary must still free room
    assert len(kept_user_messages(bulky, (1, 5), 10**6, [est(m) for m in words])) == 2
    with pytest.raises(ValueError, match="3 prices for the 4 messages"):
        kept_user_messages(bulky, (1, 5), 10**6, [1, 2, 3])


def test_r20_excerpt_summary_keeps_goal_tools_paths_errors_and_recent_work() -> None:
    """R20 fallback: the excerpt keeps the goal, tool names, file paths, error lines, excerpts."""
    calls = [ToolCall(id="a", name="run_tests", arguments='{"path": "tests/test_app.py"}')]
    messages = [
        Message.system("s"),
        Message.user("Make the login page accept unicode names."),
        Message.assistant("Running the tests.", calls),
        Message.tool(
            "a", "collected 3 items\nE   UnicodeDecodeError: bad byte in src/auth/login.py"
        ),
        Message.assistant("Next I will patch src/auth/login.py to decode as UTF-8."),
        *tool_round(1, "ok"),
    ]
    text = excerpt_summary(messages, (2, 5), max_chars=3000)
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        f"## {name}" for name in SECTIONS
    ]
    assert "Make the login page accept unicode names." in text
    assert "run_tests x1" in text
    assert "- src/auth/login.py" in text
    assert "- tests/test_app.py" in text
    assert "E   UnicodeDecodeError: bad byte in src/auth/login.py" in text
    assert "patch src/auth/login.py to decode as UTF-8" in text.split("## Next Step")[1]
    assert "tool result (run_tests)" in text
    assert len(text) <= 3000
    assert excerpt_summary(messages, (2, 5), max_chars=3000) == text


@given(agent_transcripts(max_rounds=12))
def test_excerpt_summary_always_fits_its_budget_and_names_all_sections(
    messages: list[Message],
) -> None:
    """Property: any span gives a summary within `max_chars`, with every section."""
    regions = select_regions(messages, 2)
    text = excerpt_summary(messages, regions.middle, max_chars=1200)
    assert len(text) <= 1200
    for name in SECTIONS:
        assert f"## {name}" in text


def test_excerpt_summary_of_a_huge_span_is_bounded_and_keeps_the_newest_work() -> None:
    """A span far larger than the budget keeps the newest messages' excerpts, within budget."""
    messages = session(200, body_chars=3_000)
    regions = select_regions(messages, 4)
    text = excerpt_summary(messages, regions.middle, max_chars=4000)
    assert len(text) <= 4000
    current = text.split("## Current Work\n")[1].split("\n\n## Next Step")[0].splitlines()
    assert current[-1].startswith("- tool result (read_file): # file m197; x = 1; x = 1")
    assert current[-2] == "- assistant → read_file: Step 197."
    assert text.split("## Next Step\n")[1] == "Step 197."
    files = text.split("## Files and Code\n")[1].split("\n\n")[0].splitlines()
    assert files[-1] == "- src/m197.py"
    assert len(files) == 40


def test_an_output_of_many_lines_is_one_work_line_with_its_first_and_last_lines() -> None:
    """A 200k-line output (a log, a listing) is joined in one pass and clipped head and tail.

    Joined line by line onto a growing string, 80k lines took 22 s (quadratic); the same
    excerpt is now one join.
    """
    log = "\n".join(f"line {i:06d} ok" for i in range(200_000))
    messages = [
        Message.system("You are a coding agent."),
        Message.user("Find the failing line."),
        Message.assistant("Reading the log.", [ToolCall(id="c", name="read_log", arguments="{}")]),
        Message.tool("c", log),
        Message.assistant("Done reading."),
    ]
    text = excerpt_summary(messages, (2, 4), max_chars=3_000)
    (line,) = [x for x in text.splitlines() if x.startswith("- tool result (read_log): ")]
    assert line.startswith("- tool result (read_log): line 000000 ok; line 000001 ok; ")
    assert line.endswith("; line 199999 ok")


def test_a_line_ending_in_chinese_punctuation_needs_no_added_stop() -> None:
    """Lines ending in 。 or ， are joined by a space; others get "; " (one clause a line)."""
    messages = [
        Message.system("You are a coding agent."),
        Message.user("查一下端口。"),
        Message.assistant("Checking.", [ToolCall(id="c", name="probe", arguments="{}")]),
        Message.tool("c", "端口 8443 已开放。\n证书有效，\n过期时间 2027-01-09\n完成"),
        Message.assistant("Done."),
    ]
    text = excerpt_summary(messages, (2, 4), max_chars=3_000)
    assert "- tool result (probe): 端口 8443 已开放。 证书有效， 过期时间 2027-01-09; 完成" in text


def test_excerpt_summary_trims_long_sections_to_fit_a_small_budget() -> None:
    """Dozens of error lines and paths are trimmed so the summary still fits its budget."""
    noisy = "\n".join(f"E   ValueError: bad value {i} in src/pkg/mod_{i}.py" for i in range(60))
    messages = [
        Message.system("s"),
        Message.user("goal " * 200),
        *tool_round(0, noisy),
        *tool_round(1, "ok"),
    ]
    text = excerpt_summary(messages, (2, 4), max_chars=900)
    assert len(text) <= 900
    for name in SECTIONS:
        assert f"## {name}" in text
    assert "bad value 59" in text  # the newest error survives the trimming


def test_r22b_the_replay_repairs_broken_pairs_like_the_turn_request() -> None:
    """The replay of a restored log repairs orphans exactly as the loop's requests do."""
    from steerable_compaction.compaction import pair_issues, repair_tool_pairs

    messages = [Message.system("s"), Message.tool("gone", "orphan"), Message.user("goal")]
    messages += [*tool_round(1, "a"), *tool_round(2, "b"), *tool_round(3, "c")]
    span = select_regions(messages, 2).middle
    request = build_summary_request(messages, span)
    assert not pair_issues(request.messages)
    turn_request = repair_tool_pairs(messages)
    assert list(request.replay) == turn_request[: len(request.replay)]


_EXCERPT_LINES = st.sampled_from(
    [
        "edited src/app.py and lib/util.ts",
        "src/app.py",
        "ValueError: bad input",
        "error: cannot open config.yaml",
        "all green",
        "Traceback (most recent call last):",
        "read README.md then docs/a.md",
        "ÉCHEC: not found ./x.json",
        "",
    ]
)


@given(st.lists(st.lists(_EXCERPT_LINES, max_size=8).map("\n".join), min_size=1, max_size=30))
def test_excerpt_paths_and_errors_are_the_newest_mentions_as_read_in_full(
    texts: list[str],
) -> None:
    """Reading from the newest message back keeps the newest paths and error lines.

    The same ones, in the order of their last mention, as reading the whole span.
    """
    import re

    from steerable_compaction.compaction import summary

    messages = [Message.user(text) for text in texts]

    def reference(found: list[str], count: int) -> list[str]:
        seen: dict[str, None] = {}
        for item in found:
            seen.pop(item, None)
            seen[item] = None
        return list(seen)[-count:]

    path = summary._PATH
    paths = [m.group(0) for message in messages for m in path.finditer(message.text)]
    error = re.compile(summary._ERROR.pattern)
    errors = [
        summary._clip(line, 200)
        for message in messages
        for line in message.text.splitlines()
        if error.search(line)
    ]
    for count in (1, 3, 40):
        assert summary._newest_distinct(messages, summary._paths_in, count) == reference(
            paths, count
        )
        assert summary._newest_distinct(messages, summary._error_lines, count) == reference(
            errors, count
        )
