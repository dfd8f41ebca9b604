"""The demo's scripted agent, and the wrapper that puts its moves on a real provider.

`ScriptedAgent` answers requests as a code-reading agent would: for each user input it reads
files (as many as the input asks for, `read 12 files`, else `default_reads`), then replies;
asked for a checkpoint summary (the warm-prefix replay), it writes one in the fixed sections.
Asked for a final report once the session has compacted, it first searches its history
(`history_search`) for the TODOs of files that compaction took out of its context, once.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..compaction import is_summary_instruction
from ..messages import Message, ToolCall
from ..providers.base import Completion, CompletionRequest, Provider, StreamDone, StreamEvent
from .workspace import Workspace

__all__ = ["ScriptedAgent", "ScriptedOverProvider"]

_READS = re.compile(r"\bread (\d{1,3})\b", re.I)


def _is_reminder(message: Message) -> bool:
    return message.text.startswith("<system-reminder>")


@dataclass
class ScriptedAgent:
    """A deterministic code-reading agent (see the module docstring); call it with a request.

    State lives in the agent, not in the transcript, so compaction does not confuse it: a user
    input starts a plan only after the previous plan was answered.
    """

    workspace: Workspace
    default_reads: int = 8
    max_reads: int = 40
    calls: int = field(default=0, init=False)
    summaries: int = field(default=0, init=False)
    _remaining: int = field(default=0, init=False, repr=False)
    _cursor: int = field(default=0, init=False, repr=False)
    _listed: bool = field(default=False, init=False, repr=False)
    _awaiting_input: bool = field(default=True, init=False, repr=False)
    _read_this_turn: list[str] = field(default_factory=list, init=False, repr=False)
    _final: bool = field(default=False, init=False, repr=False)
    searched: str | None = field(default=None, init=False)

    def __call__(self, request: CompletionRequest) -> Message:
        """The agent's next message for `request`."""
        last = request.messages[-1] if request.messages else Message.user("")
        if last.role == "user" and is_summary_instruction(last.text):
            self.summaries += 1
            return Message.assistant(self.summary(request.messages))
        if not {"list_files", "read_file", "grep"} <= {t.name for t in request.tools}:
            self._awaiting_input = True
            return Message.assistant("I have no tools to read the repository with here.")
        if self._awaiting_input and last.role == "user" and not _is_reminder(last):
            found = _READS.search(last.text)
            wanted = int(found.group(1)) if found else self.default_reads
            self._remaining = min(wanted, self.max_reads)
            self._awaiting_input = False
            self._read_this_turn = []
            self._final = "final report" in last.text.lower()
        if self._remaining <= 0:
            offered = {t.name for t in request.tools}
            if self._final and self.searched is None and "history_search" in offered:
                self.searched = ""  # once: the next request carries the result
                self.calls += 1
                query = json.dumps({"query": "TODO", "limit": 5})
                call = ToolCall(id=f"call_{self.calls}", name="history_search", arguments=query)
                return Message.assistant("Checking my history for earlier TODOs.", [call])
            if last.role == "tool" and self.searched == "":
                self.searched = last.text
            self._awaiting_input = True
            return Message.assistant(self._report())
        return Message.assistant(None, [self._next_call()])

    def _next_call(self) -> ToolCall:
        self.calls += 1
        cid = f"call_{self.calls}"
        if not self._listed:
            self._listed = True
            return ToolCall(id=cid, name="list_files", arguments="{}")
        if self.calls % 7 == 0:
            return ToolCall(id=cid, name="grep", arguments=json.dumps({"pattern": "TODO"}))
        paths = self.workspace.paths
        path = paths[self._cursor % len(paths)]
        self._cursor += 1
        self._remaining -= 1
        self._read_this_turn.append(path)
        return ToolCall(id=cid, name="read_file", arguments=json.dumps({"path": path}))

    def _report(self) -> str:
        read = self._read_this_turn
        if not read:
            return "I read no files this turn."
        todos = [p for p in read if self.workspace.todos(p)]
        names = ", ".join(Path(p).stem for p in read[:6]) + (" …" if len(read) > 6 else "")
        earlier = ""
        if self.searched:
            hits = len(re.findall(r"^\[seq \d+\]", self.searched, flags=re.M))
            earlier = f" My history search found {hits} earlier messages with TODOs."
        return (
            f"I read {len(read)} files ({names}). {len(todos)} of them hold TODOs"
            + (f", e.g. {todos[0]}: {self.workspace.todos(todos[0])[0]}" if todos else "")
            + "."
            + earlier
        )

    def summary(self, messages: Sequence[Message]) -> str:
        """A checkpoint summary of a warm-prefix replay, in the fixed sections (R29)."""
        goal = next((m.text for m in messages if m.role == "user"), "")
        read: list[str] = []
        for message in messages:
            for call in message.tool_calls:
                if call.name == "read_file":
                    path = json.loads(call.arguments or "{}").get("path", "?")
                    if path not in read:
                        read.append(path)
        todos = [
            f"{p}: {t}" for p in read if p in self.workspace.files for t in self.workspace.todos(p)
        ]
        files = ", ".join(read) if read else "none yet"
        return "\n".join(
            [
                "## Primary Request",
                " ".join(goal.split())[:300],
                "## Key Technical Concepts",
                "Services under src/<package>/<name>.py; each exposes verb_noun(data, strict).",
                "## Files and Code",
                f"Read {len(read)} files: {files}.",
                "## Errors and Fixes",
                "None.",
                "## Current Work",
                "TODOs found: " + ("; ".join(todos[:8]) if todos else "none") + ".",
                "## Next Step",
                "Continue with the next unread file.",
            ]
        )


class ScriptedOverProvider:
    """A real provider evaluates every request; the agent's moves are scripted.

    Usage and cache reads are real; turn replies are `agent`'s, summaries the model's own. Turn
    requests are sent with a one-token output cap: only the prompt is measured.
    """

    def __init__(self, inner: Provider, agent: Callable[[CompletionRequest], Message]) -> None:
        self.inner = inner
        self.agent = agent

    @property
    def name(self) -> str:
        """The real provider's name."""
        return self.inner.name

    async def complete(self, request: CompletionRequest) -> Completion:
        """Evaluate `request`; keep the reply for summaries, script it for turns."""
        if request.messages and is_summary_instruction(request.messages[-1].text):
            return await self.inner.complete(request)
        done = await self.inner.complete(dataclasses.replace(request, max_output_tokens=1))
        message = self.agent(request)
        return Completion(
            message=message,
            usage=done.usage,
            stop_reason="tool_calls" if message.tool_calls else "stop",
            model=done.model,
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """The whole reply as one `StreamDone`."""
        yield StreamDone(await self.complete(request))
