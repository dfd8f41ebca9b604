# ruff: noqa: RUF001  (Chinese headings use full-width punctuation on purpose)
"""Summarizer personalities: the same chosen lines, written the way different models write.

Real summarizers do not always follow the instruction's layout: they write paragraphs, answer in
another language, reply with JSON, write less than asked, or misbehave outright. Each
personality is such generic behaviour, applied to the lines `ExtractiveSummarizer` chose; none is
derived from what the engine accepts.

- `checkpoint`: the six Markdown sections the engine's instruction names (the default).
- `prose`: the same lines as paragraphs of sentences, no headings.
- `foreign`: the six sections with headings and glue text in Chinese (stated values stay as
  they were said).
- `json`: one JSON object, a key per section, a list of lines under each.
- `terse`: the checkpoint layout in a quarter of the output budget.
- `unruly`: a checkpoint after a reasoning block and a chatty preamble; and one request in three
  it misbehaves instead: echoes the instruction (with or without a preamble), continues the
  transcript (a role label and a tool call, or an answer to the last message), answers with
  only a reasoning block, or refuses. Which requests misbehave is a hash of the request, so the
  same session always gets the same answers, whatever ran before it.

`carried_lines` reads a carried summary back in any of these layouts (a model reads headings,
paragraphs and JSON alike).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from ..messages import Message

__all__ = [
    "PERSONALITIES",
    "carried_lines",
    "check_personality",
    "mischief",
    "render",
    "terse_budget",
]

PERSONALITIES: Final = ("checkpoint", "prose", "foreign", "json", "terse", "unruly")

_ZH_HEADINGS: Final = ("主要请求", "关键技术概念", "文件与代码", "错误与修复", "当前工作", "下一步")
_JSON_KEYS: Final = ("request", "context", "files", "errors", "progress", "next_step")
_PROSE_OPENERS: Final = (
    "The request:",
    "Important context:",
    "Files and code involved:",
    "Errors met along the way:",
    "Where the work stands:",
    "Next:",
)
_GOAL_MARKERS: Final = ("primary request", _ZH_HEADINGS[0], "request", "goal", "the request:")


def check_personality(name: str) -> str:
    """`name` if it is a personality, else `ValueError` naming the known ones."""
    if name not in PERSONALITIES:
        raise ValueError(f"unknown summarizer {name!r}; known: {', '.join(PERSONALITIES)}")
    return name


def terse_budget(budget: int) -> int:
    """The output budget a `terse` summarizer spends out of `budget`: a quarter of it."""
    return max(budget // 4, 32)


def _bare(line: str) -> str:
    return line[2:] if line.startswith("- ") else line


def render(personality: str, sections: Mapping[str, Sequence[str]], names: Sequence[str]) -> str:
    """The summary text of `sections` (bulleted lines per section, in `names` order)."""
    if personality in ("checkpoint", "terse", "unruly"):
        body = "\n".join(f"## {n}\n" + "\n".join(sections[n] or ["(none)"]) for n in names)
        if personality == "unruly":
            think = (
                "<think>\nI should keep the goal, the facts and where the work stands.\n</think>"
            )
            return f"{think}\n\nSure! Here is the summary of our conversation:\n\n{body}"
        return body
    if personality == "foreign":
        blocks = [
            f"## {zh}\n" + "\n".join(sections[n] or ["（无）"])
            for n, zh in zip(names, _ZH_HEADINGS, strict=True)
        ]
        return "以下是到目前为止的对话摘要。\n\n" + "\n\n".join(blocks)
    if personality == "json":
        document: dict[str, Any] = {
            key: [_bare(line) for line in sections[n]]
            for n, key in zip(names, _JSON_KEYS, strict=True)
        }
        return json.dumps(document, indent=2, ensure_ascii=False)
    if personality == "prose":
        paragraphs = []
        for n, opener in zip(names, _PROSE_OPENERS, strict=True):
            lines = [_bare(line).rstrip(".;") for line in sections[n]]
            if lines:
                paragraphs.append(f"{opener} " + "; ".join(lines) + ".")
        return "\n\n".join(paragraphs) or "Nothing of note happened in these messages."
    raise ValueError(check_personality(personality))


def _last_words(replay: Sequence[Message]) -> tuple[str, str]:
    """The newest assistant text of `replay` and the newest tool call as `name arguments`."""
    said, call = "", ""
    for message in reversed(replay):
        if message.role != "assistant":
            continue
        if not said and message.text.strip():
            said = message.text.strip().split("\n")[0]
        if not call and message.tool_calls:
            first = message.tool_calls[0]
            call = json.dumps({"name": first.name, "arguments": first.arguments})
        if said and call:
            break
    return said, call


def mischief(messages: Sequence[Message]) -> str | None:
    """What an `unruly` summarizer answers instead of a summary for this request, or `None`."""
    if not messages:
        return None
    digest = zlib.crc32("\x1f".join(m.text for m in messages[-6:]).encode("utf-8"))
    digest = zlib.crc32(str(len(messages)).encode(), digest)
    if digest % 3:
        return None
    instruction = messages[-1].text
    said, call = _last_words(messages[:-1])
    kind = digest // 3 % 6
    if kind == 0:
        return instruction
    if kind == 1:
        return f"Sure, here is the summary:\n\n{instruction}"
    if kind == 2:
        line = f"Assistant: {said or 'Let me continue.'}"
        return f"{line}\n<tool_call>{call}</tool_call>" if call else line
    if kind == 3:
        return f"{said or 'Done.'} I will keep going with the next file now."
    if kind == 4:
        return (
            "<think>\nThe summary needs a Primary Request, Key Technical Concepts, Files and "
            "Code, Errors and Fixes, Current Work and a Next Step. Let me go through the "
            "conversation and decide what belongs in each section.\n</think>"
        )
    return (
        "I'm sorry, but I can't help with writing the Primary Request and the other sections "
        "of this summary."
    )


_HEADING = re.compile(r"^(?:#{1,6}\s*(.+?)\s*#*|\*\*(.+?)\*\*:?)$")
_SENTENCES = re.compile(r"(?<=[.;。；])\s+")


def _json_lines(value: Any, key: str = "") -> Iterator[tuple[str, bool]]:
    goal = key.lower() in _GOAL_MARKERS
    if isinstance(value, str):
        if value.strip():
            yield value.strip(), goal
    elif isinstance(value, list):
        for item in value:
            yield from _json_lines(item, key)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _json_lines(item, str(k))
    elif value is not None:
        yield str(value), goal


def carried_lines(text: str, *, long_line: int = 320) -> list[tuple[str, bool]]:
    """The lines of a carried summary `text`, each with whether it states the goal.

    Headings (Markdown or bold) are dropped and name the section; a JSON object the text opens
    with is read for its values; a line that is no bullet (a paragraph), or one longer than
    `long_line` characters, is split into sentences.
    """
    start = len(text) - len(text.lstrip())
    if text[start : start + 1] == "{":
        try:
            value, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            value, end = None, start
        if isinstance(value, dict):
            rest = text[:start] + text[end:]
            return [*_json_lines(value), *carried_lines(rest, long_line=long_line)]
    out: list[tuple[str, bool]] = []
    goal = False
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        heading = _HEADING.match(line)
        if heading:
            name = (heading.group(1) or heading.group(2) or "").strip().lower()
            goal = name in _GOAL_MARKERS
            continue
        starts_goal = line.lower().startswith("the request:")
        # A bullet is one item; a paragraph (or an over-long line) is read sentence by sentence.
        bullet = line.startswith(("- ", "* "))
        pieces = _SENTENCES.split(line) if not bullet or len(line) > long_line else [line]
        for piece in pieces:
            body = _bare(piece.strip())
            if body:
                out.append((body, goal or starts_goal))
    return out
