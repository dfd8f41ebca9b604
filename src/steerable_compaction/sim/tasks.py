"""Simulated agent sessions with planted needles (L1.5): the task catalogue.

A `Task` is a deterministic session: a system prompt, optionally a restored log or a
demonstration, and user turns, each a list of `Step`s the scripted agent takes (tool calls, or
commands typed as text in an `observations` turn), then a final turn asking for every needle.
`build_task(name, seed)` builds one of `TASK_NAMES`; the same name, seed and scale always give
the same session, byte for byte. `standard.md` describes each task.

Needles are planted at evenly spaced points of the session, in positions fixed by the task's
plan, never chosen by looking at what any strategy keeps.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..messages import Message, TextPart, ToolCall
from ..policy import resolve_compaction_policy
from ..tokens import estimate_tokens
from . import content
from .builder import SessionBuilder, question_turn, statement
from .session import Carrier, Language, Needle, Position, Step, Task, Turn, find_answer

__all__ = [
    "IDLE_GAPS",
    "TASK_NAMES",
    "Needle",
    "Step",
    "Task",
    "Turn",
    "build_task",
    "find_answer",
    "with_idle_gaps",
]


# -- the tasks ------------------------------------------------------------------------------------

_SYSTEM = (
    "You are a careful software agent working in a Python monorepo. Use the tools to read "
    "files, logs, configs and test results; keep changes small; explain what you found. "
    "Tools: read_file, read_logs, read_config, run_tests, grep, list_dir{extra}."
)
_COMMANDS_SYSTEM = (
    "You are a careful software agent working in a Python monorepo. You act by typing exactly "
    "one command per reply, in a fenced code block after your reasoning; the harness runs it and "
    "sends its output back to you as the next user message, after OBSERVATION:. Keep changes "
    "small; explain what you found. Commands: read_file PATH, read_logs SERVICE LINES, "
    "read_config PATH STEP, run_tests TARGET, grep PATTERN, list_dir PATH."
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
                elif carrier == "agent":
                    step = b.conclude(step, b.needle("agent", "whole", n, language))
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
    demonstration: tuple[Message, ...] = (),
    commands: bool = False,
) -> Task:
    """The task from `turns`; `commands`: the agent types commands (no tools in the request)."""
    names = ("read_file", "read_logs", "read_config", "run_tests", "grep", "list_dir", *tools)
    extra = "".join(f", {t}" for t in tools)
    return Task(
        name=b.name,
        seed=b.seed,
        description=f"{description}, {len(b.needles)} needles",
        window=window,
        system=_COMMANDS_SYSTEM if commands else _SYSTEM.format(extra=extra),
        turns=(*turns, question_turn(b.needles)),
        needles=tuple(b.needles),
        tools=() if commands else names,
        restored=restored,
        demonstration=demonstration,
    )


def _scaled(n: int, scale: float, low: int = 2) -> int:
    return max(low, round(n * scale))


def _mixed(user: int, tool: int, carrier: Carrier = "tool", spread: float = 0.9) -> _Plan:
    """`user` user-message needles spread evenly among `tool` needles carried by `carrier`."""
    total = user + tool
    user_at = {round(j * total / user) for j in range(user)} if user else set()
    positions: tuple[Position, ...] = ("head", "middle", "tail")
    specs: list[tuple[Carrier, Position, Language]] = []
    for i in range(total):
        if i in user_at:
            specs.append(("user", "whole", "en"))
        else:
            specs.append((carrier, positions[i % 3], "en"))
    return _Plan(tuple(specs), spread)


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


def _observations(seed: int, scale: float) -> Task:
    b = SessionBuilder("observations_as_user", seed, "light")
    turns = _work(b, 4, _scaled(30, scale), _mixed(3, 5, "observation"))
    return _task(
        b,
        "commands as plain text, every tool observation a user message (SWE-agent style)",
        16_384,
        [replace(turn, observations=True) for turn in turns],
        commands=True,
    )


_DEMO_INTRO = (
    "Here is a demonstration of how a similar task was solved in this repository. It shows how "
    "to use the tools; you do not need to follow it exactly. Demonstration task: the nightly "
    "reconciliation job in src/ledger/ drops late invoices; find out why."
)
_DEMO_END = "(end of the demonstration)\n\nNow the real task.\n\n"


def _demo(b: SessionBuilder, rounds: int) -> tuple[Message, ...]:
    """A worked example: the example task, `rounds` tool rounds, the example's closing reply."""
    out = [Message.user(_DEMO_INTRO)]
    for i in range(rounds):
        step = b.step(900 + i)  # numbers no step of the task itself reaches
        cid = f"call_demo_{i + 1}"
        call = ToolCall(id=cid, name=step.tool, arguments=step.arguments)
        out += [Message.assistant(step.thought, [call]), Message.tool(cid, str(step.output))]
    out.append(Message.assistant(f"The example is solved: {content.sentence(b.rng, 14)}"))
    return tuple(out)


def _demonstration(seed: int, scale: float) -> Task:
    b = SessionBuilder("demonstration", seed, "light")
    demo = _demo(b, 5)
    turns = _work(b, 4, _scaled(30, scale), _mixed(3, 5))
    task = turns[0]  # the real task message, after the example: the host pins it
    turns[0] = replace(task, user=Message.user(_DEMO_END + task.user.text, pinned=True))
    return _task(
        b,
        "a worked demonstration before the real task, which the host pins",
        16_384,
        turns,
        demonstration=demo,
    )


def _parallel_screenshots(seed: int, scale: float) -> Task:
    b = SessionBuilder("parallel_screenshots", seed, "light")
    steps = _scaled(20, scale, 3)
    total = 4 * steps

    def calls(n: int) -> int:  # screenshots taken in parallel at step n
        return 2 + n // 3 % 2

    shots: dict[tuple[int, int], Needle] = {}  # (step, call) -> the needle in its pixels
    for i, fraction in enumerate((0.1, 0.35, 0.6, 0.85)):
        n = int(total * fraction) // 3 * 3
        shots[n, (i + 1) % calls(n)] = b.needle("image", "whole", n)

    def shot(n: int, call: int) -> Step:
        url = f"https://admin.example.test/view/{n}/{call}"
        text = f"Admin dashboard, view {n}.{call}: {content.sentence(b.rng, 8)}"
        if (n, call) in shots:
            text += " " + statement(shots[n, call], b.rng, "image")
        return Step(
            tool="screenshot",
            arguments=json.dumps({"url": url}),
            thought=f"Taking screenshots of the views of step {n} side by side.",
            output=(
                TextPart(text=f"Screenshot of {url} (800x600)."),
                content.screenshot(800, 600, text),
            ),
        )

    def special(b: SessionBuilder, n: int, step: Step) -> Step:
        if n % 3:
            return step
        return replace(shot(n, 0), parallel=tuple(shot(n, c) for c in range(1, calls(n))))

    turns = _work(b, 4, steps, _Plan(()), special)
    for t in (1, 2, 3):  # the user pastes a screenshot: a fact in its caption or its pixels
        pixels = b.needle("image", "whole", t * steps) if t == 2 else None
        seen = f"Pasted view: {content.sentence(b.rng, 9)}"
        if pixels is not None:
            seen += " " + statement(pixels, b.rng, "image")
        caption = "Here is what the on-call engineer saw."
        if pixels is None:
            needle = b.needle("caption", "whole", t * steps)
            caption += " " + statement(needle, b.rng, "doc")
        old = turns[t]
        parts = (TextPart(text=f"{old.user.text}\n\n{caption}"), content.screenshot(800, 600, seen))
        turns[t] = replace(old, user=Message.user(parts))
    return _task(
        b,
        "parallel screenshot calls, user-pasted screenshots with captions",
        24_576,
        turns,
        tools=("screenshot",),
    )


def _chain(seed: int, scale: float) -> Task:
    b = SessionBuilder("chain", seed, "medium")
    plan = _mixed(0, 8, spread=0.25)  # every fact is stated early, in a tool result
    turns = _work(b, 6, _scaled(30, scale), plan)
    return _task(b, "facts stated early in tool results, then many compactions", 16_384, turns)


def _findings(seed: int, scale: float) -> Task:
    b = SessionBuilder("findings", seed, "light")
    turns = _work(b, 4, _scaled(30, scale), _mixed(2, 6, "agent"))
    return _task(b, "facts the agent itself concluded, stated in its own words", 16_384, turns)


def _write_step(b: SessionBuilder, n: int) -> Step:
    """The agent writes a module: the source is in its call's arguments, the result is short."""
    rng = b.rng
    module = rng.choice(("api", "core", "db", "auth", "billing", "search", "jobs", "sync"))
    path = f"src/{module}/{content.sentence(rng, 2).split()[0].lower()}_{n}.py"
    source = content.python_source(rng, path, rng.randint(60, 140))
    report = f"Wrote {len(source.encode()):,} bytes to {path}.\nformat: unchanged\nlint: 0 errors"
    return Step(
        tool="write_file",
        arguments=json.dumps({"path": path, "content": source}),
        thought=f"Writing {path}.",
        output=report,
    )


def _file_writes(seed: int, scale: float) -> Task:
    """A coding agent that writes files: its own calls hold most of the context, not results."""
    b = SessionBuilder("file_writes", seed, "light")

    def special(b: SessionBuilder, n: int, step: Step) -> Step:
        return step if n % 3 == 0 else _write_step(b, n)  # two steps in three write a module

    turns = _work(b, 4, _scaled(30, scale), _mixed(3, 5), special)
    return _task(
        b,
        "files written through tool calls: the calls' arguments hold most of the context",
        16_384,
        turns,
        tools=("write_file",),
    )


_EXAMPLE_OPEN = (
    "Before the task, here is a worked example from another repository, to show how an "
    "investigation with these tools goes. It is only an example; do not act on it.\n\n"
    "Example task: the nightly reconciliation job in src/ledger/ drops late invoices.\n"
)


def _example(b: SessionBuilder, tokens: int) -> Message:
    """A demonstration written out as one user message of about `tokens` estimated tokens."""
    text = _EXAMPLE_OPEN
    for i in itertools.count():
        step = b.step(900 + i)
        if not isinstance(step.output, str):
            continue
        chunk = f"\nExample step {i + 1}: {step.thought} ({step.tool} {step.arguments})\n"
        for line in step.output.split("\n"):
            chunk += f"    {line}\n"
        if estimate_tokens(text + chunk) > tokens:
            break
        text += chunk
    text += "\nExample conclusion: a timezone cut-off in the batch query skipped the late rows."
    return Message.user(text)


def _tight_opening(seed: int, scale: float) -> Task:
    """A demonstration sent as a user message before the task fills most of a 4k window."""
    b = SessionBuilder("tight_opening", seed, "small")
    window = 4096
    share = 0.55 + 0.3 * b.rng.random()  # of the threshold, system prompt and task included
    turns = _work(b, 3, _scaled(20, scale), _mixed(2, 3))
    system = _SYSTEM.format(extra="")
    threshold = resolve_compaction_policy(None, window).threshold_tokens
    first = turns[0].user
    room = int(share * threshold) - estimate_tokens([Message.system(system), first])
    return replace(
        _task(b, "a demonstration before the task fills 55-85 % of the threshold", window, turns),
        demonstration=(_example(b, max(room, 200)),),
    )


def _small_window(seed: int, scale: float) -> Task:
    b = SessionBuilder("small_window", seed, "small")
    window = (2048, 3072, 4096)[seed % 3]
    turns = _work(b, 3, _scaled(25, scale), _mixed(2, 4))
    return _task(b, f"a {window:,}-token window", window, turns)


def _dense_tokens(seed: int, scale: float) -> Task:
    b = SessionBuilder("dense_tokens", seed, "light")
    over = 1.3 + 0.2 * b.rng.random()  # the static estimate over-counts this model's tokens
    turns = _work(b, 4, _scaled(25, scale), _mixed(3, 5))
    task = _task(b, f"a model whose tokens the estimate over-counts {over:.2f}x", 8_192, turns)
    return replace(task, token_scale=round(1 / over, 4))


STEERED_SUBJECT = "billing"


def _steered(seed: int, scale: float) -> Task:
    """Facts about one subject amid many others; the host steers the last compaction to it.

    Heavy outputs carry many stated facts; ten about the subject are planted over the last
    work turn, and before the question turn the host asks for a manual compaction that keeps
    "everything about billing" (like `/compact <instructions>`).
    """
    b = SessionBuilder("steered", seed, "heavy")
    steps = _scaled(30, scale)
    subject_at = {int(steps * (2 + 0.95 * i / 10)): i for i in range(10)}  # the third turn

    def special(b: SessionBuilder, n: int, step: Step) -> Step:
        if n not in subject_at or not isinstance(step.output, str):
            return step
        return b.plant(step, b.needle("tool", "middle", n, subject=STEERED_SUBJECT))

    turns = _work(b, 3, steps, _mixed(1, 3, spread=0.6), special)
    task = _task(
        b,
        f"facts about {STEERED_SUBJECT} among many; the host steers a compaction toward them",
        16_384,
        turns,
    )
    *work, questions = task.turns
    steered = replace(questions, compact_focus=f"everything about {STEERED_SUBJECT}")
    return replace(task, turns=(*work, steered))


_BUILDERS: dict[str, Callable[[int, float], Task]] = {
    "light": _light,
    "heavy": _heavy,
    "cjk": _cjk,
    "images": _images,
    "giant_tool_output": _giant,
    "long_haul": _long_haul,
    "restored_orphans": _restored,
    "observations_as_user": _observations,
    "demonstration": _demonstration,
    "parallel_screenshots": _parallel_screenshots,
    "chain": _chain,
    "findings": _findings,
    "file_writes": _file_writes,
    "tight_opening": _tight_opening,
    "small_window": _small_window,
    "dense_tokens": _dense_tokens,
    "steered": _steered,
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


IDLE_GAPS: tuple[float, ...] = (180.0, 600.0, 3600.0)
"""A user returning after 3, 10 and 60 minutes (`eval --idle-gaps`): one gap inside a 5-minute
cache lifetime, two beyond it."""


def with_idle_gaps(task: Task, gaps: Sequence[float] = IDLE_GAPS) -> Task:
    """`task` with the user away before every turn but the first, the `gaps` (seconds) in turn.

    No gaps: the task as it is. The needles, the turns' content and their order are unchanged;
    only the simulated clock moves between turns.
    """
    gaps = tuple(gaps)
    if not gaps:
        return task
    if any(not 0 <= gap < float("inf") for gap in gaps):
        raise ValueError(f"idle gaps must be non-negative seconds, got {gaps!r}")
    turns = tuple(
        replace(turn, idle_seconds=gaps[(i - 1) % len(gaps)]) if i else turn
        for i, turn in enumerate(task.turns)
    )
    away = ", ".join(f"{gap / 60:g}" for gap in gaps)
    return replace(
        task, turns=turns, description=f"{task.description} (user away {away} min between turns)"
    )
