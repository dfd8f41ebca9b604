"""The JSON-RPC 2.0 sidecar: a host drives a `Session` over newline-delimited stdio.

`JsonRpcServer` maps JSON-RPC requests onto a `Session` (checking every param by name and type);
`host.stdio.serve_stdio` runs it on stdin/stdout (the `steerable-compaction serve` command).

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
import json
import logging
import math
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ..errors import CompactionError, MessageError, ProviderError
from ..messages import Message, message_from_dict, message_to_dict
from ..wire import from_openai
from .events import EventSink, outcome_json
from .reconcile import SeedConflictError
from .session import Session

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
    "JsonRpcServer",
    "RpcError",
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
                {"unknown": _scrub(unknown)},
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
    """Whether a reply can echo `value` exactly: null, UTF-8 text, an integer, a finite number."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and not _SURROGATE.search(value)


# Python's JSON reader accepts NaN, Infinity and lone surrogate escapes; neither can be written
# back as strict JSON in UTF-8, so an outgoing value holding one is scrubbed (see `_encode`).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: Any) -> Any:
    """`value` with each lone surrogate replaced by U+FFFD and each non-finite number by null."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _encode(obj: Any) -> bytes:
    """One outgoing line: strict JSON in UTF-8, whatever `obj` holds (scrubbed if it must be)."""
    try:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (data + "\n").encode("utf-8")
    except ValueError as exc:  # UnicodeEncodeError is a ValueError
        logger.warning("an outgoing message held a value JSON cannot carry (%s); replaced", exc)
        data = json.dumps(_scrub(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (data + "\n").encode("utf-8")


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
        self._write(_encode(obj))

    def _notify(self, request_id: Any) -> EventSink:
        def sink(event: dict[str, Any]) -> None:
            params = {"request": request_id, "turn": self.session.harness.loop.turn, **event}
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
        self._emit(_error_response(None, error))

    async def handle_line(self, line: bytes) -> None:
        """Handle one incoming line; long requests continue as tasks (see `drain`)."""
        try:
            await self._line(line)
        except Exception:  # the server outlives a bug in its own framing, too
            logger.exception("internal error while handling a line")
            self._emit(_error_response(None, RpcError(INTERNAL_ERROR, "internal error")))

    async def _line(self, line: bytes) -> None:
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
        try:
            await self._batch_items(items)
        except Exception:
            logger.exception("internal error while handling a batch")
            self._emit(_error_response(None, RpcError(INTERNAL_ERROR, "internal error")))

    async def _batch_items(self, items: list[Any]) -> None:
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
                        METHOD_NOT_FOUND,
                        f"method not found: {method!r}",
                        {"method": _scrub(method)},
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
            "compactions": [outcome_json(c) for c in turn.compactions],
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
            "outcome": None if outcome is None else outcome_json(outcome),
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
