"""Trace assertions over a recorded run (spec verification layer L2).

`check_trace(record, requests, policy=...)` reads a record (and, when you have them, the requests
the provider received, in order) and checks what must hold in any run, live or simulated:

| check            | what must hold                                                           |
|------------------|--------------------------------------------------------------------------|
| `bracket_shrinks`| every closed bracket has `post_tokens < pre_tokens`                      |
| `fold_shrinks`   | every fold-only boundary has `post_tokens < pre_tokens`                  |
| `hysteresis`     | a pressure compaction starts at or above the threshold and at least the  |
|                  | margin above the previous compaction's post level (R31), unless it       |
|                  | starts over the window's limit (the fit guard: R32, R33)                  |
| `prefix_replay`  | a summarizer request is the previous request's first messages, byte for  |
|                  | byte, plus exactly one instruction message, with the same tools (R24)    |
| `tool_pairs`     | no request carries an orphan tool result or an unanswered call (R22b)    |

Without a policy the hysteresis check only asks that pressure rose above the previous post level
(the margin and threshold are unknown). Micro-compactions are exempt from it and do not move the
post level, as in the engine. A fold-only boundary written right after a bracket's start (or its
abandon), at the same pressure (the engine folds when no summary could be written), is the same
compaction: it is not gated again; nor is a bracket or a fold started right after a boundary at
exactly that boundary's post level (the engine merging its summary chain right after a summary,
or compacting further in the same step because the request would not fit the window). Such a
further compaction replays the projection the one before it left, which no request carried: a
summarizer request right after another summarizer request is counted apart
(`same_step_summaries`) when it is no prefix replay, not as a violation. The report lists
every violation; `strict=True` (or
`report.raise_if_violated()`) raises `TraceAssertionError` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .compaction import is_summary_instruction, pair_issues
from .errors import CompactionError
from .messages import Message, TextPart
from .policy import CompactionPolicy
from .providers.base import CompletionRequest
from .record import CompactionAbandoned, CompactionBoundary, CompactionStart, Entry, Record

__all__ = [
    "TraceAssertionError",
    "TraceCheck",
    "TraceReport",
    "TraceViolation",
    "check_trace",
    "is_summary_request",
]

TraceCheck: TypeAlias = Literal[
    "bracket_shrinks", "fold_shrinks", "hysteresis", "prefix_replay", "tool_pairs"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceViolation:
    """One failed assertion: which check, what was wrong, and where (record seq, request index)."""

    check: TraceCheck
    detail: str
    seq: int | None = None
    request: int | None = None

    def __str__(self) -> str:
        where = [f"seq {self.seq}"] if self.seq is not None else []
        if self.request is not None:
            where.append(f"request {self.request}")
        return f"{self.check} ({', '.join(where) or 'run'}): {self.detail}"


class TraceAssertionError(CompactionError):
    """A recorded run broke one or more trace assertions; `violations` lists them."""

    def __init__(self, violations: Sequence[TraceViolation]) -> None:
        self.violations = tuple(violations)
        shown = "; ".join(str(v) for v in self.violations[:5])
        more = f" (and {len(self.violations) - 5} more)" if len(self.violations) > 5 else ""
        super().__init__(f"{len(self.violations)} trace assertion(s) failed: {shown}{more}")

    def __reduce__(self) -> tuple[type[TraceAssertionError], tuple[tuple[TraceViolation, ...]]]:
        return (type(self), (self.violations,))


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceReport:
    """What was checked and every violation found."""

    violations: tuple[TraceViolation, ...] = ()
    closed_brackets: int = 0
    folds: int = 0
    pressure_compactions: int = 0
    requests: int = 0
    summary_requests: int = 0
    same_step_summaries: int = 0  # right after a summary, replaying what no request carried
    margin_tokens: int | None = None  # the hysteresis margin used (`None`: no policy given)

    @property
    def ok(self) -> bool:
        """Whether every assertion held."""
        return not self.violations

    def counts(self) -> dict[TraceCheck, int]:
        """Violations per check (checks without violations are left out)."""
        out: dict[TraceCheck, int] = {}
        for violation in self.violations:
            out[violation.check] = out.get(violation.check, 0) + 1
        return out

    def raise_if_violated(self) -> None:
        """Raise `TraceAssertionError` listing the violations, if there are any."""
        if self.violations:
            raise TraceAssertionError(self.violations)


def is_summary_request(request: CompletionRequest) -> bool:
    """Whether `request` is the engine's summarizer call (no new cache entry, R27, or R29 text)."""
    if request.cache_retention == "none":
        return True
    last = request.messages[-1] if request.messages else None
    return last is not None and last.role == "user" and is_summary_instruction(last.text)


def _entries(record: Record | Iterable[Entry]) -> list[Entry]:
    return list(record.entries) if isinstance(record, Record) else list(record)


def _check_record(
    entries: list[Entry], policy: CompactionPolicy | None
) -> tuple[list[TraceViolation], int, int, int]:
    found: list[TraceViolation] = []
    brackets = folds = pressure = 0
    starts: dict[str, CompactionStart] = {}
    last_post: int | None = None
    margin = policy.recompact_margin_tokens if policy is not None else None

    def gate(seq: int, pre: int) -> None:
        nonlocal pressure
        pressure += 1
        if policy is not None and pre < policy.threshold_tokens:
            found.append(
                TraceViolation(
                    check="hysteresis",
                    seq=seq,
                    detail=f"pressure compaction at {pre} tokens, below the threshold "
                    f"{policy.threshold_tokens}",
                )
            )
        elif policy is not None and pre > policy.limit_tokens:
            return  # the request would not fit: the limit wins over the hysteresis
        elif last_post is not None and pre < last_post + (margin or 1):
            need = f"{last_post} + {margin} margin" if margin is not None else f"> {last_post}"
            found.append(
                TraceViolation(
                    check="hysteresis",
                    seq=seq,
                    detail=f"pressure compaction at {pre} tokens, inside the hysteresis band "
                    f"(previous post {last_post}; needs >= {need})",
                )
            )

    previous: object = None  # the entry before this one
    for entry in entries:
        event = entry.event
        if isinstance(event, CompactionAbandoned):
            continue  # a bracket given up: what follows it continues the same compaction
        again = _same_compaction(previous, event)
        previous = event
        if isinstance(event, CompactionStart):
            starts[event.compaction_id] = event
            if event.trigger == "pressure" and not again:
                gate(entry.seq, event.pre_tokens)
            if event.trigger != "micro":
                last_post = event.pre_tokens  # until the bracket closes: a failed one stays here
        elif isinstance(event, CompactionBoundary):
            if event.compaction_id is None:
                folds += 1
                if event.trigger == "pressure" and not again:
                    gate(entry.seq, event.pre_tokens)
            else:
                brackets += 1
            violation = _shrinks(entry.seq, event)
            if violation is not None:
                found.append(violation)
            start = starts.get(event.compaction_id or "")
            if (start.trigger if start is not None else event.trigger) != "micro":
                last_post = event.post_tokens
    return found, brackets, folds, pressure


def _same_compaction(previous: object, event: object) -> bool:
    """Whether `event` continues the compaction `previous` belongs to (not gated again).

    A fold right after a bracket's start at the same pressure stands in for a summary that
    could not be written; a bracket right after a boundary, starting at its post level, is the
    engine merging its summary chain in the same step.
    """
    if isinstance(previous, CompactionStart) and isinstance(event, CompactionBoundary):
        same = (previous.trigger, previous.pre_tokens) == (event.trigger, event.pre_tokens)
        return event.compaction_id is None and same
    if isinstance(previous, CompactionBoundary) and isinstance(
        event, CompactionStart | CompactionBoundary
    ):
        return (previous.trigger, previous.post_tokens) == (event.trigger, event.pre_tokens)
    return False


def _shrinks(seq: int, event: CompactionBoundary) -> TraceViolation | None:
    """A violation if the rewrite did not shrink the request (`post >= pre`)."""
    if event.post_tokens < event.pre_tokens:
        return None
    if event.compaction_id is None:
        check: TraceCheck = "fold_shrinks"
        name = f"fold-only boundary ({event.action}/{event.trigger})"
    else:
        check, name = "bracket_shrinks", f"bracket {event.compaction_id!r}"
    return TraceViolation(
        check=check,
        seq=seq,
        detail=f"{name} closed with post {event.post_tokens} >= pre {event.pre_tokens}",
    )


def _only_text(message: Message) -> bool:
    return message.role == "user" and all(isinstance(p, TextPart) for p in message.parts)


def _check_replay(
    index: int, request: CompletionRequest, previous: CompletionRequest | None
) -> TraceViolation | None:
    def bad(detail: str) -> TraceViolation:
        return TraceViolation(check="prefix_replay", request=index, detail=detail)

    if previous is None:
        return bad("a summarizer request with no earlier turn request to replay")
    replay, sent = request.messages[:-1], previous.messages
    if len(request.messages) < 2:
        return bad("the summarizer request replays nothing")
    if not _only_text(request.messages[-1]):
        return bad("the last message is not a text-only user instruction")
    if request.tools != previous.tools:
        return bad("the tools differ from the previous request's (the cached prefix breaks)")
    for i, (ours, theirs) in enumerate(zip(replay, sent, strict=False)):
        if ours is not theirs and ours != theirs:
            return bad(f"message {i} differs from the previous request's message {i}")
    if len(replay) > len(sent):
        extra = len(replay) - len(sent)
        return bad(
            f"replays the whole previous request and {extra} newer message(s) before the "
            "instruction (a prefix extension, not prefix + one instruction)"
        )
    if len(replay) < len(sent) and request.messages[-1] == sent[len(replay)]:
        return bad("the instruction is the previous request's next message, not a new one")
    return None


def _same_head(request: CompletionRequest, previous: CompletionRequest | None) -> bool:
    """Whether `request` replays the session's head (first message, tools) with one instruction.

    What a further compaction in the same step sends: the head the previous turn request
    carried, the projection the compaction before it left, the instruction. A cold request
    (one flattened transcript) or a foreign prefix is no such replay.
    """
    if previous is None or len(request.messages) < 2 or not previous.messages:
        return False
    first, head = request.messages[0], previous.messages[0]
    return (
        (first is head or first == head)
        and request.tools == previous.tools
        and _only_text(request.messages[-1])
    )


def check_trace(
    record: Record | Iterable[Entry],
    requests: Sequence[CompletionRequest] | None = None,
    *,
    policy: CompactionPolicy | None = None,
    is_summary: Callable[[CompletionRequest], bool] = is_summary_request,
    strict: bool = False,
) -> TraceReport:
    """Check a recorded run; see the module docstring for the assertions.

    `requests` are the provider requests in the order they were sent (failed ones included);
    without them only the record checks run. `is_summary` tells summarizer requests apart
    (default: `is_summary_request`). With `strict=True` a violation raises
    `TraceAssertionError`.
    """
    violations, brackets, folds, pressure = _check_record(_entries(record), policy)
    summaries = same_step = 0
    previous: CompletionRequest | None = None
    last_was_summary = False
    for index, request in enumerate(requests or ()):
        issues = pair_issues(request.messages)
        if issues:
            violations.append(
                TraceViolation(
                    check="tool_pairs",
                    request=index,
                    detail=f"orphan results at {list(issues.orphan_results)}, unanswered calls "
                    f"{[c for _, c in issues.unanswered_calls]}",
                )
            )
        summary = is_summary(request)
        if summary:
            summaries += 1
            problem = _check_replay(index, request, previous)
            if problem is not None and last_was_summary and _same_head(request, previous):
                same_step += 1  # a further compaction of the same step (see the module doc)
            elif problem is not None:
                violations.append(problem)
        else:
            previous = request
        last_was_summary = summary
    report = TraceReport(
        violations=tuple(violations),
        closed_brackets=brackets,
        folds=folds,
        pressure_compactions=pressure,
        requests=len(requests or ()),
        summary_requests=summaries,
        same_step_summaries=same_step,
        margin_tokens=policy.recompact_margin_tokens if policy is not None else None,
    )
    if strict:
        report.raise_if_violated()
    return report
