"""The `steerable-compaction` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO, assert_never

from . import __version__
from .errors import CompactionError
from .messages import Message
from .record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    MessageAppended,
    Record,
    Reminder,
    open_record,
)

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
        f"{record.path}  ({kind}, {len(record):,} events, {record.message_count:,} messages, "
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
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog="steerable-compaction",
        description="Keep a long agent turn inside the context window.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    inspect = sub.add_parser(
        "inspect", help="print a record's events, brackets and boundaries as a table"
    )
    inspect.add_argument("record", help="a JSONL or SQLite record file")
    inspect.add_argument(
        "--limit", type=int, default=None, metavar="N", help="show only the last N events"
    )
    inspect.set_defaults(func=_cmd_inspect)
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
    return status
