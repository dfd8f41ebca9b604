"""Record events (schema v4).

The record is a sequence of `Entry(seq, event)`. Six event kinds exist; their `kind` strings are
persisted and never change:

| kind                   | event                 | effect on the projection                        |
|------------------------|-----------------------|-------------------------------------------------|
| `message`              | `MessageAppended`     | appends the message                             |
| `compaction_start`     | `CompactionStart`     | none: opens a bracket over `span` (and `kept`)  |
| `compaction_summary`   | `CompactionSummary`   | none: records the (paid) summary of a bracket   |
| `compaction_boundary`  | `CompactionBoundary`  | rewrites: `edits`, then `span` → `replacement`  |
| `reminder`             | `Reminder`            | appends its message (visible to model and host) |
| `compaction_abandoned` | `CompactionAbandoned` | none: closes a bracket without a rewrite (v4)   |

A summarizing compaction writes start → summary → boundary with one `compaction_id`; a fold-only
rewrite writes a boundary alone; recovery closes a bracket it cannot finish with an abandon.
Spans are `[head_end, tail_start)` in projection indices at the moment the event is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from ..errors import RecordError
from ..messages import Message

__all__ = [
    "CompactionAbandoned",
    "CompactionAction",
    "CompactionBoundary",
    "CompactionStart",
    "CompactionSummary",
    "CompactionTrigger",
    "Edit",
    "Entry",
    "Event",
    "EventKind",
    "MessageAppended",
    "Reminder",
    "SummarySource",
    "Usage",
]

CompactionAction: TypeAlias = Literal["compact", "summarize", "excerpt", "micro_compact"]
"""What a rewrite did: `compact` folds (no LLM), `summarize` splices an LLM summary, `excerpt`
splices the deterministic excerpt summary, `micro_compact` is the periodic fold."""

CompactionTrigger: TypeAlias = Literal[
    "pressure", "overflow", "manual", "micro", "recovery", "cold_cache"
]
"""Which path started a compaction (`cold_cache`: the prompt cache had expired, see
`compaction.cold`)."""

EventKind: TypeAlias = Literal[
    "message",
    "compaction_start",
    "compaction_summary",
    "compaction_boundary",
    "reminder",
    "compaction_abandoned",
]

ACTIONS: frozenset[str] = frozenset(get_args(CompactionAction))
TRIGGERS: frozenset[str] = frozenset(get_args(CompactionTrigger))


def _check_tokens(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RecordError(f"{name} must be a non-negative integer, got {value!r}")


def _check_span(span: tuple[int, int]) -> None:
    if (
        not isinstance(span, tuple)
        or len(span) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)
        or not 0 <= span[0] <= span[1]
    ):
        raise RecordError(f"span must be (start, end) with 0 <= start <= end, got {span!r}")


def _check_choice(name: str, value: str, allowed: frozenset[str]) -> None:
    if value not in allowed:
        raise RecordError(f"{name} must be one of {sorted(allowed)}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What the provider billed for the request that produced a reply."""

    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def __post_init__(self) -> None:
        _check_tokens(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageAppended:
    """A message joined the transcript; `usage` is set on provider replies."""

    message: Message
    usage: Usage | None = None
    kind: Literal["message"] = "message"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionStart:
    """Opens a compaction bracket; the span stays visible until the bracket closes.

    `kept` lists the projection indices, inside `span` and in order, of the user messages the
    summary keeps verbatim in front of it; deciding them with the span lets a recovering
    process rebuild the exact replacement whatever its policy or meter says (R37, R38).
    `focus` is what the host asked the summary to keep in full (a steered manual compaction).
    """

    compaction_id: str
    span: tuple[int, int]
    pre_tokens: int
    action: CompactionAction
    trigger: CompactionTrigger = "pressure"
    kept: tuple[int, ...] = ()
    focus: str | None = None
    kind: Literal["compaction_start"] = "compaction_start"

    def __post_init__(self) -> None:
        if not self.compaction_id:
            raise RecordError("compaction_id must be a non-empty string")
        _check_span(self.span)
        if not isinstance(self.kept, tuple):
            object.__setattr__(self, "kept", tuple(self.kept))
        start, end = self.span
        inside = all(
            isinstance(i, int) and not isinstance(i, bool) and start <= i < end for i in self.kept
        )
        if not (inside and all(a < b for a, b in zip(self.kept, self.kept[1:], strict=False))):
            raise RecordError(
                f"kept must be increasing indices inside span {self.span!r}, got {self.kept!r}"
            )
        _check_tokens(pre_tokens=self.pre_tokens)
        _check_choice("action", self.action, ACTIONS)
        _check_choice("trigger", self.trigger, TRIGGERS)
        if self.focus is not None and not isinstance(self.focus, str):
            raise RecordError(f"focus must be a string or None, got {self.focus!r}")


SummarySource: TypeAlias = Literal["summarizer", "excerpt"]
"""Who wrote a summary: the LLM summarizer, or the deterministic excerpt fallback (which may
follow a summarizer answer refused only for keeping too few values)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionSummary:
    """The summary a bracket paid for, recorded before the bracket closes (reused on recovery).

    `retention_budget` is the most the retention check may add, in the static estimate's
    tokens, decided when the summary arrived (from the room the summary left), so recovery
    writes the same block; `None` (older records): derived from the policy as it was then.
    `refused` says why the summarizer's own answer was not used as the summary, when the
    excerpt stands in (an answer refused only for keeping too few values may precede it).
    """

    compaction_id: str
    summary: str
    source: SummarySource = "summarizer"
    retention_budget: int | None = None
    refused: str | None = None
    kind: Literal["compaction_summary"] = "compaction_summary"

    def __post_init__(self) -> None:
        if not self.compaction_id:
            raise RecordError("compaction_id must be a non-empty string")
        _check_choice("source", self.source, frozenset(get_args(SummarySource)))
        if self.retention_budget is not None:
            _check_tokens(retention_budget=self.retention_budget)
        if self.refused is not None and not isinstance(self.refused, str):
            raise RecordError(f"refused must be a string or None, got {self.refused!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """Replace the message at projection `index` (a fold marker or an offloaded image)."""

    index: int
    message: Message

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise RecordError(f"edit index must be a non-negative integer, got {self.index!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionBoundary:
    """A rewrite of the projection: apply `edits`, then replace `span` with `replacement`.

    It carries everything needed to reproduce the rewrite from the record alone, and nothing
    that the record already holds (untouched messages are not repeated). When `compaction_id`
    is set the boundary closes that bracket and `span` must equal the bracket's span.
    `history` is the first and last record seq of what the span replaced (provenance);
    `retained` is the retention check's `(found, kept)` atoms for a summary.
    """

    action: CompactionAction
    pre_tokens: int
    post_tokens: int
    replacement_count: int
    compaction_id: str | None = None
    trigger: CompactionTrigger = "pressure"
    edits: tuple[Edit, ...] = ()
    span: tuple[int, int] | None = None
    replacement: tuple[Message, ...] = ()
    history: tuple[int, int] | None = None
    retained: tuple[int, int] | None = None
    kind: Literal["compaction_boundary"] = "compaction_boundary"

    def __post_init__(self) -> None:
        _check_tokens(
            pre_tokens=self.pre_tokens,
            post_tokens=self.post_tokens,
            replacement_count=self.replacement_count,
        )
        _check_choice("action", self.action, ACTIONS)
        _check_choice("trigger", self.trigger, TRIGGERS)
        if self.compaction_id is not None and not self.compaction_id:
            raise RecordError("compaction_id must be None or a non-empty string")
        if not isinstance(self.edits, tuple):
            object.__setattr__(self, "edits", tuple(self.edits))
        if not isinstance(self.replacement, tuple):
            object.__setattr__(self, "replacement", tuple(self.replacement))
        if self.span is not None:
            _check_span(self.span)
        elif self.replacement:
            raise RecordError("a boundary with a replacement needs a span")
        if self.compaction_id is not None and self.span is None:
            raise RecordError("a boundary that closes a bracket needs its span")
        if self.history is not None:
            _check_span(self.history)
        if self.retained is not None:
            found, kept = self.retained
            _check_tokens(retained_found=found, retained_kept=kept)
            if kept > found:
                raise RecordError(f"retained keeps {kept} of {found} atoms found")
        indices = [e.index for e in self.edits]
        if len(set(indices)) != len(indices):
            raise RecordError("a boundary edits each index at most once")


@dataclass(frozen=True, slots=True, kw_only=True)
class Reminder:
    """A notice for both the model and the host (e.g. `CompactionThrashingReminder`)."""

    reason: str
    message: Message
    kind: Literal["reminder"] = "reminder"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionAbandoned:
    """Closes a bracket that will never get its boundary; the projection does not change.

    Written by recovery for a bracket a crash left open without a summary it can reuse
    (`cause="recovery"`), or by the engine at once when its summary was refused and the fold
    (or nothing) stood in (`cause="refused"`), so no bracket stays open forever; `reason` says
    why it was given up.
    """

    compaction_id: str
    reason: str
    cause: Literal["recovery", "refused"] = "recovery"
    kind: Literal["compaction_abandoned"] = "compaction_abandoned"

    def __post_init__(self) -> None:
        if not self.compaction_id:
            raise RecordError("compaction_id must be a non-empty string")
        _check_choice("cause", self.cause, frozenset({"recovery", "refused"}))


Event: TypeAlias = (
    MessageAppended
    | CompactionStart
    | CompactionSummary
    | CompactionBoundary
    | Reminder
    | CompactionAbandoned
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One event at its place in the record; `seq` counts from 0 without gaps."""

    seq: int
    event: Event
