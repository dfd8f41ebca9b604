"""The offline demo: a scripted code-reading agent in a virtual repository, and the providers.

`Workspace` is a deterministic in-memory repository with `list_files`, `read_file` and `grep`
tools. `ScriptedAgent` answers requests as a code-reading agent would: for each user input it
reads files (as many as the input asks for, `read 12 files`, else `default_reads`), then
replies; asked for a checkpoint summary (the warm-prefix replay), it writes one in the fixed
sections. `build_provider` makes the demo's `CachingProvider` around that agent, or a real
provider (`openai`, `anthropic`, `local`; their SDKs are imported lazily). `run_demo` drives a
long session through the real loop (`Session`, the sidecar's engine) and draws the live
pressure bar, one line per compaction, and the PNG chart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, TypeAlias

from .charts import MissingExtraError, pressure_series, render_pressure_chart
from .compaction import is_summary_instruction
from .errors import ConfigError
from .loop import Tool
from .messages import Message, ToolCall
from .providers.base import Completion, CompletionRequest, Provider, StreamDone, StreamEvent
from .testing import CacheRules, CachingProvider

__all__ = [
    "DEMO_PROMPTS",
    "DEMO_WINDOW",
    "PROVIDERS",
    "SYSTEM_PROMPT",
    "DemoOptions",
    "DemoResult",
    "ProviderKind",
    "ScriptedAgent",
    "ScriptedOverProvider",
    "Workspace",
    "build_provider",
    "default_window",
    "run_demo",
]

ProviderKind: TypeAlias = Literal["demo", "openai", "anthropic", "local"]
PROVIDERS: tuple[ProviderKind, ...] = ("demo", "openai", "anthropic", "local")
DEMO_WINDOW = 8192
LOCAL_WINDOW = 4096
SYSTEM_PROMPT = (
    "You are a careful code-reading agent working in a repository you can only see through "
    "tools. Read files with read_file, find text with grep, and answer briefly."
)
DEMO_PROMPTS: tuple[str, ...] = (
    "Map every module under src/: read 30 files and note each one's public functions.",
    "Find every TODO and say which module owns it (read 30 files).",
    "Check the tests against the modules you mapped (read 30 files).",
    "Write the final report of what you found (read 12 files to double-check).",
)

_PACKAGES = ("core", "api", "store", "jobs")
_NAMES = (
    "auth billing cache config events export feeds geo health images invoices jobs ledger "
    "mailer metrics notify orders payments quotas ratelimit reports search sessions storage "
    "tenants tokens uploads users webhooks workers"
).split()
_VERBS = "load save parse render check merge split build apply resolve fetch index".split()
_NOUNS = "record batch entry page token item event frame chunk key window plan".split()
_READS = re.compile(r"\bread (\d{1,3})\b", re.I)


# -- the virtual repository ----------------------------------------------------------------------


class Workspace:
    """A deterministic in-memory repository: modules under `src/`, their tests under `tests/`."""

    def __init__(self, *, seed: int = 7) -> None:
        rng = random.Random(seed)
        files: dict[str, str] = {}
        for i, name in enumerate(_NAMES):
            package = _PACKAGES[i % len(_PACKAGES)]
            files[f"src/{package}/{name}.py"] = _module(rng, name)
        for name in _NAMES[::3]:
            files[f"tests/test_{name}.py"] = _test_module(rng, name)
        self.files = dict(sorted(files.items()))

    @property
    def paths(self) -> list[str]:
        """Every file path, sorted."""
        return list(self.files)

    def todos(self, path: str) -> list[str]:
        """The TODO lines of one file."""
        return [line.strip() for line in self.files[path].splitlines() if "TODO" in line]

    def tools(self) -> list[Tool]:
        """`list_files`, `read_file` and `grep` over this workspace."""
        return [
            Tool(
                name="list_files",
                fn=self._list_files,
                description="List every file in the repository.",
            ),
            Tool(
                name="read_file",
                fn=self._read_file,
                description="Read one file of the repository.",
                parameters={
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "the file path"}},
                    "required": ["path"],
                },
            ),
            Tool(
                name="grep",
                fn=self._grep,
                description="Find the lines containing a text, with file and line number.",
                parameters={
                    "type": "object",
                    "properties": {"pattern": {"type": "string", "description": "plain text"}},
                    "required": ["pattern"],
                },
            ),
        ]

    async def _list_files(self, arguments: Mapping[str, Any]) -> str:
        return "\n".join(self.paths)

    async def _read_file(self, arguments: Mapping[str, Any]) -> str:
        path = arguments.get("path")
        if not isinstance(path, str) or path not in self.files:
            raise FileNotFoundError(f"no such file: {path!r}")
        return self.files[path]

    async def _grep(self, arguments: Mapping[str, Any]) -> str:
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("pattern must be a non-empty string")
        hits = [
            f"{path}:{n}: {line.strip()}"
            for path, text in self.files.items()
            for n, line in enumerate(text.splitlines(), 1)
            if pattern in line
        ]
        more = f"\n… {len(hits) - 12} more" if len(hits) > 12 else ""
        return "\n".join(hits[:12]) + more if hits else "no matches"


def _module(rng: random.Random, name: str) -> str:
    lines = [f'"""The {name} service: storage, validation and the public API."""', ""]
    lines += ["from __future__ import annotations", "", "import json", "import logging", ""]
    lines += [f'logger = logging.getLogger("app.{name}")', ""]
    pairs = rng.sample([(v, n) for v in _VERBS for n in _NOUNS], rng.randint(3, 5))
    for verb, noun in pairs:
        lines += [
            "",
            f"def {verb}_{noun}(data: dict, *, strict: bool = False) -> dict:",
            f'    """{verb.capitalize()} one {noun} of {name}; raise ValueError when strict."""',
            f'    if strict and "{noun}_id" not in data:',
            f'        raise ValueError("missing {noun}_id")',
            f'    logger.debug("{verb} %s", data.get("{noun}_id"))',
            f'    return {{**data, "{noun}": json.dumps(data, sort_keys=True)}}',
        ]
        if rng.random() < 0.25:
            lines.insert(-1, f"    # TODO: {verb} every {noun} in one batch, not one at a time")
    return "\n".join(lines) + "\n"


def _test_module(rng: random.Random, name: str) -> str:
    lines = [f'"""Tests for the {name} service."""', ""]
    for k in range(rng.randint(2, 4)):
        lines += ["", f"def test_{name}_{k}() -> None:", f"    assert {name!r}.isidentifier()"]
    return "\n".join(lines) + "\n"


# -- the scripted agent --------------------------------------------------------------------------


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
        if self._remaining <= 0:
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
        return (
            f"I read {len(read)} files ({names}). {len(todos)} of them hold TODOs"
            + (f", e.g. {todos[0]}: {self.workspace.todos(todos[0])[0]}" if todos else "")
            + "."
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


# -- providers -----------------------------------------------------------------------------------


def default_window(kind: str) -> int | None:
    """The window a provider kind runs with unless told: demo 8192, local 4096, else the model's."""
    return {"demo": DEMO_WINDOW, "local": LOCAL_WINDOW}.get(kind)


def build_provider(
    kind: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    window: int | None = None,
    agent: Callable[[CompletionRequest], Message] | None = None,
    scripted: bool | None = None,
) -> Provider:
    """The provider named `kind`; SDKs are imported here, lazily.

    `demo` is a `CachingProvider` (OpenAI cache rules) answering with `agent`; `openai` and
    `anthropic` need `model` (and their extra); `local` runs a GGUF in-process through
    `providers.llamacpp` (`model` is the GGUF path, default Gemma 3 270M; `window` its n_ctx).
    `scripted` wraps a real provider in `ScriptedOverProvider` with `agent` (default: only for
    `local`, whose small models cannot call tools).

    Raises:
        ConfigError: an unknown kind, a missing model or a bad combination.
        MissingExtraError: the provider's SDK is not installed.
    """
    if kind not in PROVIDERS:
        raise ConfigError("provider", kind, f"one of {list(PROVIDERS)}")
    if kind == "demo":
        if agent is None:
            agent = ScriptedAgent(Workspace())
        return CachingProvider(agent, window=window or DEMO_WINDOW, rules=CacheRules.openai())
    provider: Provider
    if kind == "local":
        if base_url is not None:
            raise ConfigError(
                "base_url",
                base_url,
                "none for --provider local (a llama.cpp server is "
                "--provider openai --base-url URL)",
            )
        try:
            from .providers.llamacpp import LlamaCppProvider
        except ImportError as exc:
            raise MissingExtraError(
                "steerable_compaction.providers.llamacpp", "local", "--provider local"
            ) from exc
        provider = LlamaCppProvider(model, n_ctx=window or LOCAL_WINDOW)
    else:
        if not model:
            raise ConfigError("model", model, f"a model name for --provider {kind}")
        if kind == "openai":
            try:
                from .providers.openai import OpenAIProvider
            except ImportError as exc:
                raise MissingExtraError("openai", "openai", "--provider openai") from exc
            if base_url is None and not os.environ.get("OPENAI_API_KEY"):
                raise ConfigError(
                    "OPENAI_API_KEY", None, "an API key in the environment (or --base-url URL)"
                )
            provider = OpenAIProvider(model, base_url=base_url)
        else:
            try:
                from .providers.anthropic import AnthropicProvider
            except ImportError as exc:
                raise MissingExtraError("anthropic", "anthropic", "--provider anthropic") from exc
            if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
                raise ConfigError(
                    "ANTHROPIC_API_KEY",
                    None,
                    "an API key (or ANTHROPIC_AUTH_TOKEN) in the environment",
                )
            provider = AnthropicProvider(model, base_url=base_url)
    if scripted if scripted is not None else kind == "local":
        provider = ScriptedOverProvider(provider, agent or ScriptedAgent(Workspace()))
    return provider


# -- the demo run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """How to run the demo (the CLI's flags)."""

    directory: Path = Path("steerable-demo")
    provider: str = "demo"
    model: str | None = None
    base_url: str | None = None
    window: int | None = None
    prompts: tuple[str, ...] = DEMO_PROMPTS
    manual_before_turn: int | None = 4  # 1-based turn before which a manual compaction is asked
    chart: bool = True
    scripted: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoResult:
    """What a demo run produced."""

    record: Path
    chart: Path | None
    rounds: int
    compactions: int
    prompt_tokens: int
    cached_tokens: int


def _free_name(directory: Path) -> tuple[Path, Path]:
    n = 1
    while (directory / f"session-{n}.db").exists():
        n += 1
    return directory / f"session-{n}.db", directory / f"pressure-{n}.png"


class PressureView:
    """The terminal view: a live pressure bar, and one line per compaction.

    A compaction's line waits for the next request, so it can show what that request really
    measured next to the boundary's recorded (estimated) post tokens.
    """

    def __init__(self, out: TextIO, *, window: int, threshold: int, live: bool) -> None:
        self.out = out
        self.window = window
        self.threshold = threshold
        self.live = live
        self.round = 0
        self.pressure = 0
        self._bar_shown = False
        self._pending: list[tuple[Mapping[str, Any], int]] = []

    def bar(self, width: int = 40) -> str:
        """`round  12 [#####....|..] 3,210 / 8,192  39%` with `|` at the threshold."""
        filled = min(width, round(width * self.pressure / self.window))
        mark = min(width - 1, round(width * self.threshold / self.window))
        cells = ["#" if i < filled else "." for i in range(width)]
        cells[mark] = "|" if mark >= filled else "!"
        share = self.pressure / self.window
        return (
            f"round {self.round:>4} [{''.join(cells)}] {self.pressure:>7,} / {self.window:,}"
            f"  {share:4.0%}"
        )

    def _clear(self) -> None:
        if self.live and self._bar_shown:
            self.out.write("\r" + " " * 78 + "\r")
            self._bar_shown = False

    def line(self, text: str) -> None:
        """Print a line above the bar."""
        self._clear()
        self.out.write(text + "\n")
        self._show()

    def _show(self) -> None:
        if self.live and self.round:
            self.out.write("\r" + self.bar())
            self.out.flush()
            self._bar_shown = True

    def _flush_pending(self, measured: int | None) -> None:
        pending, self._pending = self._pending, []
        for event, before in pending:
            self.line(_compaction_line(event, before, measured))

    def on_event(self, event: Mapping[str, Any]) -> None:
        """Take one session event (see `sidecar.entry_event`)."""
        kind = event["type"]
        if kind in ("tool_calls", "reply"):
            usage = event.get("usage") or {}
            self.round += 1
            self.pressure = int(usage.get("prompt_tokens", self.pressure))
            self._flush_pending(self.pressure if usage else None)
            if self.live:
                self._clear()
                self._show()
            elif self.round % 10 == 0:
                self.out.write(self.bar() + "\n")
        elif kind == "user":
            self._flush_pending(None)
            self.line(f"\nturn: {_short(event['message'], 90)}")
        elif kind == "compaction":
            self._pending.append((event, self.round + 1))
        elif kind == "reminder":
            self.line(f"  reminder ({event['reason']}) appended for the model and the host")

    def finish(self) -> None:
        """Print what is still pending and end the live bar with a newline."""
        self._flush_pending(None)
        if self.live and self._bar_shown:
            self.out.write("\n")
            self._bar_shown = False


def _short(message: Mapping[str, Any], width: int) -> str:
    text = " ".join(
        str(p.get("text", "")) for p in message.get("parts", ()) if p.get("type") == "text"
    )
    return text if len(text) <= width else text[: width - 1] + "…"


def _compaction_line(event: Mapping[str, Any], before_round: int, measured: int | None) -> str:
    pre, post = int(event["pre_tokens"]), int(event["post_tokens"])
    text = (
        f"  compaction before round {before_round}: {event['action']} ({event['trigger']}) "
        f"{pre:,} -> {post:,} tokens"
    )
    if measured is not None:
        text += f" (next request: {measured:,})"
    summarizer = event.get("summarizer")
    if summarizer:
        prompt = int(summarizer["prompt_tokens"])
        cached = int(summarizer["cached_tokens"])
        text += f"; summarizer cache read {cached / max(prompt, 1):.0%} of {prompt:,}"
    elif event["action"] in ("compact", "micro_compact"):
        text += f"; folded {event.get('edits', 0)} tool results, no LLM call"
    return text


async def run_demo(options: DemoOptions, out: TextIO | None = None) -> DemoResult:
    """Run the demo session (see the module docstring); returns where things were written."""
    from .host.session import Session
    from .record import SqliteRecord

    stream = out if out is not None else sys.stdout
    directory = options.directory
    directory.mkdir(parents=True, exist_ok=True)
    record_path, chart_path = _free_name(directory)
    workspace = Workspace()
    agent = ScriptedAgent(workspace)
    window = options.window if options.window is not None else default_window(options.provider)
    provider = build_provider(
        options.provider,
        model=options.model,
        base_url=options.base_url,
        window=window,
        agent=agent,
        scripted=options.scripted,
    )
    record = SqliteRecord(record_path)
    try:
        session = Session(
            record,
            provider,
            model=options.model,
            window=window,
            tools=workspace.tools(),
            system=SYSTEM_PROMPT,
            spill_directory=directory / "spill",
        )
        policy = session.policy
        live = stream.isatty()
        view = PressureView(
            stream, window=policy.max_context_tokens, threshold=policy.threshold_tokens, live=live
        )
        stream.write(
            f"steerable-compaction demo: {provider.name} provider, window "
            f"{policy.max_context_tokens:,} tokens, compaction threshold "
            f"{policy.threshold_tokens:,}\nrecord: {record_path}\n"
        )
        for number, prompt in enumerate(options.prompts, 1):
            if number == options.manual_before_turn:
                session.request_compact()
                view.line("  (host asked for a manual compaction: agent.chat.compact)")
            await session.send(Message.user(prompt), sink=view.on_event)
        view.finish()
        series = pressure_series(record.entries)
        prompt_total = sum(series.prompt_tokens)
        cached_total = sum(series.cached_tokens)
        stream.write(
            f"\n{series.rounds} rounds, {len(series.compactions)} compactions, "
            f"{prompt_total:,} prompt tokens, {cached_total / max(prompt_total, 1):.0%} read "
            f"from the prompt cache; {record.message_count} raw messages kept in the record, "
            f"{len(record.projection)} visible to the model\n"
        )
        chart: Path | None = None
        if options.chart:
            try:
                chart = render_pressure_chart(
                    series,
                    chart_path,
                    threshold=policy.threshold_tokens,
                    window=policy.max_context_tokens,
                    title=f"steerable-compaction demo ({provider.name})",
                )
            except MissingExtraError as exc:
                stream.write(f"no chart: {exc}\n")
            else:
                stream.write(f"chart: {chart}\n")
        stream.write(f"inspect it: steerable-compaction inspect {record_path}\n")
        return DemoResult(
            record=record_path,
            chart=chart,
            rounds=series.rounds,
            compactions=len(series.compactions),
            prompt_tokens=prompt_total,
            cached_tokens=cached_total,
        )
    finally:
        record.close()


def run_demo_sync(options: DemoOptions, out: TextIO | None = None) -> DemoResult:
    """`run_demo` in a fresh event loop."""
    return asyncio.run(run_demo(options, out))
