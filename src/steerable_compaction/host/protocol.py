"""JSON-RPC 2.0 framing: error codes, checked named params, and lines that always encode.

Python's JSON reader accepts `NaN`, `Infinity`, `1e400` and lone surrogate escapes, none of which
strict JSON in UTF-8 can carry back: `valid_id` refuses such ids, and `encode_line` scrubs any
outgoing value that holds one (logged), so every reply is writable.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from ..errors import MessageError
from ..messages import Message, message_from_dict
from ..wire import from_openai

__all__ = [
    "BUSY",
    "COMPACTION_DISABLED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SEED_CONFLICT",
    "SESSION_UNAVAILABLE",
    "TOO_MANY_SESSIONS",
    "TURN_FAILED",
    "UNKNOWN_SESSION",
    "Params",
    "RpcError",
    "decode_messages",
    "encode_line",
    "error_response",
    "scrub",
    "valid_id",
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
UNKNOWN_SESSION = -32004
TOO_MANY_SESSIONS = -32005
SESSION_UNAVAILABLE = -32006


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


class Params:
    """Named params, checked: each getter raises `RpcError(INVALID_PARAMS)` naming the key.

    Text that UTF-8 cannot carry (a lone surrogate, anywhere in any param, keys included) is
    refused here, before anything runs, naming the field: no record could store it.
    """

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
                {"unknown": scrub(unknown)},
            )
        for key, value in params.items():
            _refuse_lone_surrogates(key, value)
        self.raw: dict[str, Any] = params

    def int(self, key: str, default: int, low: int, high: int | None = None) -> int:
        """An integer in `[low, high]` (booleans are not integers here)."""
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
        """A boolean."""
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise RpcError(
                INVALID_PARAMS, f"{key} must be a boolean, got {value!r}", {"param": key}
            )
        return value

    def choice(self, key: str, default: str, allowed: Sequence[str]) -> str:
        """One of `allowed`."""
        value = self.raw.get(key, default)
        if value not in allowed:
            raise RpcError(
                INVALID_PARAMS,
                f"{key} must be one of {list(allowed)}, got {value!r}",
                {"param": key},
            )
        return str(value)

    def messages(self, key: str, fmt: str) -> list[Message] | None:
        """An array of messages in `fmt` (`record` or `openai`), or `None` when absent."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise RpcError(INVALID_PARAMS, f"{key} must be an array of messages", {"param": key})
        return decode_messages(key, value, fmt)

    def text(self, key: str) -> str | None:
        """A string, or `None` when absent (`null` is refused: omit the param instead)."""
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not isinstance(value, str):
            raise RpcError(
                INVALID_PARAMS,
                f"{key} must be a string (omit it for the default), got {value!r}",
                {"param": key},
            )
        return value

    def user_input(self, key: str, fmt: str) -> Message | None:
        """Text, or one user message in `fmt`, or `None` when absent."""
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            if not value.strip():
                raise RpcError(INVALID_PARAMS, f"{key} must not be empty", {"param": key})
            return Message.user(value)
        messages = decode_messages(key, [value], fmt)
        if len(messages) != 1 or messages[0].role != "user":
            raise RpcError(INVALID_PARAMS, f"{key} must be text or a user message", {"param": key})
        return messages[0]


def decode_messages(key: str, items: list[Any], fmt: str) -> list[Message]:
    """Messages in the record's JSON form or as Chat Completions messages."""
    try:
        if fmt == "openai":
            return from_openai(items)
        return [message_from_dict(obj, index=i) for i, obj in enumerate(items)]
    except MessageError as exc:
        raise RpcError(
            INVALID_PARAMS, f"{key}: {exc}", {"param": key, "index": exc.index, "field": exc.field}
        ) from None


def _refuse_lone_surrogates(key: str, value: Any) -> None:
    """Raise `RpcError(INVALID_PARAMS)` naming the first field of `value` with a lone surrogate.

    Walked with a stack, not recursion: JSON nests as deep as the parser allows.
    """
    stack: list[tuple[str, Any]] = [(key, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                field = scrub(path)
                raise RpcError(
                    INVALID_PARAMS,
                    f"{field} holds a lone surrogate (U+{ord(found.group()):04X}) at character "
                    f"{found.start()}: text must be valid Unicode",
                    {"param": key, "field": field},
                )
        elif isinstance(item, dict):
            for name, child in reversed(list(item.items())):
                stack.append((f"{path}.{name}", child))
                stack.append((f"{path}.{name}", name))  # the key itself, looked at first
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", item[i]) for i in reversed(range(len(item))))


def valid_id(value: Any) -> bool:
    """Whether a reply can echo `value` exactly: null, UTF-8 text, an integer, a finite number."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and not _SURROGATE.search(value)


# Python's JSON reader accepts NaN, Infinity and lone surrogate escapes; neither can be written
# back as strict JSON in UTF-8, so an outgoing value holding one is scrubbed (see `encode_line`).
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(value: Any) -> Any:
    """`value` with each lone surrogate replaced by U+FFFD and each non-finite number by null."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def encode_line(obj: Any) -> bytes:
    """One outgoing line: strict JSON in UTF-8, whatever `obj` holds (scrubbed if it must be)."""
    try:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (data + "\n").encode("utf-8")
    except ValueError as exc:  # UnicodeEncodeError is a ValueError
        logger.warning("an outgoing message held a value JSON cannot carry (%s); replaced", exc)
        data = json.dumps(scrub(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return (data + "\n").encode("utf-8")


def error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    """A response carrying `error`."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
