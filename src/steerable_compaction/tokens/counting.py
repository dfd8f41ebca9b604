"""Character-class counts of a text and their cost in tokens (R8).

A text is priced by character class: ASCII words, capitals, camelCase humps, digit runs,
punctuation, whitespace runs, CJK ideographs, kana, hangul and other non-ASCII characters, each
scaled by a family's `Calibration`. Counting is done on the UTF-8 bytes with `bytes.translate`
(one byte per class) and `bytes.count`, so no Python loop runs per character.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import lru_cache

from .calibration import Calibration

__all__ = ["TextCounts", "count_text"]

_LOWER = b"abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_DIGITS = b"0123456789"
_LETTERS = _LOWER + _UPPER
_PUNCT = bytes(b for b in range(0x21, 0x7F) if not chr(b).isalnum())
_CONT = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes


def _table(default: bytes, **groups: tuple[bytes, bytes]) -> bytes:
    table = bytearray(default * 256)
    for members, cls in groups.values():
        for b in members:
            table[b] = cls[0]
    return bytes(table)


def _keep_only(members: bytes) -> bytes:
    return bytes(b for b in range(256) if b not in members)


# Run counts use a two-letter needle on a translated copy: "a " counts letter runs by their ends.
# Needles are chosen for speed (`bytes.count` is slower when the needle's last byte is common).
_T_LETTER = _table(b" ", letters=(_LETTERS, b"a"))
_T_DIGIT = _table(b" ", digits=(_DIGITS, b"0"))
_T_SPACED_DIGIT = _table(b"x", digits=(_DIGITS, b"0"), space=(b" ", b"s"))
_T_PUNCT = _table(b" ", punct=(_PUNCT, b"."))
_T_CASE = _table(b" ", lower=(_LOWER, b"a"), upper=(_UPPER, b"A"))
_T_SPACE = _table(b"x", space=(b" \t", b" "))
_DEL_NOT_UPPER = _keep_only(_UPPER)
_DEL_NOT_DIGIT = _keep_only(_DIGITS)
_DEL_NOT_PUNCT = _keep_only(_PUNCT)
# Non-ASCII characters by UTF-8 lead byte (continuation bytes and ASCII are deleted):
#   C2-DF two-byte (Latin-1, Greek, Cyrillic, ...)   E0-E2 three-byte symbols, Indic, punctuation
#   E3 U+3000-3FFF (CJK punctuation, kana, ...)      E4-E9 CJK ideographs U+4000-9FFF
#   EA-ED hangul syllables U+AC00-D7A3 (approx.)     EE-EF private use, fullwidth forms
#   F0-F4 four-byte (emoji, rare ideographs)
_T_NONASCII = _table(
    b"?",
    two=(bytes(range(0xC2, 0xE0)), b"l"),
    three=(bytes(range(0xE0, 0xE3)), b"o"),
    kana=(b"\xe3", b"j"),
    han=(bytes(range(0xE4, 0xEA)), b"H"),
    hangul=(bytes(range(0xEA, 0xEE)), b"K"),
    wide=(b"\xee\xef", b"f"),
    four=(bytes(range(0xF0, 0xF8)), b"e"),
)
_T_TWO_BYTE = _table(b" ", two=(bytes(range(0xC2, 0xE0)), b"l"))
_DEL_ASCII_CONT = bytes(range(0x80)) + _CONT
_PUNCT_ENDS = frozenset(_PUNCT)


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
    newline_runs: int = 0
    space_runs: int = 0  # runs of two or more spaces/tabs followed by more text
    han: int = 0
    kana: int = 0
    hangul: int = 0
    cjk_punct: int = 0  # U+3000-303F and U+E000-FFFF (fullwidth forms, CJK compatibility)
    two_byte: int = 0  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic ...
    two_byte_runs: int = 0
    three_byte: int = 0  # U+0800-2FFF: symbols, arrows, box drawing, Indic, Thai ...
    four_byte: int = 0  # U+10000 and up: emoji, rare ideographs


_NO_NONASCII = (0, 0, 0, 0, 0, 0, 0, 0)


def _counts(text: str) -> tuple[int, ...]:
    """`TextCounts` fields in order, as a tuple (the hot path builds no objects)."""
    raw = text.encode("utf-8", "surrogatepass")
    last = raw[-1]
    ascii_counts = (
        raw.translate(_T_LETTER).count(b"a ") + (last in _LETTERS),
        len(raw.translate(None, _DEL_NOT_UPPER)),
        raw.translate(_T_CASE).count(b"aA"),
        raw.translate(_T_DIGIT).count(b"0 ") + (last in _DIGITS),
        raw.translate(_T_SPACED_DIGIT).count(b"s0"),
        len(raw.translate(None, _DEL_NOT_DIGIT)),
        len(raw.translate(None, _DEL_NOT_PUNCT)),
        raw.translate(_T_PUNCT).count(b". ") + (last in _PUNCT_ENDS),
        raw.count(b"\n") - raw.count(b"\n\n"),  # exact for runs of one or two newlines
        raw.translate(_T_SPACE).count(b"  x"),
    )
    if text.isascii():
        return (*ascii_counts, *_NO_NONASCII)
    cls = raw.translate(_T_NONASCII, _DEL_ASCII_CONT)
    e3 = cls.count(b"j")
    e3_punct = raw.count(b"\xe3\x80") if e3 else 0  # U+3000-303F: ideographic comma, stop, brackets
    wide = cls.count(b"f")  # fullwidth forms, CJK compatibility, private use: ~1 token each
    two = cls.count(b"l")
    two_runs = 0
    if two:
        two_runs = raw.translate(_T_TWO_BYTE, _CONT).count(b"l ") + (0xC2 <= raw[-2] <= 0xDF)
    return (
        *ascii_counts,
        cls.count(b"H"),
        e3 - e3_punct,
        cls.count(b"K"),
        e3_punct + wide,
        two,
        two_runs,
        cls.count(b"o"),
        cls.count(b"e"),
    )


def count_text(text: str) -> TextCounts:
    """Count `text`'s character classes with a few `translate`/`count` passes."""
    if not text:
        return TextCounts()
    return TextCounts(**dict(zip(TextCounts.__slots__, _counts(text), strict=True)))


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


@lru_cache(maxsize=64)
def _weights(cal: Calibration) -> tuple[float, ...]:
    """Tokens per unit of each `TextCounts` field under `cal`."""
    text, other = cal.text, cal.other
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
        other * _COST_TWO_BYTE,
        other * _COST_TWO_BYTE_RUN,
        other * _COST_THREE_BYTE,
        other * _COST_FOUR_BYTE,
    )


def _text_cost(text: str, cal: Calibration) -> float:
    if not text:
        return 0.0
    total: float = sum(map(operator.mul, _weights(cal), _counts(text)))
    return total
