"""The summarize stage's exact request, its replacement message, and the excerpt fallback.

Warm-prefix replay (R24-R28): the summary request is the session's own head plus the shadowed
middle, verbatim (real roles, real parts, every byte, R26), as the projection stood before this
compaction's fold (R25: that is what the provider cached), followed by one user instruction.
`cache_retention="none"` asks adapters not to cache the throwaway suffix (R27). Images become text
pointers unless the summarizer is the turn model itself (R28).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from .provenance import history_ref
from .prune import image_pointer
from .regions import SUMMARY_TAG, call_sites, is_goal_candidate, repair_tool_pairs

__all__ = [
    "FOCUS_LEAD",
    "FOCUS_TAIL",
    "INCREMENTAL_INSTRUCTION",
    "MERGE_INSTRUCTION",
    "RETRY_LEAD",
    "RETRY_TAIL",
    "SECTIONS",
    "SUMMARY_INSTRUCTION",
    "SummaryRequest",
    "base_instruction",
    "build_summary_request",
    "check_focus",
    "excerpt_summary",
    "instruction_focus",
    "is_summary_instruction",
    "kept_messages",
    "kept_user_messages",
    "summary_message",
    "text_pointer_span",
    "with_focus",
    "with_retry",
]

SECTIONS = (
    "Primary Request",
    "Key Technical Concepts",
    "Files and Code",
    "Errors and Fixes",
    "Current Work",
    "Next Step",
)

SUMMARY_INSTRUCTION = (
    "Your context window is nearly full, so the conversation so far will be replaced by a "
    "checkpoint summary that you write now. The summary is all you will see of these messages "
    "when you continue, so keep every fact you will need: the user's goal and constraints, "
    "decisions and why they were made, exact file paths, identifiers, commands, values and "
    "error messages, and where the work stands. Keep any [history seq N] references next to "
    "the facts they stand for.\n\n"
    "Reply with text only (no tool calls), in Markdown, with exactly these sections:\n\n"
    + "\n".join(f"## {name}" for name in SECTIONS)
)

INCREMENTAL_INSTRUCTION = (
    "Your context window is nearly full. The checkpoint summaries above stay as they are; the "
    "messages after the last of them will be replaced by a new checkpoint summary that you "
    "write now. Summarize only those later messages and do not repeat what the earlier "
    "summaries already say. The new summary is all you will see of those messages when you "
    "continue, so keep every fact from them you will need: the user's requests and "
    "constraints, decisions and why they were made, exact file paths, identifiers, commands, "
    "values and error messages, and where the work stands. Keep any [history seq N] references "
    "next to the facts they stand for.\n\n"
    "Reply with text only (no tool calls), in Markdown, with exactly these sections:\n\n"
    + "\n".join(f"## {name}" for name in SECTIONS)
)

MERGE_INSTRUCTION = (
    "Your context window is nearly full. The checkpoint summaries above will be replaced by one "
    "summary that you write now, merging them: keep every fact they hold that you may still "
    "need (the user's goal and constraints, decisions, exact file paths, identifiers, commands, "
    "values and error messages, with their [history seq N] references), drop what is settled "
    "or superseded, and say where the work stands.\n\n"
    "Reply with text only (no tool calls), in Markdown, with exactly these sections:\n\n"
    + "\n".join(f"## {name}" for name in SECTIONS)
)

_INSTRUCTIONS = frozenset({SUMMARY_INSTRUCTION, INCREMENTAL_INSTRUCTION, MERGE_INSTRUCTION})

FOCUS_LEAD = "\n\nThe user asked this summary to focus on: "
"""What joins a steered compaction's focus to its instruction (`with_focus`)."""
FOCUS_TAIL = (
    "\nKeep everything about it in full detail (exact values, names, paths, decisions and "
    "open questions), even where the rest must be summarized briefly."
)
MAX_FOCUS_CHARS = 2_000


def check_focus(focus: str | None) -> str | None:
    """`focus` stripped, or `None` for none; `TypeError`/`ValueError` for a bad one.

    A focus is a short text naming what a manual compaction's summary must keep in full (like
    an agent CLI's `/compact <instructions>`); at most `MAX_FOCUS_CHARS` characters.
    """
    if focus is None:
        return None
    if not isinstance(focus, str):
        raise TypeError(f"focus must be a string or None, got {type(focus).__name__}")
    text = focus.strip()
    if len(text) > MAX_FOCUS_CHARS:
        raise ValueError(f"focus must be at most {MAX_FOCUS_CHARS:,} characters, got {len(text):,}")
    return text or None


def with_focus(instruction: str, focus: str | None) -> str:
    """`instruction` steered toward `focus` (unchanged without one)."""
    return f"{instruction}{FOCUS_LEAD}{focus}{FOCUS_TAIL}" if focus else instruction


RETRY_LEAD = "\n\nYour previous answer could not be used as the summary ("
"""What joins a second request's note on the refused answer to its instruction (`with_retry`)."""
RETRY_TAIL = "). Write the summary itself now, as plain text, without tool calls."


def with_retry(instruction: str, reason: str) -> str:
    """`instruction` asked again after an answer refused for `reason` (one line)."""
    return f"{instruction}{RETRY_LEAD}{' '.join(reason.split())}{RETRY_TAIL}"


def base_instruction(text: str) -> str | None:
    """The engine's instruction `text` was built from (first, incremental, merge), or `None`.

    Recognizes a steered instruction (`with_focus`) and one asked again (`with_retry`).
    """
    head, lead, rest = text.rpartition(RETRY_LEAD)
    if lead and rest.endswith(RETRY_TAIL):
        text = head
    if text in _INSTRUCTIONS:
        return text
    head, lead, rest = text.partition(FOCUS_LEAD)
    if lead and head in _INSTRUCTIONS and rest.endswith(FOCUS_TAIL):
        return head
    return None


def is_summary_instruction(text: str) -> bool:
    """Whether `text` is one of the engine's summary instructions, steered or asked again."""
    return base_instruction(text) is not None


def instruction_focus(text: str) -> str | None:
    """The focus a steered summary instruction carries, or `None`."""
    head, lead, rest = text.rpartition(RETRY_LEAD)
    if lead and rest.endswith(RETRY_TAIL):
        text = head
    head, lead, rest = text.partition(FOCUS_LEAD)
    if not lead or head not in _INSTRUCTIONS or not rest.endswith(FOCUS_TAIL):
        return None
    return rest[: -len(FOCUS_TAIL)]


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRequest:
    """The exact summarizer call: `messages` to send and the cache hint for adapters.

    `max_output_tokens`, when set, is the longest summary the engine can use (a merge of the
    summary chain asks for a summary shorter than the chain it replaces); a summarizer should
    pass it on as the request's output limit.
    """

    messages: tuple[Message, ...]
    span: tuple[int, int]
    cache_retention: Literal["none"] = "none"
    max_output_tokens: int | None = None

    @property
    def replay(self) -> tuple[Message, ...]:
        """The replayed prefix: everything but the final instruction."""
        return self.messages[:-1]

    @property
    def instruction(self) -> Message:
        """The one instruction appended after the replay."""
        return self.messages[-1]


def _pointer_parts(
    parts: Sequence[TextPart | ImagePart], round_: int
) -> tuple[TextPart | ImagePart, ...]:
    return tuple(
        TextPart(text=image_pointer(p, round_)) if isinstance(p, ImagePart) else p for p in parts
    )


def text_pointer_span(
    messages: Sequence[Message], rounds: Sequence[int] | None = None
) -> tuple[Message, ...]:
    """`messages` with every image replaced by its text pointer; text passes through as is."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        if not message.images:
            out.append(message)
            continue
        round_ = rounds[i] if rounds is not None else 0
        result = message.tool_result
        if result is not None:
            content = _pointer_parts(result.content, round_)
            tool = ToolResult(call_id=result.call_id, content=content, is_error=result.is_error)
            out.append(Message(role="tool", parts=(tool,)))
        else:
            parts = [p for p in message.parts if isinstance(p, TextPart | ImagePart)]
            out.append(Message(role=message.role, parts=_pointer_parts(parts, round_)))
    return tuple(out)


def build_summary_request(
    messages: Sequence[Message],
    span: tuple[int, int],
    *,
    replay_images: bool = False,
    rounds: Sequence[int] | None = None,
    instruction: str = SUMMARY_INSTRUCTION,
    max_output_tokens: int | None = None,
) -> SummaryRequest:
    """The warm-prefix replay for summarizing `messages[span[0]:span[1]]` (R24-R29).

    `messages` must be the projection as the provider last saw it (before any fold planned by
    this compaction). `replay_images=True` when the summarizer is the turn model itself.
    """
    head_end, tail_start = span
    if not 0 <= head_end <= tail_start <= len(messages):
        raise ValueError(f"span {span!r} does not fit {len(messages)} messages")
    replay = tuple(messages[:tail_start])
    if not replay_images:
        replay = text_pointer_span(replay, rounds)
    # The turn requests carried these messages with broken pairs repaired (R22b), so the replay
    # does too: the same bytes (a warm prefix) and nothing a provider refuses.
    replay = tuple(repair_tool_pairs(replay))
    return SummaryRequest(
        messages=(*replay, Message.user(instruction)),
        span=span,
        max_output_tokens=max_output_tokens,
    )


def kept_messages(
    messages: Sequence[Message],
    span: tuple[int, int],
    budget: int,
    prices: Sequence[int],
    pinned: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """Indices a summary of `messages[span]` keeps verbatim before it, oldest first.

    Every pinned message of the span (they never count against `budget`), then the user's own
    messages that fit `budget` (`kept_user_messages`).
    """
    start, end = span
    users = kept_user_messages(messages, span, budget, prices, skip=pinned)
    return tuple(sorted({*users, *(i for i in pinned if start <= i < end)}))


def kept_user_messages(
    messages: Sequence[Message],
    span: tuple[int, int],
    budget: int,
    prices: Sequence[int],
    *,
    skip: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """Indices of the user's own messages in `messages[span]` that a summary keeps verbatim.

    `prices` are the estimated tokens of `messages[span]`, in order (the planner has them).

    Newest first, each one that still fits `budget` estimated tokens (a message too large to
    fit is left to the summary, and older ones may still fit), never more than half of the
    span's tokens in all (the summary must still free room); returned oldest first. Summaries
    and reminders are not the user's words and are never kept.
    """
    start, end = span
    if len(prices) != end - start:
        raise ValueError(f"{len(prices)} prices for the {end - start} messages of span {span!r}")
    left = min(budget, sum(prices) // 2)
    kept: list[int] = []
    for i in range(end - 1, start - 1, -1):
        if i in skip or not is_goal_candidate(messages[i]):
            continue
        if prices[i - start] > left:
            continue
        left -= prices[i - start]
        kept.append(i)
    return tuple(reversed(kept))


def summary_message(
    summary: str,
    replaced: int,
    kept: int = 0,
    *,
    kept_users_only: bool = True,
    history: tuple[int, int] | None = None,
) -> Message:
    """The user message that replaces the middle (R30), after the `kept` messages.

    `kept_users_only` says every kept message is the user's (else a pinned one is among them);
    `history` is the first and last record seq replaced, named as `[history seq N-M]`.
    """
    plural = "message" if replaced == 1 else "messages"
    where = f" {history_ref(*history)}" if history is not None else ""
    if kept:
        whose = "the user's " if kept_users_only else "the "
        verbatim = (
            f"{whose}message above is kept from them word for word"
            if kept == 1
            else f"{whose}{kept} messages above are kept from them word for word"
        )
        note = f"{verbatim}, and the originals remain in the record"
    else:
        note = "the originals remain in the record"
    return Message.user(
        f"{SUMMARY_TAG}\n{summary.strip()}\n</compacted-summary>\n\n"
        f"(This summary replaces {replaced} earlier {plural} of this conversation{where}; "
        f"{note}. "
        "Continue the work from here.)"
    )


_PATH = re.compile(
    r"(?<![\w/.-])(?:[~.]?/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b|(?<![\w/.-])[\w-]+\.(?:py|ts|tsx|js|"
    r"jsx|rs|go|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|md|toml|yaml|yml|json|ini|cfg|sh|sql|"
    r"html|css|txt)\b"
)
_ERROR = re.compile(
    r"(?i)(?:error|exception)s?\b|\b(?:traceback|failed|failure|fatal|panic|assert\w*|denied|"
    r"not found|cannot|can't|unable)\b|错误|失败|異常|エラー|예외|오류"
)


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head - 3, 0)
    return text[:head].rstrip() + " … " + (text[-tail:].lstrip() if tail else "")


def _tool_counts(middle: Sequence[Message]) -> dict[str, int]:
    """How many times each tool was called in `middle`, in order of first call."""
    tools: dict[str, int] = {}
    for message in middle:
        for call in message.tool_calls:
            tools[call.name] = tools.get(call.name, 0) + 1
    return tools


def _last_lines(text: str) -> list[str]:
    """The distinct lines of `text`, each where it last occurs, in order.

    A path is found within a line, so for the newest mentions a repeated line (log lines, a
    listing printed twice) need only be read where it occurs last.
    """
    seen: dict[str, None] = {}
    for line in reversed(text.split("\n")):
        seen.setdefault(line, None)
    return list(reversed(seen))


def _paths_in(message: Message) -> Iterator[str]:
    """File paths in `message`'s text, then in its tool calls' arguments (for last mentions)."""
    for line in _last_lines(message.text):
        yield from _PATH.findall(line)
    for call in message.tool_calls:
        yield from (m.group(0) for m in _PATH.finditer(call.arguments))


_ERROR_WORDS = (
    "error", "exception", "traceback", "failed", "failure", "fatal", "panic", "assert", "denied",
    "not found", "cannot", "can't", "unable",
)  # fmt: skip


def _error_lines(message: Message) -> Iterator[str]:
    """The lines of `message`'s text that report an error, clipped."""
    text = message.text
    if text.isascii():
        # Most messages report none: substring tests on the lowered text rule out every match
        # of `_ERROR` (ASCII folds case only within A-Z) far faster than searching it.
        lowered = text.lower()
        if not any(word in lowered for word in _ERROR_WORDS):
            return iter(())
    return (_clip(line, 200) for line in text.splitlines() if _ERROR.search(line))


def _newest_distinct(
    middle: Sequence[Message], items: Callable[[Message], Iterable[str]], count: int
) -> list[str]:
    """The newest `count` distinct `items` of `middle`, each where it was last mentioned.

    In order of last mention. Read from the newest message back and stops once `count` are
    found, so a long span costs what its newest messages hold.
    """
    found: dict[str, None] = {}
    for message in reversed(middle):
        for item in reversed(list(items(message))):
            if item not in found:
                found[item] = None
                if len(found) == count:
                    return list(reversed(found))
    return list(reversed(found))


def _tools_line(middle: Sequence[Message]) -> str:
    """Every tool called in `middle` with its count, in order of first call."""
    tools = _tool_counts(middle)
    if not tools:
        return "No tools were called in this span."
    return "Tools used: " + ", ".join(f"{name} x{n}" for name, n in tools.items())


def _excerpt_sections(
    messages: Sequence[Message], start: int, middle: Sequence[Message], budget: int
) -> dict[str, list[str]]:
    """Every section of the excerpt, in `SECTIONS` order; "Current Work" is filled later."""
    goal = next((m.text for m in messages[:start] if is_goal_candidate(m)), "")
    last = next((m.text for m in reversed(middle) if m.role == "assistant" and m.text.strip()), "")
    # The newest mentions matter most to the work that continues.
    paths = _newest_distinct(middle, _paths_in, 40)
    errors = _newest_distinct(middle, _error_lines, 20)
    return {
        "Primary Request": [_clip(goal, budget // 6) if goal else "(no user goal)"],
        "Key Technical Concepts": [_tools_line(middle)],
        "Files and Code": [f"- {p}" for p in paths],
        "Errors and Fixes": [f"- {e}" for e in errors],
        "Current Work": [],
        "Next Step": [_clip(last, 400) if last else "Continue from the messages below."],
    }


EXCERPT_LEAD = "(Deterministic excerpt summary: no summarizer was used.)"
AFTER_ANSWER_LEAD = (
    "(The summary above keeps few of the exact values, so a deterministic excerpt of the same "
    "messages follows.)"
)


def _render_excerpt(sections: Mapping[str, list[str]], work: list[str]) -> str:
    """The excerpt summary text: `sections` in order, with `work` as "Current Work"."""
    body = dict(sections, **{"Current Work": work})
    blocks = []
    for name in SECTIONS:
        lines = body[name] or ["(none)"]
        blocks.append(f"## {name}\n" + "\n".join(lines))
    return f"{EXCERPT_LEAD}\n\n" + "\n\n".join(blocks)


def _work_line(message: Message, sites: Mapping[str, tuple[int, ToolCall]]) -> str:
    """One "Current Work" line: who spoke (or which tool answered) and an excerpt."""
    label: str = message.role
    result = message.tool_result
    if result is not None:
        site = sites.get(result.call_id)
        label = f"tool result ({site[1].name if site else 'unknown tool'})"
    elif message.tool_calls:
        label = "assistant → " + ", ".join(c.name for c in message.tool_calls)
    flat = _one_line(message.text)
    return f"- {label}: {_clip(flat, 300)}" if flat else f"- {label}"


def _one_line(text: str) -> str:
    """`text` on one line: blanks collapsed, a line without its own stop ended by "; ".

    Lines run together ("a.json The port is 8443.") would read as one clause to the
    retention check, which keeps one fact a clause, and as one sentence to a model.
    """
    pieces: list[str] = []
    for line in text.split("\n"):
        line = " ".join(line.split())
        if line:
            if pieces:
                pieces.append(" " if pieces[-1][-1] in _STOPS else "; ")
            pieces.append(line)
    return "".join(pieces)


_STOPS = frozenset(".;:!?,\u3002\uff1b\uff1a\uff01\uff1f\uff0c\u3001")  # and the full-width stops


def _recent_work(
    middle: Sequence[Message],
    sites: Mapping[str, tuple[int, ToolCall]],
    sections: Mapping[str, list[str]],
    max_chars: int,
) -> list[str]:
    """Excerpts of `middle`, newest first while the whole summary fits, shown oldest first."""
    work: list[str] = []
    for message in reversed(middle):
        candidate = [_work_line(message, sites), *work]
        if len(_render_excerpt(sections, candidate)) > max_chars:
            break
        work = candidate
    return work


def _trim_to_fit(sections: dict[str, list[str]], work: list[str], max_chars: int) -> str:
    """The rendered summary, trimming the longest section (oldest lines first) until it fits."""
    text = _render_excerpt(sections, work)
    while len(text) > max_chars:
        lines = max(sections.values(), key=lambda ls: sum(len(line) for line in ls))
        if len(lines) > 1:
            del lines[0]
        elif lines and len(lines[0]) > 40:
            lines[0] = _clip(lines[0], len(lines[0]) // 2)
        else:
            return text[:max_chars]
        text = _render_excerpt(sections, work)
    return text


def excerpt_summary(
    messages: Sequence[Message],
    span: tuple[int, int],
    *,
    max_chars: int = 6000,
    after: str | None = None,
) -> str:
    """A deterministic checkpoint of `messages[span]` for when no summarizer is available.

    It keeps the goal, every tool name called (with counts), file paths, error lines, and the
    head and tail of each shadowed message, newest first within the budget, in the same
    sections an LLM summary has. The excerpt never exceeds `max_chars`. With `after` (a
    summarizer's answer refused for keeping too few values) the excerpt follows that text,
    which stays as it is, outside `max_chars`.
    """
    start, end = span
    middle = messages[start:end]
    sections = _excerpt_sections(messages, start, middle, max(max_chars, 400))
    work = _recent_work(middle, call_sites(messages), sections, max_chars)
    excerpt = _trim_to_fit(sections, work, max_chars)
    if after is None:
        return excerpt
    return f"{after.rstrip()}\n\n{AFTER_ANSWER_LEAD}{excerpt.removeprefix(EXCERPT_LEAD)}"
