"""The `Record` protocol: an append-only event log with its projection kept up to date.

Every store keeps the entries and the projection in memory and appends each new event to its
medium before it becomes visible. Invariants are checked before anything is written, so a bad
event never reaches the medium. The stores themselves live in `memory`, `jsonl` and `sqlite`;
`files` holds what the two on-disk stores share.

Durability (`fsync`), and what a crash can lose. "Durable" events are compaction events (start,
summary, boundary, abandon) and reminders; `append` returns only after its entry is written.
- `"every_event"`: each append is on stable storage before `append` returns. A crash of the
  process or of the machine loses nothing that `append` returned.
- `"every_boundary"` (default): a durable event is on stable storage before `append` returns,
  and so is everything appended before it. Messages in between are handed to the OS at once
  (JSONL: one `write`; SQLite: one committed transaction): a killed process loses nothing that
  `append` returned, a power cut or kernel crash can lose the messages since the last durable
  event (never a durable event, never a message before one).
- `"never"`: the OS decides when to write back. A killed process loses nothing that `append`
  returned; a power cut can lose anything not yet written back by the OS.
In every case a crash in the middle of an append loses at most that append: a torn JSONL line is
dropped on the next open (with a warning), an uncommitted SQLite transaction rolls back.
`Record.batch()` groups appends into one commit (one transaction, one write, at most one sync):
a crash before the group is written loses all of it.

Resuming. A store that keeps projection checkpoints (`checkpoint`) writes one after each
boundary that replaced a span, once the boundary is committed, and opens from the newest one:
the projection comes from the checkpoint and only the entries after it are read and checked
(checksums, order, the row count, the high-water mark). The entries before it are read,
checked, and compared with the checkpoint on first use (`entries` before its seq, `history()`,
`compactions()`, iterating the record); a mismatch raises `RecordError`. `full=True` reads
everything on open, as records without a checkpoint always are.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeAlias, get_args, overload

from ..errors import RecordError
from ..messages import Message
from .checkpoint import Checkpoint, same_messages
from .codec import SCHEMA_VERSION, decode_entry, encode_body
from .events import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    Event,
    MessageAppended,
    Reminder,
)
from .fast import appended, entry_of, message_entry
from .projection import Projection

__all__ = ["CompactionInfo", "FsyncPolicy", "Record"]

logger = logging.getLogger("steerable_compaction.record")

FsyncPolicy: TypeAlias = Literal["every_event", "every_boundary", "never"]
FSYNC_POLICIES: frozenset[str] = frozenset(get_args(FsyncPolicy))


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """One compaction as the record tells it.

    `status` is `"closed"` for a bracket closed by its boundary, `"refused"` for a bracket whose
    summary was not used (the summarizer failed, or its text was empty, degenerate or too long)
    and that a later compaction moved past, `"open"` for a bracket without a boundary and
    nothing after it (a crash, or a summary still being written), `"abandoned"` for a bracket
    recovery gave up (no boundary will come), `"fold"` for a boundary without a bracket, `"v2"`
    for a boundary read from a schema v2 record (no brackets then; its action is as written).
    `retained` is the retention check's `(found, kept)` atoms of a summary, when it ran.
    `reason` says why a summary was refused (a refused or closed-with-excerpt bracket) or why
    recovery abandoned a bracket. `str()` tells it in one line:
    `summarize (pressure) 6,617 -> 1,770 tokens`.
    """

    status: Literal["closed", "refused", "open", "abandoned", "fold", "v2"]
    compaction_id: str | None
    action: str
    trigger: str
    pre_tokens: int
    post_tokens: int | None
    replacement_count: int | None
    span: tuple[int, int] | None
    start_seq: int | None
    summary_seq: int | None
    boundary_seq: int | None
    retained: tuple[int, int] | None = None
    reason: str | None = None

    def __str__(self) -> str:
        head = f"{self.action} ({self.trigger}) {self.pre_tokens:,}"
        if self.post_tokens is not None:
            return f"{head} -> {self.post_tokens:,} tokens"
        outcome = {
            "refused": "summary refused, the messages stay as they were",
            "abandoned": "abandoned by recovery, the messages stay as they were",
        }.get(self.status, "unclosed: a crash, or a summary still being written")
        return f"{head} tokens: {outcome}"


def _durable_kind(event: Event) -> bool:
    return not isinstance(event, MessageAppended)


class Record(ABC):
    """An append-only event log with its projection kept up to date.

    Use as a context manager, or call `close()`. Not safe to append from several threads at
    once without the internal lock; appends from one thread at a time are ordered.
    """

    def __init__(self, *, path: Path | None, readonly: bool, fsync: FsyncPolicy) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {sorted(FSYNC_POLICIES)}, got {fsync!r}")
        self._path = path
        self._readonly = readonly
        self._fsync: FsyncPolicy = fsync
        self._entries: list[Entry] = []
        self._message_entries: list[Entry] = []
        self._reminder_entries: list[Entry] = []
        self._projection = Projection()
        # Seqs of the newest reply that carries usage and of the newest boundary (-1: none), so
        # the meter's anchor is found in O(1) (`usage.newest_usage`).
        self._newest_usage = -1
        self._newest_boundary = -1
        self._replies = 0  # assistant messages: the rounds the session ran
        # A resumed record holds entries from `_base` on; `_resumed` is the checkpoint it
        # resumed from, until the entries before it load (`_load_head`).
        self._base = 0
        self._resumed: Checkpoint | None = None
        self._checkpoint_due = False  # a boundary was appended: checkpoint once it is committed
        self._lock = threading.RLock()
        self._batching = False  # inside `batch()`: appends wait for `_commit_batch`
        self._batch_sync = False  # an append in the open batch asked to be synced
        self._broken: str | None = None  # why appends are refused (what was written is lost)
        self._closed = False
        self._spill_directory: Path | None = None

    # -- reading -------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """Where the record lives (`None` for a memory record)."""
        return self._path

    @property
    def location(self) -> str:
        """Where the record lives, for people: its file, `memory`, or a URL without password."""
        return "memory" if self._path is None else str(self._path)

    @property
    def readonly(self) -> bool:
        """Whether this handle may append."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """Whether `close()` has run."""
        return self._closed

    @property
    def spill_directory(self) -> Path | None:
        """Where this record's spilled tool outputs are, as the spill stage gave it (`None`: unset).

        Set by whoever spills into the record (`load_harness`, or `SpillHooks` at its first
        spill); not persisted. Recall reads a spill pointer's file only from this directory.
        """
        return self._spill_directory

    @spill_directory.setter
    def spill_directory(self, directory: str | os.PathLike[str] | None) -> None:
        self._spill_directory = None if directory is None else Path(directory)

    @property
    def entries(self) -> Sequence[Entry]:
        """Every entry in order (a read-only view).

        In a resumed record, reading an entry before the checkpoint loads (and checks) them all.
        """
        return _Entries(self) if self._base else self._entries

    @property
    def resumed_at(self) -> int | None:
        """The seq of the checkpoint this handle resumed from, while older entries are unread.

        `None` once every entry is loaded (a full read, or the first use of older ones).
        """
        return self._base if self._base else None

    @property
    def projection(self) -> Projection:
        """The live projection; do not mutate it (append events instead)."""
        return self._projection

    def messages(self) -> list[Message]:
        """A copy of the projected transcript: what the model sees next."""
        return list(self._projection.messages)

    @property
    def message_count(self) -> int:
        """How many raw messages the record holds (compaction never lowers this)."""
        return len(self._message_entries) + (self._resumed.message_count if self._resumed else 0)

    @property
    def reply_count(self) -> int:
        """How many assistant messages the record holds: the rounds the session has run.

        Known without reading the entries before a checkpoint (it keeps the count).
        """
        return self._replies

    @property
    def newest_boundary(self) -> int | None:
        """The seq of the newest compaction boundary (`None`: nothing was rewritten yet).

        Every message the projection shows from a later seq is as it was appended.
        """
        return self._newest_boundary if self._newest_boundary >= 0 else None

    def history(
        self, offset: int = 0, limit: int | None = None, *, reminders: bool = True
    ) -> list[Entry]:
        """A page of the raw message history, oldest first, as it was before any compaction.

        Entries are `MessageAppended` events with their seqs, and (unless `reminders=False`)
        the `Reminder` events the model saw, each in its place after the message it followed;
        `offset` and `limit` count messages only, so pages stay where they were.
        """
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError(f"offset and limit must be non-negative, got {offset!r}, {limit!r}")
        self._load_head()
        end = len(self._message_entries) if limit is None else offset + limit
        page = self._message_entries[offset:end]
        if not reminders or not page or not self._reminder_entries:
            return page
        low = page[0].seq
        high = self._message_entries[end].seq if end < len(self._message_entries) else len(self)
        between = [e for e in self._reminder_entries if low <= e.seq < high]
        return sorted([*page, *between], key=lambda e: e.seq) if between else page

    def compactions(self) -> list[CompactionInfo]:
        """Every compaction in record order: closed and open brackets, and fold-only rewrites."""
        starts: dict[str, tuple[int, CompactionStart]] = {}
        summaries: dict[str, int] = {}
        out: list[CompactionInfo] = []
        closed: set[str] = set()
        abandoned: dict[str, CompactionAbandoned] = {}
        refused: dict[str, str] = {}  # why a bracket's summary was refused (excerpt or fold)
        latest = -1  # the seq of the newest compaction start, boundary or abandonment
        for entry in self._all_entries():
            event = entry.event
            if isinstance(event, CompactionStart | CompactionBoundary | CompactionAbandoned):
                latest = entry.seq
            if isinstance(event, CompactionAbandoned):
                abandoned[event.compaction_id] = event
            elif isinstance(event, CompactionStart):
                starts[event.compaction_id] = (entry.seq, event)
            elif isinstance(event, CompactionSummary):
                summaries[event.compaction_id] = entry.seq
                if event.refused is not None:
                    refused[event.compaction_id] = event.refused
            elif isinstance(event, CompactionBoundary):
                cid = event.compaction_id
                if cid is not None:
                    closed.add(cid)
                # A v3 rewrite without a bracket only edits; a span replaced without one is a
                # v2 boundary, upgraded on read (R39).
                kind: Literal["fold", "v2", "closed"] = (
                    "closed" if cid is not None else "fold" if event.span is None else "v2"
                )
                out.append(
                    CompactionInfo(
                        status=kind,
                        compaction_id=cid,
                        action=event.action,
                        trigger=event.trigger,
                        pre_tokens=event.pre_tokens,
                        post_tokens=event.post_tokens,
                        replacement_count=event.replacement_count,
                        span=event.span,
                        start_seq=None if cid is None else starts[cid][0],
                        summary_seq=None if cid is None else summaries.get(cid),
                        boundary_seq=entry.seq,
                        retained=event.retained,
                        reason=None if cid is None else refused.get(cid),
                    )
                )
        for cid, (seq, start) in starts.items():
            if cid not in closed:
                # A bracket the engine gave up at once was refused; so was one an older
                # engine left unclosed when a later compaction moved past it (recovery reuses
                # or abandons a crash's).
                gone = abandoned.get(cid)
                status: Literal["refused", "open", "abandoned"] = (
                    ("refused" if gone.cause == "refused" else "abandoned")
                    if gone is not None
                    else "refused"
                    if latest > seq
                    else "open"
                )
                out.append(
                    CompactionInfo(
                        status=status,
                        compaction_id=cid,
                        action=start.action,
                        trigger=start.trigger,
                        pre_tokens=start.pre_tokens,
                        post_tokens=None,
                        replacement_count=None,
                        span=start.span,
                        start_seq=seq,
                        summary_seq=summaries.get(cid),
                        boundary_seq=None,
                        reason=None if gone is None else gone.reason,
                    )
                )
        out.sort(key=lambda c: c.start_seq if c.start_seq is not None else c.boundary_seq or 0)
        return out

    # -- writing -------------------------------------------------------------------------------

    def append(self, event: Event) -> Entry:
        """Write `event` and fold it into the projection; returns it with its seq.

        Raises `RecordError` (writing nothing) if the event breaks a record invariant.
        """
        with self._lock:
            self._check_writable()
            entry = entry_of(self._base + len(self._entries), event)  # seq: len(self)
            if type(event) is MessageAppended:  # a message always applies: no check to run
                durable = self._fsync == "every_event"  # `_should_sync` of a message
            else:
                try:
                    self._projection.check(entry)
                except RecordError as exc:
                    raise RecordError(exc.reason, path=self._path) from None
                durable = self._should_sync(event)
            if self._batching:
                self._batch_sync, durable = self._batch_sync or durable, False
            self._persist_encodable(entry, durable)
            self._accept(entry)
            if isinstance(event, CompactionBoundary) and event.span is not None:
                self._checkpoint_due = self._keeps_checkpoints
            if self._checkpoint_due and not self._batching:
                self._write_checkpoint()
            return entry

    def append_message(self, message: Message) -> Entry:
        """Shorthand for `append(MessageAppended(message=message))`."""
        return self.append(appended(message))

    def append_messages(self, messages: Iterable[Message]) -> list[Entry]:
        """`append_message` of each of `messages` in order; their entries.

        The same entries and writes as one call each, under one lock and one set of checks (an
        agent step appends a few). A message the medium refuses raises as `append` would,
        after the messages before it were appended.
        """
        messages = tuple(messages)  # before the lock: an iterable may read this record
        if not messages:
            return []  # nothing to append: no handle refuses that
        with self._lock:
            self._check_writable()
            durable = self._fsync == "every_event"  # `_should_sync` of a message
            if self._batching:
                self._batch_sync, durable = self._batch_sync or durable, False
            # `_persist_encodable` and `_accept`, unrolled for messages: one call each less.
            persist, accept = self._persist, self._accept_message
            out = []
            for message in messages:
                # Read each time: loading a resumed record's older entries moves both.
                entry = entry_of(self._base + len(self._entries), appended(message))
                try:
                    persist(entry, durable=durable)
                except UnicodeEncodeError as exc:
                    raise self._unencodable(entry, exc) from None
                accept(entry, message)
                out.append(entry)
            if self._checkpoint_due and not self._batching:
                self._write_checkpoint()
            return out

    def _check_writable(self) -> None:
        """Raise `RecordError` unless this handle may append (called with the lock held)."""
        if self._closed:
            raise RecordError("the record is closed", path=self._path)
        if self._readonly:
            raise RecordError("the record was opened read-only", path=self._path)
        if self._broken is not None:
            raise RecordError(self._broken, path=self._path)

    def _persist_encodable(self, entry: Entry, durable: bool) -> None:
        """`_persist` `entry`, its text refused by name if the medium cannot encode it."""
        try:
            self._persist(entry, durable=durable)
        except UnicodeEncodeError as exc:
            raise self._unencodable(entry, exc) from None

    def _unencodable(self, entry: Entry, exc: UnicodeEncodeError) -> RecordError:
        # A lone surrogate (e.g. from undecodable tool output) cannot be stored as UTF-8;
        # nothing was written.
        return RecordError(
            f"the {entry.event.kind} event holds text that is not valid Unicode "
            f"({exc.reason} at position {exc.start}); nothing was written",
            path=self._path,
        )

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the appends made inside reach the medium together when the block ends.

        SQLite commits them in one transaction and JSONL writes them with one `write`; the
        fsync policy applies to the group (one sync at the end if any append would have had
        one). Until the block ends readers do not see them, and a crash loses them all (a crash
        during a JSONL group's write may keep its first lines). They are in this handle at
        once, and are committed even if the block raises. A nested `batch()` joins the outer.
        """
        with self._lock:
            if self._batching or self._readonly or self._closed:
                yield
                return
            self._batching, self._batch_sync = True, False
            try:
                yield
            finally:
                if self._batching:  # `close()` inside the block commits the group itself
                    self._end_batch()

    def _end_batch(self) -> None:
        self._batching = False
        try:
            self._commit_batch(durable=self._batch_sync or self._fsync == "every_event")
        except RecordError as exc:
            self._broken = f"a group commit failed, its appends are lost: {exc.reason}"
            raise
        if self._checkpoint_due:
            self._write_checkpoint()

    def _commit_batch(self, *, durable: bool) -> None:  # noqa: B027 (memory: nothing to do)
        """Write the appends of the batch that ends (called with the lock held)."""

    def _should_sync(self, event: Event) -> bool:
        if self._fsync == "every_event":
            return True
        if self._fsync == "every_boundary":
            return _durable_kind(event)
        return False

    def _accept(self, entry: Entry) -> None:
        """Take in one entry (`append` for each; `_ingest` for all but plain messages)."""
        event = entry.event
        if isinstance(event, MessageAppended):
            self._accept_message(entry, event.message)
            if event.usage is not None:
                self._newest_usage = entry.seq
            return
        self._projection.apply(entry)
        self._entries.append(entry)
        if isinstance(event, CompactionBoundary):
            self._newest_boundary = entry.seq
        elif isinstance(event, Reminder):
            self._reminder_entries.append(entry)

    def _accept_message(self, entry: Entry, message: Message) -> None:
        """`_accept` of a message entry (`message` is its message), its usage aside."""
        self._projection.append(entry.seq, message)
        self._entries.append(entry)
        self._message_entries.append(entry)
        if message.role == "assistant":
            self._replies += 1

    def _ingest(self, objs: Iterator[Any], check_version: Callable[[int], None]) -> None:
        """Decode parsed entries in order and take them in; `check_version(v)` vets each one.

        Plain messages reach the projection in runs (one `extend` each), the rest one by one.
        Raises `RecordError` with the reason only (the store says where) and lets the
        `RecursionError` of a deeply nested entry through; what was taken in before stays.
        """
        entries, projection = self._entries, self._projection
        seqs: list[int] = []
        run: list[Message] = []  # plain messages not yet in the projection
        replies = 0  # assistant messages among them
        try:
            for obj in objs:
                entry = message_entry(obj, SCHEMA_VERSION)
                if entry is None:
                    projection.extend(seqs, run)
                    seqs, run = [], []
                    entry = decode_entry(obj, projection_len=len(projection))
                if entry.seq != self._base + len(entries):
                    raise RecordError(
                        f"seq {entry.seq} out of order: expected {self._base + len(entries)}"
                    )
                check_version(obj["v"])
                event = entry.event
                if type(event) is MessageAppended and event.usage is None:
                    seqs.append(entry.seq)
                    run.append(event.message)
                    entries.append(entry)
                    self._message_entries.append(entry)
                    if event.message.role == "assistant":
                        replies += 1
                else:
                    self._accept(entry)
        finally:
            projection.extend(seqs, run)
            self._replies += replies

    @abstractmethod
    def _persist(self, entry: Entry, *, durable: bool) -> None:
        """Write one entry to the medium (called with the lock held).

        A store calls `_on_append` once the entry is written and before it is committed.
        """

    def _on_append(self, entry: Entry) -> None:  # noqa: B027 (a hook: no-op by default)
        """Extension point for derived data (e.g. a search index), called for each append.

        It runs with the lock held, once the entry is written (in a JSONL batch: queued) and,
        for SQLite, inside the same transaction: what it writes there commits or rolls back
        with the entry, and if it raises the entry is not appended (SQLite, or JSONL in a
        batch; a JSONL line already written stays on disk).
        """

    def _hooked(self) -> bool:
        """Whether something hooks appends (a subclass, or a hook set on this handle)."""
        return "_on_append" in vars(self) or type(self)._on_append is not Record._on_append

    def refresh(self) -> int:
        """Read entries another writer appended since this handle loaded; returns how many."""
        return 0

    def close(self) -> None:
        """Flush (unless `fsync="never"`), release the writer lock and close the medium."""
        with self._lock:
            if not self._closed:
                try:
                    if self._batching:
                        self._end_batch()
                finally:
                    self._closed = True
                    self._close()

    @abstractmethod
    def _close(self) -> None:
        """Release the medium (called once, with the lock held)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._all_entries())

    def __len__(self) -> int:
        return self._base + len(self._entries)

    def __repr__(self) -> str:
        mode = "r" if self._readonly else "a"
        return f"<{type(self).__name__} {self.location} mode={mode} entries={len(self)}>"

    # -- checkpoints and resuming ----------------------------------------------------------------

    _keeps_checkpoints: ClassVar[bool] = False
    """Whether the store writes projection checkpoints (`_store_checkpoint`)."""

    def _write_checkpoint(self) -> None:
        """Keep a checkpoint of the projection as it is now (every append committed).

        Skipped while a bracket is open. A failure is logged and costs only the speed of the
        next open: the appends it follows are committed already.
        """
        self._checkpoint_due = False
        if self._broken is not None or self._projection.open_brackets or not self._entries:
            return
        body = encode_body(self._entries[-1])  # what the medium holds: this handle wrote it
        checkpoint = Checkpoint(
            seq=len(self),
            last_crc=zlib.crc32(body),
            last_size=len(body),
            offset=0,
            message_count=self.message_count,
            replies=self._replies,
            newest_usage=self._newest_usage,
            newest_boundary=self._newest_boundary,
            seqs=tuple(self._projection.seqs),
            messages=tuple(self._projection.messages),
        )
        try:
            self._store_checkpoint(checkpoint)
        except (OSError, RecordError) as exc:
            logger.warning("%s: no checkpoint kept at seq %d: %s", self.location, len(self), exc)

    def _store_checkpoint(self, checkpoint: Checkpoint) -> None:  # noqa: B027 (memory: none)
        """Replace the store's checkpoint with `checkpoint` (called with the lock held)."""

    def _resume_from(self, checkpoint: Checkpoint) -> None:
        """Start from `checkpoint`: its projection and counts; entries before it load later."""
        self._base, self._resumed = checkpoint.seq, checkpoint
        self._projection = checkpoint.projection()
        self._newest_usage = checkpoint.newest_usage
        self._newest_boundary = checkpoint.newest_boundary
        self._replies = checkpoint.replies

    def _all_entries(self) -> list[Entry]:
        """Every entry, the ones before a checkpoint loaded first if need be."""
        self._load_head()
        return self._entries

    def _load_head(self) -> None:
        """Read the entries before the checkpoint this record resumed from, and check them.

        They must fold into exactly the checkpoint's projection and counts, or `RecordError`
        says the checkpoint does not match. They are read into a shallow copy of this handle
        (same medium, connection and lock, its own entries and projection), so that this one
        stays as it was until they are joined to it, and stays so if the read fails.
        """
        with self._lock:
            checkpoint = self._resumed
            if checkpoint is None:
                return
            head = copy.copy(self)
            head._base, head._resumed = 0, None
            head._entries, head._message_entries, head._reminder_entries = [], [], []
            head._projection, head._newest_usage, head._newest_boundary = Projection(), -1, -1
            head._replies = 0
            head._read_head(checkpoint)
            head._check_head(checkpoint)
            self._reminder_entries = head._reminder_entries + self._reminder_entries
            self._message_entries, self._resumed = (
                head._message_entries + self._message_entries,
                None,
            )
            self._entries, self._base = head._entries + self._entries, 0

    def _check_head(self, checkpoint: Checkpoint) -> None:
        projection = self._projection
        differs = [
            what
            for what, same in (
                ("entries", len(self._entries) == checkpoint.seq),
                ("projection", list(projection.seqs) == list(checkpoint.seqs)),
                ("messages", same_messages(projection.messages, checkpoint.messages)),
                ("brackets", not projection.open_brackets),
                ("message count", len(self._message_entries) == checkpoint.message_count),
                ("reply count", self._replies == checkpoint.replies),
                ("usage anchor", self._newest_usage == checkpoint.newest_usage),
                ("boundary anchor", self._newest_boundary == checkpoint.newest_boundary),
            )
            if not same
        ]
        if differs:
            raise RecordError(
                f"the entries before seq {checkpoint.seq} do not fold into the checkpoint this "
                f"handle resumed from (its {', '.join(differs)} differ): open the record with "
                "full=True to read it without the checkpoint",
                path=self._path,
            )

    def _read_head(self, checkpoint: Checkpoint) -> None:
        """Load entries `[0, checkpoint.seq)` into the (emptied) record, checked as on open."""
        raise RecordError("this store cannot read before its checkpoint", path=self._path)


class _Entries(Sequence[Entry]):
    """`Record.entries` of a resumed record: the entries before its checkpoint load on first use.

    Indexes and slices from the checkpoint on are served from what is loaded; anything else,
    iteration and comparison included, loads the rest first.
    """

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def __len__(self) -> int:
        return len(self._record)

    @overload
    def __getitem__(self, index: int) -> Entry: ...

    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...

    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        record = self._record
        base, size = record._base, len(record)
        if isinstance(index, slice):
            start, stop, step = index.indices(size)
            if step == 1 and start >= base:
                return record._entries[start - base : max(stop - base, 0)]
        else:
            at = index + size if index < 0 else index
            if base <= at < size:
                return record._entries[at - base]
        return record._all_entries()[index]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._record._all_entries())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Entries):
            other = other._record._all_entries()
        return self._record._all_entries() == other

    __hash__ = None  # type: ignore[assignment]  # like a list

    def __repr__(self) -> str:
        return repr(self._record._all_entries())
