"""Reading text for stated facts: clauses, their shapes and their atoms.

The retention check (`retention`) and the spill excerpt (`salient_lines`) read text the same
way. A message splits into clauses (lines, then sentences); code is told apart from prose
(`_code_line`); a clause's *shape* abstracts its names and numbers, so the lines of one template
share it; a clause's *atoms* are the values it states: identifiers, handles and e-mail
addresses, paths, URLs, numbers of three digits or more, error and exception names, quoted
strings, and `key: value` / `key = value` facts. Pure functions of the text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal, TypeAlias

from ..messages import Message
from .provenance import HISTORY_REF
from .regions import is_summary

__all__ = [
    "KIND_WEIGHT",
    "MESSAGE_CHARS",
    "SALIENT_SCAN_CHARS",
    "AtomKind",
    "Clause",
    "Read",
    "best_atom",
    "message_clauses",
    "salient_lines",
    "speaker_of",
    "stated",
]

AtomKind: TypeAlias = Literal["error", "fact", "url", "quoted", "path", "number", "identifier"]

KIND_WEIGHT: dict[AtomKind, float] = {
    "error": 3.0,
    "fact": 2.5,
    "url": 2.0,
    "quoted": 1.5,
    "path": 1.5,
    "number": 1.5,
    "identifier": 1.0,
}


def best_atom(atoms: Sequence[tuple[AtomKind, str, int]]) -> tuple[AtomKind, str, int]:
    """The atom that stands for its clause: the heaviest kind, and of equal weights the later.

    A statement names its subject before its value ("ops-1 note: the flag is ff_nimbus_480",
    "the config src/app.yaml sets the timeout to 4500"), so of values of one weight (two of
    one kind, or a path, a quoted string and a number) the last one said is the value.
    """
    return max(atoms, key=lambda a: (KIND_WEIGHT[a[0]], a[2]))


_URL = re.compile(r"https?://[^\s<>()\"'`]+[^\s<>()\"'`.,;:!?]")
_PATH = re.compile(r"(?<![\w/.:-])(?:[~.]?/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b")
_ERROR = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Fault|Failure)\b")
_QUOTED = re.compile(r"\"([^\"\n]{3,80})\"|'([^'\n]{3,80})'|`([^`\n]{3,80})`")
_NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,._:-]*\d)?(?![\w])")
_IDENT = re.compile(
    r"\b(?=[A-Za-z0-9_]*[A-Za-z])(?=[A-Za-z0-9_]*[0-9_])[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+\b"
)
_PART = r"[A-Za-z0-9_](?:[\w-]*\w)?"  # a name part: no hyphen at either end
# A handle (`@ana`, `@org/pkg`, `@raven.quartz`), not a doc tag, a decorator or a CSS at-rule.
_HANDLE = re.compile(
    r"(?<![\w.@])@(?!(?:param|returns?|throws|type|typedef|deprecated|see|example|since|"
    r"author|link|override|property|staticmethod|classmethod|dataclass|media|import|keyframes|"
    rf"font-face|supports)\b){_PART}(?:[./]{_PART})*"
)
_EMAIL = re.compile(rf"(?<![\w.+-])[\w.+-]+@{_PART}(?:\.{_PART})*\.[A-Za-z]{{2,}}(?![\w-])")
_DOTTED = re.compile(r"[A-Za-z_][\w-]+(?:\.[A-Za-z_][\w-]+)+")  # hosts, modules, file names
_SENTENCE_BREAK = re.compile(r"[a-z]+\.[A-Z][a-z]+")  # "green.Now": a missing space, no name
# A colon between two digits is a clock time or a ratio (`09:42:33`, `16:9`), not `key: value`,
# unless the digits before it end a name (a host and its port).
_SEPARATOR = re.compile(
    r"(?<!\d):|:(?!\d)"
    # digits ending a name (`redis-2:6379`, `node12:9000`; not an ISO time's `T09:`)
    r"|(?<=[A-SU-Za-z_-]\d):|(?<=[A-SU-Za-z_-]\d\d):|(?<=[A-SU-Za-z_-]\d{3}):"
    r"|[=\uff1a]|\b(?:is|are|was|equals)\b|为|是|は"
)
_VALUE = re.compile(r"\s*([^\s,;\u3002\u3001\uff0c\uff1b]{1,60})")
_CLAUSES = re.compile(r"(?<=[.;!?])\s+|(?<=[\u3002\uff01\uff1f])")
_CLAUSE_END = re.compile(r"[.;!?]\s|[\u3002\uff01\uff1f]")  # where `_CLAUSES` splits, found fast
# The same for ASCII lines, where the CJK alternatives cannot match: 2-3x faster without them.
_ASCII_CLAUSES = re.compile(r"(?<=[.;!?])\s+")
_ASCII_CLAUSE_END = re.compile(r"[.;!?]\s")
_WORD = re.compile(  # a word of prose (`on-call` is one), or a CJK character
    r"(?<!\S)[A-Za-z]{2,}(?:-[A-Za-z]{2,})*[.,;:!?]?(?!\S)|[\u3040-\u30ff\u4e00-\u9fff]"
)
_BULLET = re.compile(r"^(?:[-*]\s+)+")
_DIGITS = re.compile(r"\d")
_CODEWORD = re.compile(r"[A-Z][A-Z0-9]{5,}")  # key ids, codes: AKVDHHYVWEPX (see `_is_code`)
_VOWELS = re.compile(r"[AEIOU]")
_CONSONANTS = re.compile(r"[B-DF-HJ-NP-TV-XZ]{6}")  # six in a row (Y a vowel): no word has it
_NAMES = re.compile(r"[A-Za-z_]+|[\u3040-\u30ff\u4e00-\u9fff]+")
_CODE = re.compile(
    r"^(?:\s{4,}|\t)|^(?:def|class|import|from|return|if|elif|else|for|while|try|except|with|"
    r"const|let|var|function|func|fn|pub|public|private|static|async|await)\b|[{};:,(]\s*$"
    r"|^\s*@[\w.]+(?:\(.*\))?\s*$"  # a decorator line
)
_CODE_START = re.compile(  # `_CODE`'s alternatives anchored at the start, for `match`
    r"(?:\s{4,}|\t)|(?:def|class|import|from|return|if|elif|else|for|while|try|except|with|"
    r"const|let|var|function|func|fn|pub|public|private|static|async|await)\b"
    r"|\s*@[\w.]+(?:\(.*\))?\s*$"
)
_CODE_END = frozenset("{};:,(")  # `_CODE`'s last alternative: one of these, then blanks only


def _code_line(line: str) -> bool:
    """`_CODE.search(line)`, without trying the anchored alternatives at every position."""
    if _CODE_START.match(line):
        return True
    end = line.rstrip()
    return bool(end) and end[-1] in _CODE_END


_LINE_NUMBER = re.compile(r"^\s*\d+(?:\t| {2}|[:|\u2192])")  # `cat -n`, `grep -n`, editors
_LISTING_NUMBER = re.compile(r"^\s*\d+(?:\t|[|\u2192])")  # surely a line number: not a value
_ESCAPED_NEWLINE = re.compile(r"(?:\\r)?\\n")  # `\r\n` or `\n` written out in a JSON string
_SYMBOLS = re.compile(r"[{}\[\]()<>;=|&\\\"`$]")
_DENSE = 0.12  # more of these per character than this: code or escaped data, not a statement
_CLAUSE_CHARS = 200
# A log record's lead: a timestamp (ISO 8601, or a clock time after a date), then a level that
# says nothing about the fact (a warning or an error keeps its level). Kept clauses drop it, so
# a small block holds the statement, not the log's boilerplate; the reference leads back to it.
_LOG_PREFIX = re.compile(
    r"\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+"
    r"(?:(?:INFO|DEBUG|TRACE|NOTICE)\b:?\s*)?"
)


def _clip(clause: str, at: int, length: int) -> str:
    """`clause` cut to `_CLAUSE_CHARS` around `[at, at + length)`."""
    clause = clause.strip()
    if len(clause) <= _CLAUSE_CHARS:
        return clause
    start = max(0, min(at - _CLAUSE_CHARS // 3, len(clause) - _CLAUSE_CHARS))
    text = clause[start : start + _CLAUSE_CHARS].strip()
    return ("…" if start else "") + text + ("…" if start + _CLAUSE_CHARS < len(clause) else "")


def stated(clause: str, at: int, length: int) -> str:
    """`clause` as kept: without a log record's lead (`_LOG_PREFIX`), cut around its value."""
    lead = _LOG_PREFIX.match(clause)
    cut = lead.end() if lead is not None and lead.end() <= at else 0
    return _clip(clause[cut:], at - cut, length)


def _atoms_in(clause: str) -> list[tuple[AtomKind, str, int]]:
    """Every atom of `clause`: (kind, value, position)."""
    found: list[tuple[AtomKind, str, int]] = []
    for m in _ERROR.finditer(clause):
        found.append(("error", m.group(0), m.start()))
    for m in _URL.finditer(clause):
        found.append(("url", m.group(0), m.start()))
    for m in _PATH.finditer(clause):
        found.append(("path", m.group(0), m.start()))
    for m in _QUOTED.finditer(clause):
        found.append(("quoted", next(g for g in m.groups() if g), m.start()))
    for sep in _SEPARATOR.finditer(clause):  # a value stated after `:`, `=`, "is", 是, は ...
        stated = _VALUE.match(clause, sep.end())
        if stated is None:
            continue
        value = stated.group(1).rstrip(".")
        if _DIGITS.search(value) or _IDENT.fullmatch(value) or _is_code(value) or _named(value):
            found.append(("fact", value, stated.start(1)))
    for m in _NUMBER.finditer(clause):
        if len(_DIGITS.findall(m.group(0))) >= 3:
            found.append(("number", m.group(0), m.start()))
    for pattern in (_IDENT, _EMAIL, _HANDLE):
        for m in pattern.finditer(clause):
            found.append(("identifier", m.group(0), m.start()))
    return found


def _named(value: str) -> bool:
    """Whether a stated `value` is a handle, an e-mail address or a dotted name (`db.internal`).

    Each part of a dotted name has two characters or more, so "e.g." is none, and two words
    run together at a missing space ("green.Now") are none either.
    """
    if _SENTENCE_BREAK.fullmatch(value):
        return False
    return any(p.fullmatch(value) for p in (_HANDLE, _EMAIL, _DOTTED))


def _is_code(value: str) -> bool:
    """Whether `value` is a code in capitals (a key id), not a word in capitals (`WARNING`).

    Words keep about two vowels in five and never six consonants in a row; random capitals
    (`AKVDHHYVWEPX`, `AKVGQJHRUEBP`) have far fewer vowels, or such a run.
    """
    if _CODEWORD.fullmatch(value) is None:
        return False
    return len(_VOWELS.findall(value)) < len(value) / 4 or _CONSONANTS.search(value) is not None


# A byte table: `bytes.translate` is several times faster than `str.translate` with a mapping.
_ASCII_SHAPE = bytes.maketrans(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_", b"#" * 10 + b"a" * 53
)
_ASCII_NAMES = re.compile(b"a+")


def _shape(clause: str) -> str:
    """`clause` with every number and name abstracted: lines of one template share it."""
    if clause.isascii():  # the same, by one byte map and one substitution
        return _ASCII_NAMES.sub(b"a", clause.encode().translate(_ASCII_SHAPE)).decode()
    return _NAMES.sub("a", _DIGITS.sub("#", clause))


def _shapes(clauses: list[str]) -> list[str]:
    """`_shape` of each clause, by one substitution for them all (one each cost 3x more).

    Joined by newlines, which neither substitution touches, so no run crosses two clauses; a
    clause holding a newline itself (a JSON line unquoted) has its shape made alone.
    """
    joined = "\n".join(clauses)
    if joined.isascii():
        made = _ASCII_NAMES.sub(b"a", joined.encode().translate(_ASCII_SHAPE)).decode()
    else:
        made = _NAMES.sub("a", _DIGITS.sub("#", joined))
    shapes = made.split("\n")
    if len(shapes) != len(clauses):
        return [_shape(clause) for clause in clauses]
    return shapes


def speaker_of(message: Message) -> str | None:
    """Who states `message`'s facts: "user", "tool", "agent" or "summary" (`None`: system).

    A user message that is mostly output (pasted or relayed, `_is_output`) is read as tool
    output; system text stays verbatim anyway.
    """
    if message.role == "tool":
        return "tool"
    if message.role == "user":
        if is_summary(message):
            return "summary"
        return "tool" if _is_output(message.text) else "user"
    if message.role == "assistant":
        return "agent"  # its findings: values it stated, conclusions, decisions
    return None  # system text stays verbatim anyway


_OUTPUT_MIN_LINES = 4


def _is_output(text: str) -> bool:
    """Whether a user message is mostly tool output: a listing, code or a log pasted or relayed.

    Hosts that send observations as user messages (SWE-agent style), and users who paste a
    file, fill a user message with lines that are code (by the rules tool output is read with)
    or numbered listing lines; when at least half of its lines are, it is read as tool output,
    so its code is not taken for the user's statements.
    """
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) < _OUTPUT_MIN_LINES:
        return False
    code = sum(
        1
        for line in lines
        if _LISTING_NUMBER.match(line) or _CODE.search(_LINE_NUMBER.sub("", line, count=1))
    )
    return code * 2 >= len(lines)


def _lines(text: str) -> Iterable[str]:
    """The lines of `text`; a line holding escaped newlines (a JSON string) is split at them."""
    if "\\n" not in text:
        return text.split("\n")  # most texts: no line to split further
    return _split_lines(text)


def _split_lines(text: str) -> Iterator[str]:
    for line in text.split("\n"):
        if line.count("\\n") >= 2:
            yield from _ESCAPED_NEWLINE.split(line)
        else:
            yield line


_JSON_ITEM = re.compile(r'^\s*(?:"[^"\\]{1,60}"\s*:\s*)?("(?:[^"\\]|\\.)*")\s*,?\s*$')


def _unquoted(line: str) -> str:
    """A line of a JSON document (`"text",` or `"key": "text"`) as the text it holds.

    A summarizer that answers in JSON states its facts inside string literals; read as they
    are, the quotes and escapes make every fact a new clause beside the one it restates.
    """
    found = _JSON_ITEM.match(line)
    if found is None:
        return line
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return line
    return value if isinstance(value, str) else line


class Clause:
    """One clause of a message, read once: what it says and what the filters need of it.

    Its shape is read at once (every clause counts towards the span's shapes); whether it is
    a statement, and its atoms, the first time a check asks (most clauses are filtered out
    before).
    """

    __slots__ = ("_atoms", "_statement", "origin", "shape", "speaker", "text")

    def __init__(self, speaker: str, text: str, origin: int | None, shape: str) -> None:
        self.speaker = speaker
        self.text = text
        self.origin = origin  # the seq a reference carried from an earlier summary names
        self.shape = shape
        self._statement: bool | None = None
        self._atoms: list[tuple[AtomKind, str, int]] | None = None

    @property
    def statement(self) -> bool:
        """Whether it may state a fact: not code, some prose, not symbols everywhere."""
        if self._statement is None:
            text = self.text
            statement = len(_WORD.findall(text)) >= 4
            if statement and self.speaker == "tool" and len(text) >= 40:
                # minified code, escaped JSON: symbols everywhere, words in between
                statement = len(_SYMBOLS.findall(text)) <= _DENSE * len(text)
            self._statement = statement
        return self._statement

    @property
    def atoms(self) -> list[tuple[AtomKind, str, int]]:
        """Every atom of the clause: (kind, value, position)."""
        if self._atoms is None:
            self._atoms = _atoms_in(self.text)
        return self._atoms


MESSAGE_CHARS = 100_000
"""The most of one message the check reads: its first and last halves of this (the bound).

A giant tool output states its command and outcome at its ends; its middle is left to the
history tools, so one message costs the check at most this much."""


def _read_text(text: str) -> str:
    if len(text) <= MESSAGE_CHARS:
        return text
    half = MESSAGE_CHARS // 2
    return f"{text[:half]}\n{text[-half:]}"


Read: TypeAlias = tuple[list[str], list["Clause"]]
"""One message read: the shape of every clause, and the clauses that are not code.

Code is never a stated fact, but its shapes count: a line of prose repeating the template of
code lines is a data row too."""


def message_clauses(message: Message, speaker: str) -> Read:
    """Every clause of one user, tool or assistant `message` read as `speaker`."""
    texts: list[str] = []
    prose: list[tuple[int, int | None]] = []  # (clause number, origin) of the clauses not code
    tool = speaker == "tool"
    summary = speaker == "summary"
    text = message.text
    if summary and (end := text.rfind("</compacted-summary>")) >= 0:
        text = text[:end]  # the engine's closing note after it ("This summary replaces ...")
    # Every line passes here (a span holds thousands): each test is kept to what it needs.
    for line in _lines(_read_text(text)):
        if summary and line[:1] in (" ", '"'):
            line = _unquoted(line)
        stripped = line.strip()
        if len(stripped) < 4:
            continue  # no clause of four characters (the substitutions below only shorten)
        # Each substitution only where its pattern can match (a line number starts with a
        # digit, a bullet with - or *): most lines need none of them.
        numbered = stripped[:1].isdigit()
        code = False
        if tool:
            if numbered:
                code = _code_line(_LINE_NUMBER.sub("", line, count=1))
                line = _LISTING_NUMBER.sub("", line, count=1)
            else:  # `_code_line(line)`, inline
                code = _CODE_START.match(line) is not None or stripped[-1] in _CODE_END
        read = line
        origin = None
        if "[history seq " in line:
            refs = HISTORY_REF.findall(line)
            origin = int(refs[0][0]) if refs else None
            line = HISTORY_REF.sub("", line)
        if line[:1] in ("-", "*"):
            line = _BULLET.sub("", line)
        line = stripped if line is read and not numbered else line.strip()
        # A clause ends only at . ; ! ? and a blank (or CJK punctuation): most lines have one
        # clause, and the split (a look-behind at every position) costs 3x the search for one.
        if line.isascii():
            ends, splits = _ASCII_CLAUSE_END, _ASCII_CLAUSES
            whole = not ("." in line or ";" in line or "!" in line or "?" in line)
        else:
            ends, splits, whole = _CLAUSE_END, _CLAUSES, False
        if not whole:
            whole = ends.search(line) is None
        for clause in (line,) if whole else splits.split(line):
            clause = clause.strip().rstrip(";,\uff1b\uff0c").rstrip()  # a separator, no content
            if len(clause) >= 4 and (
                clause[0] != "<" or not clause.startswith(("<compacted-summary>", "</compacted"))
            ):
                if not code:  # code is only counted (a clause object each costs)
                    prose.append((len(texts), origin))
                texts.append(clause)
    shapes = _shapes(texts)
    return shapes, [Clause(speaker, texts[i], origin, shapes[i]) for i, origin in prose]


SALIENT_SCAN_CHARS = 2_000_000
"""The most of a text `salient_lines` reads: its first and last halves of this (the bound)."""


def salient_lines(text: str, max_chars: int) -> list[tuple[int, str]]:
    """The lines of `text` that state facts, the most salient within `max_chars`, in text order.

    Each is `(line number, the line stripped)`, numbered from 1. The same salience as the
    retention check, read line by line: code, data rows and lines whose shape repeats three
    times or more (a log's template, a table) are left out, and so is a line whose only atoms
    are bare numbers (a count or a measurement no name is stated for); an error name or a
    stated value ranks first. For the middle of a tool output too large to show: what a
    reader skimming it would stop at. Each line is kept as the retention block keeps a
    clause: without a log record's timestamp and plain level, a line longer than
    `_CLAUSE_CHARS` cut around its value; `max_chars` counts each line's text plus 12
    characters for its number and layout.
    """
    if max_chars <= 0 or not text:
        return []
    lines = text.split("\n")
    if len(text) > SALIENT_SCAN_CHARS:  # read the ends; the line numbers stay those of `text`
        half = SALIENT_SCAN_CHARS // 2
        head = text[:half].count("\n")
        tail = len(lines) - text[-half:].count("\n")  # the lines wholly in the last half
        numbered = [*enumerate(lines[:head], 1), *enumerate(lines[tail:], tail + 1)]
    else:
        numbered = list(enumerate(lines, 1))
    stripped = [(n, line.strip()) for n, line in numbered]
    shapes = _shapes([line for _, line in stripped])
    counts = Counter(shapes)
    ranked: list[tuple[float, int, str]] = []
    for (n, line), (_, raw), shape in zip(stripped, numbered, shapes, strict=True):
        if len(line) < 4 or counts[shape] >= 3 or _code_line(_LINE_NUMBER.sub("", raw, count=1)):
            continue  # code is read as the retention check reads it: indented, numbered or not
        clause = Clause("tool", line, None, shape)
        atoms = clause.atoms if clause.statement else []
        if not atoms:
            continue
        kinds = {atom[0] for atom in atoms}
        if "number" in kinds and kinds <= {"number", "identifier"}:
            continue  # a count or a measurement with no name said for it: a data row
        kind, value, at = best_atom(atoms)
        score = KIND_WEIGHT[kind] + 0.2 * (len({a[1] for a in atoms}) - 1)
        ranked.append((score, n, stated(line, at, len(value))))
    ranked.sort(key=lambda item: (-item[0], item[1]))
    chosen: list[tuple[int, str]] = []
    used = 0
    for _, n, line in ranked:
        cost = len(line) + 12
        if used + cost > max_chars:
            continue
        used += cost
        chosen.append((n, line))
    return sorted(chosen)
