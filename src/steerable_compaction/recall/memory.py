"""What recall derives from a record in memory: message facts, visibility, the word index.

All three follow the record incrementally: each `update` reads only the entries appended since
the last one (O(new entries)). The word index may stop short, at a deadline, and go on from
there at the next search; the messages it has not reached are left to a check one by one.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from array import array
from collections.abc import Iterator, Sequence

from ..messages import Message
from ..record import CompactionBoundary, Entry, MessageAppended, Record
from ..spillfile import SPILL_PREFIX
from .text import CJK, HISTORY_TOOL_NAMES, MIN_INDEXED_CHARS, searchable

__all__ = ["CATCH_UP_CHUNK", "Catalog", "Visibility", "WordIndex", "grams"]

CATCH_UP_CHUNK = 512
"""Entries an index reads between two looks at its catch-up deadline."""

_SEQ_TYPE = "i"  # 4-byte seqs halve the postings' memory; a record holds far fewer than 2**31


def grams(text: str) -> set[str]:
    """The distinct character trigrams of `text`."""
    return {text[i : i + MIN_INDEXED_CHARS] for i in range(len(text) - MIN_INDEXED_CHARS + 1)}


class Catalog:
    """Per-message facts: which seqs hold messages, the tool a result answers, what to skip.

    A tool result's tool name is that of the newest earlier call with its `call_id` (some
    providers reuse ids across turns). `image_seqs` are the messages that hold images, but
    not results of the history tools (an image read again is no new image).
    """

    __slots__ = ("_calls", "done", "excluded", "image_seqs", "seqs", "tool_names")

    def __init__(self) -> None:
        self.seqs = array(_SEQ_TYPE)  # seqs of the message entries, ascending
        self.image_seqs = array(_SEQ_TYPE)  # those of them that hold images, ascending
        self.tool_names: dict[int, str] = {}
        self.excluded: set[int] = set()  # results of history tools
        self._calls: dict[str, str] = {}
        self.done = 0  # entries read so far

    def update(self, entries: Sequence[Entry]) -> None:
        """Read the entries appended since the last update."""
        for entry in entries[self.done :]:
            event = entry.event
            if not isinstance(event, MessageAppended):
                continue
            self.seqs.append(entry.seq)
            message = event.message
            for call in message.tool_calls:
                self._calls[call.id] = call.name
            result = message.tool_result
            if result is not None and result.call_id in self._calls:
                name = self._calls[result.call_id]
                self.tool_names[entry.seq] = name
                if name in HISTORY_TOOL_NAMES:
                    self.excluded.add(entry.seq)
            if entry.seq not in self.excluded and message.images:
                self.image_seqs.append(entry.seq)
        self.done = len(entries)

    def newest_from(self, floor: int, below: int) -> Iterator[int]:
        """Message seqs from `floor` up to (not including) `below`, newest first."""
        seqs = self.seqs
        low = bisect.bisect_left(seqs, floor)
        for i in range(bisect.bisect_left(seqs, below) - 1, low - 1, -1):
            yield seqs[i]

    def newest_first(self, below: int) -> Iterator[int]:
        """Message seqs lower than `below`, newest first."""
        seqs = self.seqs
        i = len(seqs)
        while i > 0:
            i -= 1
            if seqs[i] < below:
                yield seqs[i]


class Visibility:
    """Which raw messages the projection still shows unchanged.

    A raw message is visible when the projection holds it at its own seq as it was appended,
    or holds an equal message placed by a compaction's replacement (a message kept verbatim).
    """

    __slots__ = ("_kept", "_own", "entry_count")

    def __init__(self, record: Record) -> None:
        entries = record.entries
        projection = record.projection
        self._own: set[int] = set()
        self._kept: set[Message] = set()
        for seq, message in zip(projection.seqs, projection.messages, strict=True):
            event = entries[seq].event
            if isinstance(event, MessageAppended):
                if event.message is message or event.message == message:
                    self._own.add(seq)
            elif isinstance(event, CompactionBoundary):
                self._kept.add(message)
        self.entry_count = len(entries)

    def hidden(self, seq: int, message: Message) -> bool:
        """Whether the raw message at `seq` is no longer visible in the projection.

        A spilled tool result is never wholly visible: the transcript shows its pointer only.
        """
        if message.text.startswith(SPILL_PREFIX):
            return True
        return seq not in self._own and message not in self._kept


class WordIndex:
    """An inverted index of the messages' words and CJK characters, with trigrams over words.

    A message's tokens are, in its case-folded text, its words (maximal runs of letters, digits
    and `_` outside the CJK scripts) and its distinct CJK characters. Wherever a term occurs,
    each word of the term lies inside a word of the message and each CJK character of the term
    is one of the message's, so the postings of those tokens narrow the candidates; the match
    rule then checks them. The trigrams of each distinct word (indexed once, however often it
    recurs) find the words that contain a piece of a term. Indexing a message costs one regex
    pass and one posting append per distinct token; trigrams only for words never seen before.
    """

    __slots__ = ("_grams", "_postings", "_words", "done")

    def __init__(self) -> None:
        self._postings: dict[str, array[int]] = {}  # token → message seqs, ascending
        self._words: list[str] = []  # word id → word (CJK characters are not words)
        self._grams: dict[str, array[int]] = {}  # trigram → ids of the words holding it
        self.done = 0  # entries read so far

    def update(
        self,
        entries: Sequence[Entry],
        spill_directory: str | os.PathLike[str] | None = None,
        *,
        deadline: float | None = None,
    ) -> None:
        """Index the entries appended since the last update, oldest first.

        Spilled results are read from `spill_directory`.
        With a `deadline` (a `time.monotonic()` value), indexing stops at the first chunk
        boundary past it, so `done` may stay short of `len(entries)`: the entries from `done`
        on are unindexed, and `candidates` leaves them to the caller. At least one chunk is
        indexed per call, so repeated calls always finish.
        """
        postings = self._postings
        get = postings.get  # bound once: a message holds a hundred or more tokens
        end = len(entries)
        while self.done < end:
            stop = min(end, self.done + CATCH_UP_CHUNK)
            for entry in entries[self.done : stop]:
                event = entry.event
                if not isinstance(event, MessageAppended):
                    continue
                seq = entry.seq
                folded = searchable(event.message, spill_directory).casefold()
                for token in _tokens(folded):
                    seqs = get(token)
                    if seqs is None:
                        postings[token] = array(_SEQ_TYPE, (seq,))
                        if len(token) > 1 or not _is_cjk(token):  # CJK tokens are characters
                            self._add_word(token)
                    else:
                        seqs.append(seq)
            self.done = stop
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _add_word(self, word: str) -> None:
        word_id = len(self._words)
        self._words.append(word)
        for gram in grams(word):
            ids = self._grams.get(gram)
            if ids is None:
                self._grams[gram] = array(_SEQ_TYPE, (word_id,))
            else:
                ids.append(word_id)

    def candidates(self, terms: Sequence[str]) -> list[int] | None:
        """Seqs, newest first, of the indexed messages that may hold every term (a superset).

        Only words of three or more characters and CJK characters narrow the candidates;
        `None` when the terms hold none (every message is a candidate). Messages at or after
        `done` are not indexed and never proposed here.
        """
        options: list[tuple[int, list[array[int]]]] = []  # (size bound, postings to unite)
        for term in terms:
            for word in _WORDS.findall(term):
                if len(word) >= MIN_INDEXED_CHARS:
                    lists = [self._postings[w] for w in self._words_containing(word)]
                    options.append((sum(map(len, lists)), lists))
            for char in _cjk_chars(term):
                seqs = self._postings.get(char)
                options.append((0, []) if seqs is None else (len(seqs), [seqs]))
        if not options:
            return None
        options.sort(key=lambda option: option[0])
        found: set[int] = set().union(*options[0][1])
        for _, lists in options[1:_NARROWING]:
            if len(found) <= _FEW:  # checking a few candidates beats uniting long postings
                break
            found.intersection_update(lists[0] if len(lists) == 1 else set().union(*lists))
        return sorted(found, reverse=True)

    def _words_containing(self, piece: str) -> list[str]:
        lists: list[array[int]] = []
        for gram in grams(piece):
            ids = self._grams.get(gram)
            if ids is None:
                return []
            lists.append(ids)
        lists.sort(key=len)
        ids_found = set(lists[0])
        for other in lists[1:3]:  # the rarest trigrams narrow enough; the check below is exact
            ids_found.intersection_update(other)
        return [word for word in map(self._words.__getitem__, ids_found) if piece in word]


_NARROWING = 4  # the most token constraints intersected; verification does the rest
_FEW = 64
_WORDS = re.compile(f"[^\\W{CJK}]+")
# The same words in case-folded ASCII text, faster: every byte not of a word made a space (one
# byte map), then one split (the words' regex cost twice as much).
_ASCII_WORD_BYTES = bytes(
    byte if chr(byte) in "abcdefghijklmnopqrstuvwxyz0123456789_" else 32 for byte in range(256)
)
_CJK_RUNS = re.compile(f"[{CJK}]+")
_CJK_SPLIT = re.compile(f"([{CJK}]+)")


def _is_cjk(token: str) -> bool:
    return _CJK_RUNS.fullmatch(token) is not None


def _cjk_chars(folded: str) -> set[str]:
    return set("".join(_CJK_RUNS.findall(folded)))


def _tokens(folded: str) -> set[str]:
    """The distinct words and CJK characters of a case-folded text."""
    if folded.isascii():
        return set(folded.encode().translate(_ASCII_WORD_BYTES).decode().split())
    # One pass splits the text at its CJK runs (the odd pieces); the words are those of the
    # rest, each run a boundary, so the word pattern scans only the few characters left.
    pieces = _CJK_SPLIT.split(folded)
    rest = " ".join(pieces[0::2])
    if rest.isascii():
        tokens = set(rest.encode().translate(_ASCII_WORD_BYTES).decode().split())
    else:
        tokens = set(_WORDS.findall(rest))
    tokens.update("".join(pieces[1::2]))  # the runs' characters, with no set between
    return tokens
