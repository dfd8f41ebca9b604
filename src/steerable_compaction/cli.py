"""The `steerable-compaction` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO, assert_never

from . import __version__
from .errors import CompactionError
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
from .sim.command import add_eval_command

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
    if not compactions:
        out.write("(none)\n")
    else:
        crows = [["id", "status", "action", "trigger", "pre", "post", "replaced", "span", "seqs"]]
        for c in compactions:
            seqs = "/".join(
                "-" if s is None else str(s) for s in (c.start_seq, c.summary_seq, c.boundary_seq)
            )
            crows.append(
                [
                    c.compaction_id or "-",
                    "UNCLOSED" if c.status == "open" else c.status,
                    c.action,
                    c.trigger,
                    f"{c.pre_tokens:,}",
                    "-" if c.post_tokens is None else f"{c.post_tokens:,}",
                    "-" if c.replacement_count is None else str(c.replacement_count),
                    "-" if c.span is None else f"[{c.span[0]}, {c.span[1]})",
                    seqs,
                ]
            )
        _table(crows, out)
        out.write("(seqs: start/summary/boundary)\n")
    for bracket in record.projection.open_brackets:
        paid = "with a recorded summary" if bracket.summary is not None else "without a summary"
        out.write(
            f"warning: bracket {bracket.start.compaction_id} is unclosed ({paid}); "
            "its span stays visible\n"
        )


def _cmd_inspect(args: argparse.Namespace) -> int:
    with open_record(args.record, readonly=True) as record:
        inspect_record(record, sys.stdout, limit=args.limit)
        if args.chart is not None:
            from .charts import pressure_series, render_pressure_chart

            threshold = window = None
            if args.window is not None or args.model is not None:
                policy = resolve_compaction_policy(args.model, args.window)
                threshold, window = policy.threshold_tokens, policy.max_context_tokens
            series = pressure_series(record.entries)
            path = render_pressure_chart(
                series,
                args.chart,
                threshold=threshold,
                window=window,
                title=f"Context pressure per round: {Path(args.record).name}",
            )
            print(
                f"\nchart: {path} ({series.rounds} rounds, {len(series.compactions)} compactions"
                + ("" if threshold is not None else "; pass --window or --model for the threshold")
                + ")"
            )
    return 0


def _window(args: argparse.Namespace) -> int | None:
    from .demo import default_window

    return int(args.window) if args.window is not None else default_window(args.provider)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DEMO_PROMPTS, DemoOptions, run_demo

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


def _cmd_serve(args: argparse.Namespace) -> int:
    from .demo import ScriptedAgent, Workspace, build_provider
    from .host.session import Session
    from .host.sessions import Sessions
    from .host.stdio import serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    tools = (
        args.tools if args.tools is not None else ("demo" if args.provider == "demo" else "none")
    )
    window = _window(args)

    def open_session(record: Record) -> Session:
        workspace = Workspace()  # each session gets its own provider and workspace
        provider = build_provider(
            args.provider,
            model=args.model,
            base_url=args.base_url,
            window=window,
            agent=ScriptedAgent(workspace),
        )
        return Session(
            record,
            provider,
            model=args.model,
            window=window,
            tools=workspace.tools() if tools == "demo" else (),
            system=args.system,
            harness=args.harness,
        )

    saved, protocol = sys.stdout, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must never corrupt the protocol stream
    try:
        with open_record(args.record) as record:
            session = open_session(record)
            sessions = Sessions(
                session,
                directory=args.record_dir,
                open_session=open_session,
                max_sessions=args.max_sessions,
            )
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
        "record", help="a JSONL or SQLite record file, or postgresql://...?session=ID"
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
    inspect.add_argument("--model", default=None, help="model name (its window and policy)")
    inspect.set_defaults(func=_cmd_inspect)


def _provider_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provider",
        choices=["demo", "openai", "anthropic", "local"],
        default="demo",
        help="demo: offline scripted agent on a caching fake (default); local: a GGUF in-process",
    )
    parser.add_argument("--model", default=None, help="model name (local: a GGUF path)")
    parser.add_argument(
        "--base-url", default=None, help="an OpenAI- or Anthropic-compatible server's URL"
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
    serve.add_argument("--harness", default=None, help="a harness YAML (default: packaged)")
    serve.add_argument("--system", default=None, help="system prompt for a new record")
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests).

    Each command adds itself to the subparsers with one call (`_add_inspect(sub)`, ...).
    """
    parser = argparse.ArgumentParser(
        prog="steerable-compaction",
        description="Keep a long agent turn inside the context window.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_inspect(sub)
    _add_demo(sub)
    _add_serve(sub)
    add_eval_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status: int = args.func(args)
    except CompactionError as exc:
        print(f"steerable-compaction: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status
