from __future__ import annotations

import math

from steerable_compaction import Message, TextPart, ToolCall
from steerable_compaction.tokens import (
    estimate_tokens,
)


def test_r8_message_framing_per_message_and_part() -> None:
    """A text message costs 4 framing + 1 per part + its text."""
    one = Message.user("x")  # "x" is one word: 1.05 * 0.98 = 1.029
    assert estimate_tokens(one, "gpt-4o") == 4 + 1 + 2
    two = Message.user([TextPart(text="x"), TextPart(text="x")])
    assert estimate_tokens(two, "gpt-4o") == math.ceil(4 + 2 * (1 + 1.029)) == 9
    assert estimate_tokens([one, two], "gpt-4o") == 16


def test_r8_tool_call_framing_prices_name_arguments_and_id() -> None:
    """A tool call adds 18 for its JSON wrapper plus its id, name and arguments text."""
    bare = Message.assistant(tool_calls=[ToolCall(id="y", name="x", arguments="")])
    assert estimate_tokens(bare, "gpt-4o") == math.ceil(4 + 1 + 18 + 2 * 1.029) == 26
    args = '{"path": "src/app.py"}'
    full = Message.assistant(tool_calls=[ToolCall(id="y", name="x", arguments=args)])
    assert estimate_tokens(full, "gpt-4o") == 26 + estimate_tokens(args, "gpt-4o") - 1


def test_r8_tool_result_framing() -> None:
    """A tool result adds 6 for its wrapper plus its call id and each content part."""
    assert estimate_tokens(Message.tool("y", "x"), "gpt-4o") == math.ceil(4 + 1 + 6 + 1 + 2.058)
    assert estimate_tokens(Message.tool("y", "x"), "gpt-4o") == 15
