# ruff: noqa: RUF001  (CJK questions use full-width punctuation on purpose)
"""The values a simulated session is made of: needles, steps, turns, tasks; and answering.

A `Needle` is a fact stated once (in a user message, a tool result, a tool observation sent back
as a user message, a screenshot's pixels, an image caption, a restored orphan result, the
agent's own words) and asked
for in the final turn; `find_answer` is how the agent answers it from the lines it can see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..messages import ContentPart, Message

__all__ = ["Carrier", "Language", "Needle", "Position", "Step", "Task", "Turn", "find_answer"]

Carrier: TypeAlias = Literal[
    "user", "tool", "observation", "image", "caption", "orphan", "giant", "agent"
]
Position: TypeAlias = Literal["head", "middle", "tail", "whole"]
Language: TypeAlias = Literal["en", "zh", "ja"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Needle:
    """A fact stated once: `anchor` (the phrase asked about) and its `value`.

    The agent answers with the first match of `shape` after the anchor on a visible line.
    """

    id: str
    anchor: str
    value: str
    shape: str
    carrier: Carrier
    position: Position
    step: int  # the session step (0-based tool round) where it is stated
    language: Language = "en"
    subject: str | None = None  # what a steered compaction names (the `steered` task)

    @property
    def question(self) -> str:
        """How the final turn asks for it."""
        if self.language == "zh":
            return f"{self.anchor}是多少？"
        if self.language == "ja":
            return f"{self.anchor}は何ですか？"
        return f"What is the {self.anchor}?"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One tool round: the agent's thought, its call, and what the tool returns.

    `parallel` holds further calls the agent makes in the same assistant message, in order.
    """

    tool: str
    arguments: str
    thought: str
    output: str | tuple[ContentPart, ...]
    parallel: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """A user message, the tool rounds the agent takes for it, then its reply.

    With `observations` the agent types each step as a command in plain assistant text (no tool
    call) and the harness sends the step's output back as the next user message (SWE-agent).
    With `compact_focus` the host asks for a manual compaction steered to it before the turn
    (like `/compact <instructions>`); arms without manual compaction ignore it. `idle_seconds`
    is how long the user was away before the turn (the simulated clock moves first; a provider
    cache older than its lifetime is gone).
    """

    user: Message
    steps: tuple[Step, ...]
    reply: str
    questions: tuple[Needle, ...] = ()
    observations: bool = False
    compact_focus: str | None = None  # the host asks a compaction steered to this first
    idle_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A whole simulated session and the needles it plants."""

    name: str
    seed: int
    description: str
    window: int
    system: str
    turns: tuple[Turn, ...]
    needles: tuple[Needle, ...]
    tools: tuple[str, ...]
    restored: tuple[Message, ...] = ()  # a cut log the session resumes from (after the system)
    demonstration: tuple[Message, ...] = ()  # a worked example the host puts before the task
    token_scale: float = 1.0  # billed tokens per counted piece: below 1, a denser tokenizer

    @property
    def rounds(self) -> int:
        """Agent requests the session makes when nothing dies: tool rounds plus replies."""
        return sum(len(turn.steps) + 1 for turn in self.turns)


def find_answer(needle: Needle, lines: list[str]) -> str | None:
    """The agent's answer for `needle` from visible `lines`: the newest statement wins."""
    anchor = needle.anchor.lower()
    shape = re.compile(needle.shape)
    for line in reversed(lines):
        at = line.lower().find(anchor)
        if at < 0:
            continue
        found = shape.search(line, at + len(anchor))
        if found is not None:
            return found.group(0)
    return None
