"""`sim.peers`: the other published strategies, reimplemented as arms."""

from __future__ import annotations

import pytest

from steerable_compaction import Message
from steerable_compaction.errors import ContextOverflowError
from steerable_compaction.hooks import ToolResultContext
from steerable_compaction.sim.peers import (
    CodexArm,
    LangChainArm,
    OpenHandsArm,
    approx_tokens,
    head_tail,
    trim_last,
)
from steerable_compaction.sim.provider import SimProvider
from steerable_compaction.sim.runner import is_summary_call

from .sim_helpers import arm_context, fill_record


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


async def test_peers_cut_oversized_tool_output_like_their_sources() -> None:
    """Codex keeps about 10 kB of head and tail; OpenHands cuts observations over 30,000 chars."""
    big = Message.tool("c", "h" * 20_000 + "t" * 20_000).tool_result
    assert big is not None
    ctx = arm_context()
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


async def test_codex_drops_the_oldest_items_until_the_compaction_request_fits() -> None:
    """A compaction request over the window loses its oldest items and is retried (Codex)."""
    ctx = arm_context(window=4096)
    fill_record(ctx, pairs=12, size=200)
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
    ctx = arm_context(window=1024)
    ctx.record.append_message(Message.system("sys"))
    ctx.record.append_message(Message.user("goal"))
    ctx.record.append_message(Message.user("word " * 2000))
    with pytest.raises(ContextOverflowError):
        await CodexArm(ctx).compact("pressure", 3_000)


def test_codex_keeps_the_newest_user_messages_within_its_budget() -> None:
    """Recent user messages are kept newest first; the one that overflows is cut head+tail."""
    arm = CodexArm(arm_context(window=8192))  # budget: 8192 // 8 = 1024 approximate tokens
    messages = [Message.user("a" * 8000), Message.user("b" * 2000), Message.user("c" * 100)]
    kept = arm._user_messages(messages)
    assert [m.text[0] for m in kept] == ["a", "b", "c"]
    assert len(kept[0].text) < 2200 and "tokens truncated" in kept[0].text
    assert kept[1:] == messages[1:]


async def test_langchain_keeps_twenty_messages_and_never_splits_a_tool_pair() -> None:
    """The cut moves back off a tool result; the summary replaces everything before it."""
    ctx = arm_context()
    fill_record(ctx, pairs=12, size=5)
    ctx.record.append_message(Message.user("and now?"))
    outcome = await LangChainArm(ctx).compact("pressure", 14_000)
    assert outcome is not None and outcome.written
    kept = ctx.record.messages()
    assert kept[1].text.startswith("Here is a summary of the conversation to date:")
    assert kept[2].role == "assistant" and len(kept) == 2 + 21
