"""The `steerable-compaction` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO, assert_never

from . import __version__
from .errors import CompactionError, RecordError, RecordLockedError
from .messages import Message
from .policy import resolve_compaction_policy
from .record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    MessageAppended,
    Record,
    Reminder,
    open_record,
)
from .record.stores import is_postgres_url

__all__ = ["describe_entry", "describe_message", "inspect_record", "main"]

_PREVIEW = 60


def _preview(text: str, width: int = _PREVIEW) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def describe_message(message: Message) -> str:
    """A one-line description of a message for tables."""
    calls = message.tool_calls
    result = message.tool_result
    bits: list[str] = [message.role]
    if result is not None:
        bits.append(f"result {result.call_id}{' (error)' if result.is_error else ''}")
    if calls:
        bits.append("calls " + ", ".join(c.name for c in calls))
    images = message.images
    if images:
        bits.append(f"{len(images)} image{'s' if len(images) > 1 else ''}")
    text = message.text
    bits.append(f"{len(text):,} chars")
    if text:
        bits.append(repr(_preview(text)))
    return "  ".join(bits)


def describe_entry(entry: Entry) -> tuple[str, str]:
    """The kind and a one-line detail of a record entry."""
    event = entry.event
    match event:
        case MessageAppended():
            detail = describe_message(event.message)
            usage = event.usage
            if usage is not None:
                detail += f"  [prompt {usage.prompt_tokens:,}, cached {usage.cached_tokens:,}]"
            return event.kind, detail
        case CompactionStart():
            return event.kind, (
                f"id={event.compaction_id} {event.action}/{event.trigger} "
                f"span={list(event.span)} pre={event.pre_tokens:,}"
            )
        case CompactionSummary():
            return event.kind, (
                f"id={event.compaction_id} {len(event.summary):,} chars {_preview(event.summary)!r}"
            )
        case CompactionBoundary():
            parts = [
                f"{event.action}/{event.trigger}",
                f"{event.pre_tokens:,} -> {event.post_tokens:,} tokens",
                f"replaced {event.replacement_count}",
            ]
            if event.compaction_id is not None:
                parts.insert(0, f"closes {event.compaction_id}")
            if event.edits:
                parts.append(f"{len(event.edits)} edits")
            if event.span is not None:
                parts.append(f"span={list(event.span)} -> {len(event.replacement)} messages")
            return event.kind, " ".join(parts)
        case Reminder():
            return event.kind, f"{event.reason}: {_preview(event.message.text)!r}"
        case CompactionAbandoned():
            return event.kind, f"id={event.compaction_id} {event.reason}"
        case _:
            assert_never(event)


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


_BRACKET = {
    "closed": "closed",
    "refused": "refused",
    "open": "UNCLOSED",
    "abandoned": "abandoned",
    "fold": "none",
    "v2": "v2 (none)",
}


def _compactions_table(record: Record, out: TextIO) -> None:
    compactions = record.compactions()
    if not compactions:
        out.write("(none)\n")
        return
    head = ["id", "bracket", "action", "trigger", "pre", "post", "replaced", "span", "seqs"]
    rows = [[*head, "retained"]]
    for c in compactions:
        seqs = "/".join(
            "-" if s is None else str(s) for s in (c.start_seq, c.summary_seq, c.boundary_seq)
        )
        rows.append(
            [
                c.compaction_id or "-",
                _BRACKET[c.status],
                c.action,
                c.trigger,
                f"{c.pre_tokens:,}",
                "-" if c.post_tokens is None else f"{c.post_tokens:,}",
                "-" if c.replacement_count is None else str(c.replacement_count),
                "-" if c.span is None else f"[{c.span[0]}, {c.span[1]})",
                seqs,
                "-" if c.retained is None else f"{c.retained[1]}/{c.retained[0]}",
            ]
        )
    _table(rows, out)
    out.write(
        "(seqs: start/summary/boundary; `compact` is a fold: a boundary alone, no LLM call; "
        "retained: facts the retention check kept / found missing from the summary)\n"
    )


def inspect_record(record: Record, out: TextIO, *, limit: int | None = None) -> None:
    """Print a record's events, its compactions and its projection size."""
    kind = type(record).__name__
    compactions = record.compactions()
    out.write(
        f"{record.location}  ({kind}, {len(record):,} events, {record.message_count:,} messages, "
        f"{len(compactions)} compactions, {len(record.projection):,} messages visible)\n\n"
    )
    entries = list(record.entries)
    shown = entries if limit is None else entries[-limit:]
    rows = [["seq", "kind", "detail"]]
    rows.extend([str(e.seq), *describe_entry(e)] for e in shown)
    if len(shown) < len(entries):
        out.write(f"(last {len(shown)} of {len(entries):,} events)\n")
    _table(rows, out)
    out.write("\ncompactions\n")
    _compactions_table(record, out)
    for bracket in record.projection.open_brackets:
        paid = "with a recorded summary" if bracket.summary is not None else "without a summary"
        out.write(
            f"warning: bracket {bracket.start.compaction_id} is unclosed ({paid}); "
            "its span stays visible\n"
        )


class CliError(CompactionError):
    """A command-line argument names something unusable (a directory, a missing folder)."""


_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_SUFFIXES = {".db", ".sqlite", ".sqlite3"}


def _existing_record(path: str) -> Path:
    """`path` as a record file to read: it exists and is a file."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{path}: is a directory, not a record file")
    if not p.exists():
        raise RecordError("no such record", path=p)
    return p


def _new_file(path: str, flag: str) -> Path:
    """`path` as a file to write: its directory must exist (the CLI creates none unasked)."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{flag} {path}: is a directory, not a file")
    if not p.parent.is_dir():
        raise CliError(f"{flag} {path}: no such directory {str(p.parent)!r}")
    return p


def _at_least(flag: str, value: int | None, low: int) -> None:
    """Refuse a count below `low` (`None`: not given)."""
    if value is not None and value < low:
        raise CliError(f"{flag} {value}: must be an integer >= {low}")


def _directory_to_be(path: str, flag: str) -> Path:
    """`path` as a directory to use or create: it, or its nearest existing parent, is one."""
    p = Path(path)
    for existing in (p, *p.parents):
        if existing.exists():
            if not existing.is_dir():
                raise CliError(f"{flag} {path}: {str(existing)!r} is not a directory")
            break
    return p


def _check_policy(model: str | None, window: int | None, harness: str | None = None) -> None:
    """Resolve the policy (and read the harness) now, so a bad value stops the command early."""
    from .harness import read_harness

    knobs = {} if harness is None else read_harness(harness)["compaction"]
    resolve_compaction_policy(model, window, **knobs)


def _open_for_reading(path: Path) -> Record:
    """Open a record read-only; a `.db` file that is neither SQLite nor JSONL says so."""
    try:
        return open_record(path, readonly=True)
    except RecordError as exc:
        if path.suffix.lower() not in _SQLITE_SUFFIXES:
            raise
        with path.open("rb") as fh:
            if fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
                raise
        raise RecordError(
            f"neither an SQLite database nor a JSONL record ({exc.reason})", path=path
        ) from None


def _cmd_inspect(args: argparse.Namespace) -> int:
    _at_least("--limit", args.limit, 1)
    if args.window is not None or args.model is not None:
        _check_policy(args.model, args.window)
    chart = None if args.chart is None else _new_file(args.chart, "--chart")
    if is_postgres_url(args.record):
        reading = open_record(args.record, readonly=True)
    else:
        reading = _open_for_reading(_existing_record(args.record))
    with reading as record:
        inspect_record(record, sys.stdout, limit=args.limit)
        if chart is not None:
            _inspect_chart(record, chart, args)
    return 0


def _inspect_chart(record: Record, chart: Path, args: argparse.Namespace) -> None:
    from .charts import pressure_series, render_pressure_chart

    threshold = window = None
    if args.window is not None or args.model is not None:
        policy = resolve_compaction_policy(args.model, args.window)
        threshold, window = policy.threshold_tokens, policy.max_context_tokens
    series = pressure_series(record.entries)
    path = render_pressure_chart(
        series,
        chart,
        threshold=threshold,
        window=window,
        title=f"Context pressure per round: {Path(args.record).name}",
    )
    print(
        f"\nchart: {path} ({series.rounds} rounds, {len(series.compactions)} compactions"
        + ("" if threshold is not None else "; pass --window or --model for the threshold")
        + ")"
    )


def _window(args: argparse.Namespace) -> int | None:
    from .demo import default_window

    return int(args.window) if args.window is not None else default_window(args.provider)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DEMO_PROMPTS, DemoOptions, run_demo

    _at_least("--reads", args.reads, 1)
    prompts = DEMO_PROMPTS[: args.turns]
    if args.reads is not None:
        prompts = tuple(re.sub(r"\bread \d+", f"read {args.reads}", p) for p in prompts)
    options = DemoOptions(
        directory=Path(args.dir),
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        window=_window(args),
        prompts=prompts,
        manual_before_turn=None if args.turns < len(DEMO_PROMPTS) else len(DEMO_PROMPTS),
        chart=not args.no_chart,
        scripted=args.scripted,
    )
    asyncio.run(run_demo(options, sys.stdout))
    return 0


@contextlib.contextmanager
def _removed_on_error(directory: Path) -> Iterator[None]:
    """Remove what the block created in `directory` if it fails (nothing is left behind)."""
    before = set(directory.iterdir())
    try:
        yield
    except BaseException:
        for path in set(directory.iterdir()) - before:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise


def _cmd_serve(args: argparse.Namespace) -> int:
    from .demo import ScriptedAgent, Workspace, build_provider
    from .host.session import Session
    from .host.sessions import Sessions
    from .host.stdio import serve_stdio
    from .providers.base import Provider

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    remote = is_postgres_url(args.record)  # a database: nothing to check or clean up on disk
    path = None if remote else _new_file(args.record, "--record")
    tools = (
        args.tools if args.tools is not None else ("demo" if args.provider == "demo" else "none")
    )
    window = _window(args)
    # Every argument is checked before anything is opened, created or loaded.
    if args.record_dir is not None:
        _directory_to_be(args.record_dir, "--record-dir")
    _at_least("--max-sessions", args.max_sessions, 1)
    _at_least("--max-line-bytes", args.max_line_bytes, 1)

    def open_session(record: Record) -> Session:
        workspace = Workspace()  # each session gets its own provider and workspace
        return session_on(record, workspace, provider_for(workspace))

    def provider_for(workspace: Workspace) -> Provider:
        return build_provider(
            args.provider,
            model=args.model,
            base_url=args.base_url,
            window=window,
            agent=ScriptedAgent(workspace),
        )

    def session_on(record: Record, workspace: Workspace, provider: Provider) -> Session:
        return Session(
            record,
            provider,
            model=args.model,
            window=window,
            tools=workspace.tools() if tools == "demo" else (),
            system=args.system,
            harness=args.harness,
        )

    workspace = Workspace()
    provider = provider_for(workspace)  # a missing model, extra or key stops here, before any file
    _check_policy(args.model, window, args.harness)
    guard = contextlib.nullcontext() if path is None else _removed_on_error(path.parent)
    with guard:
        try:
            record = open_record(args.record if path is None else path)
        except RecordLockedError:
            raise CliError(
                f"--record {args.record}: another writer holds this record (one at a time): "
                "stop it first, or read the record with `steerable-compaction inspect`"
            ) from None
        try:
            session = session_on(record, workspace, provider)
            sessions = Sessions(
                session,
                directory=args.record_dir,
                open_session=open_session,
                max_sessions=args.max_sessions,
            )
        except BaseException:
            record.close()
            raise
    saved, protocol = sys.stdout, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must never corrupt the protocol stream
    try:
        with record:
            print(
                f"steerable-compaction serve: {record.location} ({record.message_count} messages), "
                f"provider {session.provider.name}, "
                f"window {session.policy.max_context_tokens:,}, "
                "JSON-RPC 2.0 on stdin/stdout",
                file=sys.stderr,
            )
            with sessions:
                asyncio.run(
                    serve_stdio(
                        sessions, sys.stdin.buffer, protocol, max_line_bytes=args.max_line_bytes
                    )
                )
    finally:
        sys.stdout = saved
    return 0


def _add_inspect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = sub.add_parser(
        "inspect", help="print a record's events, brackets and boundaries as a table"
    )
    inspect.add_argument(
        "record",
        metavar="RECORD",
        help="a JSONL or SQLite record file, or postgresql://...?session=ID",
    )
    inspect.add_argument(
        "--limit", type=int, default=None, metavar="N", help="show only the last N events"
    )
    inspect.add_argument(
        "--chart", default=None, metavar="PNG", help="also draw the pressure per round as a PNG"
    )
    inspect.add_argument(
        "--window", type=int, default=None, metavar="N", help="context window (threshold line)"
    )
    inspect.add_argument(
        "--model", default=None, metavar="M", help="model name (its window and policy)"
    )
    inspect.set_defaults(func=_cmd_inspect)


def _provider_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provider",
        choices=["demo", "openai", "anthropic", "local"],
        default="demo",
        help="demo: offline scripted agent on a caching fake (default); local: a GGUF in-process",
    )
    parser.add_argument(
        "--model", default=None, metavar="M", help="model name (local: a GGUF path)"
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="an OpenAI- or Anthropic-compatible server's URL",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        metavar="N",
        help="context window in tokens (default: demo 8192, local 4096, else the model's)",
    )


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo", help="run a long scripted agent session and chart its context pressure"
    )
    demo.add_argument(
        "--dir", default="steerable-demo", help="where the record and chart go (./steerable-demo)"
    )
    _provider_flags(demo)
    demo.add_argument(
        "--turns", type=int, choices=range(1, 5), default=4, metavar="1-4", help="user turns"
    )
    demo.add_argument("--reads", type=int, default=None, metavar="N", help="files read per turn")
    demo.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    demo.add_argument(
        "--scripted",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="script the agent's moves over a real provider (default: only for local)",
    )
    demo.set_defaults(func=_cmd_demo)


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve", help="JSON-RPC 2.0 sidecar on stdin/stdout (agent.chat.send, compact, ...)"
    )
    serve.add_argument(
        "--record",
        required=True,
        help="the session record (.jsonl, .db for SQLite, or postgresql://...?session=ID)",
    )
    _provider_flags(serve)
    serve.add_argument(
        "--harness", default=None, metavar="FILE", help="a harness YAML (default: packaged)"
    )
    serve.add_argument(
        "--system", default=None, metavar="TEXT", help="system prompt for a new record"
    )
    serve.add_argument(
        "--tools",
        choices=["demo", "none"],
        default=None,
        help="the demo workspace's read-only tools, or none (default: demo for --provider demo)",
    )
    serve.add_argument(
        "--record-dir",
        default=None,
        metavar="DIR",
        help="host named sessions too: one record per session id, DIR/<id>.jsonl",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=16,
        metavar="N",
        help="sessions open at once, the default one included (default: 16)",
    )
    serve.add_argument(
        "--max-line-bytes",
        type=int,
        default=16 * 1024 * 1024,
        metavar="N",
        help="longest request line in bytes; a longer one gets -32600 (default: 16 MiB)",
    )
    serve.set_defaults(func=_cmd_serve)


_EVAL_HELP = "run the compaction simulator: every arm on every task, a table, JSON and a chart"


def _add_eval(sub: argparse._SubParsersAction[argparse.ArgumentParser], *, full: bool) -> None:
    """`eval`, whose flags `sim.command` defines: `sim` is imported only when they are needed."""
    if full:
        from .sim.command import add_eval_command

        add_eval_command(sub)
    else:
        sub.add_parser("eval", help=_EVAL_HELP)


def build_parser(*, full_eval: bool = True) -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests).

    Each command adds itself to the subparsers with one call (`_add_inspect(sub)`, ...);
    `full_eval=False` lists `eval` without importing the simulator for its flags.
    """
    parser = argparse.ArgumentParser(
        prog="steerable-compaction",
        description="Keep a long agent turn inside the context window.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(sub)
    _add_inspect(sub)
    _add_serve(sub)
    _add_eval(sub, full=full_eval)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Every failure is one line on stderr and a non-zero status, never a traceback.
    """
    args_list = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(full_eval=_command(args_list) == "eval")
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status: int = args.func(args)
        sys.stdout.flush()  # a reader that went away is found here, not at interpreter exit
    except BrokenPipeError:
        # The reader closed the pipe (`inspect ... | head`): it has what it wanted. Like other
        # Unix tools, stop quietly; stdout points at /dev/null so the exit flush stays silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except CompactionError as exc:
        print(f"steerable-compaction: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"steerable-compaction: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status
