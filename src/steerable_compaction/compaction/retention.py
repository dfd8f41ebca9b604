"""The retention check: salient facts of a span that its summary lacks, kept beside it.

A summarizer is lossy. After each summary the engine reads the span it replaces (each message as the
record holds it, so a fold that came first hides nothing), finds the *atoms* there (identifiers,
handles and e-mail addresses, paths, URLs, numbers of three digits or more, error and exception
names, quoted strings, and `key: value` / `key = value` facts) in user, tool and assistant messages
(the agent's findings: values it stated, its conclusions and decisions), drops those the summary
already holds, and keeps the most salient under `RETAINED_HEADING`, each as the clause it was stated
in with a `[history seq N]` reference to the original, within a token budget. No LLM is called: the
same span and summary always give the same block.

Salience is generic: an error name or a stated fact beats a bare number; a statement (a clause
with words around its value) beats a data row; source code is worth little (it can be read
again from its file; comments are prose and count in full), and a clause dense with brackets,
quotes and operators (minified code, escaped JSON) is not a statement; a clause whose shape
repeats (log lines, table rows, a file's function signatures) is worth little; the user's words
count more than tool output, the agent's own conclusions in between (a user message that is
mostly code or a listing is tool output); newer beats older.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..messages import Message
from . import atoms
from .atoms import KIND_WEIGHT, MESSAGE_CHARS, AtomKind, Read, best_atom, speaker_of, stated
from .provenance import history_ref
from .regions import is_summary

__all__ = [
    "MESSAGE_CHARS",
    "RETAINED_HEADING",
    "Atom",
    "AtomKind",
    "Retention",
    "RetentionIndex",
    "carried_block",
    "focus_words",
    "retention_check",
]

RETAINED_HEADING = "## Retained facts"
"""The one heading the retained block sits under (never translated, never varied)."""

_ROLE_WEIGHT = {"user": 1.5, "summary": 1.2, "agent": 1.2, "tool": 1.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class Atom:
    """One salient value the summary lacks: the clause that states it and where it came from."""

    value: str
    kind: AtomKind
    clause: str
    seq: int | None
    score: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """What the check found: `block` is appended to the summary ('' when nothing is kept)."""

    found: int
    kept: tuple[Atom, ...]
    block: str

    @property
    def dropped(self) -> int:
        """Atoms found missing but left out for the budget."""
        return self.found - len(self.kept)


class RetentionIndex:
    """Each message's clauses and atoms, read once and reused by every later check.

    Keyed by record seq (a message keeps its seq in the projection, and the record's original
    stays at it), so a summary or a kept message in the next span is not read again. Holds
    the newest `capacity` messages read.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._read: dict[int, tuple[Message, Read]] = {}

    def __len__(self) -> int:
        return len(self._read)

    def clauses(self, seq: int, message: Message, speaker: str) -> Read:
        """The clauses of `message` at record `seq`, read now or taken from the index."""
        held = self._read.get(seq)
        if held is not None and held[0] is message:
            return held[1]
        read = atoms.message_clauses(message, speaker)
        self._read[seq] = (message, read)
        if len(self._read) > self.capacity:
            del self._read[next(iter(self._read))]  # the oldest read
        return read


def _clauses(
    messages: Sequence[Message],
    span: tuple[int, int],
    skip: frozenset[int],
    seqs: Sequence[int] | None = None,
    index: RetentionIndex | None = None,
) -> list[tuple[int, Read]]:
    """Every clause of the user, tool and assistant messages of `messages[span]` (not `skip`).

    Grouped by the index of their message; read through `index` when there is one (with `seqs`).
    """
    out: list[tuple[int, Read]] = []
    for i in range(*span):
        message = messages[i]
        speaker = None if i in skip else speaker_of(message)
        if speaker is None:
            continue
        if index is not None and seqs is not None:
            read = index.clauses(seqs[i], message, speaker)
        else:
            read = atoms.message_clauses(message, speaker)
        out.append((i, read))  # grouped: a flat list would allocate a pair per clause
    return out


_FOCUS_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}|[\u3040-\u30ff\u4e00-\u9fff]{2,}")
_FOCUS_STOP = frozenset(
    "about also anything keep keeping everything from have into just more most only please "
    "should some that their them then there these they this those what when where which "
    "while with would your".split()
)
_FOCUS_BOOST = 2.0


def focus_words(focus: str | None) -> frozenset[str]:
    """The words of a steered compaction's `focus` that mark a clause as being about it."""
    if not focus:
        return frozenset()
    return frozenset(w.lower() for w in _FOCUS_WORD.findall(focus) if w.lower() not in _FOCUS_STOP)


def _candidates(
    clauses: Sequence[tuple[int, Read]],
    span: tuple[int, int],
    summary: str,
    seqs: Sequence[int] | None,
    focus: frozenset[str] = frozenset(),
) -> list[Atom]:
    """The stated facts the summary lacks, one per clause (its best atom), best first.

    Source code (read it again from its file), data rows and repeated shapes (logs, tables,
    signatures) are not facts someone stated: they are left to the history tools. The facts
    an earlier summary carries were judged when first kept: their shapes are not held
    against them (a retained block is a list of statements, many in one template).
    """
    start, end = span
    shapes: Counter[str] = Counter()
    for _, (read_shapes, _) in clauses:
        shapes.update(read_shapes)
    span_length = max(end - start - 1, 1)
    found: dict[str, Atom] = {}
    held: dict[str, bool] = {}  # each value matched against the summary once
    for index, clause in ((i, clause) for i, (_, prose) in clauses for clause in prose):
        # The cheap tests first: most lines of tool output are code (not here at all), repeat
        # a shape or are no prose, and finding atoms is the costly part.
        if (
            shapes[clause.shape] >= 3 and (clause.origin is None or clause.speaker != "summary")
        ) or not clause.statement:
            continue
        lacking = []
        for atom in clause.atoms:
            missing = held.get(atom[1])
            if missing is None:
                missing = held[atom[1]] = atom[1] not in summary
            if missing:
                lacking.append(atom)
        if not lacking:
            continue
        base = _ROLE_WEIGHT[clause.speaker] * (0.7 + 0.3 * (index - start) / span_length)
        kind, value, at = best_atom(lacking)
        score = base * (KIND_WEIGHT[kind] + 0.2 * (len({a[1] for a in lacking}) - 1))
        if focus and any(word in clause.text.lower() for word in focus):
            score *= _FOCUS_BOOST  # the host asked this compaction to keep this subject
        text = stated(clause.text, at, len(value))
        seq = clause.origin if clause.origin is not None else None
        if seq is None and seqs is not None:
            seq = seqs[index]
        # One clause per value: a fact restated (by a summary, a later message) is kept once,
        # where it scores best.
        current = found.get(value)
        if current is None or score > current.score:
            found[value] = Atom(value=value, kind=kind, clause=text, seq=seq, score=score)
    return sorted(found.values(), key=lambda a: (-a.score, a.clause))


def carried_block(message: Message) -> str:
    """The retained block an earlier summary `message` carries ('' for any other message)."""
    if not is_summary(message):
        return ""
    text = message.text
    at = text.rfind(RETAINED_HEADING)  # the engine appends the block last
    if at < 0:
        return ""
    end = text.find("</compacted-summary>", at)
    return text[at : end if end >= 0 else len(text)].rstrip()


def retention_check(
    messages: Sequence[Message],
    span: tuple[int, int],
    summary: str,
    *,
    budget_tokens: int,
    estimate_text: Callable[[str], int],
    seqs: Sequence[int] | None = None,
    skip: frozenset[int] = frozenset(),
    focus: str | None = None,
    index: RetentionIndex | None = None,
) -> Retention:
    """The atoms of `messages[span]` that `summary` lacks, the most salient within the budget.

    `seqs` gives each message's record seq (for the `[history seq N]` references); `skip` are
    indices kept verbatim anyway. `budget_tokens` bounds the block, heading included. A
    steered compaction's `focus` doubles the salience of clauses that name its words. With
    `index` (and `seqs`), each message is read once across checks.
    """
    clauses = _clauses(messages, span, skip, seqs, index)
    ranked = _candidates(clauses, span, summary, seqs, focus_words(focus))
    heading = f"{RETAINED_HEADING}\n"
    used = estimate_text(heading)
    kept: list[Atom] = []
    lines: list[str] = []
    for atom in ranked:
        line = f"- {atom.clause} {history_ref(atom.seq)}".rstrip()
        cost = estimate_text(line + "\n")
        if used + cost > budget_tokens:
            continue
        used += cost
        kept.append(atom)
        lines.append(line)
    block = heading + "\n".join(lines) if lines else ""
    return Retention(found=len(ranked), kept=tuple(kept), block=block)
