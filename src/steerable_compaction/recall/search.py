"""`search_history` and `read_history`: raw messages that the projection no longer shows.

Each record handle gets its recall state on first use (message facts, visibility, an index),
kept beside it and dropped with it. `SqliteRecord` answers from its FTS5 table; every other
record, and a SQLite reader whose writer keeps no table, from the in-memory word index. Both
only propose candidates: the match rule and the ranking in `text` decide, so they agree.
Neither is kept up to date by appends: each search catches its index up for at most
`CATCH_UP_SECONDS` and checks the messages it has not reached yet one by one.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import RecallError
from ..messages import ImagePart, Message, Role
from ..record import MessageAppended, Record, SqliteRecord
from ..tokens import estimate_tokens
from .fts import FtsIndex
from .memory import Catalog, Visibility, WordIndex
from .text import (
    MIN_INDEXED_CHARS,
    matches,
    normalize,
    parse_query,
    rank,
    render,
    searchable,
    snippet,
)

__all__ = [
    "CATCH_UP_SECONDS",
    "DEFAULT_READ_TOKENS",
    "MAX_IMAGE_MESSAGES",
    "MAX_LIMIT",
    "RANK_WINDOW",
    "SCAN_LIMIT",
    "HistoryHit",
    "HistoryPage",
    "hidden_image_messages",
    "hidden_image_sources",
    "hidden_seqs",
    "prepare_index",
    "read_history",
    "search_history",
]

MAX_LIMIT = 50
"""The most hits one search returns."""

RANK_WINDOW = 256
"""Ranking considers the newest this many matches; an older match ranks only if fewer match."""

SCAN_LIMIT = 10_000
"""A query whose every term is too short for an index (under three characters, e.g. a
two-character Chinese word alone) is checked against the newest this many hidden messages."""

CATCH_UP_SECONDS = 0.5
"""A search indexes (at least one chunk of entries, oldest first) only until this long after
it began, reading included; the messages its index has not reached yet are checked one by one,
so hits never depend on how far it got. Appending never indexes: searches do, a slice each."""

DEFAULT_READ_TOKENS = 2_000
"""`read_history`'s default page size, in estimated tokens."""

_MIN_READ_TOKENS = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryHit:
    """A hidden raw message that matches a search.

    `tool_name` names the call a tool result answers (`None` for other messages); `snippet` is
    one line of the message around a match; `tokens` its estimated size (`estimate_tokens`).
    """

    seq: int
    role: Role
    tool_name: str | None
    snippet: str
    tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPage:
    """One page of a raw message's text, as `render` shows it, from `offset` (characters).

    `next_offset` is where the next page starts, or `None` on the last page. `images` are the
    message's images, in order, on the page at offset 0 (the text shows where each one was as
    an `[image: ...]` line); later pages carry none. `max_tokens` prices the text only.
    """

    seq: int
    role: Role
    tool_name: str | None
    text: str
    offset: int
    next_offset: int | None
    total_chars: int
    images: tuple[ImagePart, ...] = ()


class _State:
    """What recall keeps for one record handle."""

    __slots__ = ("catalog", "fts", "lock", "visibility", "words")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.catalog = Catalog()
        self.visibility: Visibility | None = None
        self.words: WordIndex | None = None
        self.fts: FtsIndex | None = None

    def refresh(self, record: Record) -> Visibility:
        self.catalog.update(record.entries)
        if self.visibility is None or self.visibility.entry_count != len(record.entries):
            self.visibility = Visibility(record)
        return self.visibility

    def index(self, record: Record, deadline: float | None) -> FtsIndex | WordIndex:
        """The index that answers for `record` now, caught up until `deadline` (or fully)."""
        if isinstance(record, SqliteRecord):
            if self.fts is None:
                self.fts = FtsIndex()
            if self.fts.usable(record, self.catalog, deadline=deadline):
                return self.fts
        if self.words is None:
            self.words = WordIndex()
        self.words.update(record.entries, record.spill_directory, deadline=deadline)
        return self.words


_STATES: weakref.WeakKeyDictionary[Record, _State] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state(record: Record) -> _State:
    with _STATES_LOCK:
        state = _STATES.get(record)
        if state is None:
            state = _STATES[record] = _State()
        return state


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecallError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise RecallError(f"{name} must be {bound}, got {value}")
    return value


def _indexable(term: str) -> bool:
    """Whether an index can look `term` up: it has a whitespace-free piece of 3+ characters."""
    return any(len(piece) >= MIN_INDEXED_CHARS for piece in term.split(" "))


def search_history(record: Record, query: str, *, limit: int = 5) -> list[HistoryHit]:
    """The raw messages the projection no longer shows that hold every term of `query`, best first.

    Results of `history_search` / `history_read` calls are never hits. Raises `RecallError` for
    a bad query (see `parse_query`) or a `limit` outside 1..`MAX_LIMIT`.
    """
    terms = parse_query(query)
    limit = _check_int("limit", limit, 1, MAX_LIMIT)
    deadline = time.monotonic() + CATCH_UP_SECONDS  # reading a resumed record's past counts
    state = _state(record)
    with state.lock:
        visibility = state.refresh(record)
        indexed = tuple(t for t in terms if _indexable(t))
        if indexed:
            candidates: Iterable[int] = _candidates(state, record, indexed, deadline)
            budget = None
        else:
            candidates = state.catalog.newest_first(len(record.entries))
            budget = SCAN_LIMIT
        found = _verify(record, state.catalog, visibility, candidates, terms, budget)
        hits = []
        for seq in rank(found, terms)[:limit]:
            message = _message(record, seq)
            hits.append(
                HistoryHit(
                    seq=seq,
                    role=message.role,
                    tool_name=state.catalog.tool_names.get(seq),
                    snippet=snippet(searchable(message, record.spill_directory), terms),
                    tokens=estimate_tokens(message),
                )
            )
        return hits


def prepare_index(record: Record) -> None:
    """Bring `record`'s search index wholly up to date now, rather than a slice per search.

    Searches catch the index up themselves, `CATCH_UP_SECONDS` at a time; call this where
    time is cheap (a batch job, an idle moment) so that later searches find nothing to do.
    """
    state = _state(record)
    with state.lock:
        state.refresh(record)
        state.index(record, None)


def _candidates(
    state: _State, record: Record, terms: tuple[str, ...], deadline: float
) -> Iterable[int]:
    index = state.index(record, deadline)
    if isinstance(index, FtsIndex):
        assert isinstance(record, SqliteRecord)
        return index.candidates(record, terms, state.catalog)
    found = index.candidates(terms)
    loaded = len(record.entries)
    if found is None:  # e.g. only punctuation: check every message (exact, and rare)
        return state.catalog.newest_first(loaded)
    # The messages the index has not reached are the newest: all of them first, unfiltered.
    return itertools.chain(state.catalog.newest_from(index.done, loaded), found)


def _verify(
    record: Record,
    catalog: Catalog,
    visibility: Visibility,
    candidates: Iterable[int],
    terms: tuple[str, ...],
    budget: int | None,
) -> list[tuple[int, str]]:
    """The newest `RANK_WINDOW` hidden candidates that match, with their normalized text.

    With a `budget`, only that many hidden messages are checked.
    """
    found: list[tuple[int, str]] = []
    checked = 0
    for seq in candidates:
        if seq in catalog.excluded:
            continue
        message = _message(record, seq)
        if not visibility.hidden(seq, message):
            continue
        checked += 1
        if budget is not None and checked > budget:
            break
        text = normalize(searchable(message, record.spill_directory))
        if matches(text, terms):
            found.append((seq, text))
            if len(found) >= RANK_WINDOW:
                break
    return found


def _message(record: Record, seq: int) -> Message:
    event = record.entries[seq].event
    assert isinstance(event, MessageAppended)
    return event.message


def read_history(
    record: Record, seq: int, *, offset: int = 0, max_tokens: int = DEFAULT_READ_TOKENS
) -> HistoryPage:
    """The exact content of the hidden raw message at `seq`, from `offset`, within `max_tokens`.

    Raises `RecallError` if `seq` is not a message's seq, the message is still visible
    unchanged, or `offset` lies outside the text.
    """
    seq = _check_int("seq", seq, 0)
    offset = _check_int("offset", offset, 0)
    max_tokens = _check_int("max_tokens", max_tokens, _MIN_READ_TOKENS)
    state = _state(record)
    with state.lock:
        visibility = state.refresh(record)
        entries = record.entries
        if seq >= len(entries):
            raise RecallError(
                f"there is no entry with seq {seq}: this record's seqs run from 0 to "
                f"{len(entries) - 1}"
            )
        event = entries[seq].event
        if not isinstance(event, MessageAppended):
            raise RecallError(
                f"seq {seq} is a {event.kind} event, not a message"
                + _nearest(record, state.catalog, visibility, seq)
            )
        if not visibility.hidden(seq, event.message):
            raise RecallError(
                f"seq {seq} is still in your context unchanged: read it there"
                + _nearest(record, state.catalog, visibility, seq)
            )
        tool_name = state.catalog.tool_names.get(seq)
    text = render(event.message, record.spill_directory)
    if offset > len(text) or (offset == len(text) and text):
        raise RecallError(
            f"offset {offset} is past the end of seq {seq}, which has {len(text)} characters"
        )
    end = _page_end(text, offset, max_tokens)
    return HistoryPage(
        seq=seq,
        role=event.message.role,
        tool_name=tool_name,
        text=text[offset:end],
        offset=offset,
        next_offset=end if end < len(text) else None,
        total_chars=len(text),
        images=event.message.images if offset == 0 else (),
    )


_NEAREST_STEPS = 256  # messages looked at on each side for a hidden neighbour


def _nearest(record: Record, catalog: Catalog, visibility: Visibility, seq: int) -> str:
    """`; the nearest hidden messages are seq A and seq B` (what exists of it), or ''."""
    seqs = catalog.seqs
    at = bisect.bisect_left(seqs, seq)
    found: list[int] = []
    before = range(at - 1, max(at - 1 - _NEAREST_STEPS, -1), -1)
    after = range(at, min(at + _NEAREST_STEPS, len(seqs)))
    for indices in (before, after):
        for i in indices:
            other = seqs[i]
            if other != seq and visibility.hidden(other, _message(record, other)):
                found.append(other)
                break
    if not found:
        return ""
    return "; the nearest hidden messages are " + " and ".join(f"seq {n}" for n in found)


_MAX_CHARS_PER_TOKEN = 16  # no estimate prices a token above this; it bounds the page's search


def _page_end(text: str, offset: int, max_tokens: int) -> int:
    """The largest end with `text[offset:end]` within `max_tokens` (at least one character)."""
    hi = min(len(text), offset + max_tokens * _MAX_CHARS_PER_TOKEN)
    if estimate_tokens(text[offset:hi]) <= max_tokens:
        return hi
    lo = offset + 1  # always make progress, whatever one character costs
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[offset:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def hidden_seqs(record: Record) -> list[int]:
    """The seqs of the raw messages the projection no longer shows, oldest first."""
    state = _state(record)
    with state.lock:
        visibility = state.refresh(record)
        return [seq for seq in state.catalog.seqs if visibility.hidden(seq, _message(record, seq))]


_IMAGE_SNIPPET_CHARS = 160  # a listed image message's snippet: its first line of text, cut


MAX_IMAGE_MESSAGES = 1_000
"""The most hidden image messages one `hidden_image_messages` call lists."""


def hidden_image_messages(record: Record, *, limit: int = MAX_LIMIT) -> list[HistoryHit]:
    """The newest `limit` raw messages holding images that the projection no longer shows.

    Text search cannot see into an image, so a fact only in its pixels is found by looking at
    the images again (`read_history` returns them). Newest first; a hit's `snippet` is the
    message's first line of text (its images as `[image: ...]` lines when it has none), and
    results of the history tools are never listed. Raises `RecallError` for a `limit` outside
    1..`MAX_IMAGE_MESSAGES`.
    """
    out: list[HistoryHit] = []
    for seq, message, tool_name in hidden_image_sources(record, limit=limit):
        text = render(message, record.spill_directory).strip()
        out.append(
            HistoryHit(
                seq=seq,
                role=message.role,
                tool_name=tool_name,
                snippet=text.split("\n", 1)[0][:_IMAGE_SNIPPET_CHARS],
                tokens=estimate_tokens(message),
            )
        )
    return out


def hidden_image_sources(record: Record, *, limit: int) -> list[tuple[int, Message, str | None]]:
    """`hidden_image_messages` without the snippets and sizes: `(seq, message, tool name)`.

    For a caller that only names the messages (the search tool's list of them): nothing is
    rendered or priced, and a spilled result's file is not read.
    """
    limit = _check_int("limit", limit, 1, MAX_IMAGE_MESSAGES)
    state = _state(record)
    with state.lock:
        visibility = state.refresh(record)
        out: list[tuple[int, Message, str | None]] = []
        seqs = state.catalog.image_seqs
        for i in range(len(seqs) - 1, -1, -1):
            seq = seqs[i]
            message = _message(record, seq)
            if visibility.hidden(seq, message):
                out.append((seq, message, state.catalog.tool_names.get(seq)))
                if len(out) >= limit:
                    break
        return out
