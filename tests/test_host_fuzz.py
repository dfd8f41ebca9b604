"""Random and hostile JSON-RPC lines against a real `steerable-compaction serve` process (issue 14).

One process serves the whole run, with a default session and room for two named ones, so session
ids take every path (created, reused, unknown, malformed, too many). After each fuzzed line the
test sends a probe (`status`) and reads until the probe's answer and every reply the line is owed
have arrived; each message must be strict JSON-RPC 2.0 (UTF-8, no NaN, one line), and the process
must still be up at the end.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerable_compaction.messages import message_to_dict

from .host_helpers import Json, Process
from .strategies import messages

LIMIT = 4096  # the process runs with --max-line-bytes 4096, so oversized lines are cheap
EXAMPLES = 300
METHODS = [
    "agent.chat.send",
    "agent.chat.seed",
    "agent.chat.compact",
    "agent.chat.history",
    "agent.chat.status",
    "agent.session.list",
    "agent.session.close",
]
PARAMS = ["input", "seed", "format", "messages", "now", "offset", "limit", "session"]

surrogates = st.integers(0xD800, 0xDFFF).map(chr)
texts = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(st.text(max_size=3), surrogates), max_size=4).map("".join),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(10**300),
    texts,
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
record_messages = messages().map(message_to_dict)
openai_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "x"]), "content": texts}
)
param_values = st.one_of(
    json_values,
    st.sampled_from(["hi", "Look around (read 1 files).", "record", "openai", "a", "b", "c"]),
    st.integers(-2, 600),
    st.lists(st.one_of(record_messages, openai_messages), max_size=3),
)
params = st.dictionaries(st.one_of(st.sampled_from(PARAMS), texts), param_values, max_size=3)
ids = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.none(),
    json_values,
)
requests = st.fixed_dictionaries(
    {"jsonrpc": st.one_of(st.just("2.0"), json_values), "method": st.sampled_from(METHODS) | texts},
    optional={"id": ids, "params": st.one_of(params, json_values)},
)


def ascii_json(value: Any) -> bytes:
    """Python's JSON writer: NaN/Infinity tokens, lone surrogates as escapes."""
    return json.dumps(value, allow_nan=True).encode()


def raw_json(value: Any) -> bytes:
    """The same text written raw: lone surrogates become bytes that are not UTF-8."""
    return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


lines = st.one_of(
    requests.map(ascii_json),
    requests.map(raw_json),
    st.lists(st.one_of(requests, json_values), max_size=4).map(ascii_json),
    json_values.map(ascii_json),
    st.binary(max_size=64),
    # Deep nesting: balanced only as deep as any Python stack parses it, unclosed much deeper.
    st.integers(1, 200).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, LIMIT).map(lambda n: b"[" * n),
    st.integers(LIMIT - 64, LIMIT + 64).map(
        lambda n: (
            b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.status","x":"'
            + b"y" * max(n - 60, 0)
            + b'"}'
        )
    ),
).map(lambda line: line.replace(b"\n", b" "))


def _silent(item: Any) -> bool:
    """A notification: a valid request without an id, which JSON-RPC never answers."""
    return (
        isinstance(item, dict)
        and "id" not in item
        and item.get("jsonrpc") == "2.0"
        and isinstance(item.get("method"), str)
        and ("params" not in item or isinstance(item["params"], dict | list))
    )


def owed(line: bytes) -> Literal["none", "one", "array"]:
    """What JSON-RPC 2.0 owes `line`: nothing, one response, or one batch array."""
    if len(line) > LIMIT:
        return "one"
    if not line.strip():
        return "none"
    try:
        payload = json.loads(line)
    except (ValueError, RecursionError):
        return "one"
    if isinstance(payload, list):
        if not payload:
            return "one"
        return "none" if all(_silent(item) for item in payload) else "array"
    return "none" if _silent(payload) else "one"


def check_response(message: Any) -> None:
    """A JSON-RPC 2.0 response: an id, and a result or an error with an integer code."""
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    assert "id" in message and isinstance(message["id"], str | int | float | None), message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str), message


def check(message: Any) -> Literal["event", "one", "array"]:
    """Validate one message from the server and say what it is."""
    if isinstance(message, list):
        assert message, "an empty batch reply"
        for item in message:
            check_response(item)
        return "array"
    if isinstance(message, dict) and "method" in message:
        assert message == {
            "jsonrpc": "2.0",
            "method": "agent.chat.event",
            "params": message["params"],
        }
        assert isinstance(message["params"], dict)
        return "event"
    check_response(message)
    return "one"


class Server:
    """One `serve` process for the whole run, started again if an example ended it.

    Restarting keeps shrinking honest: each candidate line meets a live server.
    """

    def __init__(self, record: Path) -> None:
        self.record = record
        self.process: Process | None = None
        self.starts = 0

    def get(self) -> Process:
        if self.process is not None and self.process.proc.poll() is not None:
            self.process.close()
            self.process = None
        if self.process is None:
            args = ["--record", str(self.record), "--record-dir", str(self.record.parent / "s")]
            args += ["--window", "4096", "--max-sessions", "3"]
            self.process = Process(*args, "--max-line-bytes", str(LIMIT))
            self.starts += 1
        return self.process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    holder = Server(Path(tmp_path_factory.mktemp("fuzz")) / "session.jsonl")
    try:
        yield holder
    finally:
        if holder.process is not None:
            holder.process.close()


_probes = itertools.count()


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(line=lines)
def test_every_line_gets_a_valid_json_rpc_reply_and_the_server_stays_up(
    server: Server, line: bytes
) -> None:
    """Issue 14: whatever one line holds, the server owes it a strict JSON-RPC reply and lives."""
    process = server.get()
    probe = f"probe:{next(_probes)}"
    process.send(line)
    process.send(json.dumps({"jsonrpc": "2.0", "id": probe, "method": "agent.chat.status"}))
    expected = owed(line)
    replies: list[Json | list[Json]] = []
    probed = False
    while not probed or len(replies) < (expected != "none"):
        message = process.read()
        kind = check(message)
        if kind == "event":
            continue
        if isinstance(message, dict) and message.get("id") == probe:
            probed = True
            continue
        replies.append(message)
    assert len(replies) == (expected != "none"), (line, replies)
    if replies:
        assert ("array" if isinstance(replies[0], list) else "one") == expected, (line, replies)
    assert process.proc.poll() is None, process.stderr()


@pytest.mark.slow
def test_the_fuzzed_server_exits_cleanly_when_stdin_closes(server: Server) -> None:
    """The process that served the whole run was never restarted and ends with status 0 on EOF."""
    process = server.get()
    assert server.starts == 1
    assert process.proc.stdin is not None
    process.proc.stdin.close()
    assert process.proc.wait(timeout=30) == 0, process.stderr()
