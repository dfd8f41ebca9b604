"""Simulated agent sessions with planted needles (L1.5): the task catalogue.

A `Task` is a deterministic session: a system prompt, optionally a restored log, and user turns,
each a list of tool `Step`s the scripted agent takes, then a final turn asking for every needle.
`build_task(name, seed)` builds one of `TASK_NAMES`; the same name, seed and scale always give
the same session, byte for byte.

Needles are planted at evenly spaced points of the session, in positions fixed by the task's
plan, never chosen by looking at what any strategy keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..messages import Message, TextPart, ToolCall
from . import content
from .builder import SessionBuilder, question_turn, statement
from .session import Carrier, Language, Needle, Position, Step, Task, Turn, find_answer

__all__ = [
    "TASK_NAMES",
    "Needle",
    "Step",
    "Task",
    "Turn",
    "build_task",
    "find_answer",
]


# -- the tasks ------------------------------------------------------------------------------------

_SYSTEM = (
    "You are a careful software agent working in a Python monorepo. Use the tools to read "
    "files, logs, configs and test results; keep changes small; explain what you found. "
    "Tools: read_file, read_logs, read_config, run_tests, grep, list_dir{extra}."
)
_GOAL = (
    "Goal: stabilise the flaky integration suite of the payments platform and document what "
    "you find. Work through the modules one at a time."
)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a task plants: (carrier, position, language) per needle, spread over the session."""

    needles: tuple[tuple[Carrier, Position, Language], ...]
    spread: float = 0.9  # needles are planted in the first `spread` of the steps


def _work(
    b: SessionBuilder,
    turns: int,
    steps_per_turn: int,
    plan: _Plan,
    special: Callable[[SessionBuilder, int, Step], Step] | None = None,
    *,
    goal: bool = True,
) -> list[Turn]:
    """`turns` work turns of `steps_per_turn` rounds with `plan`'s needles planted evenly.

    A tool needle due on a step whose output is not text waits for the next text output.
    """
    total = turns * steps_per_turn
    k = len(plan.needles)
    due: dict[int, list[tuple[Carrier, Position, Language]]] = {}
    for i, spec in enumerate(plan.needles):
        due.setdefault(int((i + 0.5) * total * plan.spread / k), []).append(spec)
    waiting: list[tuple[Carrier, Position, Language]] = []
    out: list[Turn] = []
    for t in range(turns):
        openers: list[Needle] = []
        steps: list[Step] = []
        for s in range(steps_per_turn):
            n = t * steps_per_turn + s
            step = b.step(n)
            if special is not None:
                step = special(b, n, step)
            for carrier, position, language in due.get(n, []):
                if carrier == "user":
                    openers.append(b.needle("user", "whole", t * steps_per_turn, language))
                else:
                    waiting.append((carrier, position, language))
            while waiting and isinstance(step.output, str):
                carrier, position, language = waiting.pop(0)
                step = b.plant(step, b.needle(carrier, position, n, language))
            steps.append(step)
        reply = f"Done with part {t + 1}: {content.sentence(b.rng, 10)}"
        out.append(Turn(user=b.opener(t, openers), steps=tuple(steps), reply=reply))
    if goal:
        first = out[0]
        out[0] = Turn(
            user=Message.user(f"{_GOAL}\n\n{first.user.text}"), steps=first.steps, reply=first.reply
        )
    return out


def _task(
    b: SessionBuilder,
    description: str,
    window: int,
    turns: list[Turn],
    *,
    tools: tuple[str, ...] = (),
    restored: tuple[Message, ...] = (),
) -> Task:
    names = ("read_file", "read_logs", "read_config", "run_tests", "grep", "list_dir", *tools)
    extra = "".join(f", {t}" for t in tools)
    return Task(
        name=b.name,
        seed=b.seed,
        description=f"{description}, {len(b.needles)} needles",
        window=window,
        system=_SYSTEM.format(extra=extra),
        turns=(*turns, question_turn(b.needles)),
        needles=tuple(b.needles),
        tools=names,
        restored=restored,
    )


def _scaled(n: int, scale: float, low: int = 2) -> int:
    return max(low, round(n * scale))


def _mixed(user: int, tool: int) -> _Plan:
    """`user` user-message needles spread evenly among `tool` tool-result needles."""
    total = user + tool
    user_at = {round(j * total / user) for j in range(user)} if user else set()
    positions: tuple[Position, ...] = ("head", "middle", "tail")
    specs: list[tuple[Carrier, Position, Language]] = []
    for i in range(total):
        if i in user_at:
            specs.append(("user", "whole", "en"))
        else:
            specs.append(("tool", positions[i % 3], "en"))
    return _Plan(tuple(specs))


def _light(seed: int, scale: float) -> Task:
    b = SessionBuilder("light", seed, "light")
    turns = _work(b, 4, _scaled(30, scale), _mixed(3, 5))
    return _task(b, "small tool outputs", 16_384, turns)


def _heavy(seed: int, scale: float) -> Task:
    b = SessionBuilder("heavy", seed, "heavy")
    turns = _work(b, 4, _scaled(30, scale), _mixed(4, 8))
    return _task(b, "large tool outputs (files, logs, configs)", 16_384, turns)


def _cjk(seed: int, scale: float) -> Task:
    b = SessionBuilder("cjk", seed, "light", language="mixed")
    plan = _Plan(
        (
            ("user", "whole", "zh"),
            ("tool", "middle", "zh"),
            ("tool", "head", "ja"),
            ("user", "whole", "en"),
            ("tool", "tail", "zh"),
            ("tool", "middle", "ja"),
            ("tool", "middle", "zh"),
            ("tool", "tail", "ja"),
        )
    )
    turns = _work(b, 4, _scaled(30, scale), plan)
    return _task(b, "Chinese and Japanese tool output", 16_384, turns)


def _images(seed: int, scale: float) -> Task:
    b = SessionBuilder("images", seed, "light")
    steps = _scaled(20, scale, 3)
    total = 4 * steps
    shots: dict[int, Needle] = {}
    for fraction in (0.1, 0.4, 0.7):
        n = int(total * fraction) // 3 * 3
        shots[n] = b.needle("image", "whole", n)

    def special(b: SessionBuilder, n: int, step: Step) -> Step:
        if n % 3:
            return step
        text = f"Admin dashboard, step {n}: {content.sentence(b.rng, 8)}"
        if n in shots:
            text += " " + statement(shots[n], b.rng, "image")
        url = f"https://admin.example.test/view/{n}"
        return Step(
            tool="screenshot",
            arguments=json.dumps({"url": url}),
            thought=f"Taking a screenshot of {url}.",
            output=(
                TextPart(text=f"Screenshot of {url} (800x600)."),
                content.screenshot(800, 600, text),
            ),
        )

    turns = _work(b, 4, steps, _mixed(1, 2), special)
    for t in (1, 2):  # a pasted screenshot whose caption states a fact
        needle = b.needle("caption", "whole", t * steps)
        caption = f"Here is what the on-call engineer saw; {statement(needle, b.rng, 'doc')}"
        picture = content.screenshot(800, 600, f"Pasted: {content.sentence(b.rng, 9)}")
        old = turns[t]
        user = Message.user((TextPart(text=f"{old.user.text}\n\n{caption}"), picture))
        turns[t] = Turn(user=user, steps=old.steps, reply=old.reply)
    return _task(
        b,
        "screenshots with pixel-only facts, captioned images",
        24_576,
        turns,
        tools=("screenshot",),
    )


def _giant(seed: int, scale: float) -> Task:
    b = SessionBuilder("giant_tool_output", seed, "light")
    steps = _scaled(25, scale)
    giant_at = {steps + steps // 2: ("tail", 1800), 2 * steps + steps // 2: ("middle", 1200)}

    def special(b: SessionBuilder, n: int, step: Step) -> Step:
        if n not in giant_at:
            return step
        position, lines = giant_at[n]
        dump = Step(
            tool="read_logs",
            arguments=json.dumps({"service": "payments", "lines": lines}),
            thought="Dumping the whole payments log around the failure.",
            output=content.log_lines(b.rng, lines),
        )
        return b.plant(dump, b.needle("giant", "tail" if position == "tail" else "middle", n))

    turns = _work(b, 4, steps, _mixed(2, 2), special)
    return _task(b, "two tool results larger than the window", 16_384, turns)


def _long_haul(seed: int, scale: float) -> Task:
    b = SessionBuilder("long_haul", seed, "light")
    turns = _work(b, _scaled(25, scale, 3), 41, _mixed(6, 6))
    return _task(b, "1,000+ rounds over 25 turns", 16_384, turns)


def _restored(seed: int, scale: float) -> Task:
    b = SessionBuilder("restored_orphans", seed, "light")
    first = b.plant(b.step(-1), b.needle("orphan", "middle", 0))
    restored: list[Message] = [  # the calls of these two results were cut off the log
        Message.tool("call_cut_1", str(first.output)),
        Message.tool("call_cut_2", str(b.step(-2).output)),
        Message.user(f"{_GOAL}\n\nWe are resuming a session restored from a truncated log."),
    ]
    for i in range(12):
        step = b.step(-10 - i)
        if i == 5:
            step = b.plant(step, b.needle("tool", "tail", 0))
        cid = f"call_restored_{i}"
        call = ToolCall(id=cid, name=step.tool, arguments=step.arguments)
        restored += [Message.assistant(step.thought, [call]), Message.tool(cid, str(step.output))]
    last = ToolCall(id="call_unanswered", name="read_file", arguments='{"path": "src/app.py"}')
    restored.append(Message.assistant("Checking the last file.", [last]))
    turns = _work(b, 3, _scaled(30, scale), _mixed(2, 2), goal=False)
    return _task(
        b,
        "resumes a cut log: orphan results, an unanswered call",
        16_384,
        turns,
        restored=tuple(restored),
    )


_BUILDERS: dict[str, Callable[[int, float], Task]] = {
    "light": _light,
    "heavy": _heavy,
    "cjk": _cjk,
    "images": _images,
    "giant_tool_output": _giant,
    "long_haul": _long_haul,
    "restored_orphans": _restored,
}
TASK_NAMES: tuple[str, ...] = tuple(_BUILDERS)


def build_task(name: str, seed: int = 0, *, scale: float = 1.0) -> Task:
    """The task `name` for `seed`; `scale` < 1 shortens it (tests) keeping every needle."""
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}") from None
    if not 0 < scale <= 4:
        raise ValueError(f"scale must be in (0, 4], got {scale!r}")
    return builder(seed, scale)
