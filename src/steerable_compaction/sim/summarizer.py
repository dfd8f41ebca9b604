"""A deterministic extractive summarizer that is lossy the way real summaries are.

It stands in for the LLM behind every arm's summary call, warm or cold, so arms differ only in
what they ask and when. It reads the request the way a model would: a warm replay (the session's
own messages, then the instruction) message by message, a cold request by parsing the flattened
transcript that peers put inside `<transcript>` tags. Images are read (simulated vision) when
their bytes are in the request; a text pointer is just text.

Every line is scored on generic features only, never on what will be asked:

- who said it: user lines (instructions, constraints) > carried-over summary lines and tool
  output > the agent's own narration, as LLM summaries weigh them;
- what it is: a *fact* (a sentence that carries a specific value) beats bare data (settings,
  numbers, log fields), which beats prose without specifics; ids, ports, paths and versions
  make a line more specific, and tool noise is full of them too;
- whether it reports an error or a decision;
- code, indentation and timestamped log lines are discounted, newer lines are preferred, and
  each further line from the same tool result is worth half the previous one.

It follows the engine's instructions as a model would: asked to focus on a subject (a steered
manual compaction), it weighs the lines naming it 2.5 times; asked for an incremental summary
(`INCREMENTAL_INSTRUCTION`), it reads only the messages after the last summary of the replay
(the earlier summaries stay, so it neither carries nor repeats them); asked to merge
(`MERGE_INSTRUCTION`), it reads only the summaries (the messages kept among them stay as they
are).

The best lines that fit the output budget are kept (clipped to `line_chars`) and laid out as its
`personality` writes (`personalities`): the engine's six checkpoint sections by default, or
prose, Chinese headings, JSON, a quarter of the budget, or an unruly model's answers. The budget
is what a writer would spend: most of the carried summary again (`carry`, 0.85) plus `1/ratio`
of the fresh material (16 by default; `eval --summary-ratio` varies it), at least `floor`, at
most the request's `max_output_tokens`. So a summary grows over a session until it hits the cap,
and from then on every new fact pushes an older one out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..compaction import (
    INCREMENTAL_INSTRUCTION,
    MERGE_INSTRUCTION,
    SECTIONS,
    base_instruction,
    instruction_focus,
)
from ..compaction.regions import is_goal_candidate
from ..messages import Message
from ..providers.base import CompletionRequest
from ..tokens import estimate_tokens
from .content import image_text
from .personalities import carried_lines, check_personality, mischief, render, terse_budget

__all__ = [
    "CODEX_HEAD",
    "LANGCHAIN_HEAD",
    "NAIVE_HEAD",
    "OPENHANDS_HEAD",
    "SUMMARY_MARKERS",
    "TRANSCRIPT_CLOSE",
    "TRANSCRIPT_OPEN",
    "ExtractiveSummarizer",
    "Unit",
    "flatten",
    "units_from_messages",
    "units_from_text",
]

TRANSCRIPT_OPEN = "<transcript>"
TRANSCRIPT_CLOSE = "</transcript>"
NAIVE_HEAD = "[Summary of the earlier conversation]"
OPENHANDS_HEAD = "[Condensed summary of earlier events]"
LANGCHAIN_HEAD = "Here is a summary of the conversation to date:"
CODEX_HEAD = "[Handoff summary from an earlier context window]"
SUMMARY_MARKERS: tuple[str, ...] = (
    "<compacted-summary>",  # the engine (R30)
    NAIVE_HEAD,
    OPENHANDS_HEAD,
    LANGCHAIN_HEAD,
    CODEX_HEAD,
)
"""How each arm's summary message starts: a later summary treats its lines as carried over."""
_ROLE_LINE = re.compile(r"^\[(system|user|assistant|tool)(?: [^\]]*)?\]$")
_ROLE_WEIGHT = {
    "goal": 10.0,
    "user": 2.5,
    "summary": 1.5,
    "image": 1.5,
    "assistant": 0.9,
    "tool": 1.0,
}
_SPECIFIC = re.compile(
    r"(?<![\w/])(?=[\w./:@-]*\d)[\w./:@-]{3,}"  # anything with a digit: ids, ports, versions
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"  # CONSTANT_NAMES
    r"|(?:[\w.-]+/)+[\w.-]+"  # paths
    r"|@?\b\w+(?:\.\w+)+\b|@\w+"  # dotted names, handles
)
_PROSE = re.compile(r"\b[A-Za-z]{2,}\b|[\u3040-\u30ff\u4e00-\u9fff]{2}")
_SALIENT = re.compile(
    r"(?i)\b(?:error|errors|failed|failure|exception|traceback|must|never|always|decided|"
    r"because|note|important|remember|fix|fixed|todo|warn)\b|错误|失败|注意|必须|备注|说明|"
    r"エラー|必ず|メモ|補足"
)
_CODE = re.compile(
    r"^(?:\s{4,}|\t)|^(?:def|class|import|from|return|if|for|while|try|except|with)\b|[{};]\s*$"
)
_DECAY = {"tool": 0.5, "assistant": 0.7, "image": 0.5}
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


@dataclass(frozen=True, slots=True)
class Unit:
    """One candidate line: its speaker (`user`, `assistant`, `tool`, `summary`, `image`, `goal`).

    `source` numbers the message it came from; `stub` marks lines of a folded, spilled or
    truncated result (a pointer and a clipped excerpt, not content a model would repeat).
    """

    role: str
    text: str
    source: int = 0
    stub: bool = False


_STUBS = (
    "[folded tool result: ",
    "[tool output spilled: ",
    "[image offloaded: ",
    "Old environment",
)


def _split(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def _summary_lines(text: str, source: int) -> list[Unit]:
    """Lines of a previous summary in any layout (`carried_lines`), without the arm's markers."""
    body = "\n".join(
        line
        for line in text.split("\n")
        if not line.strip().startswith((*SUMMARY_MARKERS, "</", "(This"))
    )
    return [Unit("goal" if goal else "summary", line, source) for line, goal in carried_lines(body)]


def _is_summary(text: str) -> bool:
    return text.lstrip().startswith(SUMMARY_MARKERS)


def units_from_messages(messages: Sequence[Message], *, goal: bool = True) -> list[Unit]:
    """Candidate lines of a warm replay; the first user message is the goal (if `goal`)."""
    out: list[Unit] = []
    goal_seen = not goal
    for source, message in enumerate(messages):
        if message.role == "system":
            continue
        text = message.text
        if message.role == "user" and _is_summary(text):
            out.extend(_summary_lines(text, source))
            continue
        lines = _split(text)
        stub = bool(lines) and lines[0].startswith(_STUBS)
        if not goal_seen and is_goal_candidate(message):
            goal_seen = True
            out.extend(Unit("goal" if i == 0 else "user", x, source) for i, x in enumerate(lines))
        else:
            out.extend(Unit(message.role, line, source, stub) for line in lines)
        for call in message.tool_calls:
            out.append(Unit("assistant", f"called {call.name} {call.arguments}", source))
        for image in message.images:
            seen = image_text(image)
            if seen:
                out.append(Unit("image", f"[image] {seen}", source))
    return out


def units_from_text(text: str) -> list[Unit]:
    """Candidate lines of a cold request: the flattened transcript inside `<transcript>` tags."""
    start = text.find(TRANSCRIPT_OPEN)
    end = text.rfind(TRANSCRIPT_CLOSE)
    body = text[start + len(TRANSCRIPT_OPEN) : end if end > start else len(text)]
    out: list[Unit] = []
    role, source, stub = "user", 0, False
    goal_seen = False
    in_summary: list[str] | None = None
    for line in _split(body):
        if line in ("<PREVIOUS SUMMARY>", "</PREVIOUS SUMMARY>"):  # OpenHands' prompt
            if line == "</PREVIOUS SUMMARY>" and in_summary is not None:
                out.extend(_summary_lines("\n".join(in_summary), source))
            in_summary = [] if line == "<PREVIOUS SUMMARY>" else None
            source += 1
            continue
        if in_summary is not None:
            in_summary.append(line)
            continue
        header = _ROLE_LINE.match(line)
        if header:
            role, source, stub = header.group(1), source + 1, False
            continue
        if line.startswith(("<EVENT", "</EVENT")):
            continue
        if any(line.startswith(m) for m in SUMMARY_MARKERS):
            role = "summary"
            continue
        if line.startswith(_STUBS):
            stub = True
        if role == "system":
            continue
        unit_role = role
        if role == "user" and not goal_seen:
            goal_seen, unit_role = True, "goal"
        out.append(Unit(unit_role, line, source, stub))
    return out


def flatten(messages: Sequence[Message], *, max_chars: int | None = None) -> str:
    """Messages as plain text for a cold summary request: a `[role]` header, then the text.

    Tool calls are written as `→ name arguments`; images as `[image]` (their pixels do not
    travel in a text prompt). `max_chars` cuts each message's text to its first characters.
    """
    out: list[str] = []
    for message in messages:
        result = message.tool_result
        out.append(f"[tool {result.call_id}]" if result is not None else f"[{message.role}]")
        text = message.text if max_chars is None else message.text[:max_chars]
        if text:
            out.append(text)
        out.extend(f"→ {c.name} {c.arguments}" for c in message.tool_calls)
        out.extend("[image]" for _ in message.images)
    return "\n".join(out)


_FOCUSED = 2.5  # a line about what the user asked the summary to focus on


# Words of four letters or more that say how to focus, not on what ("everything about X").
_FOCUS_GLUE = frozenset(
    "about above after again also before below detail details every everything focus from "
    "full give keep mainly most much only please regarding related since that their them "
    "there these they this those through what when where which while with within".split()
)


def _words(focus: str | None) -> frozenset[str]:
    """The words of a focus a line must name to be about it (four letters or more, not glue)."""
    words = (w.lower() for w in re.findall(r"[A-Za-z]{4,}", focus or ""))
    return frozenset(w for w in words if w not in _FOCUS_GLUE)


def _about(text: str, focus: frozenset[str]) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in focus)


def _same(text: str) -> str:
    """What makes two lines the same statement: their text without closing punctuation."""
    return text.strip().rstrip(".;:,\u3002\uff1b").strip()


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head].rstrip() + " … " + text[len(text) - (limit - head - 3) :].lstrip()


def _score(unit: Unit, position: float) -> float:
    """How much a summary writer would want to keep this line (see the module docstring).

    A *fact* is prose (four or more words once ids are taken out) that carries a specific
    value; bare data (settings, numbers, log fields) is worth less than a sentence about it.
    """
    text = unit.text
    specific = _SPECIFIC.findall(text)
    prose = len(_PROSE.findall(_SPECIFIC.sub(" ", text)))
    content = 1.0 + 0.4 * min(len(specific), 3)
    if specific and prose >= 4:
        content += 1.2
    if _SALIENT.search(text):
        content += 0.8
    if prose < 3:
        content -= 0.5
    score = _ROLE_WEIGHT.get(unit.role, 1.0) * content
    if unit.role in ("tool", "assistant"):
        if _CODE.search(text):
            score *= 0.35
        elif text.startswith("#"):
            score *= 0.7
        if _STAMP.match(text):
            score *= 0.6
        if text.startswith("called "):
            score *= 0.5
    if len(text) < 12 or unit.stub:
        score *= 0.3
    return score * (0.55 + 0.45 * position)


class ExtractiveSummarizer:
    """Answers summary requests with the best lines that fit the output budget (see module doc)."""

    def __init__(
        self,
        *,
        ratio: int = 16,
        carry: float = 0.85,
        floor: int = 256,
        default_max_output: int = 2048,
        line_chars: int = 240,
        personality: str = "checkpoint",
    ) -> None:
        self.personality = check_personality(personality)
        self.ratio = ratio
        self.carry = carry
        self.floor = floor
        self.default_max_output = default_max_output
        self.line_chars = line_chars

    def budget(self, fresh_tokens: int, carried_tokens: int, max_output_tokens: int | None) -> int:
        """Output tokens for a summary of `fresh_tokens` new and `carried_tokens` summarized."""
        cap = max_output_tokens or self.default_max_output
        wanted = carried_tokens * self.carry + fresh_tokens // self.ratio
        return min(cap, max(self.floor, int(wanted)))

    def __call__(self, request: CompletionRequest) -> str:
        """The summary text for a warm replay or a cold request."""
        if self.personality == "unruly":
            misbehaving = mischief(request.messages)
            if misbehaving is not None:
                return misbehaving
        last = request.messages[-1] if request.messages else Message.user("")
        replay = list(request.messages[:-1])
        focus = instruction_focus(last.text)
        asked = base_instruction(last.text)
        if TRANSCRIPT_OPEN in last.text:
            units = units_from_text(last.text)
        elif asked == INCREMENTAL_INSTRUCTION:
            cut = max((i + 1 for i, m in enumerate(replay) if _is_summary(m.text)), default=0)
            replay = replay[cut:]  # only what came after the last summary; no goal there
            units = units_from_messages(replay, goal=False)
        elif asked == MERGE_INSTRUCTION:
            replay = [m for m in replay if m.role == "user" and _is_summary(m.text)]
            units = units_from_messages(replay, goal=False)
        else:
            units = units_from_messages(replay)
        tokens = estimate_tokens([*replay, last])
        carried = sum(estimate_tokens(u.text) + 2 for u in units if u.role == "summary")
        budget = self.budget(max(tokens - carried, 0), carried, request.max_output_tokens)
        if self.personality == "terse":
            budget = terse_budget(budget)
        return self.summarize(units, budget, _words(focus))

    def summarize(
        self, units: Sequence[Unit], budget: int, focus: frozenset[str] = frozenset()
    ) -> str:
        """Pick lines by score under `budget` estimated tokens; render the six sections.

        A line naming a word of `focus` (what a steered compaction asked to keep) weighs
        `_FOCUSED` times as much.

        A message's lines compete with each other too: each further line taken from the same
        tool result (assistant message) is worth half (0.7 times) as much as the previous one,
        so one noisy output cannot fill the summary. User and carried summary lines do not
        decay.
        """
        latest: dict[str, int] = {}
        for i, unit in enumerate(units):
            latest[_same(unit.text)] = i  # a repeated line counts once, at its newest place
        total = max(len(units) - 1, 1)
        base = {
            i: _score(u, i / total) * (_FOCUSED if focus and _about(u.text, focus) else 1.0)
            for i, u in enumerate(units)
            if latest[_same(u.text)] == i
        }
        by_source: dict[int, list[int]] = {}
        for i in sorted(base, key=lambda i: (-base[i], -i)):
            by_source.setdefault(units[i].source, []).append(i)
        ranked: list[tuple[float, int]] = []
        for members in by_source.values():
            for k, i in enumerate(members):
                decay = _DECAY.get(units[i].role, 1.0) ** k
                ranked.append((base[i] * decay, i))
        ranked.sort(key=lambda pair: (-pair[0], -pair[1]))
        used = estimate_tokens(self._render([], units)) + 8
        chosen: list[int] = []
        for _, i in ranked:
            line = "- " + _clip(units[i].text, self.line_chars)
            cost = estimate_tokens(line) + 1
            if used + cost > budget:
                continue
            used += cost
            chosen.append(i)
        return self._render(sorted(chosen), units)

    def _render(self, chosen: Sequence[int], units: Sequence[Unit]) -> str:
        sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
        for i in chosen:
            unit = units[i]
            line = "- " + _clip(unit.text, self.line_chars)
            if unit.role == "goal":
                name = SECTIONS[0]
            elif _SALIENT.search(unit.text) and re.search(r"(?i)error|fail|错误|エラー", unit.text):
                name = "Errors and Fixes"
            elif unit.role in ("user", "summary", "image"):
                name = "Key Technical Concepts"
            elif re.search(r"(?:[\w.-]+/)+[\w.-]+\.\w+", unit.text):
                name = "Files and Code"
            else:
                name = "Current Work"
            sections[name].append(line)
        last = next((u.text for u in reversed(units) if u.role == "assistant"), "")
        sections["Next Step"].append(_clip(last, 160) if last else "Continue the task.")
        return render(self.personality, sections, SECTIONS)
