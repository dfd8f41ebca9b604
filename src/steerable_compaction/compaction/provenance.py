"""Provenance: the one format compaction uses to name the record seqs it stands for.

Fold markers, image pointers, summaries and retained facts carry `[history seq N]` or
`[history seq N-M]`: the record seqs of the originals, which the history tools read back
(`history_read` takes any seq named there). The record keeps every original byte.
"""

from __future__ import annotations

import re

__all__ = ["HISTORY_REF", "history_ref", "parse_history_refs"]

HISTORY_REF = re.compile(r"\[history seq (\d+)(?:-(\d+))?\]")
"""Matches one reference; group 1 is the first seq, group 2 the last (absent for one seq)."""


def history_ref(first: int | None, last: int | None = None) -> str:
    """`[history seq 120]`, or `[history seq 120-188]` for a range ('' without a seq)."""
    if first is None:
        return ""
    if last is None or last == first:
        return f"[history seq {first}]"
    return f"[history seq {min(first, last)}-{max(first, last)}]"


def parse_history_refs(text: str) -> list[tuple[int, int]]:
    """Every reference in `text`, as inclusive `(first, last)` seq ranges, in order."""
    out: list[tuple[int, int]] = []
    for match in HISTORY_REF.finditer(text):
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        out.append((min(first, last), max(first, last)))
    return out
