"""The demo run: a long scripted session through the real loop, recorded in SQLite, charted.

`run_demo` checks the provider, its extra and key before it writes anything, then plays the
prompts through a `Session`, prints the pressure view and a closing line, and draws the chart.
A run that fails before the model answered once (a bad window, a refused key) removes every
file it created.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TextIO

from ..charts import MissingExtraError, PressureSeries, pressure_series, render_pressure_chart
from ..host.session import Session
from ..messages import Message
from ..policy import CompactionPolicy
from ..providers.base import Provider
from ..record import Record, SqliteRecord
from .agent import ScriptedAgent
from .providers import build_provider, default_window
from .view import PressureView
from .workspace import Workspace

__all__ = [
    "DEMO_PROMPTS",
    "SYSTEM_PROMPT",
    "DemoOptions",
    "DemoResult",
    "run_demo",
    "run_demo_sync",
]

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


class _RunFiles:
    """The run's next free `session-N.db` / `pressure-N.png`, and cleanup when it fails early.

    Leaving the block with an error before any reply was recorded removes every file the run
    created in `directory` (the store's side files too), and `directory` if the run made it.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._made = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        self._before = set(directory.iterdir())
        n = 1
        while (directory / f"session-{n}.db").exists():
            n += 1
        self.record = directory / f"session-{n}.db"
        self.chart = directory / f"pressure-{n}.png"
        self.answered = False

    def __enter__(self) -> _RunFiles:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or self.answered:
            return
        for path in set(self.directory.iterdir()) - self._before:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if self._made and not any(self.directory.iterdir()):
            self.directory.rmdir()


def _answered(record: Record) -> bool:
    return any(m.role == "assistant" for m in record.messages())


async def run_demo(options: DemoOptions, out: TextIO | None = None) -> DemoResult:
    """Run the demo session (see the module docstring); returns where things were written."""
    stream = out if out is not None else sys.stdout
    workspace = Workspace()
    window = options.window if options.window is not None else default_window(options.provider)
    provider = build_provider(
        options.provider,
        model=options.model,
        base_url=options.base_url,
        window=window,
        agent=ScriptedAgent(workspace),
        scripted=options.scripted,
    )
    with _RunFiles(options.directory) as files, SqliteRecord(files.record) as record:
        try:
            session = Session(
                record,
                provider,
                model=options.model,
                window=window,
                tools=workspace.tools(),
                system=SYSTEM_PROMPT,
                spill_directory=options.directory / "spill",
            )
            _header(stream, provider, session.policy, files.record)
            await _play(session, options, stream)
        finally:
            files.answered = _answered(record)
        series = pressure_series(record.entries)
        _totals(stream, series, record)
        chart = _chart(options, series, session.policy, provider, files.chart, stream)
        stream.write(f"inspect it: steerable-compaction inspect {files.record}\n")
        return DemoResult(
            record=files.record,
            chart=chart,
            rounds=series.rounds,
            compactions=len(series.compactions),
            prompt_tokens=sum(series.prompt_tokens),
            cached_tokens=sum(series.cached_tokens),
        )


def _header(stream: TextIO, provider: Provider, policy: CompactionPolicy, record: Path) -> None:
    stream.write(
        f"steerable-compaction demo: {provider.name} provider, window "
        f"{policy.max_context_tokens:,} tokens, compaction threshold "
        f"{policy.threshold_tokens:,}\nrecord: {record}\n"
    )


async def _play(session: Session, options: DemoOptions, stream: TextIO) -> None:
    """Send each prompt as a user turn, asking for a manual compaction before the one named."""
    policy = session.policy
    view = PressureView(
        stream,
        window=policy.max_context_tokens,
        threshold=policy.threshold_tokens,
        live=stream.isatty(),
    )
    for number, prompt in enumerate(options.prompts, 1):
        if number == options.manual_before_turn:
            session.request_compact()
            view.line("  (host asked for a manual compaction: agent.chat.compact)")
        await session.send(Message.user(prompt), sink=view.on_event)
    view.finish()


def _totals(stream: TextIO, series: PressureSeries, record: Record) -> None:
    prompt = sum(series.prompt_tokens)
    cached = sum(series.cached_tokens)
    stream.write(
        f"\n{series.rounds} rounds, {len(series.compactions)} compactions, "
        f"{prompt:,} prompt tokens, {cached / max(prompt, 1):.0%} read "
        f"from the prompt cache; {record.message_count} raw messages kept in the record, "
        f"{len(record.projection)} visible to the model\n"
    )


def _chart(
    options: DemoOptions,
    series: PressureSeries,
    policy: CompactionPolicy,
    provider: Provider,
    path: Path,
    stream: TextIO,
) -> Path | None:
    if not options.chart:
        return None
    try:
        chart = render_pressure_chart(
            series,
            path,
            threshold=policy.threshold_tokens,
            window=policy.max_context_tokens,
            title=f"steerable-compaction demo ({provider.name})",
        )
    except MissingExtraError as exc:
        stream.write(f"no chart: {exc}\n")
        return None
    stream.write(f"chart: {chart}\n")
    return chart


def run_demo_sync(options: DemoOptions, out: TextIO | None = None) -> DemoResult:
    """`run_demo` in a fresh event loop."""
    return asyncio.run(run_demo(options, out))
