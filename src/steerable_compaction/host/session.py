"""The session a host drives: one record, one harness-built loop, events for every new entry.

`Session` is usable without any transport: the JSON-RPC sidecar (`host.rpc`) and the demo both
drive it. It assembles the loop with `load_harness`, wraps the provider and tools so that each new
record entry reaches the current request's `EventSink` (`EventTap`), and offers seed reconcile
(R1), manual compaction (R15), paged raw history (R40) and a status snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..compaction import repair_tool_pairs
from ..harness import Harness, load_harness
from ..hooks import CompactionOutcome, StepContext
from ..loop import Tool, TurnResult
from ..messages import Message, message_to_dict
from ..policy import CompactionPolicy
from ..providers.base import Completion, CompletionRequest, Provider, StreamDone, StreamEvent
from ..record import CompactionBoundary, Entry, MessageAppended, Record, Reminder, Usage
from ..record.codec import encode_body
from ..tokens import TokenMeter
from .events import EventSink, entry_event, usage_json
from .reconcile import ReconcilePlan, apply_reconcile, plan_reconcile

__all__ = ["EventTap", "SendResult", "Session"]


class EventTap:
    """Turns record entries appended since the last look into events for the current sink.

    The sidecar flushes it before every model request and tool call and at the end of each
    request, so events arrive in record order, close to when they happen. A summarizer call's
    usage (a request with `cache_retention="none"`) rides on the boundary it paid for.
    """

    def __init__(self, record: Record) -> None:
        self.record = record
        self.sink: EventSink | None = None
        self.summarizer_usage: Usage | None = None
        self._seen = len(record)

    def flush(self) -> None:
        """Emit every entry appended since the last flush (dropped when there is no sink)."""
        entries = self.record.entries
        new, self._seen = entries[self._seen :], len(entries)
        for entry in new:
            event = entry_event(entry)
            if event["type"] == "compaction" and event["compaction_id"] is not None:
                if self.summarizer_usage is not None and event["action"] == "summarize":
                    event["summarizer"] = usage_json(self.summarizer_usage)
                self.summarizer_usage = None
            if self.sink is not None:
                self.sink(event)


def _check_storable(name: str, messages: Sequence[Message]) -> None:
    """Raise `ValueError` naming the first of `messages` that no record can store.

    A store writes UTF-8: text holding a lone surrogate cannot be written, and a group of
    appends that fails half-way would leave the first half recorded.
    """
    for index, message in enumerate(messages):
        try:
            encode_body(Entry(0, MessageAppended(message=message)))
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{name}[{index}] holds text that is not valid Unicode ({exc.reason} at "
                f"character {exc.start} of its JSON form); nothing was written"
            ) from None


class _TappedProvider:
    """Flushes the tap before each request; keeps the summarizer call's usage for its event."""

    def __init__(self, inner: Provider, tap: EventTap) -> None:
        self.inner = inner
        self.tap = tap

    @property
    def name(self) -> str:
        return self.inner.name

    def _seen(self, request: CompletionRequest, completion: Completion) -> None:
        if request.cache_retention == "none":
            self.tap.summarizer_usage = completion.usage

    async def complete(self, request: CompletionRequest) -> Completion:
        self.tap.flush()
        completion = await self.inner.complete(request)
        self._seen(request, completion)
        return completion

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        self.tap.flush()
        async for event in self.inner.stream(request):
            if isinstance(event, StreamDone):
                self._seen(request, event.completion)
            yield event


def _tapped_tool(tool: Tool, tap: EventTap) -> Tool:
    async def fn(arguments: Mapping[str, Any]) -> Any:
        tap.flush()  # the call that asked for this tool goes out before the tool runs
        return await tool.fn(arguments)

    return dataclasses.replace(tool, fn=fn)


# -- the session ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """A finished `send`: the turn, and what its seed added (if it had one)."""

    turn: TurnResult
    seed: ReconcilePlan | None = None


class Session:
    """One agent session over `record`, assembled by `load_harness` around `provider`.

    `system` is written as the first message of an empty record (an existing record is the
    truth and is left as it is). The provider and tools are wrapped so that each new record
    entry reaches the current request's event sink.
    """

    def __init__(
        self,
        record: Record,
        provider: Provider,
        *,
        model: str | None = None,
        window: int | None = None,
        tools: Sequence[Tool] = (),
        system: str | None = None,
        harness: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        spill_directory: str | os.PathLike[str] | None = None,
    ) -> None:
        self.record = record
        self.provider = provider
        self.model = model
        self.tap = EventTap(record)
        self.harness: Harness = load_harness(
            harness,
            provider=_TappedProvider(provider, self.tap),
            record=record,
            model=model,
            max_context_tokens=window,
            tools=[_tapped_tool(t, self.tap) for t in tools],
            env=env,
            spill_directory=spill_directory,
        )
        if system is not None and len(record) == 0:
            record.append_message(Message.system(system))
        if self.harness.compaction is not None:
            # Close what an interrupted run left open (R38) before any host reads the status.
            self.harness.compaction.recover()
        self.tap.flush()
        self.busy = False

    @property
    def policy(self) -> CompactionPolicy:
        """The compaction policy resolved at assembly."""
        return self.harness.policy

    def pressure(self) -> int:
        """Observed prompt tokens plus the estimate of what came since (R7)."""
        if self.harness.compaction is not None:
            return self.harness.compaction.pressure()
        return TokenMeter(self.model).pressure(repair_tool_pairs(list(self.record.messages())))

    @contextlib.contextmanager
    def _sink(self, sink: EventSink | None) -> Any:
        self.tap.flush()  # anything from before this request is not its event
        self.tap.sink = sink
        try:
            yield
        finally:
            self.tap.flush()
            self.tap.sink = None

    def plan_seed(self, seed: Sequence[Message]) -> ReconcilePlan:
        """Match `seed` against the record (R1); raises `SeedConflictError`, writing nothing."""
        return plan_reconcile(self.record, seed)

    def seed(self, seed: Sequence[Message]) -> ReconcilePlan:
        """Reconcile `seed` and append what is new (see `reconcile`), all of it or nothing.

        Raises `SeedConflictError`, or `ValueError` for a message no record can store; either
        way nothing was written.
        """
        _check_storable("seed", seed)
        plan = self.plan_seed(seed)
        apply_reconcile(self.record, plan)
        self.tap.flush()
        return plan

    async def send(
        self,
        message: Message | None,
        *,
        seed: Sequence[Message] | None = None,
        sink: EventSink | None = None,
    ) -> SendResult:
        """Reconcile `seed` (if any), then run one turn on `message`.

        Without `message`, the seed's last new message must be a user message: it starts the
        turn. Raises `SeedConflictError` or `ValueError` for bad input (writing nothing, the turn
        counter unchanged), and whatever the turn raises.
        """
        if message is not None and message.role != "user":
            raise ValueError(f"the input must be a user message, got role {message.role!r}")
        _check_storable("input", () if message is None else (message,))
        _check_storable("seed", seed or ())
        plan = self.plan_seed(seed) if seed is not None else None
        prefix: tuple[Message, ...] = plan.new if plan is not None else ()
        if message is None:
            if not prefix or prefix[-1].role != "user":
                raise ValueError(
                    "nothing to answer: give `input`, or a seed whose last new message is a "
                    "user message"
                )
            prefix, message = prefix[:-1], prefix[-1]
        if plan is not None:
            apply_reconcile(self.record, dataclasses.replace(plan, new=prefix))
            self.tap.flush()
        with self._sink(sink):
            turn = await self.harness.loop.run_turn(message)
        return SendResult(turn=turn, seed=plan)

    def request_compact(self, focus: str | None = None) -> None:
        """Compact at the next step boundary, bypassing threshold, hysteresis, circuit (R15).

        `focus` names what the summary must keep in full.

        Raises:
            RuntimeError: the harness has no `pressure_compaction` hook.
        """
        if self.harness.compaction is None:
            raise RuntimeError("compaction is not enabled in this harness")
        self.harness.compaction.request_compact(focus)

    async def compact_now(
        self, *, sink: EventSink | None = None, focus: str | None = None
    ) -> CompactionOutcome | None:
        """Run a manual compaction at once (between turns); `None` when nothing ran."""
        compaction = self.harness.compaction
        if compaction is None:
            raise RuntimeError("compaction is not enabled in this harness")
        loop = self.harness.loop
        with self._sink(sink):
            action = await compaction.compact_now(
                StepContext(
                    record=self.record, round=loop.round, turn=loop.turn, compact_focus=focus
                )
            )
        return action.compactions[0] if action.compactions else None

    def history(self, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A page of the raw (never compacted) message history (R40), JSON-ready."""
        total = self.record.message_count
        page = self.record.history(offset, limit)
        items = []
        index = offset
        for entry in page:
            event = entry.event
            if isinstance(event, Reminder):  # what the model saw, in its place; not counted
                items.append(
                    {
                        "seq": entry.seq,
                        "reminder": event.reason,
                        "message": message_to_dict(event.message),
                    }
                )
                continue
            assert isinstance(event, MessageAppended)
            item: dict[str, Any] = {
                "index": index,
                "seq": entry.seq,
                "message": message_to_dict(event.message),
            }
            if event.usage is not None:
                item["usage"] = usage_json(event.usage)
            items.append(item)
            index += 1
        end = index
        return {
            "total": total,
            "offset": offset,
            "messages": items,
            "next_offset": end if end < total else None,
        }

    def status(self) -> dict[str, Any]:
        """Pressure, threshold, last boundary, circuit state and reason, counters; JSON-ready."""
        policy = self.policy
        pressure = self.pressure()
        compaction = self.harness.compaction
        last: dict[str, Any] | None = None
        for entry in reversed(self.record.entries):
            if isinstance(entry.event, CompactionBoundary):
                last = entry_event(entry)
                del last["replacement"], last["type"]
                break
        state = compaction.state if compaction is not None else None
        return {
            "record": None if self.record.path is None else str(self.record.path),
            "provider": self.provider.name,
            "model": self.model,
            "window": policy.max_context_tokens,
            "threshold": policy.threshold_tokens,
            "pressure": pressure,
            "pressure_ratio": round(pressure / policy.threshold_tokens, 4),
            "messages": self.record.message_count,
            "visible_messages": len(self.record.projection),
            "events": len(self.record),
            "turn": self.harness.loop.turn,
            "round": self.harness.loop.round,
            "busy": self.busy,
            "compaction_enabled": compaction is not None,
            "compact_requested": compaction is not None and compaction.compact_requested,
            "circuit": {
                "open": state is not None and state.circuit_open,
                "reason": None if state is None else state.circuit,
                "consecutive_failures": 0 if state is None else state.consecutive_failures,
                "rapid_refills": 0 if state is None else state.rapid_refills,
            },
            "last_boundary": last,
            "open_brackets": [b.start.compaction_id for b in self.record.projection.open_brackets],
        }
