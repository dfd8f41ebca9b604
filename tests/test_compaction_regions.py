from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall
from steerable_compaction.compaction import (
    newest_turn,
    pair_issues,
    pinned_indices,
    repair_tool_pairs,
    select_regions,
    summary_message,
)
from steerable_compaction.compaction.regions import goal_index

from .compaction_helpers import est, session, tool_round, total
from .strategies import agent_transcripts, message_lists


def test_r21_head_is_system_messages_and_the_first_user_message() -> None:
    """R21: the head ends right after the goal; every leading system message is in it."""
    messages = [Message.system("a"), Message.system("b"), Message.user("goal"), *session(4)[2:]]
    regions = select_regions(messages, keep_last_messages=2)
    assert regions.head_end == 3
    assert regions.tail_start == len(messages) - 2
    assert regions.middle == (3, len(messages) - 2)


def test_r21_tool_rounds_before_the_goal_are_compactable_and_the_goal_is_pinned() -> None:
    """R21: a restored log's rounds before the goal are middle; the goal is found and pinned.

    The head is the system messages alone, so those rounds can be summarized; the goal, behind
    them, is kept verbatim by every replacement (`pinned_indices`).
    """
    messages = [
        Message.system("s"),
        Message.tool("gone_1", "orphan output"),
        Message.user("the real goal"),
        *session(4)[2:],
    ]
    regions = select_regions(messages, 2)
    assert regions.head_end == 1
    assert regions.span == (1, regions.tail_start)
    assert 2 in pinned_indices(messages)
    assert goal_index(messages) == 2


def test_r21_without_a_user_message_the_head_is_the_leading_system_messages() -> None:
    """R21: no user message at all leaves only the system prompt in the head."""
    messages = [Message.system("s"), *session(3)[2:]]
    assert select_regions(messages, 2).head_end == 1


def test_r21_a_summary_is_never_mistaken_for_the_goal() -> None:
    """R21: an earlier summary sits in the next compaction's middle, not in its head."""
    first = session(6)
    regions = select_regions(first, 4)
    compacted = [
        *first[: regions.head_end],
        summary_message("first summary", regions.tail_start - regions.head_end),
        *first[regions.tail_start :],
        *tool_round(50, "more"),
        *tool_round(51, "more"),
    ]
    again = select_regions(compacted, 4)
    assert again.head_end == 2
    assert again.head_end <= 2 < again.tail_start  # the old summary is in the middle


def test_r22_tail_widens_back_to_the_issuer_of_its_results() -> None:
    """R22: a tail that would start inside a parallel-call group widens to its assistant."""
    calls = [ToolCall(id=f"p{i}", name="grep") for i in range(4)]
    messages = [
        *session(3),
        Message.assistant("in parallel", calls),
        *[Message.tool(f"p{i}", f"hit {i}") for i in range(4)],
        Message.assistant("done"),
    ]
    regions = select_regions(messages, keep_last_messages=3)
    assert messages[regions.tail_start].tool_calls == tuple(calls)


def test_r22_restored_orphan_in_the_tail_does_not_disable_planning() -> None:
    """R22: a tail result whose issuer is gone (cut log) is planned as is; the middle remains."""
    messages = [*session(5), Message.tool("vanished", "late result"), Message.assistant("ok")]
    regions = select_regions(messages, keep_last_messages=2)
    assert not regions.middle_empty
    assert regions.tail_start == len(messages) - 2


def test_r23_the_newest_turn_and_all_its_results_stay_in_the_tail() -> None:
    """R23: even with `keep_last_messages=1` the just-called tools' results are never shadowed."""
    calls = [ToolCall(id=f"n{i}", name="run") for i in range(3)]
    messages = [
        *session(4),
        Message.assistant(None, calls),
        *[Message.tool(f"n{i}", "out") for i in range(3)],
    ]
    regions = select_regions(messages, keep_last_messages=1)
    assert regions.tail_start == len(messages) - 4


def test_r23_newest_turn_is_the_newest_assistant_call_and_its_results_only() -> None:
    """R23: `newest_turn` is the newest assistant call and its results, nothing older.

    Once a newer assistant message called no tool, there is no newest turn to protect.
    """
    calls = [ToolCall(id="a", name="run"), ToolCall(id="b", name="run")]
    messages = [
        *session(2),
        Message.assistant(None, calls),
        Message.tool("a", "out"),
        Message.user("steer"),
        Message.tool("b", "out"),
    ]
    n = len(messages)
    assert newest_turn(messages) == frozenset({n - 4, n - 3, n - 1})
    assert newest_turn([*messages, Message.assistant("done")]) == frozenset()
    assert newest_turn([Message.user("u")]) == frozenset()


def test_the_token_cap_shrinks_the_tail_but_never_below_the_newest_turn() -> None:
    """`max_tail_tokens`: the longest tail of at most `keep_last_messages` under the cap."""
    calls = [ToolCall(id=f"n{i}", name="run") for i in range(3)]
    newest = [
        Message.assistant(None, calls),
        *[Message.tool(f"n{i}", "o" * 4_000) for i in range(3)],
    ]
    messages = [*session(4, body_chars=400), *newest]
    plain = select_regions(messages, 8)
    assert plain.tail_start == len(messages) - 8
    fits = total(messages[-6:])  # the newest turn and one older round
    capped = select_regions(messages, 8, max_tail_tokens=fits, estimate=est)
    assert capped.tail_start == len(messages) - 6
    tiny = select_regions(messages, 8, max_tail_tokens=1, estimate=est)
    assert tiny.tail_start == len(messages) - 4  # R23 wins over the cap
    with pytest.raises(ValueError, match="needs estimate"):
        select_regions(messages, 8, max_tail_tokens=10)


@given(agent_transcripts(max_rounds=8), st.integers(1, 10), st.sampled_from([None, 1, 300]))
def test_regions_are_ordered_and_the_tail_issues_every_call_it_answers(
    messages: list[Message], keep: int, cap: int | None
) -> None:
    """Property: 0 <= head_end <= tail_start <= n and no tail result answers a middle call.

    A token cap only ever narrows the tail, and a capped tail over its cap is the narrowest.
    """
    regions = select_regions(messages, keep)
    if cap is not None:
        capped = select_regions(messages, keep, max_tail_tokens=cap, estimate=est)
        assert capped.head_end == regions.head_end and capped.tail_start >= regions.tail_start
        if total(messages[capped.tail_start :]) > cap:
            assert capped == select_regions(messages, 1)
        regions = capped
    assert 0 <= regions.head_end <= regions.tail_start <= len(messages)
    middle_calls = {
        c.id for m in messages[regions.head_end : regions.tail_start] for c in m.tool_calls
    }
    for message in messages[regions.tail_start :]:
        result = message.tool_result
        assert result is None or result.call_id not in middle_calls


@given(agent_transcripts(max_rounds=8, restored_orphans=True), st.integers(1, 10))
def test_r22b_summarizing_introduces_no_broken_pair(messages: list[Message], keep: int) -> None:
    """Property: head + summary + tail breaks no call/result pair that was intact before."""
    regions = select_regions(messages, keep)
    if regions.middle_empty:
        return
    after = [
        *messages[: regions.head_end],
        summary_message("s", regions.tail_start - regions.head_end),
        *messages[regions.tail_start :],
    ]
    before = pair_issues(messages)
    issues = pair_issues(after)
    orphan_ids = {after[i].tool_result.call_id for i in issues.orphan_results}  # type: ignore[union-attr]
    old_orphans = {messages[i].tool_result.call_id for i in before.orphan_results}  # type: ignore[union-attr]
    assert orphan_ids <= old_orphans
    assert {cid for _, cid in issues.unanswered_calls} <= {
        cid for _, cid in before.unanswered_calls
    }


def test_r22b_repair_turns_orphans_into_notes_and_answers_dangling_calls() -> None:
    """R22b: an orphan result becomes a user note; an unanswered call gets an explicit result."""
    call = ToolCall(id="c1", name="grep")
    lonely = ToolCall(id="c2", name="ls")
    messages = [
        Message.user("goal"),
        Message.tool("gone", "what it said", is_error=True),
        Message.assistant(None, [call, lonely]),
        Message.tool("c1", "found"),
        Message.user("next"),
    ]
    repaired = repair_tool_pairs(messages)
    assert repaired[1] == Message.user(
        "[tool result for call 'gone', whose call is not in this transcript, an error]:\n"
        "what it said"
    )
    assert repaired[2:4] == messages[2:4]
    assert repaired[4] == Message.tool("c2", "[no result recorded for ls call 'c2']", is_error=True)
    assert repaired[5] == messages[4]
    assert not pair_issues(repaired)
    assert pair_issues(messages).orphan_results == (1,)


def test_repair_of_a_healthy_transcript_changes_nothing() -> None:
    """A transcript without pairing issues comes back as the same message objects."""
    messages = session(3)
    repaired = repair_tool_pairs(messages)
    assert all(a is b for a, b in zip(repaired, messages, strict=True))


def test_repair_answers_a_dangling_call_at_the_very_end() -> None:
    """A final assistant turn whose calls have no results gets them appended."""
    messages = [Message.user("g"), Message.assistant(None, [ToolCall(id="z", name="run")])]
    repaired = repair_tool_pairs(messages)
    assert repaired[-1].tool_result is not None
    assert repaired[-1].tool_result.call_id == "z"


@given(message_lists(max_size=12))
def test_r22b_repair_leaves_no_pairing_issue_in_any_message_list(messages: list[Message]) -> None:
    """Property: whatever the input, the repaired transcript has no orphan and no dangling call."""
    assert not pair_issues(repair_tool_pairs(messages))


def test_r21_a_summary_or_reminder_is_never_taken_as_the_goal() -> None:
    """Regression: with no user goal (restored log), summaries and reminders stay in the middle."""
    from steerable_compaction.engine import compaction_thrashing_reminder

    reminder = compaction_thrashing_reminder(3, 3).message
    messages = [
        Message.system("s"),
        summary_message("old summary", 9),
        reminder,
        *session(4)[2:],
    ]
    regions = select_regions(messages, 2)
    assert regions.head_end == 1
    assert regions.middle[0] == 1


def test_r23_the_tail_holds_the_newest_assistant_message_even_without_calls() -> None:
    """R23: commands typed as text, outputs as user messages: the tail keeps the agent's turn.

    With one message to keep, the tail would be the newest observation alone; the newest
    assistant message (the command it answers) stays with it (issue 30 item 9: deleting this
    clause passed every regions, plan, prune and pairs test).
    """
    messages = [Message.system("sys"), Message.user("Task: fix the bug.")]
    for i in range(6):
        messages += [Message.assistant(f"run command {i}"), Message.user(f"OBSERVATION: out {i}")]
    regions = select_regions(messages, 1)
    assert regions.tail_start == len(messages) - 2
    assert messages[regions.tail_start] == Message.assistant("run command 5")
