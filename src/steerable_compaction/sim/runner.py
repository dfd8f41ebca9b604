"""Running arms over tasks: one simulated session per (task, arm), its metrics and trace.

`run_session(task, arm)` plays `task` through `CoreLoop` with the arm's hooks, a `SimProvider`
(prompt-cache model, Anthropic rules, strict tool pairing) whose replies come from the scripted
agent or, for summary requests, the extractive summarizer. When the session ends (or dies), the
agent's answers give recall, the provider's log gives tokens, cache reads and costs, and
`check_trace` runs over the record and every request. `run_eval` does this for many pairs.

The runner is the host: it writes the system prompt, a restored log and a demonstration into the
record, then sends each turn's user message; in a turn played as `observations` it sends the
output of every command the agent typed as the next user message, one `run_turn` each. A turn
the loop's round limit ends before the agent's reply goes on after `CONTINUE`, so a scaled
session plays every step it planned.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..compaction import is_summary_instruction
from ..errors import (
    CompactionError,
    ContextOverflowError,
    OverflowRetriesExhaustedError,
    ProviderError,
)
from ..harness import read_harness
from ..loop import Tool, ToolOutput
from ..messages import Message
from ..policy import resolve_compaction_policy
from ..providers.base import CompletionRequest
from ..recall import HISTORY_TOOL_NAMES
from ..record import CompactionBoundary, MemoryRecord, MessageAppended, Record, Usage
from ..tokens import TokenMeter
from ..trace import check_trace
from .agent import ScriptedAgent
from .arms import (
    ArmContext,
    BuiltArm,
    FoldOnlyArm,
    NaiveArm,
    ObservationMaskingArm,
    build_current,
    build_hooks,
    build_none,
)
from .diagnose import loss_causes
from .metrics import PRICES, PRIMARY, RULES, billed_cost, cache_hit_rate, replay_usage
from .peers import CODEX_PROMPT, CodexArm, LangChainArm, OpenHandsArm
from .personalities import check_personality
from .provider import Exchange, SimClock, SimProvider
from .summarizer import TRANSCRIPT_OPEN, ExtractiveSummarizer
from .tasks import TASK_NAMES, Task, build_task, with_idle_gaps

__all__ = [
    "ARMS",
    "ARM_NAMES",
    "CONTINUE",
    "PEER_ARMS",
    "ArmSpec",
    "EvalResults",
    "RunResult",
    "is_summary_call",
    "run_eval",
    "run_session",
]

AGENT_SECONDS = 8.0  # simulated time per agent request (model + tool)
SUMMARY_SECONDS = 2.0

CONTINUE = "Continue where you stopped."
"""What the host sends when the loop's round limit ended a turn before the agent's reply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmSpec:
    """An arm: its name, how to build its loop, and one line on what it does."""

    name: str
    build: Callable[[ArmContext], BuiltArm]
    summary: str


ARMS: dict[str, ArmSpec] = {
    spec.name: spec
    for spec in (
        ArmSpec(name="none", build=build_none, summary="no context management"),
        ArmSpec(
            name="naive",
            build=build_hooks(NaiveArm),
            summary="cold summary of everything at the threshold, no fold",
        ),
        ArmSpec(
            name="fold_only",
            build=build_hooks(FoldOnlyArm),
            summary="the engine's fold stage alone, never a summary",
        ),
        ArmSpec(
            name="current",
            build=build_current,
            summary="this library: warm-prefix summary, user messages kept (packaged harness)",
        ),
        ArmSpec(
            name="masking",
            build=build_hooks(ObservationMaskingArm),
            summary="observation masking, last 5 tool outputs (SWE-agent style)",
        ),
        ArmSpec(
            name="openhands",
            build=build_hooks(OpenHandsArm),
            summary="half-cut cold summary, keep first (OpenHands condenser style)",
        ),
        ArmSpec(
            name="langchain",
            build=build_hooks(LangChainArm),
            summary="keep last 20, cold summary of a trimmed input (LangChain style)",
        ),
        ArmSpec(
            name="codex",
            build=build_hooks(CodexArm),
            summary="full warm summary + recent user messages (Codex CLI style)",
        ),
    )
}
ARM_NAMES: tuple[str, ...] = tuple(ARMS)
PEER_ARMS: tuple[str, ...] = ("masking", "openhands", "langchain", "codex")


def is_summary_call(request: CompletionRequest) -> bool:
    """Whether `request` asks for a summary (any arm's way of asking)."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user":
        return False
    text = last.text
    return is_summary_instruction(text) or text == CODEX_PROMPT or TRANSCRIPT_OPEN in text


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """Everything measured on one (task, arm) session; `standard.md` defines each field."""

    task: str
    arm: str
    seed: int
    window: int
    threshold: int
    rounds: int
    planned_rounds: int
    needles: int
    recalled: tuple[str, ...]
    recall: float
    recall_by_carrier: dict[str, tuple[int, int]]
    recall_with_tools: float
    recall_requests: int
    recall_tokens: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cache_hit_rate: float | None
    summary_calls: int
    summary_prompt_tokens: int
    summary_cached_tokens: int
    summary_cache_hit_rate: float | None
    compactions: int
    no_assistant_requests: int
    overflow_deaths: int
    death: str | None
    cost_usd: dict[str, float]
    cache_hit_rate_by_rules: dict[str, float | None]
    trace: dict[str, int] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    pressure: tuple[int, ...] = ()
    summarizer: str = "checkpoint"
    requests_over_estimate: int = 0
    failed_requests: int = 0
    focused_recall: float | None = None  # recall of the needles a steered compaction named
    cold_compactions: int = 0  # compactions the cold-cache rule started (`--idle-gaps`)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = asdict(self)
        out["recalled"] = list(self.recalled)
        out["pressure"] = list(self.pressure)
        out["recall_by_carrier"] = {k: list(v) for k, v in self.recall_by_carrier.items()}
        return out


def _tools(task: Task, agent: ScriptedAgent) -> tuple[Tool, ...]:
    def make(name: str) -> Callable[[Mapping[str, Any]], Any]:
        async def run(arguments: Mapping[str, Any]) -> ToolOutput:
            return await agent.run_tool(name, arguments)

        return run

    return tuple(
        Tool(name=name, fn=make(name), description=f"The {name} tool.") for name in task.tools
    )


def head_size(messages: Sequence[Message]) -> int:
    """The head of a request: its leading system messages and the user message right after."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n + 1 if n < len(messages) and messages[n].role == "user" else n


class _AssistantWatch:
    """Counts agent requests after the record's first compaction with no assistant message.

    Only messages after the request's head count (`head_size`); see `no_assistant_requests`.
    """

    def __init__(self, record: Record) -> None:
        self.record = record
        self._scanned = 0
        self._compacted = False
        self.count = 0

    def see(self, request: CompletionRequest) -> None:
        """Look at one agent request about to be answered."""
        entries = self.record.entries
        while not self._compacted and self._scanned < len(entries):
            self._compacted = isinstance(entries[self._scanned].event, CompactionBoundary)
            self._scanned += 1
        if not self._compacted:
            return
        messages = request.messages
        if not any(m.role == "assistant" for m in messages[head_size(messages) :]):
            self.count += 1


class _OverEstimate:
    """Counts requests the sending arm's own estimate put over what the window allows.

    An agent request is over when the arm's pressure (its meter's estimate of the projection it
    sends) exceeds the window less the policy's output reserve; a summary request when the
    arm's meter prices its messages plus the output it asks for above the window. An arm
    without a meter (`none`) is priced by a fresh static estimate.
    """

    def __init__(self, window: int, model: str | None) -> None:
        self.window = window
        self.model = model
        self.arm: BuiltArm | None = None
        self.count = 0

    def see(self, request: CompletionRequest) -> None:
        """Look at one request about to be sent."""
        arm = self.arm
        if arm is None:
            return
        meter = arm.meter if arm.meter is not None else TokenMeter(self.model)
        if is_summary_call(request):
            size = sum(meter.estimate(m) for m in request.messages)
            over = size + (request.max_output_tokens or 0) > self.window
        else:
            size = arm.pressure() if arm.pressure is not None else meter.pressure(request.messages)
            over = size > arm.policy.limit_tokens
        self.count += over


@contextlib.contextmanager
def scratch_directory() -> Iterator[str]:
    """A new private directory for one session's files, removed afterwards.

    Its name is the first free `steerable-sim-N` in the temporary directory rather than a random
    one: spill pointers show the path, and a random name would change the session's token counts
    (and so its figures) from one run to the next. The path itself still counts: another
    `TMPDIR` can shift the figures slightly. `os.mkdir` never reuses or follows what is already
    there, so concurrent runs take different numbers.
    """
    # Resolved: a spill directory under a symlinked parent is refused (macOS's /tmp and /var
    # are symlinks into /private).
    root = Path(os.path.realpath(tempfile.gettempdir()))
    for n in itertools.count():
        path = root / f"steerable-sim-{n}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        break
    try:
        yield os.fspath(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def run_session(
    task: Task,
    arm: str,
    *,
    model: str | None = None,
    summarizer: ExtractiveSummarizer | None = None,
    harness: Mapping[str, Any] | None = None,
    provider: str = PRIMARY,
) -> RunResult:
    """Play `task` with `arm` and measure it (see the module docstring).

    `model` names the model whose policy and token calibration every arm uses (the window is
    always the task's); `None` is the unknown-model default. `harness` (from `read_harness`)
    replaces the packaged harness of the `current` arm; other arms ignore it. `provider` names
    the cache rules and prices the session runs under (`RULES`); the others are replayed.
    """
    if provider not in RULES:
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(RULES)}")
    spec = ARMS[arm]
    clock = SimClock()
    agent = ScriptedAgent(task)
    summarize = summarizer if summarizer is not None else ExtractiveSummarizer()
    record = MemoryRecord()
    watch = _AssistantWatch(record)
    over = _OverEstimate(task.window, model)

    def answer(request: CompletionRequest) -> Message:
        if is_summary_call(request):
            clock.advance(SUMMARY_SECONDS)
            return Message.assistant(summarize(request))
        clock.advance(AGENT_SECONDS)
        watch.see(request)
        return agent.respond(request)

    sim = SimProvider(
        answer,
        window=task.window,
        rules=RULES[provider](),
        clock=clock,
        token_scale=task.token_scale,
        on_request=over.see,
    )
    record.append_message(Message.system(task.system))
    for written in (*task.restored, *task.demonstration):
        record.append_message(written)
    policy = resolve_compaction_policy(model, task.window)
    death: str | None = None
    with scratch_directory() as scratch:
        ctx = ArmContext(
            record=record,
            provider=sim,
            policy=policy,
            tools=_tools(task, agent),
            spill_dir=Path(scratch),
            summary_max_tokens=min(4096, policy.effective_reserved_output_tokens),
            model=model,
            harness=harness,
            clock=clock,
            cache_terms=_cache_terms(provider),
        )
        built = spec.build(ctx)
        over.arm = built
        for turn in task.turns:
            clock.advance(turn.idle_seconds)  # the user comes back: the cache may be gone
            agent.begin(turn)
            if turn.compact_focus is not None:
                built.loop.request_compact(turn.compact_focus)
            message: Message | None = turn.user
            try:
                while message is not None:  # observations come back as further user messages
                    ended = await built.loop.run_turn(message)
                    message = agent.observation()
                    if message is None and ended.stop == "max_rounds":
                        # The loop's round limit ended the turn before the agent's reply (a
                        # long turn of a scaled session): the user says to go on, as one would.
                        message = Message.user(CONTINUE)
            except (ContextOverflowError, OverflowRetriesExhaustedError):
                death = "overflow"
                break
            except ProviderError as exc:
                death = f"provider error: {exc.message[:160]}"
                break
            except CompactionError as exc:  # an engine failure ends the session: report it
                death = f"engine error: {type(exc).__name__}: {str(exc)[:160]}"
                break
    result = await _measure(task, arm, agent, sim, record, built, death, watch.count, provider)
    result = replace(
        result,
        summarizer=summarize.personality,
        requests_over_estimate=over.count,
        failed_requests=sum(1 for e in sim.exchanges if e.error is not None),
    )
    # Blame what hid each fact from the context: the history search comes after the answers.
    entries = record.entries
    searched = next(
        (
            i
            for i, e in enumerate(entries)
            if isinstance(e.event, MessageAppended)
            and any(c.name in HISTORY_TOOL_NAMES for c in e.event.message.tool_calls)
        ),
        len(entries),
    )
    lost = loss_causes(task.needles, entries[:searched], result.recalled, agent.steps)
    return replace(result, lost=lost, model=model)


def _cache_terms(provider: str) -> dict[str, float]:
    """What a host knows of the simulated provider's cache: its lifetime and its prices."""
    rules, price = RULES[provider](), PRICES[provider]
    return {
        "cache_ttl_seconds": rules.ttl_seconds,
        "cache_read_price_ratio": price.cache_read / price.input,
        "cache_write_price_ratio": max(price.cache_write / price.input, 1.0),
        "output_price_ratio": price.output / price.input,
    }


async def _billing(
    exchanges: Sequence[Exchange], usages: Sequence[Usage], task: Task, provider: str
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Cost and cache-hit rate under every provider's cache rules (`provider`'s as billed)."""
    costs: dict[str, float] = {}
    rates: dict[str, float | None] = {}
    for name, rules in RULES.items():
        billed = (
            usages
            if name == provider
            else await replay_usage(exchanges, rules(), task.window, task.token_scale)
        )
        costs[name] = round(billed_cost(billed, PRICES[name]), 6)
        rates[name] = cache_hit_rate(billed)
    return costs, rates


def _focused(task: Task, correct: Mapping[str, bool]) -> float | None:
    """In-context recall of the needles about a subject (the `steered` task), else `None`."""
    about = [n for n in task.needles if n.subject is not None]
    return sum(correct[n.id] for n in about) / len(about) if about else None


def _recall_by_carrier(task: Task, correct: Mapping[str, bool]) -> dict[str, tuple[int, int]]:
    """(recalled, planted) needles per carrier."""
    by_carrier: dict[str, tuple[int, int]] = {}
    for needle in task.needles:
        hit, total = by_carrier.get(needle.carrier, (0, 0))
        by_carrier[needle.carrier] = (hit + correct[needle.id], total + 1)
    return by_carrier


@dataclass(frozen=True, slots=True)
class _Usages:
    """The usage of every answered request, split into agent turns and summary calls."""

    answered: tuple[Usage, ...]
    turns: tuple[Usage, ...]
    summaries: tuple[Usage, ...]

    @classmethod
    def of(cls, exchanges: Sequence[Exchange]) -> _Usages:
        """The usages of `exchanges` that got a completion, in order."""
        answered = [(e.completion.usage, e.request) for e in exchanges if e.completion is not None]
        flagged = [(usage, is_summary_call(request)) for usage, request in answered]
        return cls(
            answered=tuple(u for u, _ in flagged),
            turns=tuple(u for u, summary in flagged if not summary),
            summaries=tuple(u for u, summary in flagged if summary),
        )


async def _measure(
    task: Task,
    arm: str,
    agent: ScriptedAgent,
    provider: SimProvider,
    record: MemoryRecord,
    built: BuiltArm,
    death: str | None,
    no_assistant: int,
    billed_by: str,
) -> RunResult:
    exchanges = provider.exchanges
    usages = _Usages.of(exchanges)
    costs, rates = await _billing(exchanges, usages.answered, task, billed_by)
    correct = agent.recall()
    with_tools = agent.recall_with_tools()
    # The question turn's requests after its first are what recall cost: the last ones sent.
    recall_usage = usages.turns[len(usages.turns) - agent.recall_requests :]
    report = check_trace(
        record,
        [e.request for e in exchanges],
        policy=built.trace_policy,
        is_summary=is_summary_call,
    )
    return RunResult(
        task=task.name,
        arm=arm,
        seed=task.seed,
        window=task.window,
        threshold=built.policy.threshold_tokens,
        rounds=agent.requests - agent.recall_requests,
        planned_rounds=task.rounds,
        needles=len(task.needles),
        recalled=tuple(i for i, ok in correct.items() if ok),
        recall=sum(correct.values()) / len(correct) if correct else 0.0,
        recall_by_carrier=_recall_by_carrier(task, correct),
        focused_recall=_focused(task, correct),
        recall_with_tools=sum(with_tools.values()) / len(with_tools) if with_tools else 0.0,
        recall_requests=agent.recall_requests,
        recall_tokens=sum(u.prompt_tokens for u in recall_usage) if agent.recall_requests else 0,
        requests=len(usages.answered),
        prompt_tokens=sum(u.prompt_tokens for u in usages.answered),
        cached_tokens=sum(u.cached_tokens for u in usages.answered),
        completion_tokens=sum(u.completion_tokens for u in usages.answered),
        cache_hit_rate=cache_hit_rate(usages.answered),
        summary_calls=sum(1 for e in exchanges if is_summary_call(e.request)),
        summary_prompt_tokens=sum(u.prompt_tokens for u in usages.summaries),
        summary_cached_tokens=sum(u.cached_tokens for u in usages.summaries),
        summary_cache_hit_rate=cache_hit_rate(usages.summaries),
        compactions=sum(1 for e in record.entries if isinstance(e.event, CompactionBoundary)),
        cold_compactions=sum(
            1
            for e in record.entries
            if isinstance(e.event, CompactionBoundary) and e.event.trigger == "cold_cache"
        ),
        no_assistant_requests=no_assistant,
        overflow_deaths=int(death == "overflow"),
        death=death,
        cost_usd=costs,
        cache_hit_rate_by_rules=rates,
        trace={str(check): n for check, n in report.counts().items()},
        pressure=tuple(u.prompt_tokens for u in usages.turns),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResults:
    """All runs of one evaluation, and how to write them as JSON."""

    seed: int
    scale: float
    tasks: tuple[Task, ...]
    runs: tuple[RunResult, ...]
    model: str | None = None
    summary_ratio: int = 16
    harness: str | None = None  # the `current` arm's harness file; None: the packaged one
    summarizers: tuple[str, ...] = ("checkpoint",)
    idle_gaps: tuple[float, ...] = ()  # seconds the user was away between turns, in turn
    provider: str = PRIMARY  # the cache rules the sessions ran under

    def run(self, task: str, arm: str, summarizer: str | None = None) -> RunResult:
        """The run of `arm` on `task` (under `summarizer`; default: the first one run)."""
        wanted = self.summarizers[0] if summarizer is None else summarizer
        for r in self.runs:
            if r.task == task and r.arm == arm and r.summarizer == wanted:
                return r
        raise KeyError((task, arm, wanted))

    def under(self, summarizer: str) -> EvalResults:
        """These results restricted to the runs under one summarizer personality."""
        if summarizer not in self.summarizers:
            raise KeyError(summarizer)
        return replace(
            self,
            runs=tuple(r for r in self.runs if r.summarizer == summarizer),
            summarizers=(summarizer,),
        )

    def worst_by_arm(self) -> dict[str, tuple[str, float]]:
        """Per arm, the summarizer personality it recalled least under, and that mean recall."""
        worst: dict[str, tuple[str, float]] = {}
        for personality in self.summarizers:
            runs = self.under(personality).runs
            for arm in dict.fromkeys(r.arm for r in runs):
                mine = [r for r in runs if r.arm == arm]
                recall = sum(r.recall for r in mine) / len(mine)
                if arm not in worst or recall < worst[arm][1]:
                    worst[arm] = (personality, recall)
        return worst

    def to_json(self) -> dict[str, Any]:
        """The `results.json` document (see `standard.md`)."""
        return {
            "format": "steerable-compaction-eval/1",
            "seed": self.seed,
            "scale": self.scale,
            "model": self.model,
            "summary_ratio": self.summary_ratio,
            "summarizers": list(self.summarizers),
            "idle_gaps": list(self.idle_gaps),
            "harness": self.harness,
            "primary_cache_rules": self.provider,
            "prices_per_million_tokens": {k: asdict(v) for k, v in PRICES.items()},
            "tasks": {
                t.name: {
                    "description": t.description,
                    "window": t.window,
                    "rounds": t.rounds,
                    "needles": [
                        {"id": n.id, "carrier": n.carrier, "position": n.position, "step": n.step}
                        for n in t.needles
                    ],
                }
                for t in self.tasks
            },
            "arms": {name: ARMS[name].summary for name in dict.fromkeys(r.arm for r in self.runs)},
            "runs": [r.to_dict() for r in self.runs],
        }


def run_eval(
    tasks: Sequence[str] = TASK_NAMES,
    arms: Sequence[str] = ARM_NAMES,
    *,
    seed: int = 0,
    scale: float = 1.0,
    model: str | None = None,
    summary_ratio: int = 16,
    progress: Callable[[int, int, str, str], None] | None = None,
    harness: str | os.PathLike[str] | None = None,
    summarizers: Sequence[str] = ("checkpoint",),
    idle_gaps: Sequence[float] = (),
    provider: str = PRIMARY,
) -> EvalResults:
    """Run every arm on every task; `progress(done, total, task, arm)` after each run.

    `summary_ratio` sets how much the simulated summarizer writes (see `ExtractiveSummarizer`);
    `summarizers` names the personalities it writes in (`PERSONALITIES`), each a full run.
    `harness` is a harness file for the `current` arm, to evaluate a configuration of your own
    against the same baselines (the other arms keep the default policy); it is checked, policy
    knobs included, for every task's window before any session runs (`ConfigError`).
    `idle_gaps` (seconds) puts the user away before every turn but the first, the gaps taken in
    turn (`with_idle_gaps`): the prompt cache expires in the longer ones. `provider` names the
    cache rules the sessions run under (`RULES`; the others' costs are replayed).
    """
    if provider not in RULES:
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(RULES)}")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; known: {', '.join(ARM_NAMES)}")
    personalities = tuple(dict.fromkeys(check_personality(p) for p in summarizers))
    if not personalities:
        raise ValueError("no summarizer personality to run")
    built = tuple(with_idle_gaps(build_task(name, seed, scale=scale), idle_gaps) for name in tasks)
    config = None if harness is None else read_harness(harness)
    if config is not None:
        for task in built:
            resolve_compaction_policy(model, task.window, **config["compaction"])

    async def run_all() -> list[RunResult]:
        out: list[RunResult] = []
        total = len(built) * len(arms) * len(personalities)
        for personality in personalities:
            summarizer = ExtractiveSummarizer(ratio=summary_ratio, personality=personality)
            for task in built:
                for arm in arms:
                    out.append(
                        await run_session(
                            task,
                            arm,
                            model=model,
                            summarizer=summarizer,
                            harness=config,
                            provider=provider,
                        )
                    )
                    if progress is not None:
                        progress(len(out), total, task.name, arm)
        return out

    runs = tuple(asyncio.run(run_all()))
    return EvalResults(
        seed=seed,
        scale=scale,
        tasks=built,
        runs=runs,
        model=model,
        summary_ratio=summary_ratio,
        harness=None if harness is None else os.fspath(harness),
        summarizers=personalities,
        idle_gaps=tuple(idle_gaps),
        provider=provider,
    )
