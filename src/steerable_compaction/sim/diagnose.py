"""Where each needle was lost: replays a run's record and watches every rewrite.

A needle is *visible* when the agent could answer it from the projection (`find_answer` on its
lines, images read). Folding the record entry by entry, the first rewrite after which a
visible needle no longer is gets the blame (`fold`, `summarize`, `excerpt`, `mask`, ...). A
needle never visible at all was cut before it reached the transcript (spill, truncation), or
planted after the session died. This explains recall; it is not part of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..record import CompactionBoundary, CompactionStart, Entry, MessageAppended, Projection
from .agent import visible_lines
from .tasks import Needle, find_answer

__all__ = ["loss_causes"]


def _visible(needles: Sequence[Needle], projection: Projection) -> set[str]:
    lines = visible_lines(projection.messages)
    return {n.id for n in needles if find_answer(n, lines) == n.value}


def loss_causes(
    needles: Sequence[Needle], entries: Sequence[Entry], recalled: Sequence[str], steps_done: int
) -> dict[str, str]:
    """For each needle not recalled: what removed it from view (see the module docstring).

    `steps_done` is how many tool rounds the session got through.
    """
    projection = Projection()
    seen: set[str] = set()
    visible: set[str] = set()
    lost: dict[str, str] = {}
    triggers: dict[str, str] = {}
    for entry in entries:
        event = entry.event
        projection.apply(entry)
        if isinstance(event, CompactionStart):
            triggers[event.compaction_id] = event.trigger
            continue
        if isinstance(event, MessageAppended):
            if event.message.role in ("user", "tool"):
                now = _visible(needles, projection)
                seen |= now
                visible |= now
            continue
        if isinstance(event, CompactionBoundary):
            now = _visible(needles, projection)
            kind = (
                "mask" if event.trigger == "micro" and event.action == "compact" else event.action
            )
            trigger = triggers.get(event.compaction_id or "", event.trigger)
            for needle_id in sorted(visible - now):
                lost.setdefault(needle_id, f"{kind} ({trigger}, seq {entry.seq})")
            visible = now
    out: dict[str, str] = {}
    for needle in needles:
        if needle.id in recalled:
            continue
        if needle.id in visible:
            out[needle.id] = "visible at the end but not answered (the session ended early)"
        elif needle.id in lost:
            out[needle.id] = lost[needle.id]
        elif needle.step >= steps_done:
            out[needle.id] = "not reached (the session ended first)"
        else:
            out[needle.id] = "never visible (cut before it reached the transcript)"
    return out
