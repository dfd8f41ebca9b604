"""Character-class counts of a text and their cost in tokens (R8).

A text is priced by character class: ASCII words, capitals, camelCase humps, digit runs,
punctuation, whitespace runs, CJK ideographs, kana, hangul and other non-ASCII characters, each
scaled by a family's `Calibration`.

One pass over the UTF-8 bytes computes every count, with no Python loop per character: a
`bytes.translate` gives each byte a 4-bit class code (one hex digit), the digits become one
integer, and each count is a few whole-integer bit operations and one `int.bit_count`. With
the first byte most significant, `x << 4` puts each byte's next byte on it, so "a letter whose
next byte is not a letter" is `L & ~(L << 4)`: runs, camelCase humps and space-then-digit pairs
cost one shift each. The non-ASCII classes by lead byte come from one more `translate` that keeps
only lead bytes (`classes.leads`). Texts from 8 KB on go to `vectorized` when numpy is installed
(the `fast` extra): the same counts, about twice as fast.
"""

from __future__ import annotations

import operator
import re
from binascii import unhexlify
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .calibration import FAMILY_CALIBRATIONS, Calibration
from .classes import CODES, leads, non_ascii_counts

__all__ = ["TextCounts", "TextPricer", "count_text", "pricer_for", "text_weights"]

# A byte's class code (`classes.CODES`) as one hex digit, so `int(..., 16)` or `unhexlify` makes
# one integer of a text's codes. In ASCII text bit 1 is "letter" alone and bit 8 "space or tab"
# alone; the non-ASCII codes set bit 8 with others, so a few more operations isolate each class.
_T_CODE = bytes(b"0123456789abcdef"[c] for c in CODES)  # code -> hex digit
# Without E0 and E3 leads only the two-byte leads matter among non-ASCII bytes: fewer operations.
_T_CODE_SIMPLE = bytes(b"0123456789abcdef"[c if c < 9 or c == 10 or c == 12 else 0] for c in CODES)
_WS = (9, 32)
_NO_NONASCII = (0,) * 12
_SHORT = 256  # hex digits `int(..., 16)` reads faster than `unhexlify` + `int.from_bytes`

# Longer texts are counted in pieces of about this many bytes (the bit operations run fastest on
# integers that stay in cache). A piece ends after a newline run or a punctuation run, where no
# class run, pair or triple crosses: every count is the sum of the pieces' counts.
_PIECE = 1 << 14
_CUT = re.compile(rb"\n(?!\n)|[!-/:-@\[-`{-~](?![!-/:-@\[-`{-~])")
# From this many bytes a text is counted by `vectorized` (numpy) when numpy is installed, in pieces
# of about `_VECTOR_PIECE` bytes (numpy's temporary arrays stay a few times that size).
_VECTOR_MIN = 1 << 13  # numpy overtakes the bit operations at 7-12 KB (tokens_accuracy.py)
_VECTOR_PIECE = 1 << 20
_NEWLINE_ROUNDS = 3  # newline runs longer than 2 * this are counted by `bytes.count` instead


_mask = 0  # sum(1 << 4 * i for i in range(_mask_length)): the lowest bit of each code
_mask_length = 0


def _low_bits(n: int) -> int:
    """The lowest bit of each of `n` codes (kept for pieces up to `8 * _PIECE` bytes)."""
    global _mask, _mask_length
    size = max(n, 2 * _mask_length, 1024)
    value = ((1 << 4 * size) - 1) // 15
    if size <= 8 * _PIECE:
        _mask, _mask_length = value, size  # one assignment each: safe without a lock
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class TextCounts:
    """Character-class counts of one text (the estimator's input; exposed for tuning)."""

    words: int = 0  # runs of ASCII letters
    upper: int = 0  # uppercase ASCII letters
    humps: int = 0  # lower-to-upper case changes (camelCase)
    digit_runs: int = 0
    spaced_digit_runs: int = 0  # digit runs right after a space (the space is its own token)
    digits: int = 0
    punct: int = 0  # ASCII punctuation and symbols
    punct_runs: int = 0
    newline_runs: int = 0  # runs of "\n", a run of k counting ceil(k / 2)
    space_runs: int = 0  # runs of two or more spaces/tabs followed by more text
    han: int = 0
    kana: int = 0
    hangul: int = 0
    cjk_punct: int = 0  # U+3000-303F and U+E000-FFFF (fullwidth forms, CJK compatibility)
    two_byte: int = 0  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic ...
    two_byte_runs: int = 0
    three_byte: int = 0  # U+0800-2FFF: symbols, arrows, box drawing, Indic, Thai ...
    four_byte: int = 0  # U+10000 and up: emoji, rare ideographs
    # Scripts whose cost differs most between tokenizers, counted again on their own (they are
    # in `two_byte` or `three_byte` too; their own price replaces the generic one there).
    latin_greek: int = 0  # U+0080-03FF: accented Latin, combining marks, Greek
    arabic: int = 0  # U+0600-07FF: Arabic, Syriac, Thaana
    indic: int = 0  # U+0900-0DFF: Devanagari, Bengali, Tamil, ... Sinhala
    thai: int = 0  # U+0E00-0EFF: Thai, Lao


_FIELDS = 22


_Counter = Callable[[bytes, bool], tuple[int, ...]]  # bytes, ASCII only -> counts


def _counts(text: str) -> tuple[int, ...]:
    """`TextCounts` fields of a non-empty `text`, in order; ASCII text stops after 10 fields."""
    raw = text.encode("utf-8", "surrogatepass")
    ascii_only = text.isascii()
    piece: _Counter = _piece
    size = _PIECE
    if len(raw) >= _VECTOR_MIN:
        vector = _vectorized()
        if vector is not None:
            piece, size = vector, _VECTOR_PIECE
    if len(raw) <= size:
        return piece(raw, ascii_only)
    total = (0,) * _FIELDS
    start = 0
    while start < len(raw):
        cut = _CUT.search(raw, start + size)
        end = len(raw) if cut is None else cut.end()
        chunk = raw[start:end]
        count = piece if len(chunk) >= _VECTOR_MIN else _piece
        part = count(chunk, ascii_only or chunk.isascii())
        total = tuple(map(operator.add, total, part + _NO_NONASCII[: _FIELDS - len(part)]))
        start = end
    return total


_vector: list[_Counter | None] = []  # `vectorized.piece_counts` once looked up; None: no numpy


def _vectorized() -> _Counter | None:
    """The numpy counting (`vectorized`), imported on the first long text; None without numpy."""
    if not _vector:
        try:
            from .vectorized import piece_counts
        except ImportError:  # numpy is an optional extra
            _vector.append(None)
        else:
            _vector.append(piece_counts)
    return _vector[0]


def _piece(raw: bytes, ascii_only: bool) -> tuple[int, ...]:
    """The counts of `raw`: a shift by 4 bits moves the next byte's code onto this byte's."""
    simple = ascii_only or (b"\xe3" not in raw and b"\xe0" not in raw)
    digits = raw.translate(_T_CODE_SIMPLE if simple else _T_CODE)
    if len(digits) < _SHORT:
        codes = int(digits, 16)  # the first byte is the most significant digit
    else:
        codes = int.from_bytes(unhexlify(digits if len(digits) % 2 == 0 else b"0" + digits))
    low = _mask if len(raw) <= _mask_length else _low_bits(len(raw))
    n1 = codes >> 1
    n2 = codes >> 2
    n3 = codes >> 3
    letter = codes & low
    blank = n3 & low  # in ASCII text: space or tab
    two = n2 & n1 & low  # codes 6, 14, 15
    non_ascii: tuple[int, int, int, int] | None = None
    if simple:  # codes 0-10 and 12 only
        punct = two
        digit = (n2 & low) ^ punct
        if not ascii_only:
            high = n2 & blank  # code 12
            digit ^= high
            blank ^= high
            non_ascii = (high, 0, 0, 0)
    else:
        odd = letter & n3  # codes 9, 11, 13, 15: not letters
        letter ^= odd
        high = n2 & blank  # codes 12-15
        punct = two ^ (two & n3)
        digit = (n2 & low) ^ high ^ punct
        blank ^= high ^ (odd ^ (odd & n2))  # codes 8 and 10 left
        non_ascii = (high ^ (high & codes), high & codes, odd, two & n3)
    upper = letter & n1
    tab = blank & n1
    newline = (n1 & low) ^ upper ^ punct ^ tab  # code 2 (and in non-ASCII text 11, 14, 15)
    if not simple:
        assert non_ascii is not None
        newline ^= (non_ascii[2] & n1) ^ (non_ascii[3] ^ (non_ascii[3] & codes))
    words = (letter ^ (letter & (letter << 4))).bit_count()
    uppers = humps = digits_ = digit_runs = spaced = puncts = punct_runs = newlines = blanks = 0
    if upper:
        uppers = upper.bit_count()
        humps = ((letter ^ upper) & (upper << 4)).bit_count()
    if digit:
        next_digit = digit << 4
        digits_ = digit.bit_count()
        digit_runs = digits_ - (digit & next_digit).bit_count()
        spaced = ((blank ^ tab) & next_digit).bit_count()  # a space, not a tab
    if punct:
        puncts = punct.bit_count()
        punct_runs = puncts - (punct & (punct << 4)).bit_count()
    if newline:
        newlines = _newline_runs(newline, raw)
    pair = blank & (blank << 4)
    if pair:
        blanks = (pair ^ (pair & (pair << 4))).bit_count()
        blanks -= raw[-1] in _WS and raw[-2] in _WS  # a blank run at the very end
    counts = (
        words,
        uppers,
        humps,
        digit_runs,
        spaced,
        digits_,
        puncts,
        punct_runs,
        newlines,
        blanks,
    )
    if non_ascii is None:
        return counts
    return counts + _non_ascii(raw, n1, n2, *non_ascii)


def _newline_runs(newline: int, raw: bytes) -> int:
    """Sum of ceil(k / 2) over newline runs of length k: runs of >= 1, + runs of >= 3, ..."""
    total = 0
    longer = newline  # newlines starting 1, 3, 5, ... newlines in a row
    for _ in range(_NEWLINE_ROUNDS):
        two = longer & (longer << 4)
        total += (longer ^ two).bit_count()  # the last of each such stretch
        longer = two & (two << 4)
        if not longer:
            return total
    return raw.count(b"\n") - raw.count(b"\n\n")  # very long runs: two byte scans instead


def _non_ascii(
    raw: bytes, n1: int, n2: int, even: int, odd_high: int, odd: int, three: int
) -> tuple[int, ...]:
    """The non-ASCII classes (`classes.leads`), the two-byte runs and the script refinements.

    `even` holds codes 12 and 14, `odd_high` 13 and 15, `odd` 9, 11, 13 and 15, `three`
    14 and 15 (one bit per byte, as in `_piece`).
    """
    lead = leads(raw)
    two_runs = e3_punct = indic = thai = 0
    if lead[4]:  # two-byte characters
        lead2 = even ^ (even & n1)  # code 12
        two_runs = (lead2 ^ (lead2 & (lead2 << 8))).bit_count()  # the next character: 2 on
    if lead[1]:  # E3; U+3000-303F (E3 80 xx): ideographic comma, full stop, brackets
        byte_80 = odd ^ (odd & (n1 | n2))  # code 9
        e3_punct = (even & three & (byte_80 << 4)).bit_count()  # code 14, then 9
    if lead[7]:  # E0, then its second byte
        lead_e0 = odd_high & three  # code 15
        second = odd ^ (odd & n2)  # codes 9 and 11 (0x80 never follows E0)
        indic = (lead_e0 & ((second & n1) << 4)).bit_count()
        thai = (lead_e0 & ((odd_high ^ lead_e0) << 4)).bit_count()
    return non_ascii_counts(lead, two_runs, e3_punct, indic, thai)


def count_text(text: str) -> TextCounts:
    """Count `text`'s character classes (one pass over its UTF-8 bytes)."""
    if not text:
        return TextCounts()
    counts = _counts(text)
    counts += _NO_NONASCII[: _FIELDS - len(counts)]
    return TextCounts(**dict(zip(TextCounts.__slots__, counts, strict=True)))


# Base costs in tokens per counted unit, fitted on ASCII text (code, JSON, prose, shell output).
# A letter run is about one token whatever its length; a space before a digit run is a token of
# its own; an upper-case letter and a camelCase hump usually start a new token.
_COST_WORD = 1.05
_COST_UPPER = 0.18
_COST_HUMP = 1.7
_COST_DIGIT_RUN = 1.25
_COST_SPACED_DIGIT_RUN = 1.2
_COST_PUNCT = 0.18
_COST_PUNCT_RUN = 0.44
_COST_NEWLINE_RUN = 0.92
_COST_SPACE_RUN = 0.57
# Non-ASCII costs outside the family table: CJK punctuation is one token everywhere; the `other`
# classes are scaled by `Calibration.other`.
_COST_CJK_PUNCT = 1.0
_COST_TWO_BYTE_RUN = 1.0  # an accented letter splits its word; a Cyrillic word starts a token
_COST_TWO_BYTE = 0.25
_COST_THREE_BYTE = 0.8
_COST_FOUR_BYTE = 2.0


def _weights_of(cal: Calibration) -> tuple[float, ...]:
    text, other = cal.text, cal.other
    two, three = other * _COST_TWO_BYTE, other * _COST_THREE_BYTE
    return (
        text * _COST_WORD,
        text * _COST_UPPER,
        text * _COST_HUMP,
        text * _COST_DIGIT_RUN - cal.digit,  # digits after the first of a run cost `cal.digit`
        text * _COST_SPACED_DIGIT_RUN,
        cal.digit,
        text * _COST_PUNCT,
        text * _COST_PUNCT_RUN,
        text * _COST_NEWLINE_RUN,
        text * _COST_SPACE_RUN,
        cal.han,
        cal.kana,
        cal.hangul,
        _COST_CJK_PUNCT,
        two,
        other * _COST_TWO_BYTE_RUN,
        three,
        other * _COST_FOUR_BYTE if cal.emoji is None else cal.emoji,
        # A script's own price replaces the generic one its characters were counted at.
        0.0 if cal.latin_greek is None else cal.latin_greek - two,
        0.0 if cal.arabic is None else cal.arabic - two,
        0.0 if cal.indic is None else cal.indic - three,
        0.0 if cal.thai is None else cal.thai - three,
    )


def text_weights(cal: Calibration) -> tuple[float, ...]:
    """Tokens per unit of each `TextCounts` field under `cal`."""
    return pricer_for(cal).weights


_MEMO_CHARS = 64  # texts this short are remembered: tool names, call ids, short results
_MEMO_SIZE = 4096  # entries per calibration before the memo starts afresh


class TextPricer:
    """Prices texts under one calibration (the weights are computed once, not per call).

    Short texts are remembered, since a transcript repeats them (tool names, a call's id in its
    result, "ok"): for those a price is one dictionary lookup. A short ASCII text met for the
    first time is looked up by its *shape* too, the string of its bytes' classes: its counts
    depend on nothing else, and fresh texts of one shape are common (call ids, hashes, times,
    line numbers), so a new `call_1042` costs one translation instead of a count.
    """

    __slots__ = ("_memo", "_shapes", "weights")

    def __init__(self, cal: Calibration) -> None:
        self.weights = _weights_of(cal)
        self._memo: dict[str, float] = {}
        self._shapes: dict[bytes, float] = {}  # ASCII texts' class codes -> their price

    def cost(self, text: str) -> float:
        """Tokens of `text` (not rounded; 0.0 for the empty text)."""
        if len(text) > _MEMO_CHARS:
            total: float = sum(map(operator.mul, self.weights, _counts(text)))
            return total
        memo = self._memo
        cost = memo.get(text)
        if cost is None:
            if not text:
                cost = 0.0
            elif text.isascii():
                # In ASCII text every class has a code of its own (`classes.CODES`).
                shapes, shape = self._shapes, text.encode().translate(_T_CODE_SIMPLE)
                cost = shapes.get(shape)
                if cost is None:
                    cost = sum(map(operator.mul, self.weights, _counts(text)))
                    if len(shapes) >= _MEMO_SIZE:
                        shapes.clear()
                    shapes[shape] = cost
            else:
                cost = sum(map(operator.mul, self.weights, _counts(text)))
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[text] = cost
        return cost


# The table's pricers, found by identity: hashing a `Calibration` (eight fields) on every call
# cost more than counting a short text.
_PRICERS: Mapping[int, tuple[Calibration, TextPricer]] = {
    id(cal): (cal, TextPricer(cal)) for cal in FAMILY_CALIBRATIONS.values()
}


def pricer_for(cal: Calibration) -> TextPricer:
    """The `TextPricer` of `cal` (shared for the table's calibrations)."""
    entry = _PRICERS.get(id(cal))
    if entry is not None and entry[0] is cal:
        return entry[1]
    return TextPricer(cal)
