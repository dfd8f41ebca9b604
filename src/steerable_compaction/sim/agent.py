"""The scripted agent: follows a task's steps and answers the needle questions from what it sees.

The agent never looks at the record, only at each request the provider gets: that request *is*
its visible projection. During work turns it takes the task's next tool step whatever the
context holds (so every arm faces the same session); in the question turn it answers each
question from the request's lines (text, plus what its vision reads in images still present),
newest statement first. A fact that was folded, masked, summarized away or offloaded is not
there to be found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import ContentPart, Message, ToolCall
from ..providers.base import CompletionRequest
from .content import image_text
from .tasks import Step, Task, Turn, find_answer

__all__ = ["ScriptedAgent", "visible_lines"]


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
        self._pending: Step | None = None
        self.calls = 0
        self.requests = 0
        self.answers: dict[str, str | None] = {}

    def begin(self, turn: Turn) -> None:
        """Start `turn`: its steps are taken in order, then it replies."""
        self.turn = turn
        self._next = 0

    def respond(self, request: CompletionRequest) -> Message:
        """The next assistant message for `request`."""
        turn = self.turn
        if turn is None:
            raise RuntimeError("begin(turn) must be called before the first request")
        self.requests += 1
        if turn.questions:
            lines = visible_lines(request.messages[:-1])  # not the question itself
            replies = []
            for i, needle in enumerate(turn.questions, 1):
                answer = find_answer(needle, lines)
                self.answers[needle.id] = answer
                replies.append(f"{i}. {answer if answer is not None else 'I do not know.'}")
            return Message.assistant("\n".join(replies))
        if self._next < len(turn.steps):
            step = turn.steps[self._next]
            self._next += 1
            self.calls += 1
            self._pending = step
            call = ToolCall(id=f"call_{self.calls}", name=step.tool, arguments=step.arguments)
            return Message.assistant(step.thought, [call])
        return Message.assistant(turn.reply)

    async def run_tool(self, name: str, arguments: Mapping[str, Any]) -> str | list[ContentPart]:
        """The output of the step just called (the loop runs each call right after the reply)."""
        step = self._pending
        if step is None or step.tool != name:
            raise RuntimeError(f"tool {name!r} was not the agent's pending call")
        self._pending = None
        if isinstance(step.output, str):
            return step.output
        return list(step.output)

    def recall(self) -> dict[str, bool]:
        """For each needle id: whether the agent answered it correctly."""
        return {n.id: self.answers.get(n.id) == n.value for n in self.task.needles}
