"""Every error this library raises, under one root.

```
CompactionError
├── ConfigError                    a bad policy or harness value (names key and allowed range)
├── MessageError                   a transcript value or wire payload is malformed (index and field)
│   └── ConversionError            a valid message that the target wire format cannot carry
├── RecordError                    the record is unreadable or violates an invariant (file and line)
│   ├── RecordLockedError          another writer holds the record
│   ├── RecordLossError            events the writer committed are missing (`.found`, `.written`)
│   └── RecordConnectionError      the record's database is unreachable or dropped the connection
├── RecallError                    a history search or read that cannot be answered
├── ProviderError                  an adapter call failed (`.provider`, `.status_code`)
│   └── ContextOverflowError       the request was too long; compaction may retry
├── OverflowRetriesExhaustedError  the loud failure after `max_overflow_retries`
└── RequestTooLargeError           the next request would not fit, whatever compaction did
```

Every error keeps its constructor arguments as typed attributes and pickles (the sidecar and
subprocess tests send them across processes).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CompactionError",
    "ConfigError",
    "ContextOverflowError",
    "ConversionError",
    "MessageError",
    "OverflowRetriesExhaustedError",
    "ProviderError",
    "RecallError",
    "RecordConnectionError",
    "RecordError",
    "RecordLockedError",
    "RecordLossError",
    "RequestTooLargeError",
]


class CompactionError(Exception):
    """Root of every error raised by `steerable_compaction`."""


class ConfigError(CompactionError):
    """A policy, harness or pricing value is out of range or of the wrong type.

    `message` replaces the standard text where a plain sentence helps more (a missing key).
    """

    def __init__(self, key: str, value: object, allowed: str, *, message: str = "") -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        self.message = message
        super().__init__(message or f"{key}={value!r} is not allowed: expected {allowed}")

    def __reduce__(self) -> tuple[object, ...]:
        args = (self.key, self.value, self.allowed)
        return (_rebuild, (type(self), args, {"message": self.message}))


class MessageError(CompactionError):
    """A message or wire payload is malformed.

    `index` is the message's position in the transcript (or `None` for a lone value) and
    `field` the dotted path of the offending field inside it, e.g. `parts[2].media_type`.
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.index = index
        self.field = field
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field:
            where.append(f"field {field!r}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + reason)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), (self.reason,), {"index": self.index, "field": self.field}))


class ConversionError(MessageError):
    """A valid message holds something the target wire format cannot represent losslessly."""


class RecordError(CompactionError):
    """The record cannot be read, or an event violates one of its invariants.

    `path` and `line` (1-based; for SQLite the row's `seq`) say where, when known.
    """

    def __init__(self, reason: str, *, path: Path | str | None = None, line: int | None = None):
        self.reason = reason
        self.path = None if path is None else Path(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(where + reason)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), (self.reason,), {"path": self.path, "line": self.line}))


class RecordLockedError(RecordError):
    """A second writer tried to open a record that another writer holds."""


class RecordLossError(RecordError):
    """The record holds fewer events than its writer had committed (its high-water mark).

    `found` events remain; the writer had committed `written`, `synced` of them to disk. A
    writer is refused with this error and nothing is changed; a reader is only warned.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: Path | str | None = None,
        found: int,
        written: int,
        synced: int,
    ) -> None:
        self.found = found
        self.written = written
        self.synced = synced
        super().__init__(reason, path=path)

    def __reduce__(self) -> tuple[object, ...]:
        kwargs = {
            "path": self.path,
            "found": self.found,
            "written": self.written,
            "synced": self.synced,
        }
        return (_rebuild, (type(self), (self.reason,), kwargs))


class RecordConnectionError(RecordError):
    """The record's database server cannot be reached, or the connection broke.

    Whatever the failed call was writing is not in the record (or is, whole, if the commit
    reached the server just before the break): reopen the record to resume where it ends.
    """


class RecallError(CompactionError):
    """A history search or read was asked something it cannot answer; `reason` says what.

    The history tools hand `reason` to the model as the tool result, so it names the fix.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[type[RecallError], tuple[str]]:
        return (type(self), (self.reason,))


class ProviderError(CompactionError):
    """A provider call failed; `provider` names the adapter, `status_code` the HTTP status.

    `retryable` is true for failures worth retrying as they are (rate limits, 5xx, timeouts).
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str = "unknown",
        status_code: int | None = None,
        retryable: bool = False,
    ) -> None:
        self.message = message
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        status = f" (HTTP {status_code})" if status_code is not None else ""
        super().__init__(f"{provider}{status}: {message}")

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild,
            (
                type(self),
                (self.message,),
                {
                    "provider": self.provider,
                    "status_code": self.status_code,
                    "retryable": self.retryable,
                },
            ),
        )


class ContextOverflowError(ProviderError):
    """The provider refused the request because it exceeds the model's context window."""


class OverflowRetriesExhaustedError(CompactionError):
    """Compaction could not bring an overflowing request under the window within the retry bound."""

    def __init__(self, attempts: int, last_error: str) -> None:
        self.attempts = attempts
        self.last_error = last_error
        super().__init__(
            f"context overflow persisted after {attempts} compaction retries: {last_error}"
        )

    def __reduce__(self) -> tuple[type[OverflowRetriesExhaustedError], tuple[int, str]]:
        return (type(self), (self.attempts, self.last_error))


class RequestTooLargeError(CompactionError):
    """The next request would not fit the window, and nothing is left to compact.

    Raised before the request is sent (the library's own estimate says it will not fit):
    `tokens` is that estimate, `limit` what a request may carry, `head_tokens` what cannot be
    compacted (system messages, the goal, pinned messages and the newest turn), `window` the
    context window. `bound` says where `limit` comes from: `None` for the window less the
    output room; after an overflow, the share of the refused request a retry must come under.
    """

    def __init__(
        self, tokens: int, limit: int, head_tokens: int, window: int, bound: str | None = None
    ) -> None:
        self.tokens = tokens
        self.limit = limit
        self.head_tokens = head_tokens
        self.window = window
        self.bound = bound
        why = bound if bound is not None else f"a {window:,}-token window less its output room"
        super().__init__(
            f"the next request needs {tokens:,} tokens but a request may carry {limit:,} "
            f"({why}), and nothing is left to compact: what must stay (system messages, the "
            f"goal, pinned messages and the newest turn) takes {head_tokens:,} tokens"
        )

    def __reduce__(
        self,
    ) -> tuple[type[RequestTooLargeError], tuple[int, int, int, int, str | None]]:
        return (
            type(self),
            (self.tokens, self.limit, self.head_tokens, self.window, self.bound),
        )


def _rebuild(
    cls: type[CompactionError], args: tuple[object, ...], kwargs: dict[str, object]
) -> CompactionError:
    return cls(*args, **kwargs)
