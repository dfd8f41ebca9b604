"""The stdio transport: a `JsonRpcServer` on a process's stdin and stdout, with bounded memory.

A daemon thread reads stdin and splits it into lines; the event loop hands each to the server.
Two limits keep a client from growing the process without end:

- a line longer than `MAX_LINE_BYTES` (not counting its newline) is dropped as it arrives, never
  held whole, and answered with -32600 (id null);
- the reader stops reading stdin while `MAX_QUEUED_LINES` lines, or `MAX_LINE_BYTES` bytes, wait
  for the server, and the server takes no new line while `MAX_TASKS` requests run; a client that
  never reads stdout stalls the server's writes, so it ends up blocked in its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ConfigError
from .rpc import JsonRpcServer
from .session import Session
from .sessions import Sessions

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_QUEUED_LINES",
    "MAX_TASKS",
    "Oversized",
    "serve_stdio",
    "split_lines",
]

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest request line `serve` accepts, in bytes, not counting its newline (16 MiB)."""
MAX_QUEUED_LINES = 64
"""How many read lines may wait for the server before the reader stops reading stdin."""
MAX_TASKS = 32
"""How many requests (turns, batches) may run at once before the server takes no new line."""

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Oversized:
    """A line longer than the limit: dropped as it was read, only its size kept."""

    size: int  # bytes, not counting the newline


def split_lines(chunks: Iterable[bytes], limit: int) -> Iterator[bytes | Oversized]:
    """The newline-terminated lines in `chunks` (the last may lack its newline).

    A line holding more than `limit` bytes before its newline is yielded as `Oversized`; at most
    `limit` bytes of it are ever held.
    """
    pending = bytearray()
    dropped = 0  # bytes of an oversized line seen so far; 0 while none is being dropped
    for chunk in chunks:
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            piece = chunk[start:end]
            if dropped or len(pending) + len(piece) > limit:
                dropped += len(pending) + len(piece)
                pending.clear()
            else:
                pending += piece
            if newline < 0:
                break
            if dropped:
                yield Oversized(size=dropped)
            else:
                yield bytes(pending) + b"\n"
            pending.clear()
            dropped = 0
            start = newline + 1
    if dropped:
        yield Oversized(size=dropped)
    elif pending:
        yield bytes(pending)


class _Budget:
    """Lines and bytes the reader may have waiting; `take` blocks while either is spent."""

    def __init__(self, lines: int, size: int) -> None:
        self.lines = lines
        self.size = size
        self.stalled = threading.Event()  # set once a `take` had to wait (seen by tests)
        self._held_lines = 0
        self._held_size = 0
        self._cond = threading.Condition()

    def _room(self, size: int) -> bool:
        # One line always fits when nothing waits, or a line as big as the budget would stall.
        return self._held_lines == 0 or (
            self._held_lines < self.lines and self._held_size + size <= self.size
        )

    def take(self, size: int) -> None:
        with self._cond:
            if not self._room(size):
                self.stalled.set()
                self._cond.wait_for(lambda: self._room(size))
            self._held_lines += 1
            self._held_size += size

    def give(self, size: int) -> None:
        with self._cond:
            self._held_lines -= 1
            self._held_size -= size
            self._cond.notify_all()


def _raw_reads(stream: BinaryIO) -> Callable[[int], bytes]:
    """Reads that bypass the stream's buffer, so no lock is held while the thread waits.

    A daemon thread blocked inside a buffered `readline` holds the buffer's lock; the interpreter
    then aborts at exit (SIGABRT) when the server ends before stdin does.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return stream.read
    return functools.partial(os.read, fd)


def _held(item: bytes | Oversized) -> int:
    """The bytes an item keeps in memory while it waits (an `Oversized` keeps none)."""
    return len(item) if isinstance(item, bytes) else 0


async def _lines(
    stream: BinaryIO, *, limit: int = MAX_LINE_BYTES, budget: _Budget | None = None
) -> AsyncIterator[bytes | Oversized]:
    """Lines from a blocking binary stream, read by a daemon thread (pipes, files, ttys).

    The thread waits while `budget` is spent by lines read but not yet done with (a line is done
    with when the consumer asks for the next one).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | Oversized | None] = asyncio.Queue()
    if budget is None:
        budget = _Budget(MAX_QUEUED_LINES, limit)
    read = _raw_reads(stream)

    def put(item: bytes | Oversized | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def chunks() -> Iterator[bytes]:
        try:
            while chunk := read(_CHUNK):
                yield chunk
        except (OSError, ValueError):
            pass

    def reader() -> None:
        for item in split_lines(chunks(), limit):
            budget.take(_held(item))
            put(item)
        put(None)

    threading.Thread(target=reader, name="sidecar-stdin", daemon=True).start()
    while (item := await queue.get()) is not None:
        try:
            yield item
        finally:
            budget.give(_held(item))


async def serve_stdio(
    sessions: Sessions | Session,
    stdin: BinaryIO,
    stdout: BinaryIO,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_queued_lines: int = MAX_QUEUED_LINES,
    max_tasks: int = MAX_TASKS,
) -> None:
    """Serve `sessions` until `stdin` ends (then finish running requests) or `stdout` breaks.

    Raises:
        ConfigError: a limit is below 1.
    """
    for key, value in (
        ("max_line_bytes", max_line_bytes),
        ("max_queued_lines", max_queued_lines),
        ("max_tasks", max_tasks),
    ):
        if value < 1:
            raise ConfigError(key, value, "an integer >= 1")
    broken = asyncio.Event()

    def write(data: bytes) -> None:
        if broken.is_set():
            return
        try:
            stdout.write(data)
            stdout.flush()
        except (BrokenPipeError, ValueError):
            broken.set()

    server = JsonRpcServer(sessions, write)
    budget = _Budget(max_queued_lines, max_line_bytes)
    async for item in _lines(stdin, limit=max_line_bytes, budget=budget):
        if isinstance(item, Oversized):
            server.refuse_oversized(item.size, max_line_bytes)
        else:
            await server.handle_line(item)
        await server.throttle(max_tasks)
        if broken.is_set():
            break
    await server.drain()
