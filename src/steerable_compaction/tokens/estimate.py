"""Estimated tokens of texts, messages and transcripts (R8).

A message costs its framing (role markers, part separators, a tool call's JSON wrapper, a
result's wrapper) plus its texts (`counting`) and images (`images`), under one family's
`Calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..messages import Message, TextPart, ToolCall, ToolResult
from .calibration import Calibration, calibration_for
from .counting import pricer_for
from .images import _image_part_cost

__all__ = ["estimate_tokens"]

_MESSAGE_OVERHEAD = 4  # role header and end-of-turn markers
_PART_OVERHEAD = 1  # separator between content blocks
_TOOL_CALL_OVERHEAD = 18  # the call's JSON wrapper (keys, braces, markers) around name/args/id
_TOOL_RESULT_OVERHEAD = 6  # the result's wrapper around its call id and content


def _message_cost(
    message: Message, cal: Calibration, price: Callable[[str], float] | None = None
) -> int:
    """Whole tokens for one message: framing plus every part (the meter caches this).

    `price` is `pricer_for(cal).cost`, passed by callers that price many messages.
    """
    if price is None:
        price = pricer_for(cal).cost
    total = float(_MESSAGE_OVERHEAD)
    for part in message.parts:
        total += _PART_OVERHEAD
        if isinstance(part, TextPart):
            total += price(part.text)
        elif isinstance(part, ToolCall):
            total += _TOOL_CALL_OVERHEAD + price(part.id)
            total += price(part.name) + price(part.arguments)
        elif isinstance(part, ToolResult):
            total += _TOOL_RESULT_OVERHEAD + _tool_result_cost(part, cal, price)
        else:
            total += _image_part_cost(part, cal)
    return math.ceil(total)


def _tool_result_cost(part: ToolResult, cal: Calibration, price: Callable[[str], float]) -> float:
    total = price(part.call_id)
    for item in part.content:
        total += _PART_OVERHEAD
        if isinstance(item, TextPart):
            total += price(item.text)
        else:
            total += _image_part_cost(item, cal)
    return total


def estimate_tokens(x: str | Message | Sequence[Message], model: str | None = None) -> int:
    """Estimated tokens of a text, a message or a transcript under `model`'s calibration.

    A text is priced alone; messages include their framing. Unknown or `None` models use the
    conservative `DEFAULT_FAMILY`, which over-estimates rather than under-estimates.
    """
    cal = calibration_for(model)
    if isinstance(x, str):
        return math.ceil(pricer_for(cal).cost(x))
    if isinstance(x, Message):
        return _message_cost(x, cal)
    return sum(_message_cost(m, cal) for m in x)
