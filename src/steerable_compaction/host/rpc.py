"""The JSON-RPC 2.0 sidecar: a host drives its sessions over newline-delimited JSON.

`JsonRpcServer` maps requests onto the `Sessions` it hosts (checking every param by name and
type before anything runs or opens); `host.stdio.serve_stdio` runs it on stdin/stdout (the
`steerable-compaction serve` command).

Methods (params are named; unknown ones are refused; every `agent.chat.*` method also takes
`session`, a session id, omitted for the default session; `null` is refused):

| method               | params                                           | result                 |
|----------------------|--------------------------------------------------|------------------------|
| `agent.chat.send`    | `input` (text or user message), `seed`, `format` | the turn and its seed  |
| `agent.chat.seed`    | `messages`, `format` (`record` or `openai`)      | what matched, what new |
| `agent.chat.compact` | `now` (default false: at the next step boundary) | scheduled, or outcome  |
| `agent.chat.history` | `offset` (0), `limit` (50, at most 500)          | a page of raw history  |
| `agent.chat.status`  | none                                             | pressure, circuit, …   |
| `agent.session.list` | none                                             | open sessions, limit   |
| `agent.session.close`| `session` (required)                             | whether it was open    |

`agent.chat.send` also takes `pinned`, `goal` and `cache_cold` (booleans; docs/sidecar.md).

While a request runs, the record's new entries stream as `agent.chat.event` notifications
(`params.type`: `user`, `tool_calls`, `tool_result`, `reply`, `system`, `compaction_start`,
`compaction_summary`, `compaction`, `reminder`; each with `seq` and the id of the request that
caused it). Results and events of a named session carry its id as `session`. Errors: the JSON-RPC
codes, plus -32000 turn failed, -32001 busy, -32002 seed conflict, -32003 compaction disabled,
-32004 unknown session, -32005 too many sessions, -32006 session unavailable.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from ..compaction.summary import check_focus
from ..errors import CompactionError, ProviderError
from ..messages import Message, message_to_dict
from .events import EventSink, outcome_json
from .protocol import (
    BUSY,
    COMPACTION_DISABLED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SEED_CONFLICT,
    SESSION_UNAVAILABLE,
    TOO_MANY_SESSIONS,
    TURN_FAILED,
    UNKNOWN_SESSION,
    Params,
    RpcError,
    encode_line,
    error_response,
    scrub,
    valid_id,
)
from .reconcile import SeedConflictError
from .session import Session
from .sessions import SessionError, Sessions

__all__ = ["JsonRpcServer"]

logger = logging.getLogger("steerable_compaction.sidecar")

_NO_ID = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Call:
    """A request whose params are checked and whose session is open: ready to run."""

    reply_id: Any  # `None` for a notification
    method: str
    session: Session
    session_id: str | None
    args: dict[str, Any]
    long: bool  # runs as a task and holds its session (a turn, an immediate compaction)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Method:
    """A method: its params, how they are checked, what runs, and how it finds its session."""

    params: tuple[str, ...]
    parse: Callable[[Params], dict[str, Any]]
    run: Callable[[JsonRpcServer, _Call], Awaitable[dict[str, Any]]]
    creates: bool = False  # may create a named session that does not exist yet
    addressed: bool = True  # `session` names the session it runs on (else it is its own param)
    long: Callable[[dict[str, Any]], bool] = lambda args: False


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


def _session_error(exc: SessionError, sessions: Sessions) -> RpcError:
    data: dict[str, Any] = {"session": scrub(exc.session)}
    if exc.kind == "malformed":
        return RpcError(INVALID_PARAMS, f"session: {exc}", {"param": "session"})
    if exc.kind == "unknown":
        return RpcError(UNKNOWN_SESSION, str(exc), data)
    if exc.kind == "too_many":
        return RpcError(TOO_MANY_SESSIONS, str(exc), data | {"limit": sessions.max_sessions})
    cause = exc.__cause__
    return RpcError(SESSION_UNAVAILABLE, str(exc), data | {"error": type(cause).__name__})


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


class JsonRpcServer:
    """JSON-RPC 2.0 over newline-delimited JSON, onto the sessions it hosts.

    `write` receives each outgoing line (a response or a notification, newline-terminated).
    `send` and `compact` with `now` run as tasks, so every other request keeps answering during
    a turn; a second turn on a session while one runs gets `BUSY` (sessions run side by side).
    Nothing a client sends stops the server: every failure becomes an error response.
    """

    def __init__(self, sessions: Sessions | Session, write: Callable[[bytes], None]) -> None:
        self.sessions = sessions if isinstance(sessions, Sessions) else Sessions(sessions)
        self._write = write
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def session(self) -> Session:
        """The default session."""
        return self.sessions.default

    def _emit(self, obj: Mapping[str, Any] | list[dict[str, Any]]) -> None:
        self._write(encode_line(obj))

    def _notify(self, call: _Call) -> EventSink:
        named = {} if call.session_id is None else {"session": call.session_id}

        def sink(event: dict[str, Any]) -> None:
            turn = call.session.harness.loop.turn
            params = {"request": call.reply_id, **named, "turn": turn, **event}
            self._emit({"jsonrpc": "2.0", "method": "agent.chat.event", "params": params})

        return sink

    async def drain(self) -> None:
        """Wait for every running request to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def throttle(self, limit: int) -> None:
        """Let running requests move on; wait while `limit` or more of them run (backpressure)."""
        await asyncio.sleep(0)  # a flood of quick requests must not starve a running turn
        while len(self._tasks) >= limit:
            await asyncio.wait(list(self._tasks), return_when=asyncio.FIRST_COMPLETED)

    def refuse_oversized(self, size: int, limit: int) -> None:
        """Answer a line the transport dropped for being longer than `limit` bytes."""
        error = RpcError(
            INVALID_REQUEST,
            f"line of {size:,} bytes is longer than the limit of {limit:,} bytes; it was skipped",
            {"limit": limit, "size": size},
        )
        self._emit(error_response(None, error))

    async def handle_line(self, line: bytes) -> None:
        """Handle one incoming line; long requests continue as tasks (see `drain`)."""
        try:
            await self._line(line)
        except Exception:  # the server outlives a bug in its own framing, too
            logger.exception("internal error while handling a line")
            self._emit(error_response(None, RpcError(INTERNAL_ERROR, "internal error")))

    async def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            payload = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self._emit(error_response(None, RpcError(PARSE_ERROR, f"parse error: {exc}")))
            return
        if isinstance(payload, list):
            if not payload:
                self._emit(error_response(None, RpcError(INVALID_REQUEST, "empty batch")))
                return
            self._spawn(self._batch(payload))
            return
        request_id, call = self._prepare(payload)
        if isinstance(call, RpcError):
            if request_id is not _NO_ID:
                self._emit(error_response(request_id, call))
            return
        if call is None:
            return
        if not call.long:
            await self._respond(request_id, call)
        elif call.session.busy:
            if request_id is not _NO_ID:
                self._emit(error_response(request_id, _busy()))
        else:
            call.session.busy = True  # claimed now, so the next line already sees it
            self._spawn(self._respond(request_id, call))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _batch(self, items: list[Any]) -> None:
        """A batch runs its requests in order and answers with one array."""
        try:
            await self._batch_items(items)
        except Exception:
            logger.exception("internal error while handling a batch")
            self._emit(error_response(None, RpcError(INTERNAL_ERROR, "internal error")))

    async def _batch_items(self, items: list[Any]) -> None:
        responses: list[dict[str, Any]] = []
        for item in items:
            request_id, call = self._prepare(item)
            if isinstance(call, RpcError):
                response = error_response(None if request_id is _NO_ID else request_id, call)
            elif call is None:
                continue
            elif call.long and call.session.busy:
                response = error_response(call.reply_id, _busy())
            else:
                call.session.busy = call.session.busy or call.long
                response = await self._run(call)
            if request_id is not _NO_ID:
                responses.append(response)
        if responses:
            self._emit(responses)

    def _prepare(self, payload: Any) -> tuple[Any, _Call | RpcError | None]:
        """`(id, call)`, `(id, error)`, or `(_NO_ID, None)` to stay silent.

        The id is `_NO_ID` for a notification; an error for one is never sent.
        """
        if not isinstance(payload, dict):
            return None, RpcError(INVALID_REQUEST, "a request must be a JSON object")
        has_id = "id" in payload
        request_id = payload.get("id") if has_id else _NO_ID
        if has_id and not valid_id(request_id):
            return None, RpcError(
                INVALID_REQUEST, "id must be a string (valid Unicode), a finite number or null"
            )
        reply_id = None if request_id is _NO_ID else request_id
        if payload.get("jsonrpc") != "2.0":
            return reply_id, RpcError(INVALID_REQUEST, 'jsonrpc must be exactly "2.0"')
        method = payload.get("method")
        if not isinstance(method, str):
            return reply_id, RpcError(INVALID_REQUEST, "method must be a string")
        params = payload.get("params")
        if "params" in payload and not isinstance(params, dict | list):
            return reply_id, RpcError(INVALID_REQUEST, "params must be an object or an array")
        spec = _METHODS.get(method)
        if spec is None:
            if request_id is _NO_ID:
                return _NO_ID, None  # a notification is never answered, not even with an error
            return request_id, RpcError(
                METHOD_NOT_FOUND, f"method not found: {method!r}", {"method": scrub(method)}
            )
        try:
            p = Params(params, (*spec.params, "session") if spec.addressed else spec.params)
            args = spec.parse(p)
            session_id = p.text("session") if spec.addressed else None
            session = self.sessions.get(session_id, create=spec.creates)
        except Exception as exc:
            return request_id, self._error(method, exc)
        return request_id, _Call(
            reply_id=reply_id,
            method=method,
            session=session,
            session_id=session_id,
            args=args,
            long=spec.long(args),
        )

    def _error(self, method: str, exc: Exception) -> RpcError:
        """The error response for what a request raised."""
        if isinstance(exc, RpcError):
            return exc
        if isinstance(exc, SeedConflictError):
            return _seed_error(exc)
        if isinstance(exc, SessionError):
            return _session_error(exc, self.sessions)
        if isinstance(exc, CompactionError):
            return _failure(exc)
        logger.exception("internal error in %s", method, exc_info=exc)
        return RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")

    async def _respond(self, request_id: Any, call: _Call) -> None:
        response = await self._run(call)
        if request_id is not _NO_ID:
            self._emit(response)

    async def _run(self, call: _Call) -> dict[str, Any]:
        """Run one checked request; every failure becomes an error response."""
        try:
            try:
                result = await _METHODS[call.method].run(self, call)
            finally:
                if call.long:
                    call.session.busy = False
        except Exception as exc:  # the server outlives any bug in a request
            return error_response(call.reply_id, self._error(call.method, exc))
        if call.session_id is not None:
            result = {"session": call.session_id, **result}
        return {"jsonrpc": "2.0", "id": call.reply_id, "result": result}

    # -- methods ---------------------------------------------------------------------------------

    async def _send(self, call: _Call) -> dict[str, Any]:
        session = call.session
        message: Message | None = call.args["input"]
        if call.args["cache_cold"] and session.harness.compaction is not None:
            # The host knows the provider's cache is gone (a restart, another region): the
            # turn's first step may compact first, where that is priced cheaper than waiting.
            session.harness.compaction.report_cache_cold()
        try:
            done = await session.send(message, seed=call.args["seed"], sink=self._notify(call))
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        turn = done.turn
        reply = turn.reply
        return {
            "turn": session.harness.loop.turn,
            "stop": turn.stop,
            "reply": None if reply is None else reply.text,
            "message": None if reply is None else message_to_dict(reply),
            "rounds": turn.rounds,
            "retries": turn.retries,
            "compactions": [outcome_json(c) for c in turn.compactions],
            "pressure": session.pressure(),
            "threshold": session.policy.threshold_tokens,
            "seed": None if done.seed is None else done.seed.summary(),
        }

    async def _seed(self, call: _Call) -> dict[str, Any]:
        if call.session.busy:
            raise _busy()
        try:
            return call.session.seed(call.args["messages"]).summary()
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc), {"param": "messages"}) from None

    async def _compact(self, call: _Call) -> dict[str, Any]:
        session = call.session
        try:
            focus = call.args["focus"]
            if not call.args["now"]:
                session.request_compact(focus)
                return {"scheduled": True, "ran": False, "running_turn": session.busy}
            outcome = await session.compact_now(sink=self._notify(call), focus=focus)
        except RuntimeError as exc:
            raise RpcError(COMPACTION_DISABLED, str(exc)) from None
        return {
            "scheduled": False,
            "ran": outcome is not None,
            "outcome": None if outcome is None else outcome_json(outcome),
            "pressure": session.pressure(),
        }

    async def _history(self, call: _Call) -> dict[str, Any]:
        return call.session.history(call.args["offset"], call.args["limit"])

    async def _status(self, call: _Call) -> dict[str, Any]:
        return call.session.status()

    async def _list(self, call: _Call) -> dict[str, Any]:
        sessions = self.sessions
        return {
            "open": sessions.open_ids,
            "max_sessions": sessions.max_sessions,
            "record_dir": None if sessions.directory is None else str(sessions.directory),
        }

    async def _close(self, call: _Call) -> dict[str, Any]:
        session_id: str = call.args["session"]
        session = self.sessions.find(session_id)
        if session is not None and session.busy:
            raise _busy()
        return {"session": session_id, "closed": self.sessions.close(session_id)}


def _send_args(p: Params) -> dict[str, Any]:
    fmt = p.choice("format", "record", ("record", "openai"))
    message = p.user_input("input", fmt)
    seed = p.messages("seed", fmt)
    if message is None and seed is None:
        raise RpcError(INVALID_PARAMS, "give `input`, `seed`, or both")
    if p.bool("pinned", False):
        if message is None:
            raise RpcError(INVALID_PARAMS, "pinned applies to `input`", {"param": "pinned"})
        message = message.pin()  # never folded or summarized, re-sent as it is
    if p.bool("goal", False):
        if message is None:
            raise RpcError(INVALID_PARAMS, "goal applies to `input`", {"param": "goal"})
        message = message.as_goal()  # the session's task, whatever came before it
    return {"input": message, "seed": seed, "cache_cold": p.bool("cache_cold", False)}


def _seed_args(p: Params) -> dict[str, Any]:
    seed = p.messages("messages", p.choice("format", "record", ("record", "openai")))
    if seed is None:
        raise RpcError(INVALID_PARAMS, "messages is required", {"param": "messages"})
    if "goal" in p.raw:  # the index of the seed's user message that is the session's goal
        at = p.int("goal", 0, 0, len(seed) - 1)
        if seed[at].role != "user":
            raise RpcError(
                INVALID_PARAMS,
                f"goal must name a user message, messages[{at}] is {seed[at].role}",
                {"param": "goal"},
            )
        seed[at] = seed[at].as_goal()
    return {"messages": seed}


def _compact_args(p: Params) -> dict[str, Any]:
    focus = p.text("focus")
    try:
        return {"now": p.bool("now", False), "focus": check_focus(focus)}
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, str(exc), {"param": "focus"}) from None


def _close_args(p: Params) -> dict[str, Any]:
    session_id = p.text("session")
    if session_id is None:
        raise RpcError(
            INVALID_PARAMS,
            "session is required (the default session closes only with the sidecar)",
            {"param": "session"},
        )
    return {"session": session_id}


_METHODS: dict[str, _Method] = {
    "agent.chat.send": _Method(
        params=("input", "seed", "format", "pinned", "goal", "cache_cold"),
        parse=_send_args,
        run=JsonRpcServer._send,
        creates=True,
        long=lambda args: True,
    ),
    "agent.chat.seed": _Method(
        params=("messages", "format", "goal"),
        parse=_seed_args,
        run=JsonRpcServer._seed,
        creates=True,
    ),
    "agent.chat.compact": _Method(
        params=("now", "focus"),
        parse=_compact_args,
        run=JsonRpcServer._compact,
        long=lambda args: bool(args["now"]),
    ),
    "agent.chat.history": _Method(
        params=("offset", "limit"),
        parse=lambda p: {"offset": p.int("offset", 0, 0), "limit": p.int("limit", 50, 1, 500)},
        run=JsonRpcServer._history,
    ),
    "agent.chat.status": _Method(params=(), parse=lambda p: {}, run=JsonRpcServer._status),
    "agent.session.list": _Method(
        params=(), parse=lambda p: {}, run=JsonRpcServer._list, addressed=False
    ),
    "agent.session.close": _Method(
        params=("session",), parse=_close_args, run=JsonRpcServer._close, addressed=False
    ),
}
