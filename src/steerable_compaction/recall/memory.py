"""What recall derives from a record in memory: message facts, visibility, the word index.

All three follow the record incrementally: each `update` reads only the entries appended since
the last one (O(new entries)), so the first search after opening a record builds them and later
searches pay only for what came since.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

from ..messages import Message
from ..record import CompactionBoundary, Entry, MessageAppended, Record
from .text import HISTORY_TOOL_NAMES, MIN_INDEXED_CHARS, searchable

__all__ = ["Catalog", "Visibility", "WordIndex", "grams"]


def grams(text: str) -> set[str]:
    """The distinct character trigrams of `text`."""
    return {text[i : i + MIN_INDEXED_CHARS] for i in range(len(text) - MIN_INDEXED_CHARS + 1)}


class Catalog:
    """Per-message facts: which seqs hold messages, the tool a result answers, what to skip.

    A tool result's tool name is that of the newest earlier call with its `call_id` (some
    providers reuse ids across turns).
    """

    __slots__ = ("_calls", "done", "excluded", "seqs", "tool_names")

    def __init__(self) -> None:
        self.seqs = array("q")  # seqs of the message entries, ascending
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
        self.done = len(entries)

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
        """Whether the raw message at `seq` is no longer visible in the projection."""
        return seq not in self._own and message not in self._kept


class WordIndex:
    """An inverted index from words to the messages that hold them, with trigrams over words.

    A message's words are the whitespace-separated pieces of its case-folded text. A term
    without whitespace occurs in a message exactly when it occurs inside one of its words, so
    the trigrams of the distinct words (each word indexed once, however often it recurs) find
    the words, and the words' postings find the messages. Indexing a message costs one split
    and one posting append per distinct word; trigrams cost only for words never seen before.
    """

    __slots__ = ("_grams", "_postings", "_words", "done")

    def __init__(self) -> None:
        self._postings: dict[str, array[int]] = {}  # word → message seqs, ascending
        self._words: list[str] = []  # word id → word
        self._grams: dict[str, array[int]] = {}  # trigram → ids of the words holding it
        self.done = 0  # entries read so far

    def update(self, entries: Sequence[Entry]) -> None:
        """Index the messages appended since the last update."""
        postings = self._postings
        for entry in entries[self.done :]:
            event = entry.event
            if not isinstance(event, MessageAppended):
                continue
            seq = entry.seq
            for word in set(searchable(event.message).casefold().split()):
                seqs = postings.get(word)
                if seqs is None:
                    postings[word] = array("q", (seq,))
                    self._add_word(word)
                else:
                    seqs.append(seq)
        self.done = len(entries)

    def _add_word(self, word: str) -> None:
        word_id = len(self._words)
        self._words.append(word)
        for gram in grams(word):
            ids = self._grams.get(gram)
            if ids is None:
                self._grams[gram] = array("q", (word_id,))
            else:
                ids.append(word_id)

    def candidates(self, terms: Sequence[str]) -> list[int]:
        """Seqs, newest first, of the messages that may hold every term (a superset).

        Each term must have a whitespace-free piece of at least `MIN_INDEXED_CHARS`
        characters; only such pieces are looked up, the rest is left to verification.
        """
        found: set[int] | None = None
        pieces = {p for term in terms for p in term.split(" ") if len(p) >= MIN_INDEXED_CHARS}
        for piece in sorted(pieces, key=len, reverse=True):  # longer pieces are rarer
            seqs = self._containing(piece)
            found = seqs if found is None else found & seqs
            if not found:
                return []
        return sorted(found or (), reverse=True)

    def _containing(self, piece: str) -> set[int]:
        """Seqs of the messages with a word that contains `piece`."""
        lists: list[array[int]] = []
        for gram in grams(piece):
            ids = self._grams.get(gram)
            if ids is None:
                return set()
            lists.append(ids)
        lists.sort(key=len)
        ids_found = set(lists[0])
        for other in lists[1:3]:  # the rarest trigrams narrow enough; the check below is exact
            ids_found.intersection_update(other)
        out: set[int] = set()
        for word_id in ids_found:
            word = self._words[word_id]
            if piece in word:
                out.update(self._postings[word])
        return out
