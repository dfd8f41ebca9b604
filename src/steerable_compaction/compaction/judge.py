"""Judging a summarizer's answer by its content, whatever its layout or language. Pure.

A summary may come with any headings or none, in any language, as prose, a list or JSON: all of
them are accepted and written as they are. What is refused is an answer that cannot stand in
for the messages it would replace (`judge_summary`, then `content_shortfall`):

- no words at all, fewer than four ("Done."), or mostly markup (the empty code fences small
  models loop on);
- only a reasoning block (`<think>`, `<thinking>`, `<reasoning>`): the block is never part of a
  summary, and an answer that is nothing else has no summary in it;
- a loop that collapsing repeated paragraphs and lines does not cure (a summary written three
  times over is kept once);
- the instruction echoed back, in whole or in large part, with or without a preamble;
- a continuation of the transcript instead of a summary: it opens with a role label or a tool
  call;
- a refusal;
- headings (or JSON keys) with nothing under them;
- a summary that keeps clearly fewer of the span's distinctive values (paths, identifiers,
  numbers, error names, URLs) than the deterministic excerpt of the same span keeps at the
  same size (`content_shortfall`): an answer to the last message, say, or a summary of
  something else.

Cleaned before judging, not refused: the chat-template markers a local model leaked (the
opening of its own turn, and everything from its turn's end marker on, where it goes on to
write the next turn), and whatever surrounds a `<summary>` block (an `<analysis>` block, a
chatty line), of which only the block is kept.

Every refusal names its reason; the engine logs it and records it with the compaction.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..messages import Message

__all__ = [
    "CONTENT_FLOOR_CHARS",
    "CONTENT_MIN_VALUES",
    "CONTENT_RATIO",
    "Verdict",
    "content_shortfall",
    "distinctive_values",
    "judge_summary",
]

_WORD = re.compile(r"[^\W\d_]{2,}|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_MARKUP_SHARE = 0.4  # real summaries measured 0.83-0.93 letters and digits (eval and tests)
_LOOP_RATIO = 0.1  # zlib size / text size: prose and checkpoints 0.35-0.6, loops < 0.05, lists of
# near-identical lines (calls, paths) 0.14 and up
_LOOP_VOCABULARY = 5  # a word loop repeats a handful of words; a list repeats one among many

_REASONING = re.compile(
    r"<(think|thinking|reasoning|reflection)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE
)
# A closing tag that ends reasoning ends its line: "...the port.</think>\n## Summary", not a
# summary that mentions the tag ("strips </think> tags").
_CLOSE_AT_LINE_END = r"</(?:think|thinking|reasoning)>[ \t]*(?:\n|\Z)"
_LEADING_CLOSE = re.compile(r"\A.*?" + _CLOSE_AT_LINE_END, re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(
    r"^\s*(?:<\|?(?:im_start|start_of_turn|assistant)\|?>"
    r"|<(?:tool_call|function_call|tool_use|invoke)\b"
    r"|\[(?:tool|function)[ _](?:call|result)\b"
    r"|\{\s*\"(?:name|tool|function|tool_calls)\"\s*:)",
    re.IGNORECASE,
)
_FEW_VALUES = 2  # a refusal or a transcript turn names fewer; a summary that opens alike, more
_ROLE_LABEL = re.compile(
    r"^\s*(?:(?:user|assistant|human|ai|system|tool|model|bot)\s*:"
    r"|\[(?:user|assistant|system|tool)(?:\s[^\]]*)?\]"
    r"|<\|?(?:im_start|start_of_turn|assistant|user)\|?>"
    r"|<(?:tool_call|function_call|tool_use|invoke)\b"
    r"|\{\s*\"(?:name|tool|function|tool_calls)\"\s*:)",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"^\s*(?:i'?m sorry|i am sorry|sorry[,.!]|i apologi[sz]e|unfortunately,? i|as an ai\b"
    r"|i (?:can(?:'|no)t|can not|cannot|am unable to|'m unable to|won'?t|will not|must decline)"
    r"|抱歉|对不起|很抱歉|我无法|我不能|申し訳|すみません"
    r"|lo siento|je suis désolé|es tut mir leid)",
    re.IGNORECASE,
)
_REFUSAL_MAX_CHARS = 600
_MIN_WORDS = 4  # "Done.", "OK, continuing": an answer, not a summary
_KEY = re.compile(r"\"[^\"\n]{1,60}\"\s*:")
_HEADING_LINE = re.compile(r"^\s*(?:#{1,6}\s.*|\*\*[^*]+\*\*:?|[^\W\d_][^:\n]{0,40}:)\s*$")
_SHINGLE = 4
_ECHO_SHARE = 0.4  # of the answer's word 4-grams that come from the instruction
_ECHO_COVER = 0.6  # of the instruction's 4-grams found in the answer ...
_ECHO_COVER_SHARE = 0.25  # ... when they are at least this share of the answer

CONTENT_RATIO = 6
"""A summary keeping fewer than 1/6 of the values the excerpt keeps at its size is refused.

The excerpt is built to be dense in values (every path, every error line). Measured with
`benchmarks/judge_content.py` over `eval`'s tasks (seed 0) under the six simulated
summarizers: summaries kept a median of 0.89-1.01 of the excerpt's count, the lowest tenth
0.40-0.71, the lowest 0.18 (one terse summary of 88 kept 0.04); the unruly summarizer's
answers to the last message kept 0 of 6-10.
"""
CONTENT_MIN_VALUES = 6
"""The content check runs only when the excerpt keeps at least this many distinctive values."""
CONTENT_FLOOR_CHARS = 400
"""A shorter answer is compared with an excerpt of this many characters (the shortest useful)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """`text` to write (cleaned of reasoning and repeats), or `None` and the `reason` why not.

    `note` says what was cleaned from an accepted answer ('' when nothing was).
    """

    text: str | None
    reason: str | None = None
    note: str = ""


def _refused(reason: str) -> Verdict:
    return Verdict(text=None, reason=reason)


# A model's own turn opened by a chat template's marker that leaked into the text (local
# models run without their template applied), and the markers that end a turn.
_OWN_TURN = re.compile(
    r"\A\s*(?:<\|im_start\|>\s*assistant|<start_of_turn>\s*model"
    r"|<\|start_header_id\|>\s*assistant\s*<\|end_header_id\|>|<\|assistant\|>)[ \t]*\n?",
    re.IGNORECASE,
)
# A turn's end marker ends its line or comes before the next turn's opening ("...port
# 8443.<|im_end|>\n<|im_start|>user"), unlike a summary that mentions one ("strips <|im_end|>
# from the prompt").
_TURN_END = re.compile(
    r"(?:<\|im_end\|>|<end_of_turn>|<\|eot_id\|>|<\|end\|>|<\|endoftext\|>|</s>|<eos>)"
    r"(?=[ \t]*(?:\n|\Z|<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>))",
    re.IGNORECASE,
)
# The summary block of an answer laid out as `<analysis>...</analysis><summary>...</summary>`
# (or with a chatty line around it): an unclosed one runs to the end.
_SUMMARY_BLOCK = re.compile(
    r"^[ \t]*<summary>(.*?)(?:</summary>|\Z)", re.DOTALL | re.IGNORECASE | re.MULTILINE
)


def _without_template(text: str) -> tuple[str, bool]:
    """`text` without a leaked opening of its own turn and anything after its turn's end."""
    cut = _OWN_TURN.sub("", text, count=1)
    end = _TURN_END.search(cut)
    while end is not None and not cut[: end.start()].strip():  # an end marker before any text
        cut = cut[end.end() :]
        end = _TURN_END.search(cut)
    if end is not None:
        cut = cut[: end.start()]
    return cut, cut != text


def _summary_block(text: str) -> str | None:
    """The inside of `text`'s `<summary>` block when it has one with words, else None."""
    match = _SUMMARY_BLOCK.search(text)
    if match is None or not _WORD.search(match.group(1)):
        return None
    return match.group(1).strip()


def _without_reasoning(text: str) -> tuple[str, bool]:
    """`text` without reasoning blocks (an unclosed one runs to the end); whether any was cut."""
    cut = _REASONING.sub("", text)
    if cut == text and re.search(_CLOSE_AT_LINE_END, text, re.IGNORECASE):
        cut = _LEADING_CLOSE.sub("", text, count=1)  # a template that dropped the opening tag
    return cut.strip(), cut != text


def _collapse(text: str) -> str:
    """`text` with repeated paragraphs, then repeated lines, kept once each (first place)."""
    seen: set[str] = set()
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        key = " ".join(paragraph.split())
        if key and key not in seen:
            seen.add(key)
            paragraphs.append(paragraph.strip("\n"))
    return "\n\n".join(paragraphs)


def _dedupe_lines(text: str) -> str:
    seen: set[str] = set()
    out = []
    for line in text.split("\n"):
        key = " ".join(line.split())
        if key and key in seen:
            continue
        seen.add(key)
        out.append(line)
    return "\n".join(out)


_VALUE_TOKEN = re.compile(r"\S*[\d./_]\S*")  # paths, ids, numbers: a list of files is no loop
_LINE_MIN = 20  # shorter lines ("- (none)", headings) may repeat in a sound summary
_REPEAT_SHARE = 0.3  # of the text in lines that repeat an earlier line: a copy, not a summary


def _repeated_share(text: str) -> float:
    """The share of `text`'s characters in long lines that repeat an earlier line."""
    seen: set[str] = set()
    repeated = 0
    for line in text.split("\n"):
        key = " ".join(line.split())
        if len(key) < _LINE_MIN:
            continue
        if key in seen:
            repeated += len(line)
        seen.add(key)
    return repeated / max(len(text), 1)


def _loop(text: str) -> str | None:
    """Why `text` reads as a loop, or `None`."""
    data = text.encode("utf-8")
    if len(data) >= 256 and (ratio := len(zlib.compress(data, 9)) / len(data)) < _LOOP_RATIO:
        return f"the same text loops: it compresses to {ratio:.1%} of its size"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines:
        line, count = Counter(lines).most_common(1)[0]
        if count >= 4 and count * 2 >= len(lines):
            return f"{count} of its {len(lines)} lines read {line[:40]!r}"
    words = [w.lower() for w in _WORD.findall(_VALUE_TOKEN.sub(" ", text))]
    if len(words) >= 8 and len(set(words)) <= _LOOP_VOCABULARY:
        word, count = Counter(words).most_common(1)[0]
        if count * 2 >= len(words):
            return f"{count} of its {len(words)} words are {word!r}"
    return None


def _shingles(text: str) -> list[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return [tuple(words[i : i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1)]


def _echo(text: str, instruction: str) -> str | None:
    """Why `text` is the instruction echoed back, or `None`."""
    given = set(_shingles(instruction))
    said = _shingles(text)
    if not given or not said:
        return None
    echoed = sum(s in given for s in said)
    share = echoed / len(said)
    cover = len(given & set(said)) / len(given)
    if share >= _ECHO_SHARE or (cover >= _ECHO_COVER and share >= _ECHO_COVER_SHARE):
        return f"it echoes the instruction ({share:.0%} of it is the instruction's wording)"
    return None


def judge_summary(text: str, *, instruction: str = "") -> Verdict:
    """Whether a summarizer's answer `text` can be written as a summary (see the module doc).

    `instruction` is the instruction the request ended with (for the echo check). Pure.
    """
    if not text.strip():
        return _refused("it is empty")
    text, templated = _without_template(text)
    if not text.strip():
        return _refused("it is empty but for chat-template markers")
    notes = ["chat-template markers and what followed its turn were left out"] if templated else []
    body, reasoned = _without_reasoning(text)
    if reasoned:
        notes.append("a reasoning block was left out")
    if not body:
        return _refused("it holds only a reasoning block")
    block = _summary_block(body)
    if block is not None and block != body:
        body = block
        notes.append("only its <summary> block was kept")
    if not _WORD.search(body):
        return _refused("it has no words")
    visible = [c for c in body if not c.isspace()]
    content = sum(c.isalnum() for c in visible) / len(visible)
    if len(visible) >= 20 and content < _MARKUP_SHARE:
        return _refused(
            f"it is mostly markup (only {content:.0%} of its characters are letters or digits)"
        )
    if _loop(body) is not None or _repeated_share(body) >= _REPEAT_SHARE:
        cured = _collapse(body)
        if _loop(cured) is not None or _repeated_share(cured) >= _REPEAT_SHARE:
            cured = _dedupe_lines(cured)
        flaw = _loop(cured)
        if flaw is not None:
            return _refused(f"it repeats itself ({flaw})")
        body = cured
        notes.append("repeats were kept once")
    if instruction and (flaw := _echo(body, instruction)) is not None:
        return _refused(flaw)
    first = next(line for line in body.splitlines() if line.strip())
    # A summary may open like a turn ("User: Ana wants ...") or a refusal ("Unfortunately, I
    # could not fix test_x in tests/a.py"); one that names a few values is read as a summary,
    # and the content check judges what it keeps. A tool call is never a summary.
    few = len(_values_of(body)) < _FEW_VALUES
    if _TOOL_CALL.match(first) or (few and _ROLE_LABEL.match(first)):
        return _refused(
            f"it continues the transcript instead of summarizing it (it opens {first[:40]!r})"
        )
    if few and len(body) <= _REFUSAL_MAX_CHARS and _REFUSAL.match(body):
        return _refused(f"it is a refusal ({first[:60]!r})")
    under = [_KEY.sub(" ", line) for line in body.splitlines() if not _HEADING_LINE.match(line)]
    if not any(_WORD.search(line) for line in under):
        return _refused("it has headings (or keys) and nothing under them")
    words = len(_WORD.findall(body))
    if words < _MIN_WORDS:
        return _refused(f"it is too short to stand in for any messages ({words} words)")
    return Verdict(text=body, note="; ".join(notes))


_TOKEN = re.compile(r"[^\s\"'`()\[\]{}<>,;|=\u3000-\u303f\u3040-\u9fff\uff00-\uffef]+")
_ERROR_NAME = re.compile(r"[A-Z]\w*(?:Error|Exception|Fault|Failure)")
_DOTTED = re.compile(r"[A-Za-z_][\w-]*\.[A-Za-z_][\w-]*")
_ERROR_ENDINGS = ("Error", "Exception", "Fault", "Failure")


def _values_of(text: str) -> set[str]:
    out: set[str] = set()
    for raw in set(_TOKEN.findall(text)):  # a token repeated is judged once
        token = raw.strip(".:!?*#-")
        if len(token) < 3:
            continue
        if token.isalpha():  # a plain word: a value only as an error name
            if token.endswith(_ERROR_ENDINGS) and _ERROR_NAME.fullmatch(token):
                out.add(token)
            continue
        if (
            any(c.isdigit() for c in token)
            or "/" in token
            or "_" in token
            or _ERROR_NAME.fullmatch(token)
            or _DOTTED.search(token)
        ):
            out.add(token)
    return out


def _message_text(message: Message) -> str:
    calls = " ".join(f"{c.name} {c.arguments}" for c in message.tool_calls)
    return f"{message.text} {calls}" if calls else message.text


def distinctive_values(
    messages: Sequence[Message], span: tuple[int, int], *, known: str = ""
) -> set[str]:
    """The distinctive values stated in `messages[span]` (every speaker, tool calls included).

    Paths, URLs, identifiers, dotted names, error names and anything holding a digit, three
    characters or more; values also stated before the span or in `known` (the instruction) are
    not distinctive of it.
    """
    start, end = span
    found: set[str] = set()
    for message in messages[start:end]:
        found |= _values_of(_message_text(message))
    before: set[str] = _values_of(known)
    for message in messages[:start]:
        before |= _values_of(_message_text(message))
    return found - before


def content_shortfall(
    summary: str,
    values: set[str],
    excerpt: Callable[[int], str],
) -> str | None:
    """Why `summary` keeps clearly fewer of `values` than an excerpt of its size, or `None`.

    `excerpt(max_chars)` writes the deterministic excerpt of the same span. The check runs when
    that excerpt keeps at least `CONTENT_MIN_VALUES`; an answer shorter than
    `CONTENT_FLOOR_CHARS` is compared with an excerpt of that size.
    """
    if len(values) < CONTENT_MIN_VALUES:
        return None
    reference = excerpt(max(len(summary), CONTENT_FLOOR_CHARS))
    theirs = sum(v in reference for v in values)
    if theirs < CONTENT_MIN_VALUES:
        return None
    ours = sum(v in summary for v in values)
    if ours * CONTENT_RATIO < theirs:
        return (
            f"it keeps {ours} of the span's {len(values)} distinctive values, where the "
            f"deterministic excerpt of its size keeps {theirs}"
        )
    return None
