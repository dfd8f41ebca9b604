"""What recall searches and shows: a message's text, the query's terms, the match rule, the score.

Both index kinds (the in-memory word index and SQLite FTS5) only propose candidates; whether a
message matches, and how the matches rank, is decided here, so both return the same hits.

- `render(message, spill_directory)`: the message as text: its text, each tool call on its own
  line as `[tool call NAME (id ID)] ARGUMENTS`, each image as `[image: MEDIA_TYPE, N bytes]` or
  `[image: URL]`, a failed tool result prefixed `[tool error] `; a spill pointer as the whole
  output its file in `spill_directory` holds, or as the pointer followed by
  `[the full output is not available: REASON]` (`spillfile.read_spilled`).
- `searchable(message, spill_directory)`: what search matches: `render` without calls to the
  history tools (their arguments only repeat a query).
- `normalize(text)`: case-folded (`str.casefold`), whitespace runs collapsed to one space.
- `parse_query(query)`: the terms. Words are split on whitespace; a `"quoted phrase"` is one
  term (an unclosed quote runs to the end); inside a word, runs of Chinese, Japanese or Korean
  script and runs of other characters are separate terms. Nothing else is syntax.
- A message matches when its normalized text contains every term.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

from ..errors import RecallError
from ..messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from ..spillfile import SPILL_PREFIX, read_spilled

__all__ = [
    "CJK",
    "HISTORY_TOOL_NAMES",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "MIN_INDEXED_CHARS",
    "SNIPPET_CHARS",
    "UNAVAILABLE",
    "matches",
    "normalize",
    "parse_query",
    "rank",
    "render",
    "searchable",
    "snippet",
]

HISTORY_TOOL_NAMES = frozenset({"history_search", "history_read"})
"""Tools whose calls and results are never search hits (they only repeat history or a query)."""

MAX_QUERY_CHARS = 10_000
"""A longer query is refused: no message search needs it, and it would cost every index."""

MAX_TERMS = 32
"""A query with more terms is refused (each term is one more pass over the candidates)."""

MIN_INDEXED_CHARS = 3
"""Terms shorter than this are not looked up in an index (trigrams need three characters);
they are checked on the candidates of the query's other terms."""

UNAVAILABLE = "[the full output is not available: "
"""What follows a spill pointer whose file cannot be read, before the reason and `]`."""

SNIPPET_CHARS = 240
"""The longest snippet, not counting the `…` marks at clipped ends."""

CJK = (
    "\u3005\u3006\u3007\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
"""A regex character-class body of the Chinese, Japanese and Korean scripts: Han (with its
extensions and compatibility ideographs), kana, Hangul, and the ideographic iteration marks."""
_RUNS = re.compile(f"[{CJK}]+|[^{CJK}]+")
# Full-width and ideographic punctuation separates words in a query, like a space.
_CJK_PUNCTUATION = re.compile(
    "[\u3000-\u3004\u3008-\u3011\u3014-\u301f\u30fb\uff01-\uff0f\uff1a-\uff20]"
)
# How much more a term's occurrences count in a message of average length (BM25's k1 and b).
_SATURATION = 1.2
_LENGTH_WEIGHT = 0.75


def render(message: Message, spill_directory: str | os.PathLike[str] | None = None) -> str:
    """The message as one text: what `history_read` pages and what search matches.

    A spilled tool result reads as the whole output its file in `spill_directory` holds
    (verified), not as the pointer and excerpt the transcript kept; a pointer that cannot be
    read keeps its text and says why (`UNAVAILABLE`).
    """
    parts = message.parts
    if len(parts) == 1:  # most messages: one text, or one result of one text (indexing reads all)
        part = parts[0]
        if type(part) is TextPart:
            return part.text
        if type(part) is ToolResult and not part.is_error and len(part.content) == 1:
            item = part.content[0]
            if type(item) is TextPart and not item.text.startswith(SPILL_PREFIX):
                return item.text
    items: list[tuple[bool, str]] = []  # (is a line of its own, text)
    error = False
    for part in message.parts:
        if isinstance(part, TextPart):
            items.append((False, part.text))
        elif isinstance(part, ImagePart):
            items.append((True, _image_line(part)))
        elif isinstance(part, ToolCall):
            items.append((True, f"[tool call {part.name} (id {part.id})] {part.arguments}"))
        else:
            error = part.is_error
            for item in part.content:
                text = item.text if isinstance(item, TextPart) else _image_line(item)
                if isinstance(item, TextPart) and text.startswith(SPILL_PREFIX):
                    text = _unspilled(text, spill_directory)
                items.append((not isinstance(item, TextPart), text))
    out: list[str] = ["[tool error] "] if error else []
    first = len(out)
    previous_line = False
    for is_line, text in items:
        # Adjacent text parts join as `Message.text` joins them; line items start a new line.
        if len(out) > first and (is_line or previous_line) and not out[-1].endswith("\n"):
            out.append("\n")
        out.append(text)
        previous_line = is_line
    return "".join(out)


def _unspilled(pointer: str, spill_directory: str | os.PathLike[str] | None) -> str:
    read = read_spilled(pointer, spill_directory)
    if read.text is not None:
        return read.text
    return f"{pointer}\n{UNAVAILABLE}{read.reason}]"


def searchable(message: Message, spill_directory: str | os.PathLike[str] | None = None) -> str:
    """What search matches in `message`: `render` without its calls to the history tools."""
    parts = message.parts
    if len(parts) == 1 and not isinstance(parts[0], ToolCall):
        return render(message, spill_directory)
    if not any(isinstance(p, ToolCall) and p.name in HISTORY_TOOL_NAMES for p in parts):
        return render(message, spill_directory)
    parts = tuple(
        p for p in message.parts if not (isinstance(p, ToolCall) and p.name in HISTORY_TOOL_NAMES)
    )
    return render(Message(role=message.role, parts=parts), spill_directory)


def _image_line(image: ImagePart) -> str:
    if image.data is not None:
        return f"[image: {image.media_type}, {len(image.data):,} bytes]"
    return f"[image: {image.url}]"


def normalize(text: str) -> str:
    """`text` case-folded, with every run of whitespace made one space (and none at the ends)."""
    return " ".join(text.casefold().split())


def parse_query(query: object) -> tuple[str, ...]:
    """The normalized terms of `query`, in order, without repeats.

    Raises `RecallError` for a query that is not a string, is longer than `MAX_QUERY_CHARS`,
    holds a NUL character, has no terms, or more than `MAX_TERMS`.
    """
    if not isinstance(query, str):
        raise RecallError(f"the query must be a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise RecallError(
            f"the query is {len(query):,} characters long; at most {MAX_QUERY_CHARS:,} are "
            "searched: use a few distinctive words"
        )
    if "\x00" in query:
        raise RecallError("the query holds a NUL character; remove it")
    terms: list[str] = []
    for i, piece in enumerate(query.split('"')):
        if i % 2:  # inside quotes (an unclosed quote runs to the end): one phrase
            phrase = normalize(piece)
            if phrase:
                terms.append(phrase)
            continue
        for word in normalize(_CJK_PUNCTUATION.sub(" ", piece)).split():
            terms.extend(_RUNS.findall(word))
    unique = tuple(dict.fromkeys(terms))
    if not unique:
        raise RecallError(f"the query {query[:80]!r} has no words to search for")
    if len(unique) > MAX_TERMS:
        raise RecallError(
            f"the query has {len(unique)} distinct terms; at most {MAX_TERMS}: "
            "use a few distinctive words"
        )
    return unique


def matches(normalized: str, terms: Sequence[str]) -> bool:
    """Whether a message whose normalized text is `normalized` contains every term."""
    return all(term in normalized for term in terms)


def rank(found: Sequence[tuple[int, str]], terms: Sequence[str]) -> list[int]:
    """The seqs of `found` (seq, normalized text) pairs, best first.

    A term counts more the more often it occurs in a message (saturating, relative to the
    message's length) and the rarer it is across the matches; newer messages win ties.
    """
    if not found:
        return []
    counts = [[text.count(term) for term in terms] for _, text in found]
    lengths = [len(text) for _, text in found]
    mean_length = max(sum(lengths) / len(found), 1.0)
    weights = [
        1.0 / math.log2(2.0 + sum(row[i] for row in counts) / len(found)) for i in range(len(terms))
    ]
    scored: list[tuple[float, int]] = []
    for (seq, _), row, length in zip(found, counts, lengths, strict=True):
        norm = _SATURATION * (1.0 - _LENGTH_WEIGHT + _LENGTH_WEIGHT * length / mean_length)
        score = sum(
            w * tf * (_SATURATION + 1.0) / (tf + norm) for w, tf in zip(weights, row, strict=True)
        )
        scored.append((score, seq))
    scored.sort(key=lambda item: (-item[0], -item[1]))
    return [seq for _, seq in scored]


def snippet(text: str, terms: Sequence[str]) -> str:
    """One line of `text` around the first match of its most distinctive term, clipped.

    The most distinctive term is the one occurring least often in this message (the longer on
    a tie). Whitespace runs show as one space; clipped ends show `…`.
    """
    normalized = normalize(text)
    present = [t for t in terms if t in normalized] or list(terms)
    term = min(present, key=lambda t: (normalized.count(t), -len(t)))
    start, end = _locate(text, term)
    end = min(end, start + SNIPPET_CHARS)  # a very long match shows its beginning
    lo = max(0, start - (SNIPPET_CHARS - (end - start)) // 3)
    hi = min(len(text), lo + SNIPPET_CHARS)
    if hi == len(text):  # near the end: show more of what comes before
        lo = max(0, hi - SNIPPET_CHARS)
    body = " ".join(text[lo:hi].split())
    return ("…" if lo > 0 else "") + body + ("…" if hi < len(text) else "")


def _locate(text: str, term: str) -> tuple[int, int]:
    """Where `term` (normalized) first occurs in `text`, as `(start, end)` character offsets."""
    pattern = r"\s+".join(re.escape(piece) for piece in term.split(" "))
    found = re.search(pattern, text, re.IGNORECASE)
    if found is not None:
        return found.start(), found.end()
    # Case folding that changes lengths (ß → ss) defeats the regex: map offsets one by one.
    folded: list[str] = []
    origin: list[int] = []
    previous_space = True
    for index, char in enumerate(text):
        if char.isspace():
            if not previous_space:
                folded.append(" ")
                origin.append(index)
            previous_space = True
            continue
        previous_space = False
        for piece in char.casefold():
            folded.append(piece)
            origin.append(index)
    at = "".join(folded).find(term)
    if at < 0:
        return 0, 0
    return origin[at], origin[at + len(term) - 1] + 1
