"""Hypothesis strategies, builders and helpers for record tests (shared by the record tests)."""

from __future__ import annotations

import os
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from hypothesis import strategies as st

from steerable_compaction import Message, ToolCall
from steerable_compaction.record import (
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Edit,
    Event,
    JsonlRecord,
    MemoryRecord,
    MessageAppended,
    Record,
    Reminder,
    SqliteRecord,
    Usage,
)

Factory = Callable[..., Record]
STORES: dict[str, tuple[Factory, str]] = {
    "jsonl": (JsonlRecord, "record.jsonl"),
    "sqlite": (SqliteRecord, "record.db"),
}


POSTGRES_URL = os.environ.get("STEERABLE_TEST_POSTGRES") or None
NO_POSTGRES = (
    "STEERABLE_TEST_POSTGRES is unset: set it to a PostgreSQL URL (a database where the tests "
    "may create and drop schemas) to run the PostgreSQL cases; .ci/run starts a server for them"
)


def in_schema(url: str, schema: str) -> str:
    """`url` with the search path set to `schema`: its tables are created there."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


def new_schema_name() -> str:
    """A schema name no other test uses."""
    return "steerable_test_" + uuid.uuid4().hex[:12]


@dataclass(kw_only=True)
class Store:
    """One store under test: `open()` opens the same record each time, as writer or reader.

    A memory record lives only in its object: its "reader" is the record its writer made.
    """

    name: str
    cls: type[Record]
    path: Path | None = None  # file stores: the file
    url: str | None = None  # PostgreSQL: the database, and `session` in it
    session: str = ""
    memory: list[MemoryRecord] = field(default_factory=list)

    @property
    def durable(self) -> bool:
        """Whether records outlive their handle (everything but memory)."""
        return self.cls is not MemoryRecord

    def open(self, *, readonly: bool = False, **kw: object) -> Record:
        """The record (created if new), as its writer or a reader."""
        make: Callable[..., Record] = self.cls
        if self.path is not None:
            return make(self.path, readonly=readonly, **kw)
        if self.url is not None:
            return make(self.url, session=self.session, readonly=readonly, **kw)
        if readonly and self.memory:
            return self.memory[-1]
        self.memory.append(MemoryRecord())
        return self.memory[-1]


def make_store(name: str, root: Path, postgres_url: str | None = None) -> Store:
    """The store `name` (`memory`, `jsonl`, `sqlite`, `postgres`) with a new record under `root`."""
    if name == "memory":
        return Store(name=name, cls=MemoryRecord)
    if name == "postgres":
        from steerable_compaction.record.postgres import PostgresRecord

        assert postgres_url is not None
        return Store(name=name, cls=PostgresRecord, url=postgres_url, session=str(root / name))
    cls, filename = STORES[name]
    return Store(name=name, cls=cls, path=root / filename)  # type: ignore[arg-type]


def with_crc(obj: bytes) -> bytes:
    """A JSON object's bytes with a correct checksum added last, as a v4 writer adds it."""
    return b'%s,"crc":%d}' % (obj[:-1], zlib.crc32(obj[:-1]))


def write(factory: Factory, path: Path, events: list[Event], **kw: object) -> None:
    """Append `events` to a new (or existing) record at `path`, then close it."""
    with factory(path, **kw) as record:
        for event in events:
            record.append(event)


_text = st.text(
    alphabet=st.sampled_from(
        [*list('abc xyz\n\t"\\{}[],:/'), "中", "文", "か", "な", "한", "😀", "\u2028"]
    ),
    max_size=40,
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """A small message of any role (tool results answer made-up ids; the record does not care)."""
    kind = draw(st.sampled_from(["system", "user", "assistant", "call", "tool"]))
    text = draw(_text)
    if kind == "system":
        return Message.system(text)
    if kind == "user":
        return Message.user(text)
    if kind == "assistant":
        return Message.assistant(text)
    if kind == "call":
        call_id = "c" + str(draw(st.integers(0, 99)))
        return Message.assistant(text or None, [ToolCall(id=call_id, name="run", arguments="{}")])
    return Message.tool("c" + str(draw(st.integers(0, 99))), text)


@st.composite
def event_sequences(draw: st.DrawFn, max_ops: int = 30) -> list[Event]:
    """A valid event sequence: messages, reminders, fold boundaries and (un)closed brackets."""
    events: list[Event] = []
    visible = 0
    open_brackets: dict[str, tuple[int, int]] = {}
    next_id = 0
    for _ in range(draw(st.integers(0, max_ops))):
        ops = ["message", "message", "message", "reminder"]
        if visible:
            ops += ["fold", "start"]
        if open_brackets:
            ops += ["summary", "close"]
        op = draw(st.sampled_from(ops))
        if op == "message":
            usage = draw(st.none() | st.builds(Usage, prompt_tokens=st.integers(0, 10_000)))
            message = draw(messages())
            if message.role == "user" and draw(st.booleans()):  # the flags the record keeps
                message = message.as_goal() if draw(st.booleans()) else message.pin()
            events.append(MessageAppended(message=message, usage=usage))
            visible += 1
        elif op == "reminder":
            events.append(Reminder(reason="test", message=Message.user(draw(_text))))
            visible += 1
        elif op == "fold":
            indices = draw(st.sets(st.integers(0, visible - 1), min_size=1, max_size=3))
            edits = tuple(
                Edit(index=i, message=Message.user(f"[folded {i}]")) for i in sorted(indices)
            )
            events.append(
                CompactionBoundary(
                    action="compact",
                    pre_tokens=100,
                    post_tokens=90,
                    replacement_count=len(edits),
                    edits=edits,
                )
            )
        elif op == "start":
            start = draw(st.integers(0, visible))
            end = draw(st.integers(start, visible))
            cid = f"k{next_id}"
            next_id += 1
            open_brackets[cid] = (start, end)
            kept = draw(st.lists(st.integers(start, end - 1), unique=True)) if end > start else []
            events.append(
                CompactionStart(
                    compaction_id=cid,
                    span=(start, end),
                    pre_tokens=500,
                    action="summarize",
                    kept=tuple(sorted(kept)),
                    focus=draw(st.none() | _text),
                )
            )
        else:
            cid = draw(st.sampled_from(sorted(open_brackets)))
            span = open_brackets[cid]
            if op == "summary":
                already = any(
                    isinstance(e, CompactionSummary) and e.compaction_id == cid for e in events
                )
                if not already:
                    events.append(
                        CompactionSummary(
                            compaction_id=cid,
                            summary=draw(_text),
                            retention_budget=draw(st.none() | st.integers(0, 5_000)),
                            refused=draw(st.none() | _text),
                        )
                    )
            elif span[1] <= visible:
                del open_brackets[cid]
                summary = Message.user(f"<compacted-summary>{cid}</compacted-summary>")
                events.append(
                    CompactionBoundary(
                        action="summarize",
                        pre_tokens=500,
                        post_tokens=100,
                        replacement_count=span[1] - span[0],
                        compaction_id=cid,
                        span=span,
                        replacement=(summary,),
                    )
                )
                visible += 1 - (span[1] - span[0])
    return events


def small_session() -> list[Event]:
    """A fixed session: goal, three tool rounds, a fold, a closed bracket, an unclosed one."""
    call = [
        ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path":"f{i}.py"}}') for i in range(3)
    ]
    return [
        MessageAppended(message=Message.system("You are a careful agent.")),
        MessageAppended(message=Message.user("Fix the bug in f2.py")),
        MessageAppended(message=Message.assistant("Reading.", [call[0]])),
        MessageAppended(message=Message.tool("c0", "print('zero')\n" * 20)),
        MessageAppended(message=Message.assistant(None, [call[1]])),
        MessageAppended(message=Message.tool("c1", "print('one')\n" * 20)),
        CompactionBoundary(
            action="compact",
            pre_tokens=900,
            post_tokens=700,
            replacement_count=1,
            edits=(Edit(index=3, message=Message.tool("c0", "[folded: read_file, 280 chars]")),),
        ),
        MessageAppended(
            message=Message.assistant(None, [call[2]]),
            usage=Usage(prompt_tokens=812, completion_tokens=20, cached_tokens=640),
        ),
        MessageAppended(message=Message.tool("c2", "def f():\n    return 1 / 0\n")),
        CompactionStart(compaction_id="k1", span=(2, 6), pre_tokens=1200, action="summarize"),
        CompactionSummary(compaction_id="k1", summary="Read f0, f1: nothing relevant."),
        CompactionBoundary(
            action="summarize",
            pre_tokens=1200,
            post_tokens=400,
            replacement_count=4,
            compaction_id="k1",
            span=(2, 6),
            replacement=(Message.user("<compacted-summary>\nRead f0, f1.\n</compacted-summary>"),),
        ),
        MessageAppended(message=Message.assistant("The division by zero is the bug.")),
        CompactionStart(compaction_id="k2", span=(2, 5), pre_tokens=800, action="summarize"),
    ]


def write_summarized_jsonl(path: Path, summary: str = "<summary>") -> None:
    """A JSONL record of a system message and four user messages, m0-m2 summarized (seq 5).

    Reopened, it resumes from the checkpoint that boundary wrote: seqs 0-4 stay unread.
    """
    with JsonlRecord(path) as record:
        record.append_message(Message.system("s"))
        for i in range(4):
            record.append_message(Message.user(f"m{i}"))
        record.append(
            CompactionBoundary(
                action="summarize",
                pre_tokens=9,
                post_tokens=2,
                replacement_count=1,
                span=(1, 4),
                replacement=(Message.user(summary),),
            )
        )
