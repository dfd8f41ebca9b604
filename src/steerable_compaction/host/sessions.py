"""Several sessions in one sidecar: session ids, where each one's record lives, how many are open.

A host names a session with an id of 1 to 64 characters from `A-Z a-z 0-9 _ -` (so an id is
always a plain file name). No id means the default session, the record `serve --record` opened.
Named sessions live in one directory (`serve --record-dir`), one JSONL record per id, opened on
first use: `record_location` is the one place that maps an id to its record, so a store holding
many sessions in one database can replace it. A session whose record does not exist yet is
created only by a method that writes (`send`, `seed`); the others call it unknown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Literal

from ..errors import CompactionError, ConfigError
from ..record import Record, open_record
from .session import Session

__all__ = [
    "MAX_SESSIONS",
    "SESSION_ID_PATTERN",
    "SessionError",
    "Sessions",
    "check_session_id",
    "record_location",
]

MAX_SESSIONS = 16
"""How many sessions (the default one included) a sidecar keeps open by default."""
SESSION_ID_PATTERN = "[A-Za-z0-9_-]{1,64}"
"""What a session id may hold: a plain file name on any system, never a path."""

_SESSION_ID = re.compile(SESSION_ID_PATTERN)

SessionErrorKind = Literal["malformed", "unknown", "too_many", "unavailable"]


class SessionError(CompactionError):
    """A session the sidecar cannot serve.

    `kind` is `malformed` (the id breaks `SESSION_ID_PATTERN`), `unknown` (no such session),
    `too_many` (the open-session limit is reached) or `unavailable` (its record cannot be opened).
    """

    def __init__(self, kind: SessionErrorKind, session: str, reason: str) -> None:
        self.kind: SessionErrorKind = kind
        self.session = session
        self.reason = reason
        super().__init__(f"session {session!r}: {reason}")

    def __reduce__(self) -> tuple[type[SessionError], tuple[SessionErrorKind, str, str]]:
        return (type(self), (self.kind, self.session, self.reason))


def check_session_id(session_id: str) -> str:
    """Return `session_id` if it matches `SESSION_ID_PATTERN`; else raise `SessionError`."""
    if not _SESSION_ID.fullmatch(session_id):
        raise SessionError(
            "malformed",
            session_id,
            f"a session id is 1 to 64 characters from A-Z a-z 0-9 _ - ({SESSION_ID_PATTERN})",
        )
    return session_id


def record_location(directory: Path, session_id: str) -> Path:
    """Where a named session's record lives: `<directory>/<session id>.jsonl`."""
    return directory / f"{check_session_id(session_id)}.jsonl"


class Sessions:
    """The sessions one sidecar hosts: the default one, and named ones opened on first use.

    `open_session` assembles a `Session` around a named session's record (the provider, tools
    and harness the host configured). Named sessions' records are closed by `close` and
    `close_all` (or leaving the `with` block); the default session's record belongs to the caller.
    """

    def __init__(
        self,
        default: Session,
        *,
        directory: str | os.PathLike[str] | None = None,
        open_session: Callable[[Record], Session] | None = None,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if max_sessions < 1:
            raise ConfigError("max_sessions", max_sessions, "an integer >= 1")
        if directory is not None and open_session is None:
            raise ConfigError("open_session", None, "a factory when a directory is given")
        self.default = default
        self.directory = None if directory is None else Path(directory)
        self.max_sessions = max_sessions
        self._open_session = open_session
        self._open: dict[str, Session] = {}
        if self.directory is not None:
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError("record_dir", str(directory), f"a directory ({exc})") from None

    def __enter__(self) -> Sessions:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_all()

    @property
    def open_ids(self) -> list[str]:
        """The named sessions open now, in the order they were opened."""
        return list(self._open)

    def find(self, session_id: str) -> Session | None:
        """The named session if it is open now, else `None` (nothing is opened)."""
        return self._open.get(check_session_id(session_id))

    def get(self, session_id: str | None, *, create: bool = False) -> Session:
        """The session named `session_id` (`None`: the default), opened if need be.

        Raises:
            SessionError: the id is malformed, unknown (with `create`, only without a directory),
                over the open-session limit, or its record cannot be opened.
        """
        if session_id is None:
            return self.default
        check_session_id(session_id)
        session = self._open.get(session_id)
        if session is not None:
            return session
        if self.directory is None or self._open_session is None:
            raise SessionError(
                "unknown",
                session_id,
                "this sidecar hosts only its default session (serve --record-dir hosts more)",
            )
        path = record_location(self.directory, session_id)
        if not create and not path.exists():
            raise SessionError(
                "unknown", session_id, "no such session (agent.chat.send or seed creates one)"
            )
        if 1 + len(self._open) >= self.max_sessions:
            raise SessionError(
                "too_many",
                session_id,
                f"{self.max_sessions} sessions are open, the limit; close one first "
                "(agent.session.close)",
            )
        try:
            record = open_record(path)
        except (CompactionError, OSError) as exc:
            raise SessionError("unavailable", session_id, str(exc)) from exc
        try:
            session = self._open_session(record)
        except BaseException:
            record.close()
            raise
        self._open[session_id] = session
        return session

    def close(self, session_id: str) -> bool:
        """Close a named session's record; `False` if it was not open (it stays on disk).

        Raises:
            SessionError: the id is malformed, or names no open or stored session.
        """
        check_session_id(session_id)
        session = self._open.pop(session_id, None)
        if session is not None:
            session.record.close()
            return True
        if self.directory is None or not record_location(self.directory, session_id).exists():
            raise SessionError("unknown", session_id, "no such session")
        return False

    def close_all(self) -> None:
        """Close every named session's record."""
        while self._open:
            _, session = self._open.popitem()
            session.record.close()
