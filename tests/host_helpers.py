"""Shared helpers for the host tests: an in-process JSON-RPC client and a `serve` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from typing import IO, Any

from steerable_compaction.demo import ScriptedAgent, Workspace, build_provider
from steerable_compaction.host.rpc import JsonRpcServer
from steerable_compaction.host.session import Session
from steerable_compaction.host.sessions import Sessions
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import Record

Json = dict[str, Any]

# Ids a reply cannot echo as JSON (non-finite numbers) or as UTF-8 (lone surrogates).
UNECHOABLE_IDS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b'"\\ud800"',
    b'"a\\udfffb"',
]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(line: bytes) -> Any:
    """One outgoing line parsed as strict JSON: UTF-8, no NaN/Infinity, newline-terminated."""
    assert line.endswith(b"\n") and line.count(b"\n") == 1, line[:200]
    return json.loads(line.decode("utf-8", errors="strict"), parse_constant=_no_constant)


class Wire:
    """An in-process client: feeds lines to a server and parses what it wrote."""

    def __init__(self, sessions: Session | Sessions) -> None:
        self.lines: list[bytes] = []
        self.server = JsonRpcServer(sessions, self.lines.append)
        self.session = self.server.session
        self._next_id = 0

    async def raw(self, data: str | bytes) -> list[Any]:
        start = len(self.lines)
        await self.server.handle_line(data.encode() if isinstance(data, str) else data)
        await self.server.drain()
        return [strict_json(line) for line in self.lines[start:]]

    async def now(self, method: str, params: Any = None) -> Json:
        """Send one request and return its answer without waiting for running turns."""
        self._next_id += 1
        request: Json = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            request["params"] = params
        start = len(self.lines)
        await self.server.handle_line(json.dumps(request).encode())
        replies = [strict_json(line) for line in self.lines[start:]]
        (answer,) = [r for r in replies if r.get("id") == self._next_id]
        assert isinstance(answer, dict)
        return answer

    async def call(self, method: str, params: Any = None, **extra: Any) -> list[Json]:
        self._next_id += 1
        request: Json = {"jsonrpc": "2.0", "id": self._next_id, "method": method, **extra}
        if params is not None:
            request["params"] = params
        return await self.raw(json.dumps(request))

    async def result(self, method: str, params: Any = None) -> Json:
        *_, response = await self.call(method, params)
        assert "result" in response, response
        result: Json = response["result"]
        return result

    async def error(self, method: str, params: Any = None) -> Json:
        *_, response = await self.call(method, params)
        assert "error" in response, response
        error: Json = response["error"]
        return error


def demo_session(record: Record, *, window: int = 4096, **kwargs: Any) -> Session:
    workspace = Workspace()
    provider = build_provider("demo", window=window, agent=ScriptedAgent(workspace))
    return Session(record, provider, window=window, tools=workspace.tools(), env={}, **kwargs)


def events(lines: list[Json]) -> list[Json]:
    return [line["params"] for line in lines if line.get("method") == "agent.chat.event"]


class Process:
    """`steerable-compaction serve` as a subprocess, read line by line with a deadline."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "steerable_compaction", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "STEERABLE_SUMMARIZER": "1"},
        )
        self.out: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            self.out.put(line)
        self.out.put(b"")

    def send(self, data: str | bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((data.encode() if isinstance(data, str) else data) + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.proc.wait(timeout=30)
            raise AssertionError(f"the sidecar is gone: {self.stderr()}") from None

    def close(self) -> None:
        """Kill the process if it still runs and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def read(self, timeout: float = 30.0) -> Json:
        line = self.out.get(timeout=timeout)
        assert line, f"the sidecar closed its output: {self.stderr()}"
        value: Json = strict_json(line)
        return value

    def until_response(self, request_id: object) -> tuple[list[Json], Json]:
        notes: list[Json] = []
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return notes, message
            notes.append(message)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()


class Gate:
    """A provider whose first request waits until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.started = asyncio.Event()

    async def answer(self, request: CompletionRequest) -> str:
        self.started.set()
        await self.opened.wait()
        return "done"
