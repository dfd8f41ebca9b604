"""`PostgresRecord`: the records of many sessions in one PostgreSQL database (psycopg 3).

Three tables in the connection's current schema (choose it with `options=-csearch_path=NAME`):
`steerable_meta` marks the database as holding records, `steerable_sessions (session, events)`
counts each session's rows, and `steerable_events (session, seq, body)` holds one entry per row,
`body` being the schema v4 line's bytes (checksummed, without its newline). A writer creates
the tables in a schema that has none of them; tables of those names in another shape, or a
`steerable_meta` that does not name this format, are refused before anything is written.

One writer per session, across processes and hosts: a writer holds a session-level advisory lock
keyed by schema and session for as long as its connection lives (the server lets go when the
connection ends, a killed process included). Each append is one transaction that inserts the row
and moves the session's count from `seq` to `seq + 1`: a count that moved under the writer means
someone else wrote, and the writer stops. Readers never lock; each read takes one snapshot of
rows and count, and rows that do not match the count were lost or added behind the record.

Durability (see `record.base`) maps onto `synchronous_commit`: `"every_event"` commits each
append synchronously; `"every_boundary"` commits messages asynchronously and each durable event
synchronously (which flushes the server's log up to it, messages before it included);
`"never"` commits all asynchronously. A killed client loses nothing `append` returned; a crash
of the server can lose the asynchronous commits of its last moments, never a synchronous one.

Each session's projection checkpoint (`record.checkpoint`) is its row of `steerable_checkpoints
(session, seq, body)`, a table a writer creates with its first checkpoint (older builds never
look at it). It is replaced in a transaction of its own after each boundary that replaced a
span is committed, and trusted only when row `seq - 1` holds, byte for byte, the entry it names.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NoReturn
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # the `postgres` extra is not installed
    raise ImportError(
        "PostgresRecord needs psycopg 3: pip install 'steerable-compaction[postgres]'"
    ) from exc

from ..errors import RecordConnectionError, RecordError, RecordLockedError
from .base import FsyncPolicy, Record
from .checkpoint import Checkpoint, bound_to, decode_checkpoint, encode_checkpoint
from .codec import CHECKED_SINCE, encode_body, iter_lines, iter_rows
from .events import Entry
from .files import bulk_load
from .urls import is_postgres_url

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PostgresRecord",
    "is_postgres_url",
    "sessions",
    "split_session",
]

logger = logging.getLogger("steerable_compaction.record")

FORMAT = "steerable-compaction record"
"""`steerable_meta`'s `format` value: what marks a database as holding records."""
FORMAT_VERSION = 1
"""The table layout's version (`steerable_meta`'s `version`); entries are schema v4 inside."""

_SHAPES: dict[str, tuple[tuple[str, str], ...]] = {
    "steerable_meta": (("key", "text"), ("value", "text")),
    "steerable_sessions": (("session", "text"), ("events", "bigint")),
    "steerable_events": (("session", "text"), ("seq", "bigint"), ("body", "bytea")),
}
_CREATE = (
    "CREATE TABLE steerable_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE steerable_sessions (session text PRIMARY KEY, events bigint NOT NULL)",
    "CREATE TABLE steerable_events (session text NOT NULL, seq bigint NOT NULL, "
    "body bytea NOT NULL, PRIMARY KEY (session, seq))",
)
_COLUMNS = """
SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relname = ANY(%s)
ORDER BY c.relname, a.attnum
"""
_APPEND = """
WITH counted AS (
    UPDATE steerable_sessions SET events = %(seq)s::bigint + 1
    WHERE session = %(s)s AND events = %(seq)s::bigint RETURNING session
)
INSERT INTO steerable_events (session, seq, body) SELECT session, %(seq)s, %(body)s FROM counted
"""
"""Moves the count from `seq` to `seq + 1` and inserts the row, or (count moved) does neither."""
_INSERT = "INSERT INTO steerable_events (session, seq, body) VALUES (%s, %s, %s)"
_COUNT = "UPDATE steerable_sessions SET events = %s WHERE session = %s AND events = %s"
_JOINED = """
SELECT count(*), min(seq), max(seq), string_agg(body, decode('0a', 'hex') ORDER BY seq)
FROM steerable_events WHERE session = %s AND seq >= %s AND seq < %s
"""
_ROWS = (
    "SELECT seq, body FROM steerable_events WHERE session = %s AND seq >= %s AND seq < %s "
    "ORDER BY seq"
)
_NO_STOP = 1 << 62  # no seq reaches it: read to the end
_CHECKPOINT_TABLE = (
    "CREATE TABLE IF NOT EXISTS steerable_checkpoints "
    "(session text PRIMARY KEY, seq bigint NOT NULL, body bytea NOT NULL)"
)
_HAS_CHECKPOINTS = "SELECT to_regclass(quote_ident(current_schema()) || '.steerable_checkpoints')"
_FIND_CHECKPOINT = """
SELECT c.seq, c.body, e.body FROM steerable_checkpoints c
LEFT JOIN steerable_events e ON e.session = c.session AND e.seq = c.seq - 1
WHERE c.session = %s
"""
_STORE_CHECKPOINT = """
INSERT INTO steerable_checkpoints (session, seq, body) VALUES (%s, %s, %s)
ON CONFLICT (session) DO UPDATE SET seq = EXCLUDED.seq, body = EXCLUDED.body
"""
_DDL_LOCK = int.from_bytes(
    hashlib.blake2b(b"steerable-compaction ddl", digest_size=8).digest(), "big", signed=True
)
_MAX_SESSION = 200
_SECRETS = [
    (re.compile(r"(://[^:/@\s]*:)[^@\s]*@"), r"\1***@"),
    (re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I), r"\1***"),
]
Layout = Literal["empty", "record"]


def split_session(url: str) -> tuple[str, str | None]:
    """`url` without its `session=` query parameter, and that parameter (`None` if absent)."""
    if not is_postgres_url(url):
        return url, None
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "session"]
    if not named:
        return url, None
    rest = urlencode([(key, value) for key, value in query if key != "session"], quote_via=quote)
    return urlunsplit(parts._replace(query=rest)), named[-1]


def _redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return _redact(lines[0] if lines else type(exc).__name__)


def _describe(params: Mapping[str, str]) -> str:
    """A URL naming the database without its password (or anything else secret)."""
    user = params.get("user", "")
    host = params.get("host") or params.get("hostaddr") or ""
    port = params.get("port", "")
    netloc = (quote(user, safe="") + "@" if user else "") + host + (":" + port if port else "")
    return f"postgresql://{netloc}/{quote(params.get('dbname', ''), safe='')}"


def _check_session(session: object) -> str:
    if not isinstance(session, str) or not 0 < len(session) <= _MAX_SESSION or "\0" in session:
        raise RecordError(
            f"a session id is a non-empty string of at most {_MAX_SESSION} characters "
            f"without NUL, got {session!r}"
        )
    return session


def _parse(url: str) -> dict[str, str]:
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise RecordConnectionError(
            f"not a PostgreSQL URL or connection string: {_first_line(exc)}"
        ) from None
    return {key: str(value) for key, value in params.items() if value is not None}


def _connect(url: str, params: Mapping[str, str], timeout: float) -> psycopg.Connection[Any]:
    extra: dict[str, Any] = {"application_name": "steerable-compaction"}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = max(1, round(timeout))
    try:
        return psycopg.connect(url, autocommit=True, **extra)
    except psycopg.Error as exc:
        raise RecordConnectionError(
            f"{_describe(params)}: cannot connect: {_first_line(exc)}"
        ) from None


def _current_schema(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute("SELECT current_schema()").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _layout(conn: psycopg.Connection[Any], schema: str) -> Layout:
    """What `schema` holds, read without writing; `RecordError` if it is not a record."""
    rows = conn.execute(_COLUMNS, (schema, list(_SHAPES))).fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for table, kind, column, type_name, not_null in rows:
        columns = found.setdefault(table, [])
        if kind != "r":
            raise RecordError(f"not a record: {table!r} is not a table (relkind {kind!r})")
        if column is not None:
            columns.append((column, type_name if not_null else f"{type_name} NULL"))
    if not found:
        return "empty"
    for table, shape in _SHAPES.items():
        if table not in found:
            raise RecordError(
                f"not a record: schema {schema!r} has {sorted(found)} but no {table!r}"
            )
        if tuple(found[table]) != shape:
            raise RecordError(
                f"not a record: table {table!r} has columns {found[table]}, "
                f"a record's has {list(shape)}"
            )
    meta = dict(conn.execute("SELECT key, value FROM steerable_meta").fetchall())
    if meta.get("format") != FORMAT:
        raise RecordError(f"not a record: steerable_meta says format {meta.get('format')!r}")
    version = meta.get("version", "")
    if not version.isdigit() or int(version) > FORMAT_VERSION:
        raise RecordError(
            f"the tables are version {version!r}, written by a newer steerable-compaction; "
            f"this version reads up to {FORMAT_VERSION}"
        )
    return "record"


def sessions(url: str, *, connect_timeout: float = 10.0) -> dict[str, int]:
    """Every session in the database at `url`, with its number of events (read-only)."""
    url, _ = split_session(url)
    params = _parse(url)
    with _connect(url, params, connect_timeout) as conn:
        try:
            conn.execute("SET default_transaction_read_only = on")
            schema = _current_schema(conn)
            if schema is None or _layout(conn, schema) == "empty":
                return {}
            rows = conn.execute("SELECT session, events FROM steerable_sessions").fetchall()
        except RecordError as exc:
            raise RecordError(f"{_describe(params)}: {exc.reason}") from None
        except psycopg.Error as exc:
            raise RecordConnectionError(f"{_describe(params)}: {_first_line(exc)}") from None
    return {str(session): int(events) for session, events in sorted(rows)}


class PostgresRecord(Record):
    """The record of one session in a PostgreSQL database; many sessions share the database.

    `url` is a libpq URL or connection string; a `session=` query parameter in the URL names the
    session when `session` is not given (default `"default"`). A second writer of the same
    session gets `RecordLockedError`, after waiting up to `lock_timeout` seconds for the first
    to let go (a killed writer's connection ends a moment after its process). Every failure to
    connect, or a connection that breaks, is a `RecordConnectionError`: reopen to resume.
    The open resumes from the session's projection checkpoint (`full=True`: reads every row).
    """

    _conn: psycopg.Connection[Any] | None = None
    _schema = ""
    _in_transaction = False  # a batch's transaction is open (a hook is attached)
    _batch_first: int | None = None  # the seq of the open batch's first entry
    _unsynced = False  # an asynchronous commit since the last synchronous one
    _stop = _NO_STOP  # loading reads rows before this seq (the entries before a checkpoint)
    _checkpoints_table = False  # this handle made sure `steerable_checkpoints` exists
    _keeps_checkpoints = True

    def __init__(
        self,
        url: str,
        *,
        session: str | None = None,
        readonly: bool = False,
        fsync: FsyncPolicy = "every_boundary",
        lock_timeout: float = 0.0,
        connect_timeout: float = 10.0,
        full: bool = False,
    ) -> None:
        super().__init__(path=None, readonly=readonly, fsync=fsync)
        self._queued: list[tuple[str, int, bytes]] = []  # a batch's rows, sent at its end
        self._url, in_url = split_session(url)
        if session is not None and in_url is not None and session != in_url:
            raise RecordError(f"two sessions named: {session!r} and the URL's {in_url!r}")
        named = session if session is not None else in_url
        self._session = _check_session("default" if named is None else named)
        params = _parse(self._url)
        self._database = _describe(params)
        try:
            self._conn = _connect(self._url, params, connect_timeout)
            with self._failures():
                self._open(lock_timeout)
                checkpoint = None if full else self._find_checkpoint()
            if checkpoint is not None:
                self._resume_from(checkpoint)
            self._read()
        except BaseException:
            self._close()
            raise

    @property
    def session(self) -> str:
        """The session this handle reads or writes."""
        return self._session

    @property
    def location(self) -> str:
        """The database as a URL (no password) with `?session=`: what `open_record` takes."""
        return f"{self._database}?session={quote(self._session, safe='')}"

    def _error(self, reason: str, *, line: int | None = None) -> RecordError:
        return RecordError(f"{self.location}: {reason}", line=line)

    # -- opening ---------------------------------------------------------------------------------

    def _open(self, lock_timeout: float) -> None:
        """Check (or create) the tables, then take the session's lock if this is its writer."""
        conn = self._live()
        if self._readonly:
            conn.execute("SET default_transaction_read_only = on")
        schema = _current_schema(conn)
        if schema is None:
            raise self._error("no schema to hold the record: the search_path names none")
        self._schema = schema
        try:
            layout = _layout(conn, schema)
            if layout == "empty" and not self._readonly:
                with conn.transaction():  # one creator at a time; another may have won
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    if _layout(conn, schema) == "empty":
                        for statement in _CREATE:
                            conn.execute(statement)
                        conn.execute(
                            "INSERT INTO steerable_meta (key, value) "
                            "VALUES ('format', %s), ('version', %s)",
                            (FORMAT, str(FORMAT_VERSION)),
                        )
        except RecordError as exc:
            raise self._error(exc.reason) from None
        if layout == "empty" and self._readonly:
            raise self._error("no such record: the database holds no records")
        if self._readonly:
            return
        self._take_lock(lock_timeout)
        conn.execute(
            "INSERT INTO steerable_sessions (session, events) VALUES (%s, 0) "
            "ON CONFLICT (session) DO NOTHING",
            (self._session,),
        )
        level = "on" if self._fsync == "every_event" else "off"
        conn.execute(f"SET synchronous_commit = {level}")

    def _take_lock(self, timeout: float) -> None:
        conn = self._live()
        name = f"steerable-compaction\0{self._schema}\0{self._session}".encode()
        key = _signed(hashlib.blake2b(name, digest_size=8).digest())
        if timeout > 0:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{timeout * 1000:.0f}",))
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                got = True
            except pg_errors.LockNotAvailable:
                got = False
            conn.execute("SELECT set_config('lock_timeout', '0', false)")
        else:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            got = row is not None and row[0] is True
        if not got:
            raise RecordLockedError(
                f"{self.location}: another writer holds this session; "
                "open it with readonly=True to read"
            )

    # -- reading ---------------------------------------------------------------------------------

    def _read(self) -> int:
        with self._failures(), bulk_load():
            return self._read_new()

    def _find_checkpoint(self) -> Checkpoint | None:
        """The session's checkpoint, if row `seq - 1` holds the entry it names."""
        try:
            found = self._live().execute(_FIND_CHECKPOINT, (self._session,)).fetchone()
        except pg_errors.UndefinedTable:
            return None  # written by an older build, or never compacted
        if found is None:
            return None
        seq, body, last = found
        try:
            checkpoint = decode_checkpoint(bytes(body))
        except RecordError as exc:
            logger.warning("%s: %s; reading the whole record", self.location, exc.reason)
            return None
        if checkpoint.seq != seq or not bound_to(checkpoint, None if last is None else bytes(last)):
            logger.warning(
                "%s: the checkpoint at seq %d does not match row %d (the rows were lost or "
                "changed); reading the whole record",
                self.location,
                seq,
                seq - 1,
            )
            return None
        return checkpoint

    def _read_head(self, checkpoint: Checkpoint) -> None:
        """Load rows `[0, checkpoint.seq)` in one snapshot, checked as on open."""
        self._stop = checkpoint.seq
        try:
            with self._failures(), bulk_load():
                conn = self._live()
                cur = conn.cursor(binary=True)
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    joined = self._joined(cur, 0)
                    rows = self._rows(cur, 0) if joined is None else []
                if joined is not None:
                    try:
                        self._load(iter_lines(joined))
                    except RecordError:
                        with conn.transaction():
                            rows = self._rows(cur, len(self._entries))
                        self._load_rows(rows)
                        raise
                else:
                    self._load_rows(rows)
        finally:
            self._stop = _NO_STOP
        if len(self._entries) != checkpoint.seq:
            raise self._error(
                f"the session holds {len(self._entries)} rows before its checkpoint at seq "
                f"{checkpoint.seq}: rows were lost"
            )

    def _store_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Replace the session's checkpoint row in a transaction of its own."""
        conn = self._live()
        with self._failures():
            if not self._checkpoints_table:
                with conn.transaction():  # one creator at a time, as for the other tables
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    # Looked up first: `CREATE ... IF NOT EXISTS` needs `CREATE` on the schema.
                    if conn.execute(_HAS_CHECKPOINTS).fetchone() == (None,):
                        conn.execute(_CHECKPOINT_TABLE)
                self._checkpoints_table = True
            conn.execute(
                _STORE_CHECKPOINT,
                (self._session, checkpoint.seq, encode_checkpoint(checkpoint)),
            )

    def _read_new(self) -> int:
        """Load the rows past those loaded, checked against the session's count (one snapshot)."""
        conn, before = self._live(), len(self)
        cur = conn.cursor(binary=True)
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            found = cur.execute(
                "SELECT events FROM steerable_sessions WHERE session = %s", (self._session,)
            ).fetchone()
            if found is None:
                raise self._error("no such record: the database has no such session")
            count = int(found[0])
            joined = self._joined(cur, before)
            rows = self._rows(cur, before) if joined is None else []
        if joined is not None:
            try:
                self._load(iter_lines(joined))
            except RecordError:
                with conn.transaction():  # read them again one by one, to name the row at fault
                    rows = self._rows(cur, len(self))
                self._load_rows(rows)
                raise
        else:
            self._load_rows(rows)
        if count != len(self):
            what = "rows were lost" if count > len(self) else "rows were added uncounted"
            raise self._error(f"the session holds {len(self)} events but counted {count}: {what}")
        return len(self) - before

    def _joined(self, cur: psycopg.Cursor[Any], first: int) -> bytes | None:
        """Rows `first`... as newline-terminated lines, or `None` if they cannot be so read."""
        try:
            with self._live().transaction():  # a savepoint: a join too large fails alone
                found = cur.execute(_JOINED, (self._session, first, self._stop)).fetchone()
        except pg_errors.ProgramLimitExceeded:  # pragma: no cover - over a gigabyte of rows
            return None
        assert found is not None
        rows, low, high, joined = found
        if not rows:
            return b""
        if low != first or high - low + 1 != rows or joined.count(b"\n") != rows - 1:
            return None  # a gap, or a body holding a newline: row by row names the fault
        return bytes(joined) + b"\n"

    def _rows(self, cur: psycopg.Cursor[Any], first: int) -> list[tuple[int, bytes]]:
        rows = cur.execute(_ROWS, (self._session, first, self._stop))
        return [(int(seq), bytes(body)) for seq, body in rows]

    def _load_rows(self, rows: list[tuple[int, bytes]]) -> None:
        first = len(self)
        for i, (seq, _) in enumerate(rows):
            if seq != first + i:
                raise self._error(f"row {first + i} is missing (the next is {seq})", line=first + i)
        self._load(iter_rows([body for _, body in rows]))

    def _load(self, objs: Iterator[Any]) -> None:
        """Decode entries in order into the record; plain messages reach the projection in runs."""

        def check_version(version: int) -> None:
            if version < CHECKED_SINCE:
                raise RecordError(f"a v{version} entry, where this store writes only v4")

        try:
            self._ingest(objs, check_version)
        except RecordError as exc:
            raise self._error(exc.reason, line=len(self)) from None
        except RecursionError:
            raise self._error("an entry nested too deeply", line=len(self)) from None

    def refresh(self) -> int:
        """Read entries the session's writer appended since this (read-only) handle loaded."""
        with self._lock:
            if self._readonly and not self._closed:
                return self._read()
            return 0

    # -- writing ---------------------------------------------------------------------------------

    def _live(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise self._error("the connection is closed")
        return self._conn

    @contextlib.contextmanager
    def _failures(self, seq: int | None = None) -> Iterator[None]:
        """Turn psycopg's errors into `RecordError`s; a broken connection stops the writer."""
        try:
            yield
        except pg_errors.UniqueViolation:
            self._broken = "another writer appended to this session: reopen the record"
            raise self._error(
                f"row {seq} already exists: something else appended to this session", line=seq
            ) from None
        except psycopg.Error as exc:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                self._broken = "the connection to the database broke: reopen the record"
                raise RecordConnectionError(
                    f"{self.location}: the connection broke: {_first_line(exc)}", line=seq
                ) from None
            raise self._error(f"the database refused: {_first_line(exc)}", line=seq) from None

    def _lost_writer(self) -> NoReturn:
        self._broken = "another writer appended to this session: reopen the record"
        raise self._error("the session's count moved: another writer appended to it")

    def _persist(self, entry: Entry, *, durable: bool) -> None:
        body = encode_body(entry)
        if self._batching:
            self._insert_in_batch(entry, body)
            return
        sync = durable and self._fsync == "every_boundary"
        conn = self._live()
        params = {"s": self._session, "seq": entry.seq, "body": body}
        with self._failures(entry.seq):
            if not sync and not self._hooked():
                # One statement is its own transaction: one round trip instead of three.
                if conn.execute(_APPEND, params).rowcount != 1:
                    self._lost_writer()
            else:
                conn.execute("BEGIN; SET LOCAL synchronous_commit = on" if sync else "BEGIN")
                try:
                    if conn.execute(_APPEND, params).rowcount != 1:
                        self._lost_writer()
                    self._on_append(entry)
                    conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
        self._unsynced = not sync and self._fsync != "every_event"

    def _rollback(self, to: str | None = None) -> None:
        """Roll back (to a savepoint), unless the connection is gone (the server did it)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK" if to is None else f"ROLLBACK TO SAVEPOINT {to}")

    def _insert_in_batch(self, entry: Entry, body: bytes) -> None:
        """Queue one entry for the batch's commit; hooked, insert it now in its own savepoint.

        A hook must run inside the transaction once its entry is written, so with a hook the
        batch's transaction opens at once and each entry is a savepoint: a failure takes back
        only that entry. Without one, the rows wait and go in one pipeline when the batch ends.
        """
        if self._batch_first is None:
            self._batch_first = entry.seq
        if not self._hooked():
            self._queued.append((self._session, entry.seq, body))
            return
        conn = self._live()
        with self._failures(entry.seq):
            if not self._in_transaction:
                conn.execute("BEGIN")
                self._in_transaction = True
            conn.execute("SAVEPOINT entry")
            try:
                conn.execute(_INSERT, (self._session, entry.seq, body))
                self._on_append(entry)
            except BaseException:
                self._rollback("entry")
                raise
            conn.execute("RELEASE SAVEPOINT entry")

    def _commit_batch(self, *, durable: bool) -> None:
        """Commit the batch's rows with the session's count, synchronously if `durable`."""
        first, self._batch_first = self._batch_first, None
        queued, self._queued = self._queued, []
        if first is None:
            return
        began, self._in_transaction = self._in_transaction, False
        sync = durable and self._fsync == "every_boundary"
        conn = self._live()
        with self._failures():
            try:
                with conn.pipeline():  # one round trip for the rows and the count
                    if not began:
                        conn.execute("BEGIN")
                    if sync:
                        conn.execute("SET LOCAL synchronous_commit = on")
                    if queued:
                        conn.cursor().executemany(_INSERT, queued)
                    cur = conn.execute(_COUNT, (len(self), self._session, first))
                if cur.rowcount != 1:
                    self._lost_writer()
                conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        self._unsynced = not sync and self._fsync != "every_event"

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if self._unsynced and self._fsync != "never" and self._broken is None:
                # A synchronous commit flushes the server's log, earlier commits included.
                with conn.transaction():
                    conn.execute("SET LOCAL synchronous_commit = on")
                    conn.execute(
                        "UPDATE steerable_sessions SET events = events WHERE session = %s",
                        (self._session,),
                    )
        except psycopg.Error as exc:
            logger.warning("%s: the last appends may not be flushed: %s", self.location, exc)
        finally:
            conn.close()


def _signed(digest: bytes) -> int:
    """Eight bytes as a signed bigint (an advisory lock's key)."""
    return int.from_bytes(digest, "big", signed=True)
