"""The scripted agent: follows a task's steps and answers the needle questions from what it sees.

The agent never looks at the record, only at each request the provider gets: that request *is*
its visible projection. During work turns it takes the task's next tool step whatever the
context holds (so every arm faces the same session); in the question turn it answers each
question from the request's lines (text, plus what its vision reads in images still present),
newest statement first. A fact that was folded, masked, summarized away or offloaded is not
there to be found, unless the arm offers the history tools: then, for each fact whose anchor
it cannot see, it calls `history_search` with the anchor phrase (one more request) and answers
from the results. Text search cannot see into images: when facts are still missing and the
search results list hidden messages with images, it looks at them again with `history_read`,
newest first, `IMAGE_READS` a request, for at most `IMAGE_ROUNDS` requests (a search again
for the list, when a compaction took it away, counts as one). It keeps the answers found so
far (those from context first), so a compaction the results bring about takes none of them
away, and each look notes them in its text. `recall` counts the
first answers, `recall_with_tools` the final ones.

A step is a tool call (with its `parallel` calls in the same message), or, in a turn played as
`observations`, a command typed in plain text whose output the harness sends back as the next
user message (`command_text`, `observation_message`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import ContentPart, Message, TextPart, ToolCall
from ..providers.base import CompletionRequest
from ..recall import HISTORY_READ, HISTORY_SEARCH
from .content import image_text
from .session import Needle
from .tasks import Step, Task, Turn, find_answer

__all__ = [
    "IMAGE_READS",
    "IMAGE_ROUNDS",
    "ScriptedAgent",
    "command_text",
    "observation_message",
    "visible_lines",
]

OBSERVATION_HEAD = "OBSERVATION:"
IMAGE_READS = 8
"""Hidden images the agent looks at again in one request (parallel `history_read` calls)."""
IMAGE_ROUNDS = 12
"""Requests the agent spends at most on looking at hidden images again."""
_IMAGES_LISTED = re.compile(r"Hidden messages with images, newest first: ([^\n]*)")
_LISTED_RUN = re.compile(r": seq (\d+(?:, \d+)*)")  # `tool result of screenshot: seq 9, 7`


def command_text(step: Step) -> str:
    """`step` typed as a command in plain text: its thought, then the command in a code block."""
    arguments = json.loads(step.arguments) if step.arguments.strip() else {}
    words = " ".join(str(value) for value in arguments.values())
    return f"{step.thought}\n\n```\n{step.tool} {words}".rstrip() + "\n```"


def observation_message(step: Step) -> Message:
    """The user message that carries `step`'s output back to the agent (SWE-agent style)."""
    if isinstance(step.output, str):
        return Message.user(f"{OBSERVATION_HEAD}\n{step.output}")
    return Message.user((TextPart(text=OBSERVATION_HEAD), *step.output))


def visible_lines(messages: Sequence[Message]) -> list[str]:
    """Every line a model reading `messages` can see: text, tool output, image contents."""
    out: list[str] = []
    for message in messages:
        text = message.text
        if text:
            out.extend(text.split("\n"))
        for call in message.tool_calls:
            out.append(f"{call.name} {call.arguments}")
        for image in message.images:
            seen = image_text(image)
            if seen:
                out.append(seen)
    return out


class ScriptedAgent:
    """Plays `task`: call `begin(turn)` before each turn; `respond` answers the loop's requests."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.turn: Turn | None = None
        self._next = 0
        self._pending: list[Step] = []  # called, not run yet, in call order
        self._observed: Step | None = None  # typed as a command, its output not sent back yet
        self.calls = 0
        self.steps = 0  # steps taken: tool rounds (parallel calls count once) or commands
        self.requests = 0
        self.answers: dict[str, str | None] = {}  # the final answers (after any search)
        self.answers_in_context: dict[str, str | None] = {}  # before any search
        self.recall_requests = 0  # agent requests spent on the history after the first answer
        self._searched = False
        self._found: dict[str, str] = {}  # answers found so far in the question turn
        self._looked: set[int] = set()  # hidden image messages read again
        self._image_rounds = 0

    def begin(self, turn: Turn) -> None:
        """Start `turn`: its steps are taken in order, then it replies."""
        self.turn = turn
        self._next = 0
        self._observed = None

    def respond(self, request: CompletionRequest) -> Message:
        """The next assistant message for `request`."""
        turn = self.turn
        if turn is None:
            raise RuntimeError("begin(turn) must be called before the first request")
        self.requests += 1
        if turn.questions:
            return self._answer(turn.questions, request)
        if self._next < len(turn.steps):
            step = turn.steps[self._next]
            self._next += 1
            self.steps += 1
            if turn.observations:
                self._observed = step
                return Message.assistant(command_text(step))
            calls = []
            for one in (step, *step.parallel):
                self.calls += 1
                calls.append(
                    ToolCall(id=f"call_{self.calls}", name=one.tool, arguments=one.arguments)
                )
            self._pending = [step, *step.parallel]
            return Message.assistant(step.thought, calls)
        return Message.assistant(turn.reply)

    def _answer(self, questions: Sequence[Needle], request: CompletionRequest) -> Message:
        """Answer from what the request shows; first search the history for unseen anchors.

        The first request of the question turn is answered from context alone (in-context
        recall). When a fact's anchor is not visible and the request offers `history_search`,
        the agent searches once for each such anchor (parallel calls, one more request) and
        answers from the results; facts still missing send it to the hidden images the
        results list (see the module docstring).
        """
        if self._searched:
            self.recall_requests += 1
            # Everything but the question message: the search results come after it.
            asked = max(i for i, m in enumerate(request.messages) if m.role == "user")
            shown = [m for i, m in enumerate(request.messages) if i != asked]
        else:
            shown = list(request.messages[:-1])  # not the question itself
        lines = visible_lines(shown)
        answers = {needle.id: find_answer(needle, lines) for needle in questions}
        offered = {tool.name for tool in request.tools}
        if not self._searched:
            self.answers_in_context = dict(answers)
            unseen = [n for n in questions if answers[n.id] is None]
            if unseen and HISTORY_SEARCH in offered:
                self._searched = True
                self._found = {k: v for k, v in answers.items() if v is not None}
                calls = [
                    ToolCall(
                        id=f"recall_{i}",
                        name=HISTORY_SEARCH,
                        arguments=json.dumps({"query": f'"{n.anchor}"'}, ensure_ascii=False),
                    )
                    for i, n in enumerate(unseen, 1)
                ]
                # What it already answered it keeps in mind (`_found`): writing it out would cost
                # room that a small window's search results need.
                return Message.assistant("Searching the history for what I no longer see.", calls)
        else:
            for needle_id, value in answers.items():
                if value is not None:
                    self._found.setdefault(needle_id, value)
            answers = {n.id: self._found.get(n.id) for n in questions}
            missing = [n for n in questions if answers[n.id] is None]
            if missing and HISTORY_READ in offered and self._image_rounds < IMAGE_ROUNDS:
                listed = _listed_images(shown)
                look = [seq for seq in listed if seq not in self._looked]
                if look:
                    return self._look_at(look[:IMAGE_READS], questions)
                if not listed and self._looked and HISTORY_SEARCH in offered:
                    # A compaction took the listing away: ask for it again.
                    self._image_rounds += 1
                    again = json.dumps({"query": f'"{missing[0].anchor}"'}, ensure_ascii=False)
                    call = ToolCall(
                        id=f"again_{self._image_rounds}", name=HISTORY_SEARCH, arguments=again
                    )
                    return Message.assistant("Listing the earlier images again.", [call])
        self.answers = answers
        replies = [
            f"{i}. {answers[n.id] if answers[n.id] is not None else 'I do not know.'}"
            for i, n in enumerate(questions, 1)
        ]
        return Message.assistant("\n".join(replies))

    def _noted(self, questions: Sequence[Needle]) -> str:
        """` Found so far: the A is X; ...` for the answers found so far, or ''."""
        found = [f"the {n.anchor} is {self._found[n.id]}" for n in questions if n.id in self._found]
        return " Found so far: " + "; ".join(found) + "." if found else ""

    def _look_at(self, seqs: Sequence[int], questions: Sequence[Needle]) -> Message:
        """Read the hidden image messages `seqs` again, saying what was found so far."""
        self._image_rounds += 1
        self._looked.update(seqs)
        said = (
            "Text search cannot see into images; looking at the earlier ones again (seen: "
            + ", ".join(f"seq {seq}" for seq in sorted(self._looked, reverse=True))
            + ")."
            + self._noted(questions)
        )
        calls = [
            ToolCall(
                id=f"look_{self._image_rounds}_{i}",
                name=HISTORY_READ,
                arguments=json.dumps({"seq": seq}),
            )
            for i, seq in enumerate(seqs, 1)
        ]
        return Message.assistant(said, calls)

    def observation(self) -> Message | None:
        """The user message carrying the output of the command just typed, once; else `None`.

        The harness sends it as the next user message after a turn played as `observations`.
        """
        step, self._observed = self._observed, None
        return None if step is None else observation_message(step)

    async def run_tool(self, name: str, arguments: Mapping[str, Any]) -> str | list[ContentPart]:
        """The output of the next pending call (the loop runs calls in order after the reply)."""
        if not self._pending or self._pending[0].tool != name:
            raise RuntimeError(f"tool {name!r} was not the agent's pending call")
        step = self._pending.pop(0)
        if isinstance(step.output, str):
            return step.output
        return list(step.output)

    def recall(self) -> dict[str, bool]:
        """For each needle id: whether the agent answered it correctly from context alone."""
        return {n.id: self.answers_in_context.get(n.id) == n.value for n in self.task.needles}

    def recall_with_tools(self) -> dict[str, bool]:
        """For each needle id: whether its final answer (after any search) was correct."""
        return {n.id: self.answers.get(n.id) == n.value for n in self.task.needles}


def _listed_images(messages: Sequence[Message]) -> list[int]:
    """The hidden image messages that history tool results in `messages` list, in order."""
    out: list[int] = []
    for message in messages:
        if message.role != "tool":
            continue
        for listing in _IMAGES_LISTED.findall(message.text):
            runs = _LISTED_RUN.findall(listing)
            for seq in (int(n) for run in runs for n in run.split(",") if n.strip()):
                if seq not in out:
                    out.append(seq)
    return out
