"""Character-class counts of long texts with numpy: the same counts as `counting`, faster.

`counting` prices any text with whole-integer bit operations; each of those walks all the bits of
a text, and `int.bit_count` is the slowest of them. For a long text this module does the same
counting on numpy arrays: one `bytes.translate` to class codes (`classes.CODES`), one comparison
per class, and "this byte and the next" as two slices of one array, so a run of a class ends
where `mask[:-1] > mask[1:]`. numpy is optional (the `fast` extra); `counting` imports this
module on the first long text and falls back to its own pass when numpy is missing.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from .classes import (
    BYTE_80,
    CODES,
    DIGIT,
    E0,
    E3,
    LEAD2,
    LOWER,
    NEWLINE,
    PUNCT,
    SECOND_INDIC,
    SECOND_THAI,
    SPACE,
    UPPER,
    leads,
    non_ascii_counts,
)

__all__ = ["piece_counts"]

_Mask: TypeAlias = npt.NDArray[np.bool_]
_TABLE = CODES
_NEWLINE_ROUNDS = 3  # newline runs longer than 2 * this are counted by `bytes.count` instead
_count = np.count_nonzero


def _runs(mask: _Mask) -> int:
    """Runs of set elements in `mask` (each counted at its last element; `mask` not empty)."""
    return int(_count(mask[:-1] > mask[1:])) + int(mask[-1])


def piece_counts(raw: bytes, ascii_only: bool) -> tuple[int, ...]:
    """`TextCounts` fields of `raw` (at least 2 bytes), in order; ASCII text stops after 10.

    The same counts as `counting._piece`, field by field.
    """
    codes = np.frombuffer(raw.translate(_TABLE), dtype=np.uint8)
    letter = (codes | 2) == UPPER  # lower (1) or upper (3)
    upper = codes == UPPER
    digit = codes == DIGIT
    punct = codes == PUNCT
    blank = (codes | 2) == (SPACE | 2)  # space (8) or tab (10)
    uppers = digits = digit_runs = spaced = blanks = 0
    if upper.any():
        uppers = int(_count(upper))
    humps = int(_count((codes[:-1] == LOWER) & upper[1:])) if uppers else 0
    if digit.any():
        digits = int(_count(digit))
        digit_runs = _runs(digit)
        spaced = int(_count((codes[:-1] == SPACE) & digit[1:]))  # a space, not a tab
    puncts = int(_count(punct))
    pair = blank[:-1] & blank[1:]
    if pair.any():
        blanks = _runs(pair) - (raw[-1] in b" \t" and raw[-2] in b" \t")  # a blank run at the end
    counts = (
        _runs(letter),
        uppers,
        humps,
        digit_runs,
        spaced,
        digits,
        puncts,
        _runs(punct) if puncts else 0,
        _newline_runs(codes == NEWLINE, raw),
        blanks,
    )
    if ascii_only:
        return counts
    return counts + _non_ascii(codes, raw)


def _newline_runs(newline: _Mask, raw: bytes) -> int:
    """Sum of ceil(k / 2) over newline runs of length k: runs of >= 1, + runs of >= 3, ..."""
    total = 0
    longer = newline  # newlines starting 1, 3, 5, ... newlines in a row
    for _ in range(_NEWLINE_ROUNDS):
        total += _runs(longer)
        two = longer[:-1] & longer[1:]
        longer = two[:-1] & two[1:]
        if len(longer) == 0 or not longer.any():
            return total
    return raw.count(b"\n") - raw.count(b"\n\n")  # very long runs: two byte scans instead


def _non_ascii(codes: npt.NDArray[np.uint8], raw: bytes) -> tuple[int, ...]:
    """The non-ASCII classes (`classes.leads`), the two-byte runs and the script refinements."""
    lead = leads(raw)
    two_runs = e3_punct = indic = thai = 0
    if lead[4]:  # two-byte characters: a run ends where the next character (2 on) is not one
        lead2 = codes == LEAD2
        two_runs = int(_count(lead2[:-2] > lead2[2:])) + int(_count(lead2[-2:]))
    if lead[1]:  # E3 80: U+3000-303F, ideographic comma, full stop, brackets
        e3_punct = int(_count((codes[:-1] == E3) & (codes[1:] == BYTE_80)))
    if lead[7]:  # E0, then its second byte
        e0 = codes[:-1] == E0
        second = codes[1:]
        indic = int(_count(e0 & (second == SECOND_INDIC)))
        thai = int(_count(e0 & (second == SECOND_THAI)))
    return non_ascii_counts(lead, two_runs, e3_punct, indic, thai)
