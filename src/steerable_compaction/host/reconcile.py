"""Seed reconcile (R1): match a host's full raw history against the record, append what is new.

The runtime owns compaction; a host only ever sends the history it has seen, uncompacted (its
"seed"). The record's raw history is its `message` events in order (`Record.history()`).
`plan_reconcile` walks the seed and the raw history together from the start:

1. a seed message equal to the next raw message matches it;
2. a seed message equal to a replacement the record wrote in place of raw messages `[j, k)`
   (a summary, a fold marker, an image pointer) matches all of them at once. The raw messages
   behind a summary are those behind the `replacement_count` projected messages its boundary
   replaced, followed back through earlier summaries it absorbed; so a host may seed back a
   summary (or a projection) it was shown. When a replacement is several messages (the user
   messages a summary keeps verbatim, then the summary), its last message stands for `[j, k)`
   and the ones before it may be seeded in front of it or left out;
3. a seed message equal to a reminder recorded at this point (the runtime's own notice, e.g.
   the thrashing reminder) is accepted but never required;
4. a seed without any `system` message need not repeat the record's system messages (a host
   need not know the runtime's system prompt); a seed with one must match them all;
5. the longest seed prefix that accounts for the whole raw history wins (the walk keeps every
   reading alive, so a message that fits two rules is never misread); the rest of the seed is
   new and is appended in order as plain `message` events, after every boundary: the
   compacted projection is kept and the new messages join its end;
6. a seed that stops fitting before it accounts for the raw history contradicts the record:
   `SeedConflictError(kind="mismatch")`, naming the seed index and the record message it
   differs from; a seed that ends first is behind the record: `SeedConflictError(kind="behind")`
   (page the rest with `history(offset=matched)`).

Planning is pure and checks everything before `apply_reconcile` writes anything, so a refused
seed leaves the record untouched. Equality is the messages' value equality (the record's JSON
form, `message_to_dict`, round-trips exactly). A schema-v2 record's raw history includes the
transcript v2 re-appended after each of its boundaries; a seed must repeat those messages too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import CompactionError
from ..messages import Message
from ..record import CompactionBoundary, MessageAppended, Record, Reminder

__all__ = [
    "ReconcilePlan",
    "SeedConflictError",
    "apply_reconcile",
    "plan_reconcile",
]

_PREVIEW = 80


def _preview(message: Message) -> str:
    text = " ".join(message.text.split())
    if message.tool_calls:
        text = (
            (text + " " if text else "") + "calls " + ", ".join(c.name for c in message.tool_calls)
        )
    if len(text) > _PREVIEW:
        text = text[: _PREVIEW - 1] + "…"
    return f"{message.role}: {text!r}"


class SeedConflictError(CompactionError):
    """A host's seed contradicts the record (`kind="mismatch"`) or lags it (`kind="behind"`).

    `seed_index` is the first seed message that does not fit (the seed's length when it is
    behind), `record_index` the raw-history position it was compared with, `seq` that
    message's record seq and `matched` how many raw messages the seed accounted for before.
    """

    def __init__(
        self,
        reason: str,
        *,
        kind: Literal["mismatch", "behind"],
        seed_index: int,
        record_index: int,
        seq: int | None,
        matched: int,
    ) -> None:
        self.reason = reason
        self.kind: Literal["mismatch", "behind"] = kind
        self.seed_index = seed_index
        self.record_index = record_index
        self.seq = seq
        self.matched = matched
        super().__init__(reason)

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild,
            (
                self.reason,
                self.kind,
                self.seed_index,
                self.record_index,
                self.seq,
                self.matched,
            ),
        )


def _rebuild(
    reason: str,
    kind: Literal["mismatch", "behind"],
    seed_index: int,
    record_index: int,
    seq: int | None,
    matched: int,
) -> SeedConflictError:
    return SeedConflictError(
        reason,
        kind=kind,
        seed_index=seed_index,
        record_index=record_index,
        seq=seq,
        matched=matched,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilePlan:
    """What a seed adds: `new` messages to append, and how the rest of it matched.

    `record_messages` raw messages were accounted for: `raw` one to one, `stand_ins` seed
    messages stood for compacted spans, `skipped_system` record system messages the seed left
    out, `reminders` seed messages were optional ones: runtime reminders, or user messages a
    summary keeps in front of it (seeded back from a projection).
    """

    record_messages: int
    new: tuple[Message, ...] = ()
    raw: int = 0
    stand_ins: int = 0
    reminders: int = 0
    skipped_system: int = 0

    def summary(self) -> dict[str, int]:
        """The plan's counts, JSON-ready."""
        return {
            "record_messages": self.record_messages,
            "appended": len(self.new),
            "matched_raw": self.raw,
            "matched_stand_ins": self.stand_ins,
            "matched_reminders": self.reminders,
            "skipped_system": self.skipped_system,
        }


@dataclass(slots=True)
class _RawIndex:
    """The record's raw history with, per raw position, what may stand in for it."""

    messages: list[Message] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    # raw position j -> (replacement, end k) for replacements covering raw [j, k)
    stand_ins: dict[int, list[tuple[Message, int]]] = field(default_factory=dict)
    # raw position j -> messages a seed may hold there or leave out (reminders, and
    # replacements of nothing but reminders)
    optional: dict[int, list[Message]] = field(default_factory=dict)


def _index(record: Record) -> _RawIndex:
    """Replay the record once, tracking which raw range each projected message stands for."""
    out = _RawIndex()
    cover: list[tuple[int, int]] = []  # parallel to the projection: raw range [j, k)
    for entry in record.entries:
        event = entry.event
        if isinstance(event, MessageAppended):
            j = len(out.messages)
            out.messages.append(event.message)
            out.seqs.append(entry.seq)
            cover.append((j, j + 1))
        elif isinstance(event, Reminder):
            j = len(out.messages)
            out.optional.setdefault(j, []).append(event.message)
            cover.append((j, j))
        elif isinstance(event, CompactionBoundary):
            _apply_boundary(event, cover, len(out.messages), out)
    return out


def _stand_in(out: _RawIndex, message: Message, j: int, k: int) -> None:
    if k > j:
        out.stand_ins.setdefault(j, []).append((message, k))
    else:
        out.optional.setdefault(j, []).append(message)


def _apply_boundary(
    event: CompactionBoundary, cover: list[tuple[int, int]], raw_count: int, out: _RawIndex
) -> None:
    for edit in event.edits:  # a fold marker or image pointer stands for the same raw messages
        j, k = cover[edit.index]
        _stand_in(out, edit.message, j, k)
    if event.span is None:
        return
    start, end = event.span  # `replacement_count` projected messages (end - start for v3)
    if start < end:
        j, k = cover[start][0], cover[end - 1][1]
    else:
        j = k = cover[start][0] if start < len(cover) else raw_count
    # The last message (the summary) stands for the span; those before it (the user messages
    # it keeps verbatim) stand for nothing and are optional in a seed.
    ranges = [(j, j)] * max(len(event.replacement) - 1, 0) + [(j, k)]
    for message, (a, b) in zip(event.replacement, ranges, strict=False):
        _stand_in(out, message, a, b)
    cover[start:end] = ranges[: len(event.replacement)]


_Counts = tuple[int, int, int, int]  # raw, stand-ins, optional, skipped system messages


def _put(states: dict[int, _Counts], j: int, counts: _Counts) -> None:
    """Keep one reading per raw position: the one that matched the most raw messages."""
    if j not in states or counts[0] > states[j][0]:
        states[j] = counts


def plan_reconcile(record: Record, seed: Sequence[Message]) -> ReconcilePlan:
    """Match `seed` against `record`'s raw history (see the module docstring for the rule).

    Raises:
        SeedConflictError: the seed contradicts the record or ends before its raw history.
    """
    index = _index(record)
    raw = index.messages
    n = len(raw)
    skip_system = not any(m.role == "system" for m in seed)

    def closure(states: dict[int, _Counts]) -> dict[int, _Counts]:
        todo = list(states)
        while todo:
            j = todo.pop()
            if skip_system and j < n and raw[j].role == "system":
                r, s, o, k = states[j]
                if j + 1 not in states:
                    states[j + 1] = (r, s, o, k + 1)
                    todo.append(j + 1)
        return states

    states = closure({0: (0, 0, 0, 0)})
    best = (0, states[n]) if n in states else None
    dead_at: int | None = None
    for i, message in enumerate(seed):
        following: dict[int, _Counts] = {}
        for j, (r, s, o, k) in states.items():
            if j < n and message == raw[j]:
                _put(following, j + 1, (r + 1, s, o, k))
            for replacement, end in index.stand_ins.get(j, ()):
                if replacement == message:
                    _put(following, end, (r, s + 1, o, k))
            if message in index.optional.get(j, ()):
                _put(following, j, (r, s, o + 1, k))
        if not following:
            dead_at = i
            break
        states = closure(following)
        if n in states:
            best = (i + 1, states[n])
    if best is None:
        j = max(states)
        if dead_at is not None:
            got = seed[dead_at]
            raise SeedConflictError(
                f"seed message {dead_at} contradicts the record: expected raw message {j} "
                f"(seq {index.seqs[j]}) {_preview(raw[j])}, got {_preview(got)}",
                kind="mismatch",
                seed_index=dead_at,
                record_index=j,
                seq=index.seqs[j],
                matched=j,
            )
        raise SeedConflictError(
            f"the seed is behind the record: its {len(seed)} messages account for {j} of the "
            f"record's {n} raw messages; page the rest with history(offset={j})",
            kind="behind",
            seed_index=len(seed),
            record_index=j,
            seq=index.seqs[j],
            matched=j,
        )
    used, (r, s, o, k) = best
    return ReconcilePlan(
        record_messages=n,
        new=tuple(seed[used:]),
        raw=r,
        stand_ins=s,
        reminders=o,
        skipped_system=k,
    )


def apply_reconcile(record: Record, plan: ReconcilePlan) -> int:
    """Append the plan's new messages in one `batch()`; returns how many.

    One group commit (one SQLite or PostgreSQL transaction, one JSONL write), so a crash keeps
    all of them or none. Refuses a plan made on another state.

    Raises:
        SeedConflictError: the record gained raw messages since the plan was made.
    """
    if record.message_count != plan.record_messages:
        raise SeedConflictError(
            f"the record changed since the seed was planned: it holds {record.message_count} "
            f"raw messages, the plan saw {plan.record_messages}",
            kind="mismatch",
            seed_index=0,
            record_index=plan.record_messages,
            seq=None,
            matched=0,
        )
    with record.batch():
        for message in plan.new:
            record.append_message(message)
    return len(plan.new)
