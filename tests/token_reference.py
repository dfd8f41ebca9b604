"""The estimator's character-class counting as it was first written: a test oracle.

`tests/test_tokens.py` checks that the production counting (`steerable_compaction.tokens`)
agrees with this slower reference on any text: it uses one `bytes.translate` and one
`bytes.count` per class, in the most direct way.
"""

from __future__ import annotations

__all__ = ["reference_counts"]

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


_NO_NONASCII = (0, 0, 0, 0, 0, 0, 0, 0)


def reference_counts(text: str) -> tuple[int, ...]:
    """`TextCounts` fields of a non-empty `text`, in order."""
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
