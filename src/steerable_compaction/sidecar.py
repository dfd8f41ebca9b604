"""The JSON-RPC 2.0 sidecar: a host drives an agent session over newline-delimited stdio.

`Session` is the engine a host talks to: one record, one harness-built loop, an event tap that
turns every new record entry into a host event, seed reconcile (R1), manual compaction (R15),
paged raw history (R40) and a status snapshot. `JsonRpcServer` maps JSON-RPC requests onto it;
`serve_stdio` runs the server on stdin/stdout (the `steerable-compaction serve` command).

Methods (params are named; unknown ones are refused):

| method               | params                                           | result                 |
|----------------------|--------------------------------------------------|------------------------|
| `agent.chat.send`    | `input` (text or user message), `seed`, `format` | the turn and its seed  |
| `agent.chat.seed`    | `messages`, `format` (`record` or `openai`)      | what matched, what new |
| `agent.chat.compact` | `now` (default false: at the next step boundary) | scheduled, or outcome  |
| `agent.chat.history` | `offset` (0), `limit` (50, at most 500)          | a page of raw history  |
| `agent.chat.status`  | none                                             | pressure, circuit, …   |

While a request runs, the record's new entries stream as `agent.chat.event` notifications
(`params.type`: `user`, `tool_calls`, `tool_result`, `reply`, `system`, `compaction_start`,
`compaction_summary`, `compaction`, `reminder`; each with `seq` and the id of the request that
caused it). Errors: the JSON-RPC codes, plus -32000 turn failed, -32001 busy, -32002 seed
conflict, -32003 compaction disabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .compaction import repair_tool_pairs
from .errors import CompactionError, MessageError, ProviderError
from .harness import Harness, load_harness
from .hooks import CompactionOutcome, StepContext
from .loop import Tool, TurnResult
from .messages import Message, message_from_dict, message_to_dict
from .policy import CompactionPolicy
from .providers.base import Completion, CompletionRequest, Provider, StreamDone, StreamEvent
from .reconcile import ReconcilePlan, SeedConflictError, apply_reconcile, plan_reconcile
from .record import (
    CompactionAbandoned,
    CompactionBoundary,
    CompactionStart,
    CompactionSummary,
    Entry,
    MessageAppended,
    Record,
    Reminder,
    Usage,
)
from .tokens import TokenMeter
from .wire import from_openai

__all__ = [
    "BUSY",
    "COMPACTION_DISABLED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SEED_CONFLICT",
    "TURN_FAILED",
    "EventSink",
    "JsonRpcServer",
    "RpcError",
    "SendResult",
    "Session",
    "entry_event",
    "serve_stdio",
]

logger = logging.getLogger("steerable_compaction.sidecar")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TURN_FAILED = -32000
BUSY = -32001
SEED_CONFLICT = -32002
COMPACTION_DISABLED = -32003

EventSink = Callable[[dict[str, Any]], None]
"""Receives host events (see `entry_event`)."""


# -- events ---------------------------------------------------------------------------------------


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def entry_event(entry: Entry) -> dict[str, Any]:
    """The host event for one record entry: `type`, `seq` and the entry's fields, JSON-ready.

    Message events carry the message in the record's JSON form, so a host can rebuild the raw
    history (and seed it back) from them alone.
    """
    event = entry.event
    out: dict[str, Any] = {"seq": entry.seq}
    if isinstance(event, MessageAppended):
        message = event.message
        if message.role == "assistant":
            out["type"] = "tool_calls" if message.tool_calls else "reply"
        else:
            out["type"] = {"system": "system", "user": "user", "tool": "tool_result"}[message.role]
        out["message"] = message_to_dict(message)
        if event.usage is not None:
            out["usage"] = _usage(event.usage)
        if message.tool_calls:
            out["calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
            ]
        result = message.tool_result
        if result is not None:
            out["call_id"] = result.call_id
            out["is_error"] = result.is_error
        if out["type"] == "reply":
            out["text"] = message.text
    elif isinstance(event, CompactionStart):
        out |= {
            "type": "compaction_start",
            "compaction_id": event.compaction_id,
            "action": event.action,
            "trigger": event.trigger,
            "span": list(event.span),
            "pre_tokens": event.pre_tokens,
            "kept": list(event.kept),
        }
    elif isinstance(event, CompactionSummary):
        out |= {
            "type": "compaction_summary",
            "compaction_id": event.compaction_id,
            "source": event.source,
            "chars": len(event.summary),
        }
    elif isinstance(event, CompactionBoundary):
        out |= {
            "type": "compaction",
            "action": event.action,
            "trigger": event.trigger,
            "pre_tokens": event.pre_tokens,
            "post_tokens": event.post_tokens,
            "replacement_count": event.replacement_count,
            "compaction_id": event.compaction_id,
            "span": None if event.span is None else list(event.span),
            "edits": len(event.edits),
            "replacement": [message_to_dict(m) for m in event.replacement],
        }
    elif isinstance(event, CompactionAbandoned):
        out |= {
            "type": "compaction_abandoned",
            "compaction_id": event.compaction_id,
            "reason": event.reason,
        }
    else:
        assert isinstance(event, Reminder)
        out |= {
            "type": "reminder",
            "reason": event.reason,
            "message": message_to_dict(event.message),
        }
    return out


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
                    event["summarizer"] = _usage(self.summarizer_usage)
                self.summarizer_usage = None
            if self.sink is not None:
                self.sink(event)


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


def _outcome(outcome: CompactionOutcome) -> dict[str, Any]:
    return {
        "trigger": outcome.trigger,
        "action": outcome.action,
        "written": outcome.written,
        "effective": outcome.effective,
        "pre_tokens": outcome.pre_tokens,
        "post_tokens": outcome.post_tokens,
        "compaction_id": outcome.compaction_id,
        "summarizer_called": outcome.summarizer_called,
        "reason": outcome.reason,
    }


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
        )
        if spill_directory is not None and self.harness.spill is not None:
            self.harness.spill.directory = Path(spill_directory)
        if system is not None and len(record) == 0:
            record.append_message(Message.system(system))
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
        """Reconcile `seed` and append what is new (see `reconcile`)."""
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
        turn. Raises `SeedConflictError` (writing nothing) or `ValueError` for bad input, and
        whatever the turn raises.
        """
        if message is not None and message.role != "user":
            raise ValueError(f"the input must be a user message, got role {message.role!r}")
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

    def request_compact(self) -> None:
        """Compact at the next step boundary, bypassing threshold, hysteresis, circuit (R15).

        Raises:
            RuntimeError: the harness has no `pressure_compaction` hook.
        """
        if self.harness.compaction is None:
            raise RuntimeError("compaction is not enabled in this harness")
        self.harness.compaction.request_compact()

    async def compact_now(self, *, sink: EventSink | None = None) -> CompactionOutcome | None:
        """Run a manual compaction at once (between turns); `None` when nothing ran."""
        compaction = self.harness.compaction
        if compaction is None:
            raise RuntimeError("compaction is not enabled in this harness")
        loop = self.harness.loop
        with self._sink(sink):
            action = await compaction.pre_step(
                StepContext(
                    record=self.record, round=loop.round, turn=loop.turn, compact_requested=True
                )
            )
        return action.compactions[0] if action.compactions else None

    def history(self, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A page of the raw (never compacted) message history (R40), JSON-ready."""
        total = self.record.message_count
        page = self.record.history(offset, limit)
        items = []
        for k, entry in enumerate(page):
            assert isinstance(entry.event, MessageAppended)
            item: dict[str, Any] = {
                "index": offset + k,
                "seq": entry.seq,
                "message": message_to_dict(entry.event.message),
            }
            if entry.event.usage is not None:
                item["usage"] = _usage(entry.event.usage)
            items.append(item)
        end = offset + len(page)
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


# -- JSON-RPC ------------------------------------------------------------------------------------


class RpcError(Exception):
    """A JSON-RPC error response: `code`, `message` and optional `data`."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        super().__init__(message)

    def to_json(self) -> dict[str, Any]:
        """The response's `error` member."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class _Params:
    """Named params, checked: each getter raises `RpcError(INVALID_PARAMS)` naming the key."""

    def __init__(self, params: Any, allowed: Sequence[str]) -> None:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object (named parameters)")
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise RpcError(
                INVALID_PARAMS,
                f"unknown parameter(s) {unknown}; allowed: {sorted(allowed)}",
                {"unknown": unknown},
            )
        self.raw: dict[str, Any] = params

    def int(self, key: str, default: int, low: int, high: int | None = None) -> int:
        value = self.raw.get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            bound = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
            raise RpcError(INVALID_PARAMS, f"{key} must be {bound}, got {value!r}", {"param": key})
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise RpcError(
                INVALID_PARAMS, f"{key} must be a boolean, got {value!r}", {"param": key}
            )
        return value

    def choice(self, key: str, default: str, allowed: Sequence[str]) -> str:
        value = self.raw.get(key, default)
        if value not in allowed:
            raise RpcError(
                INVALID_PARAMS,
                f"{key} must be one of {list(allowed)}, got {value!r}",
                {"param": key},
            )
        return str(value)

    def messages(self, key: str, fmt: str) -> list[Message] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise RpcError(INVALID_PARAMS, f"{key} must be an array of messages", {"param": key})
        return _decode(key, value, fmt)

    def user_input(self, key: str, fmt: str) -> Message | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            if not value.strip():
                raise RpcError(INVALID_PARAMS, f"{key} must not be empty", {"param": key})
            return Message.user(value)
        messages = _decode(key, [value], fmt)
        if len(messages) != 1 or messages[0].role != "user":
            raise RpcError(INVALID_PARAMS, f"{key} must be text or a user message", {"param": key})
        return messages[0]


def _decode(key: str, items: list[Any], fmt: str) -> list[Message]:
    """Messages in the record's JSON form or as Chat Completions messages."""
    try:
        if fmt == "openai":
            return from_openai(items)
        return [message_from_dict(obj, index=i) for i, obj in enumerate(items)]
    except MessageError as exc:
        raise RpcError(
            INVALID_PARAMS, f"{key}: {exc}", {"param": key, "index": exc.index, "field": exc.field}
        ) from None


def _seed_error(exc: SeedConflictError) -> RpcError:
    return RpcError(
        SEED_CONFLICT,
        f"seed refused, the record is unchanged: {exc.reason}",
        {
            "kind": exc.kind,
            "seed_index": exc.seed_index,
            "record_index": exc.record_index,
            "seq": exc.seq,
            "matched": exc.matched,
        },
    )


def _failure(exc: CompactionError) -> RpcError:
    data: dict[str, Any] = {"error": type(exc).__name__}
    if isinstance(exc, ProviderError):
        data |= {
            "provider": exc.provider,
            "status_code": exc.status_code,
            "retryable": exc.retryable,
        }
    return RpcError(TURN_FAILED, f"the turn failed: {exc}", data)


def _busy() -> RpcError:
    return RpcError(BUSY, "a request is already running; send this again when it ends")


def _long(method: str, params: Any) -> bool:
    """Whether a request runs as a task and holds the session (a turn, an immediate compact)."""
    return method == "agent.chat.send" or (
        method == "agent.chat.compact" and isinstance(params, dict) and params.get("now") is True
    )


def _valid_id(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int | float) and not isinstance(value, bool))
    )


_NO_ID = object()


class JsonRpcServer:
    """JSON-RPC 2.0 over newline-delimited JSON, onto one `Session`.

    `write` receives each outgoing line (a response or a notification, newline-terminated).
    `send` and `compact` with `now` run as tasks, so `status`, `history` and `compact` keep
    answering during a turn; a second turn while one runs gets `BUSY`. Nothing a client sends
    stops the server: every failure becomes an error response.
    """

    def __init__(self, session: Session, write: Callable[[bytes], None]) -> None:
        self.session = session
        self._write = write
        self._tasks: set[asyncio.Task[None]] = set()

    def _emit(self, obj: Mapping[str, Any] | list[dict[str, Any]]) -> None:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        self._write((data + "\n").encode("utf-8"))

    def _notify(self, request_id: Any) -> EventSink:
        def sink(event: dict[str, Any]) -> None:
            params = {"request": request_id, "turn": self.session.harness.loop.turn, **event}
            self._emit({"jsonrpc": "2.0", "method": "agent.chat.event", "params": params})

        return sink

    async def drain(self) -> None:
        """Wait for every running request to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def handle_line(self, line: bytes) -> None:
        """Handle one incoming line; long requests continue as tasks (see `drain`)."""
        if not line.strip():
            return
        try:
            payload = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self._emit(_error_response(None, RpcError(PARSE_ERROR, f"parse error: {exc}")))
            return
        if isinstance(payload, list):
            if not payload:
                self._emit(_error_response(None, RpcError(INVALID_REQUEST, "empty batch")))
                return
            self._spawn(self._batch(payload))
            return
        request_id, call = self._prepare(payload)
        if call is None:
            return
        if isinstance(call, RpcError):
            self._emit(_error_response(request_id, call))
            return
        method, params = call
        if not _long(method, params):
            await self._respond(request_id, method, params, owns_busy=False)
        elif self.session.busy:
            if request_id is not _NO_ID:
                self._emit(_error_response(request_id, _busy()))
        else:
            self.session.busy = True  # claimed now, so the next line already sees it
            self._spawn(self._respond(request_id, method, params, owns_busy=True))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _batch(self, items: list[Any]) -> None:
        """A batch runs its requests in order and answers with one array."""
        responses: list[dict[str, Any]] = []
        for item in items:
            request_id, call = self._prepare(item)
            if call is None:
                continue
            if isinstance(call, RpcError):
                responses.append(_error_response(request_id, call))
                continue
            method, params = call
            long = _long(method, params)
            if long and self.session.busy:
                response = _error_response(None if request_id is _NO_ID else request_id, _busy())
            else:
                self.session.busy = self.session.busy or long
                response = await self._call(request_id, method, params, owns_busy=long)
            if request_id is not _NO_ID:
                responses.append(response)
        if responses:
            self._emit(responses)

    def _prepare(self, payload: Any) -> tuple[Any, tuple[str, Any] | RpcError | None]:
        """`(id, (method, params))`, `(id, error)`, or `(_NO_ID, None)` to stay silent."""
        if not isinstance(payload, dict):
            return None, RpcError(INVALID_REQUEST, "a request must be a JSON object")
        has_id = "id" in payload
        request_id = payload.get("id") if has_id else _NO_ID
        if has_id and not _valid_id(request_id):
            return None, RpcError(INVALID_REQUEST, "id must be a string, a number or null")
        reply_id = None if request_id is _NO_ID else request_id
        if payload.get("jsonrpc") != "2.0":
            return reply_id, RpcError(INVALID_REQUEST, 'jsonrpc must be exactly "2.0"')
        method = payload.get("method")
        if not isinstance(method, str):
            return reply_id, RpcError(INVALID_REQUEST, "method must be a string")
        params = payload.get("params")
        if "params" in payload and not isinstance(params, dict | list):
            return reply_id, RpcError(INVALID_REQUEST, "params must be an object or an array")
        if request_id is _NO_ID and method not in _METHODS:
            return _NO_ID, None  # a notification is never answered, not even with an error
        return request_id, (method, params)

    async def _respond(self, request_id: Any, method: str, params: Any, *, owns_busy: bool) -> None:
        response = await self._call(request_id, method, params, owns_busy=owns_busy)
        if request_id is not _NO_ID:
            self._emit(response)

    async def _call(
        self, request_id: Any, method: str, params: Any, *, owns_busy: bool
    ) -> dict[str, Any]:
        """Run one request; every failure becomes an error response."""
        reply_id = None if request_id is _NO_ID else request_id
        try:
            try:
                handler = _METHODS.get(method)
                if handler is None:
                    raise RpcError(
                        METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": method}
                    )
                if method == "agent.chat.seed" and self.session.busy:
                    raise _busy()
                result = await handler(self, reply_id, params)
            finally:
                if owns_busy:
                    self.session.busy = False
        except RpcError as exc:
            return _error_response(reply_id, exc)
        except SeedConflictError as exc:
            return _error_response(reply_id, _seed_error(exc))
        except CompactionError as exc:
            return _error_response(reply_id, _failure(exc))
        except Exception as exc:  # the server outlives any bug in a request
            logger.exception("internal error in %s", method)
            return _error_response(
                reply_id,
                RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}"),
            )
        return {"jsonrpc": "2.0", "id": reply_id, "result": result}

    # -- methods ---------------------------------------------------------------------------------

    async def _send(self, request_id: Any, params: Any) -> dict[str, Any]:
        p = _Params(params, ("input", "seed", "format"))
        fmt = p.choice("format", "record", ("record", "openai"))
        message = p.user_input("input", fmt)
        seed = p.messages("seed", fmt)
        if message is None and seed is None:
            raise RpcError(INVALID_PARAMS, "give `input`, `seed`, or both")
        try:
            done = await self.session.send(message, seed=seed, sink=self._notify(request_id))
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        turn = done.turn
        reply = turn.reply
        return {
            "turn": self.session.harness.loop.turn,
            "stop": turn.stop,
            "reply": None if reply is None else reply.text,
            "message": None if reply is None else message_to_dict(reply),
            "rounds": turn.rounds,
            "retries": turn.retries,
            "compactions": [_outcome(c) for c in turn.compactions],
            "pressure": self.session.pressure(),
            "threshold": self.session.policy.threshold_tokens,
            "seed": None if done.seed is None else done.seed.summary(),
        }

    async def _seed(self, request_id: Any, params: Any) -> dict[str, Any]:
        p = _Params(params, ("messages", "format"))
        fmt = p.choice("format", "record", ("record", "openai"))
        seed = p.messages("messages", fmt)
        if seed is None:
            raise RpcError(INVALID_PARAMS, "messages is required", {"param": "messages"})
        return self.session.seed(seed).summary()

    async def _compact(self, request_id: Any, params: Any) -> dict[str, Any]:
        p = _Params(params, ("now",))
        now = p.bool("now", False)
        try:
            if not now:
                self.session.request_compact()
                return {"scheduled": True, "ran": False, "running_turn": self.session.busy}
            outcome = await self.session.compact_now(sink=self._notify(request_id))
        except RuntimeError as exc:
            raise RpcError(COMPACTION_DISABLED, str(exc)) from None
        return {
            "scheduled": False,
            "ran": outcome is not None,
            "outcome": None if outcome is None else _outcome(outcome),
            "pressure": self.session.pressure(),
        }

    async def _history(self, request_id: Any, params: Any) -> dict[str, Any]:
        p = _Params(params, ("offset", "limit"))
        return self.session.history(p.int("offset", 0, 0), p.int("limit", 50, 1, 500))

    async def _status(self, request_id: Any, params: Any) -> dict[str, Any]:
        _Params(params, ())
        return self.session.status()


def _error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


_Handler = Callable[[JsonRpcServer, Any, Any], Any]
_METHODS: dict[str, _Handler] = {
    "agent.chat.send": JsonRpcServer._send,
    "agent.chat.seed": JsonRpcServer._seed,
    "agent.chat.compact": JsonRpcServer._compact,
    "agent.chat.history": JsonRpcServer._history,
    "agent.chat.status": JsonRpcServer._status,
}


# -- stdio ---------------------------------------------------------------------------------------


async def _lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines from a blocking binary stream, read by a daemon thread (pipes, files, ttys)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def put(line: bytes) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, line)

    def reader() -> None:
        try:
            for line in iter(stream.readline, b""):
                put(line)
        except (OSError, ValueError):
            pass
        put(b"")

    threading.Thread(target=reader, name="sidecar-stdin", daemon=True).start()
    while line := await queue.get():
        yield line


async def serve_stdio(session: Session, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Serve `session` until `stdin` ends (then finish running requests) or `stdout` breaks."""
    broken = asyncio.Event()

    def write(data: bytes) -> None:
        if broken.is_set():
            return
        try:
            stdout.write(data)
            stdout.flush()
        except (BrokenPipeError, ValueError):
            broken.set()

    server = JsonRpcServer(session, write)
    async for line in _lines(stdin):
        await server.handle_line(line)
        if broken.is_set():
            break
    await server.drain()
