"""The character class of each UTF-8 byte, shared by the estimator's two counting passes.

`counting` counts classes with whole-integer bit operations (any text; no dependency) and
`vectorized` with numpy arrays (long texts, when numpy is installed). Both read a byte's class
from `CODES` and count non-ASCII characters by lead byte with `leads`, so they count alike.
"""

from __future__ import annotations

__all__ = [
    "BYTE_80",
    "CODES",
    "DIGIT",
    "E0",
    "E3",
    "LEAD2",
    "LOWER",
    "NEWLINE",
    "PUNCT",
    "SECOND_INDIC",
    "SECOND_THAI",
    "SPACE",
    "TAB",
    "UPPER",
    "leads",
    "non_ascii_counts",
]

_LOWER = b"abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_DIGITS = b"0123456789"
_PUNCT = bytes(b for b in range(0x21, 0x7F) if not chr(b).isalnum())
_CONT = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes
_LEAD2 = bytes(range(0xC2, 0xE0))  # lead bytes of two-byte characters (U+0080-07FF)

# A byte's 4-bit code. In ASCII text bit 1 is "letter" alone and bit 8 "space or tab" alone; the
# non-ASCII codes set bit 8 with others, so a few more operations isolate each class there.
LOWER, NEWLINE, UPPER, DIGIT, PUNCT, SPACE, TAB = 1, 2, 3, 4, 6, 8, 10  # ASCII
BYTE_80 = 9  # the byte 0x80 (E3 80 xx: U+3000-303F, CJK punctuation)
SECOND_INDIC = 11  # A4-B7 (after E0: an Indic letter, U+0900-0DFF)
SECOND_THAI = 13  # B8-BB (after E0: Thai or Lao, U+0E00-0EFF)
E0, LEAD2, E3 = 15, 12, 14  # lead E0, a two-byte character's lead C2-DF, lead E3
# Anything else is 0. After an ASCII byte comes ASCII or a lead, never a continuation byte, so
# the continuation codes only matter right after their lead.

_codes = bytearray(256)
for _members, _code in (
    (_LOWER, LOWER),
    (b"\n", NEWLINE),
    (_UPPER, UPPER),
    (_DIGITS, DIGIT),
    (_PUNCT, PUNCT),
    (b" ", SPACE),
    (b"\t", TAB),
    (b"\x80", BYTE_80),
    (bytes(range(0xA4, 0xB8)), SECOND_INDIC),
    (bytes(range(0xB8, 0xBC)), SECOND_THAI),
    (b"\xe0", E0),
    (_LEAD2, LEAD2),
    (b"\xe3", E3),
):
    for _b in _members:
        _codes[_b] = _code
CODES = bytes(_codes)


def _table(default: bytes, **groups: tuple[bytes, bytes]) -> bytes:
    table = bytearray(default * 256)
    for members, cls in groups.values():
        for b in members:
            table[b] = cls[0]
    return bytes(table)


# Non-ASCII characters by UTF-8 lead byte (continuation bytes and ASCII are deleted):
#   C2-DF two-byte: C2-CF accented Latin, combining marks, Greek; D0-D7 Cyrillic, Armenian,
#         Hebrew; D8-DF Arabic, Syriac, Thaana
#   E0-E2 three-byte: Indic, Thai, symbols, punctuation
#   E3 U+3000-3FFF (CJK punctuation, kana, ...)      E4-E9 CJK ideographs U+4000-9FFF
#   EA-ED hangul syllables U+AC00-D7A3 (approx.)     EE-EF private use, fullwidth forms
#   F0-F4 four-byte (emoji, rare ideographs)
_T_NONASCII = _table(
    b"?",
    latin=(bytes(range(0xC2, 0xD0)), b"a"),
    two=(bytes(range(0xD0, 0xD8)), b"l"),
    arabic=(bytes(range(0xD8, 0xE0)), b"r"),
    e0=(b"\xe0", b"z"),
    three=(b"\xe1\xe2", b"o"),
    kana=(b"\xe3", b"j"),
    han=(bytes(range(0xE4, 0xEA)), b"H"),
    hangul=(bytes(range(0xEA, 0xEE)), b"K"),
    wide=(b"\xee\xef", b"f"),
    four=(bytes(range(0xF0, 0xF8)), b"e"),
)
_DEL_ASCII_CONT = bytes(range(0x80)) + _CONT


def leads(raw: bytes) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """Non-ASCII characters of `raw` by lead byte.

    In order: han, E3 (CJK punctuation and kana), hangul, wide (fullwidth, private use), two-byte,
    its Latin-and-Greek and Arabic parts, E0 (Indic, Thai), other three-byte, four-byte.
    """
    lead = raw.translate(_T_NONASCII, _DEL_ASCII_CONT)
    count = lead.count
    latin_greek = count(b"a") if b"a" in lead else 0
    arabic = count(b"r") if b"r" in lead else 0
    return (
        count(b"H") if b"H" in lead else 0,
        count(b"j") if b"j" in lead else 0,
        count(b"K") if b"K" in lead else 0,
        count(b"f") if b"f" in lead else 0,
        count(b"l") + latin_greek + arabic,
        latin_greek,
        arabic,
        count(b"z") if b"z" in lead else 0,
        count(b"o") if b"o" in lead else 0,
        count(b"e") if b"e" in lead else 0,
    )


def non_ascii_counts(
    lead: tuple[int, ...], two_runs: int, e3_punct: int, indic: int, thai: int
) -> tuple[int, ...]:
    """The non-ASCII `TextCounts` fields in order, from `leads` and the counts of byte pairs.

    `two_runs`: runs of two-byte characters; `e3_punct`: E3 80 pairs (U+3000-303F); `indic` and
    `thai`: E0 followed by an Indic or a Thai second byte.
    """
    han, e3, hangul, wide, two, latin_greek, arabic, e0, three, four = lead
    return (
        han,
        e3 - e3_punct,
        hangul,
        e3_punct + wide,  # CJK punctuation, fullwidth forms, private use: ~1 token each
        two,
        two_runs,
        three + e0,
        four,
        latin_greek,
        arabic,
        indic,
        thai,
    )
