# ruff: noqa: RUF001  (CJK text uses full-width punctuation on purpose)
"""Drawing a session: needle topics and statements, tool steps, user turns (deterministic).

`SessionBuilder` owns one task's random stream (seeded from the task name and seed), so a task
built twice is byte-identical. It draws ordinary tool rounds of a given size, plants needles
into outputs at a position (head, middle, tail) and writes user turn openers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Literal, TypeAlias

from ..messages import Message
from . import content
from .session import Carrier, Language, Needle, Position, Step, Turn

__all__ = ["SessionBuilder", "question_turn", "statement"]


# -- needle topics ------------------------------------------------------------------------------


def _hex(n: int) -> Callable[[Random], str]:
    return lambda rng: f"{rng.getrandbits(4 * n):0{n}x}"


_LEAKS = ("cache", "lease", "cursor")
_NAMES = "amber cobalt falcon heron juniper lotus marble nimbus onyx quartz raven sable".split()
_Topic: TypeAlias = tuple[str, str, Callable[[Random], str]]
_EN: tuple[_Topic, ...] = (
    ("staging database port", r"\b\d{5}\b", lambda r: str(r.randint(20_000, 65_000))),
    ("rollback ticket", r"\b[A-Z]{3}-\d{4}\b", lambda r: f"RBK-{r.randint(1000, 9999)}"),
    (
        "release codename",
        r"\b[a-z]+-[a-z]+-\d{2}\b",
        lambda r: f"{r.choice(_NAMES)}-{r.choice(_NAMES)}-{r.randint(10, 99)}",
    ),
    ("canary build hash", r"\b[0-9a-f]{10}\b", _hex(10)),
    (
        "on-call alias",
        r"\boncall-[a-z]+-\d{3}\b",
        lambda r: f"oncall-{r.choice(_NAMES)}-{r.randint(100, 999)}",
    ),
    (
        "feature flag for the new parser",
        r"\bff_[a-z]+_\d{3}\b",
        lambda r: f"ff_{r.choice(_NAMES)}_{r.randint(100, 999)}",
    ),
    (
        "nightly export bucket",
        r"s3://[a-z]+-exports-\d{3}",
        lambda r: f"s3://{r.choice(_NAMES)}-exports-{r.randint(100, 999)}",
    ),
    (
        "license server",
        r"\blic-\d{2}\.corp\.example\.net\b",
        lambda r: f"lic-{r.randint(10, 99)}.corp.example.net",
    ),
    (
        "vendor API key id",
        r"\bAKV[A-Z0-9]{9}\b",
        lambda r: "AKV" + "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(9)),
    ),
    ("incident number", r"\bINC-\d{5}\b", lambda r: f"INC-{r.randint(10_000, 99_999)}"),
    ("migration checksum", r"\bsha:[0-9a-f]{12}\b", lambda r: "sha:" + _hex(12)(r)),
    (
        "pinned protobuf version",
        r"\b\d+\.\d+\.\d+\b",
        lambda r: f"{r.randint(3, 5)}.{r.randint(10, 29)}.{r.randint(0, 9)}",
    ),
    (
        "support contract number",
        r"\bSC-\d{3}-\d{3}\b",
        lambda r: f"SC-{r.randint(100, 999)}-{r.randint(100, 999)}",
    ),
    (
        "shard of the Acme tenant",
        r"\bshard-\d{2}[a-f]\b",
        lambda r: f"shard-{r.randint(10, 99)}{r.choice('abcdef')}",
    ),
    (
        "deploy freeze end date",
        r"\b2025-\d{2}-\d{2}\b",
        lambda r: f"2025-{r.randint(4, 12):02d}-{r.randint(10, 28):02d}",
    ),
    (
        "service owner handle",
        r"@[a-z]+\.[a-z]+\b",
        lambda r: f"@{r.choice(_NAMES)}.{r.choice(_NAMES)}",
    ),
)
_ZH: tuple[_Topic, ...] = (
    ("预发布数据库端口", r"\d{5}", lambda r: str(r.randint(20_000, 65_000))),
    ("回滚工单号", r"[A-Z]{3}-\d{4}", lambda r: f"RBK-{r.randint(1000, 9999)}"),
    (
        "发布代号",
        r"[a-z]+-[a-z]+-\d{2}",
        lambda r: f"{r.choice(_NAMES)}-{r.choice(_NAMES)}-{r.randint(10, 99)}",
    ),
    ("灰度构建哈希", r"[0-9a-f]{10}", _hex(10)),
    (
        "值班别名",
        r"oncall-[a-z]+-\d{3}",
        lambda r: f"oncall-{r.choice(_NAMES)}-{r.randint(100, 999)}",
    ),
)
_JA: tuple[_Topic, ...] = (
    ("ステージングDBのポート番号", r"\d{5}", lambda r: str(r.randint(20_000, 65_000))),
    ("障害チケット番号", r"INC-\d{5}", lambda r: f"INC-{r.randint(10_000, 99_999)}"),
    (
        "検証用バケット名",
        r"s3://[a-z]+-exports-\d{3}",
        lambda r: f"s3://{r.choice(_NAMES)}-exports-{r.randint(100, 999)}",
    ),
)


def statement(needle: Needle, rng: Random, where: str) -> str:
    """The sentence that states `needle` in a `where`.

    `where` is "user", "log", "code", "doc", "image" or "agent" (a finding in the agent's words).
    """
    a, v = needle.anchor, needle.value
    if needle.language == "zh":
        return rng.choice((f"备注：{a}为 {v}。", f"说明：{a}是 {v}，请留意。"))
    if needle.language == "ja":
        return rng.choice((f"メモ：{a}は {v} です。", f"補足：{a}は {v} に変更済み。"))
    templates = {
        "user": (
            f"By the way, the {a} is {v}.",
            f"For reference: the {a} is {v}.",
            f"Heads-up from the team: the {a} is {v}.",
        ),
        "log": (f"INFO  ops-1 note: the {a} is {v}", f"WARN  ops-2 the {a} is {v} (changed today)"),
        "code": (f"# NOTE: the {a} is {v}", f"# the {a} is {v}; keep in sync with ops"),
        "doc": (f"note: the {a} is {v}", f"The {a} is {v}."),
        "image": (f"Banner: the {a} is {v}.",),
        "agent": (
            f"Found it: the {a} is {v}.",
            f"So the {a} is {v}; I will keep that in mind.",
            f"That settles it, the {a} is {v}.",
        ),
    }
    return rng.choice(templates[where])


# -- the builder ----------------------------------------------------------------------------------

_SIZES = {  # (min, max) lines per tool output
    "small": {
        "read_file": (6, 16),
        "read_logs": (4, 10),
        "read_config": (4, 10),
        "run_tests": (5, 14),
        "grep": (2, 6),
        "list_dir": (3, 8),
    },
    "light": {
        "read_file": (12, 40),
        "read_logs": (6, 18),
        "read_config": (6, 16),
        "run_tests": (10, 40),
        "grep": (3, 10),
        "list_dir": (5, 14),
    },
    "medium": {
        "read_file": (40, 110),
        "read_logs": (25, 70),
        "read_config": (20, 50),
        "run_tests": (30, 110),
        "grep": (8, 25),
        "list_dir": (12, 35),
    },
    "heavy": {
        "read_file": (90, 260),
        "read_logs": (60, 170),
        "read_config": (40, 120),
        "run_tests": (80, 300),
        "grep": (20, 60),
        "list_dir": (30, 80),
    },
}


@dataclass
class SessionBuilder:
    """Draws steps and plants needles for one task."""

    name: str
    seed: int
    size: str = "light"
    language: Literal["en", "mixed"] = "en"  # mixed: Chinese and Japanese output
    rng: Random = field(init=False)
    needles: list[Needle] = field(default_factory=list)
    pools: dict[Language, list[_Topic]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = Random(f"steerable-sim:{self.name}:{self.seed}")
        for language, topics in (("en", _EN), ("zh", _ZH), ("ja", _JA)):
            pool = list(topics)
            self.rng.shuffle(pool)
            self.pools[language] = pool  # type: ignore[index]

    def needle(
        self,
        carrier: Carrier,
        position: Position,
        step: int,
        language: Language = "en",
        subject: str | None = None,
    ) -> Needle:
        """A new needle on a topic not used yet in this task (about `subject`, if given)."""
        anchor, shape, make = self.pools[language].pop()
        needle = Needle(
            id=f"n{len(self.needles) + 1}",
            anchor=anchor if subject is None else f"{subject} {anchor}",
            subject=subject,
            value=make(self.rng),
            shape=shape,
            carrier=carrier,
            position=position,
            step=step,
            language=language,
        )
        self.needles.append(needle)
        return needle

    def _lines(self, tool: str) -> int:
        low, high = _SIZES[self.size][tool]
        return self.rng.randint(low, high)

    def step(self, n: int) -> Step:
        """A random ordinary tool round (step number `n` names paths uniquely)."""
        rng = self.rng
        module = rng.choice(("api", "core", "db", "auth", "billing", "search", "jobs", "sync"))
        if self.language == "mixed" and rng.random() < 0.7:
            zh = rng.random() < 0.5
            lines = self._lines("read_logs")
            text = content.cjk_log(rng, lines) if zh else content.japanese_notes(rng, lines)
            path = f"docs/{module}/{'运行日志' if zh else '設計メモ'}_{n}.md"
            return Step(
                tool="read_file",
                arguments=json.dumps({"path": path}, ensure_ascii=False),
                thought=f"Reading {path}.",
                output=text,
            )
        tool = rng.choice(
            ("read_file", "read_file", "read_logs", "read_config", "run_tests", "grep", "list_dir")
        )
        lines = self._lines(tool)
        if tool == "read_file":
            path = f"src/{module}/{content.sentence(rng, 2).split()[0].lower()}_{n}.py"
            return Step(
                tool=tool,
                arguments=json.dumps({"path": path}),
                thought=f"Checking {path} next.",
                output=content.python_source(rng, path, lines),
            )
        if tool == "read_logs":
            return Step(
                tool=tool,
                arguments=json.dumps({"service": module, "lines": lines}),
                thought=f"Looking at the recent {module} logs.",
                output=content.log_lines(rng, lines),
            )
        if tool == "read_config":
            path = f"deploy/{module}.env"
            return Step(
                tool=tool,
                arguments=json.dumps({"path": path, "step": n}),
                thought=f"Reading {path} for the current settings.",
                output=content.config_dump(rng, lines),
            )
        if tool == "run_tests":
            return Step(
                tool=tool,
                arguments=json.dumps({"target": f"tests/test_{module}.py"}),
                thought=f"Running the {module} tests.",
                output=content.tests_output(rng, lines),
            )
        if tool == "grep":
            pattern = f"{module}_{rng.choice(('retry', 'limit', 'cache', 'lease'))}"
            return Step(
                tool=tool,
                arguments=json.dumps({"pattern": pattern}),
                thought=f"Searching for {pattern}.",
                output=content.grep_hits(rng, lines, pattern),
            )
        return Step(
            tool=tool,
            arguments=json.dumps({"path": f"src/{module}"}),
            thought=f"Listing src/{module}.",
            output=content.listing(rng, lines),
        )

    def plant(self, step: Step, needle: Needle) -> Step:
        """`step` with `needle` stated in its output at the needle's position."""
        if isinstance(step.output, tuple):
            raise ValueError("plant text needles in text outputs only")
        lines = step.output.split("\n")
        where = {"read_logs": "log", "read_file": "code", "read_config": "code"}.get(
            step.tool, "doc"
        )
        if needle.language != "en":
            where = "doc"
        said = statement(needle, self.rng, where)
        if where == "log":
            said = f"2025-03-14T09:{self.rng.randint(10, 59)}:{self.rng.randint(10, 59)}Z {said}"
        if needle.position == "head":
            at = min(1, len(lines))
        elif needle.position == "tail":
            at = len(lines)
        else:
            at = max(1, len(lines) // 2 + self.rng.randint(-len(lines) // 5, len(lines) // 5))
        lines.insert(at, said)
        return Step(
            tool=step.tool, arguments=step.arguments, thought=step.thought, output="\n".join(lines)
        )

    def conclude(self, step: Step, needle: Needle) -> Step:
        """`step` whose thought (the agent's own words) also states `needle` as a finding."""
        said = statement(needle, self.rng, "agent")
        return Step(
            tool=step.tool,
            arguments=step.arguments,
            thought=f"{said} {step.thought}",
            output=step.output,
            parallel=step.parallel,
        )

    def opener(self, n: int, needles: list[Needle]) -> Message:
        """A user message opening turn `n`, stating `needles` along the way."""
        rng = self.rng
        module = rng.choice(("api", "core", "db", "auth", "billing", "search"))
        ask = rng.choice(
            (
                f"Next, look into the {module} module: the retry handling is flaky, find out why.",
                f"Please continue with the {module} cleanup and keep the tests green.",
                f"Now review src/{module}/ for leaks of the session {rng.choice(_LEAKS)}.",
            )
        )
        if self.language == "mixed":
            ask = f"接下来请检查 {module} 模块的重试逻辑，并保持测试通过。"
        said = " ".join(statement(x, rng, "user") for x in needles)
        return Message.user(f"{ask} {said}".strip() if n else f"{ask}\n\n{said}".strip())


def question_turn(needles: list[Needle]) -> Turn:
    """The final turn: one question per needle, answered without tools."""
    asks = "\n".join(f"{i}. {n.question}" for i, n in enumerate(needles, 1))
    user = Message.user(
        "Before we wrap up, answer from what you remember of this session, without calling "
        f"tools. One line per answer.\n{asks}"
    )
    return Turn(user=user, steps=(), reply="", questions=tuple(needles))
