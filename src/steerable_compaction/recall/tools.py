"""The history tools: `history_search` and `history_read` for the model, in three shapes.

- `history_tools(record, max_tokens=...)`: two `HistoryTool`s, whose fields are those of
  `loop.Tool` (`Tool(name=t.name, fn=t.fn, description=t.description, parameters=t.parameters)`);
  recall sits below the loop in the layers, so the loop side builds the `Tool`;
- `openai_tool_schemas()` / `anthropic_tool_schemas()`: the schemas as plain dicts for the
  official SDKs (`tools=` of Chat Completions / Messages);
- `execute_history_tool(record, name, arguments, max_tokens=...)`: the executor for your own
  loop, answering one call.

Whatever the model sends, the answer is text (or text and images, below): a bad argument gets
an error line saying what to fix, never an exception. Results stay within `max_tokens` (the
policy's `recall_result_tokens`) and read only the record they were given.

Images: text search cannot see into an image, so a search that finds nothing lists the hidden
messages that hold images (newest first), and `history_read` of such a message returns its
images with its text, as a list of content parts, wherever images can go back to the model:
the `history_tools` (a `CoreLoop` tool may return parts) and `execute_history_tool(...,
images=True)`. A text-only answer (the default of `execute_history_tool`) shows each image as
an `[image: ...]` line and lists none. Images priced over the result's cap are left out, and
the page says so.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, overload

from ..errors import ConfigError, RecallError
from ..messages import ContentPart, TextPart
from ..record import Record
from ..tokens import estimate_tokens, image_tokens
from .search import (
    MAX_IMAGE_MESSAGES,
    HistoryHit,
    hidden_image_sources,
    read_history,
    search_history,
)
from .text import parse_query

__all__ = [
    "HISTORY_READ",
    "HISTORY_SEARCH",
    "MAX_TOOL_LIMIT",
    "MIN_RESULT_TOKENS",
    "HistoryTool",
    "anthropic_tool_schemas",
    "execute_history_tool",
    "history_tools",
    "openai_tool_schemas",
]

logger = logging.getLogger("steerable_compaction.recall")

HISTORY_SEARCH: Final = "history_search"
HISTORY_READ: Final = "history_read"
MAX_TOOL_LIMIT = 20
"""The most hits the model may ask one `history_search` for."""
MIN_RESULT_TOKENS = 256
"""The smallest result cap: an error, or one hit with its snippet, always fits."""

_SEARCH_DESCRIPTION = (
    "Search earlier messages no longer in your context (folded or summarized). Each match "
    "gives its seq and a snippet. Every term must occur (any case, also inside words); quote "
    "a phrase. Read a whole message with history_read."
)
_SEARCH_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": 'Distinctive words or "a phrase": a name, path, error or number.',
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TOOL_LIMIT,
            "description": "Matches to return (default 5).",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
_READ_DESCRIPTION = (
    "Read one earlier message by its seq (from history_search, a fold marker or a summary), "
    "images included. A long one comes in pages: pass the offset a page gives."
)
_READ_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "seq": {"type": "integer", "minimum": 0},
        "offset": {"type": "integer", "minimum": 0},
    },
    "required": ["seq"],
    "additionalProperties": False,
}
_SPECS: Final = (
    (HISTORY_SEARCH, _SEARCH_DESCRIPTION, _SEARCH_PARAMETERS),
    (HISTORY_READ, _READ_DESCRIPTION, _READ_PARAMETERS),
)
# Words that are operators in common search syntaxes; here they are text, and we say so.
_OPERATOR_WORDS = frozenset({"AND", "OR", "NOT", "NEAR"})
_OPERATOR_MARKS = re.compile(r"[*()^:+]|(?:^|\s)-\S")


def openai_tool_schemas() -> list[dict[str, Any]]:
    """The two tools as OpenAI Chat Completions `tools` entries (a fresh copy each call)."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": copy.deepcopy(dict(parameters)),
            },
        }
        for name, description, parameters in _SPECS
    ]


def anthropic_tool_schemas() -> list[dict[str, Any]]:
    """The two tools as Anthropic Messages `tools` entries (a fresh copy each call)."""
    return [
        {
            "name": name,
            "description": description,
            "input_schema": copy.deepcopy(dict(parameters)),
        }
        for name, description, parameters in _SPECS
    ]


def _check_max_tokens(max_tokens: object) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ConfigError("recall_result_tokens", max_tokens, f"an int >= {MIN_RESULT_TOKENS}")
    if max_tokens < MIN_RESULT_TOKENS:
        raise ConfigError("recall_result_tokens", max_tokens, f"an int >= {MIN_RESULT_TOKENS}")
    return max_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryTool:
    """One history tool bound to a record: the fields of `loop.Tool`, which `CoreLoop` takes.

    `fn` takes the call's parsed arguments and returns the result: text, or text and images
    (a `history_read` of a message with images) as content parts. It never raises.
    """

    name: str
    fn: Callable[[Mapping[str, Any]], Awaitable[str | list[ContentPart]]]
    description: str
    parameters: Mapping[str, Any]


def history_tools(record: Record, *, max_tokens: int) -> tuple[HistoryTool, HistoryTool]:
    """`history_search` and `history_read` over `record`, results within `max_tokens`.

    Raises `ConfigError` if `max_tokens` is below `MIN_RESULT_TOKENS`.
    """
    cap = _check_max_tokens(max_tokens)

    def bind(name: str) -> Callable[[Mapping[str, Any]], Awaitable[str | list[ContentPart]]]:
        async def run(arguments: Mapping[str, Any]) -> str | list[ContentPart]:
            return _answer(record, name, arguments, cap, images=True)

        return run

    search, read = (
        HistoryTool(
            name=name,
            fn=bind(name),
            description=description,
            parameters=copy.deepcopy(dict(parameters)),
        )
        for name, description, parameters in _SPECS
    )
    return search, read


@overload
def execute_history_tool(
    record: Record,
    name: str,
    arguments: str | Mapping[str, Any],
    *,
    max_tokens: int,
    images: Literal[False] = False,
) -> str: ...


@overload
def execute_history_tool(
    record: Record,
    name: str,
    arguments: str | Mapping[str, Any],
    *,
    max_tokens: int,
    images: bool,
) -> str | list[ContentPart]: ...


def execute_history_tool(
    record: Record,
    name: str,
    arguments: str | Mapping[str, Any],
    *,
    max_tokens: int,
    images: bool = False,
) -> str | list[ContentPart]:
    """Answer one history tool call: `arguments` as the model sent them (JSON text or a dict).

    Returns the tool result text; a bad call returns an error text, it never raises (only a
    `max_tokens` below `MIN_RESULT_TOKENS`, the integrator's mistake, raises `ConfigError`).
    With `images=True` (your tool results can carry images), a `history_read` of a message
    with images returns its page and images as content parts (`wire.to_anthropic` /
    `to_openai` convert them), and a search that finds nothing lists the hidden messages that
    hold images.
    """
    cap = _check_max_tokens(max_tokens)
    if name not in (HISTORY_SEARCH, HISTORY_READ):
        return (
            f"error: unknown tool {name!r}; the history tools are {HISTORY_SEARCH} and "
            f"{HISTORY_READ}"
        )
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return f"{name} error: the arguments are not valid JSON ({exc}); send a JSON object"
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        return f"{name} error: the arguments must be a JSON object, got {type(parsed).__name__}"
    return _answer(record, name, parsed, cap, images=images)


def _answer(
    record: Record, name: str, arguments: Mapping[str, Any], max_tokens: int, *, images: bool
) -> str | list[ContentPart]:
    try:
        if name == HISTORY_SEARCH:
            return _search(record, arguments, max_tokens, images=images)
        return _read(record, arguments, max_tokens, images=images)
    except RecallError as exc:
        return f"{name} error: {exc.reason}"
    except Exception as exc:  # a tool answers the model; a failure here must not end the turn
        logger.exception("%s failed", name)
        return f"{name} error: the history could not be read ({type(exc).__name__}: {exc})"


def _arguments(arguments: Mapping[str, Any], required: str, optional: str) -> None:
    unknown = sorted(str(key) for key in arguments if key not in (required, optional))
    if unknown:
        raise RecallError(
            f"unknown argument {', '.join(map(repr, unknown))}; expected {required!r} and "
            f"optionally {optional!r}"
        )
    if required not in arguments:
        raise RecallError(f"missing the argument {required!r}")


def _search(record: Record, arguments: Mapping[str, Any], max_tokens: int, *, images: bool) -> str:
    _arguments(arguments, "query", "limit")
    query = arguments["query"]
    limit = arguments.get("limit", 5)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_TOOL_LIMIT:
        raise RecallError(f"limit must be an integer from 1 to {MAX_TOOL_LIMIT}, got {limit!r}")
    hits = search_history(record, query, limit=limit)
    terms = parse_query(query)
    shown = ", ".join(json.dumps(term, ensure_ascii=False) for term in terms)
    note = ""
    if _OPERATOR_MARKS.search(query) or _OPERATOR_WORDS.intersection(query.split()):
        note = " (matched literally: AND, OR, NOT, *, ( ), - and the like are searched as text)"
    if not hits:
        text = (
            f"No hidden message holds every term of the query: {shown}{note}. Terms match "
            "case-insensitively, also inside longer words; try fewer or other terms."
        )
        if images:
            text += _images_note(record, max_tokens - estimate_tokens(text))
        return _clip(text, max_tokens)
    head = (
        f"{len(hits)} hidden message(s) hold every term of {shown}{note}, best first. Read "
        f'one whole with {HISTORY_READ} {{"seq": N}}.'
    )
    return _fit(head, [_hit_text(hit) for hit in hits], max_tokens)


def _images_note(record: Record, room: int) -> str:
    """The hidden messages with images, newest first, as a paragraph ('' when there are none).

    Runs of messages from one source share one label, before their seqs:
    `tool result of screenshot: seq 9, 7; user: seq 5`. Only as many seqs as fit in `room`
    tokens are listed, the newest; ` and older ones` says when some were left out.
    """
    pictures = hidden_image_sources(record, limit=MAX_IMAGE_MESSAGES)
    if not pictures:
        return ""
    head = "\nText search cannot see into images. Hidden messages with images, newest first: "
    tail = f". {HISTORY_READ} one to look at its images again."
    more = " and older ones"
    left = room - estimate_tokens(head + tail + more) - 1  # 1: the estimate is not additive
    runs: list[tuple[str, list[int]]] = []
    shown = 0
    for seq, message, tool_name in pictures:
        who = _who(message.role, tool_name)
        same = bool(runs) and runs[-1][0] == who
        cost = estimate_tokens(f", {seq}" if same else f"; {who}: seq {seq}")
        if cost > left:
            break
        left -= cost
        shown += 1
        if same:
            runs[-1][1].append(seq)
        else:
            runs.append((who, [seq]))
    if not runs:
        return ""
    listed = "; ".join(f"{who}: seq {', '.join(map(str, seqs))}" for who, seqs in runs)
    older = more if shown < len(pictures) or len(pictures) == MAX_IMAGE_MESSAGES else ""
    return f"{head}{listed}{older}{tail}"


def _hit_text(hit: HistoryHit) -> str:
    who = _who(hit.role, hit.tool_name)
    return f"[seq {hit.seq}] {who}, {hit.tokens:,} tokens\n  {hit.snippet}"


def _who(role: str, tool_name: str | None) -> str:
    if role == "tool":
        return f"tool result of {tool_name}" if tool_name else "tool result"
    return role


def _fit(head: str, blocks: list[str], max_tokens: int) -> str:
    """`head` and as many whole `blocks` as fit in `max_tokens` (at least one, clipped)."""
    text = head
    for count in range(len(blocks), 0, -1):
        lines = [head]
        if count < len(blocks):
            lines.append(f"(showing {count} of {len(blocks)}: the result is capped in size)")
        text = "\n".join([*lines, *blocks[:count]])
        if estimate_tokens(text) <= max_tokens:
            return text
    return _clip(text, max_tokens)


def _clip(text: str, max_tokens: int) -> str:
    """`text`, cut short with a marker if it exceeds `max_tokens`."""
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    marker = " …[cut: the result is capped in size]"
    budget = max_tokens - estimate_tokens(marker)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + marker


_READ_OVERHEAD = 64  # tokens kept for a page's header and footer lines
_READ_MIN_TEXT = 128  # tokens a page with images keeps for its text
_READ_NOTE = 48  # tokens kept for the line naming the images not shown


def _read(
    record: Record, arguments: Mapping[str, Any], max_tokens: int, *, images: bool
) -> str | list[ContentPart]:
    _arguments(arguments, "seq", "offset")
    seq, offset = arguments["seq"], arguments.get("offset", 0)
    budget = max_tokens - _READ_OVERHEAD
    page = read_history(record, seq, offset=offset, max_tokens=budget)
    shown: list[ContentPart] = []
    images_tokens = 0  # tokens the shown images take
    if images and page.images:
        for image in page.images:
            cost = image_tokens(image)
            if images_tokens + cost <= budget - _READ_MIN_TEXT - _READ_NOTE:
                shown.append(image)
                images_tokens += cost
        # The text gives the images their room, and the line naming those not shown its own.
        note = _READ_NOTE if len(shown) < len(page.images) else 0
        page = read_history(record, seq, offset=offset, max_tokens=budget - images_tokens - note)
    end = page.offset + len(page.text)
    text = (
        f"[seq {page.seq}] {_who(page.role, page.tool_name)}, characters "
        f"{page.offset:,}-{end:,} of {page.total_chars:,}:\n{page.text}"
    )
    if page.next_offset is not None:
        text += f'\n[continues: {HISTORY_READ} {{"seq": {page.seq}, "offset": {page.next_offset}}}]'
    if images and len(shown) < len(page.images):
        text += (
            f"\n[{len(page.images) - len(shown)} of its {len(page.images)} image(s) not shown: "
            f"they do not fit this result's cap of {max_tokens:,} tokens]"
        )
    text = _clip(text, max_tokens - images_tokens)  # a long tool name could overrun its share
    if not shown:
        return text
    return [TextPart(text=text), *shown]
