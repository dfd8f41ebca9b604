"""Tests for `steerable_compaction.recall.tools`: the history tools as the model meets them.

The schemas go through the official SDKs (on a mock transport, as in the provider tests), the
`Tool` objects through `CoreLoop`, and every bad call comes back as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction.errors import ConfigError
from steerable_compaction.loop import CoreLoop, Tool
from steerable_compaction.messages import Message, ToolCall
from steerable_compaction.recall import (
    HISTORY_READ,
    HISTORY_SEARCH,
    anthropic_tool_schemas,
    execute_history_tool,
    history_tools,
    openai_tool_schemas,
    search_history,
)
from steerable_compaction.record import MemoryRecord, Record
from steerable_compaction.testing import ScriptedProvider
from steerable_compaction.tokens import estimate_tokens
from tests.test_recall import call, session, summarize


def run(record: Record, name: str, arguments: Any, max_tokens: int = 2000) -> str:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return execute_history_tool(record, name, text, max_tokens=max_tokens)


# -- results ------------------------------------------------------------------------------------


def test_search_result_lists_hits_with_seq_tool_size_and_snippet() -> None:
    """The result names each hit's seq, who wrote it, its size, and shows a snippet."""
    record = session(MemoryRecord())
    text = run(record, HISTORY_SEARCH, {"query": "port 5432"})
    assert text.splitlines()[0] == (
        '2 hidden message(s) hold every term of "port", "5432", best first. Read one whole with '
        'history_read {"seq": N}.'
    )
    assert "[seq 3] tool result of read_file, " in text
    assert "raise ConnectionRefusedError('port 5432')" in text
    assert "[seq 4] assistant, " in text


def test_search_without_hits_says_so_and_how_to_widen() -> None:
    """No hits is an answer, not an error: it repeats the terms and suggests fewer."""
    record = session(MemoryRecord())
    text = run(record, HISTORY_SEARCH, {"query": "zebra 42"})
    assert text.startswith('No hidden message holds every term of the query: "zebra", "42".')


def test_operator_laden_queries_are_answered_with_a_literal_note() -> None:
    """Operators are searched as text, and the result says so."""
    record = session(MemoryRecord())
    text = run(record, HISTORY_SEARCH, {"query": "port AND (5432 OR 5433) NOT x*"})
    assert "(matched literally: AND, OR, NOT, *, ( ), - and the like are searched as text)" in text


def test_read_result_pages_with_a_continuation_line() -> None:
    """A long message reads in pages; each but the last says how to read on."""
    record = MemoryRecord()
    body = "".join(f"row {i} ok\n" for i in range(3000))
    record.append_message(Message.user("go"))
    record.append_message(Message.assistant("", [call("c1", "dump")]))
    record.append_message(Message.tool("c1", body))
    summarize(record, 0, 3)
    first = run(record, HISTORY_READ, {"seq": 2}, max_tokens=300)
    header, *_, footer = first.splitlines()
    assert header.startswith("[seq 2] tool result of dump, characters 0-")
    assert header.endswith(f" of {len(body):,}:")
    assert footer.startswith('[continues: history_read {"seq": 2, "offset": ')
    next_offset = json.loads(footer.removeprefix("[continues: history_read ").removesuffix("]"))
    second = run(record, HISTORY_READ, next_offset, max_tokens=300)
    assert second.splitlines()[0].startswith(
        f"[seq 2] tool result of dump, characters {next_offset['offset']:,}-"
    )
    assert estimate_tokens(first) <= 300 and estimate_tokens(second) <= 300


def test_the_last_page_has_no_continuation() -> None:
    """A message that fits reads whole, without a continuation line."""
    record = session(MemoryRecord())
    text = run(record, HISTORY_READ, {"seq": 3})
    assert text == (
        "[seq 3] tool result of read_file, characters 0-61 of 61:\n"
        "def connect():\n    raise ConnectionRefusedError('port 5432')\n"
    )


def test_results_stay_within_the_token_cap() -> None:
    """Many large hits are cut to the cap, with a note of how many were left out."""
    record = MemoryRecord()
    for i in range(30):
        record.append_message(Message.user(f"needle {i} " + "haystack words here " * 20))
    summarize(record, 0, 30)
    text = run(record, HISTORY_SEARCH, {"query": "needle", "limit": 20}, max_tokens=256)
    assert estimate_tokens(text) <= 256
    assert text.splitlines()[1].startswith("(showing ")
    assert text.splitlines()[1].endswith(" of 20: the result is capped in size)")


def test_a_huge_single_hit_is_clipped_to_the_cap() -> None:
    """A header and one hit that overflow the cap are cut with a marker."""
    record = MemoryRecord()
    record.append_message(Message.user("needle " + "数" * 5000))
    record.append_message(Message.user("next"))
    summarize(record, 0, 1)
    terms = " ".join(f"needle{i}"[:6] for i in range(1))
    text = run(record, HISTORY_SEARCH, {"query": terms + " " + "数" * 200}, max_tokens=256)
    assert estimate_tokens(text) <= 256
    assert text.endswith(" …[cut: the result is capped in size]")


# -- bad input: every one is a text answer ------------------------------------------------------

BAD_CALLS: list[tuple[str, str, str]] = [
    (HISTORY_SEARCH, "", "missing the argument 'query'"),
    (HISTORY_SEARCH, "{", "the arguments are not valid JSON"),
    (HISTORY_SEARCH, "[1, 2]", "the arguments must be a JSON object, got list"),
    (HISTORY_SEARCH, '"port"', "the arguments must be a JSON object, got str"),
    (HISTORY_SEARCH, "{}", "missing the argument 'query'"),
    (HISTORY_SEARCH, '{"query": ""}', "has no words to search for"),
    (HISTORY_SEARCH, '{"query": "   "}', "has no words to search for"),
    (HISTORY_SEARCH, '{"query": "\\"\\"\\"\\""}', "has no words to search for"),
    (HISTORY_SEARCH, json.dumps({"query": "x" * 10_001}), "10,001 characters long"),
    (HISTORY_SEARCH, '{"query": "port\\u0000"}', "NUL character"),
    (HISTORY_SEARCH, '{"query": 5432}', "the query must be a string, got int"),
    (HISTORY_SEARCH, '{"query": ["port"]}', "the query must be a string, got list"),
    (HISTORY_SEARCH, '{"query": null}', "the query must be a string, got NoneType"),
    (HISTORY_SEARCH, '{"query": "port", "limit": 0}', "limit must be an integer from 1 to 20"),
    (HISTORY_SEARCH, '{"query": "port", "limit": 21}', "limit must be an integer from 1 to 20"),
    (HISTORY_SEARCH, '{"query": "port", "limit": "5"}', "limit must be an integer"),
    (HISTORY_SEARCH, '{"query": "port", "limit": true}', "limit must be an integer"),
    (HISTORY_SEARCH, '{"query": "port", "limit": 2.5}', "limit must be an integer"),
    (HISTORY_SEARCH, '{"query": "port", "seq": 3}', "unknown argument 'seq'"),
    (HISTORY_READ, "{}", "missing the argument 'seq'"),
    (HISTORY_READ, '{"seq": -1}', "seq must be at least 0, got -1"),
    (HISTORY_READ, '{"seq": 99}', "there is no entry with seq 99"),
    (HISTORY_READ, '{"seq": 8}', "seq 8 is a compaction_boundary event, not a message"),
    (HISTORY_READ, '{"seq": 7}', "seq 7 is still in your context unchanged: read it there"),
    (HISTORY_READ, '{"seq": 1}', "seq 1 is still in your context unchanged"),
    (HISTORY_READ, '{"seq": "3"}', "seq must be an integer, got '3'"),
    (HISTORY_READ, '{"seq": 3.0}', "seq must be an integer, got 3.0"),
    (HISTORY_READ, '{"seq": null}', "seq must be an integer, got None"),
    (HISTORY_READ, '{"seq": 3, "offset": -1}', "offset must be at least 0, got -1"),
    (HISTORY_READ, '{"seq": 3, "offset": 500}', "offset 500 is past the end of seq 3"),
    (HISTORY_READ, '{"seq": 3, "offset": "0"}', "offset must be an integer"),
    (HISTORY_READ, '{"seq": 3, "query": "x"}', "unknown argument 'query'"),
    (HISTORY_READ, '{"seq": 99999999999999999999999}', "there is no entry with seq"),
]


@pytest.mark.parametrize(("name", "arguments", "reason"), BAD_CALLS)
def test_every_bad_call_is_answered_with_an_error_text(
    name: str, arguments: str, reason: str
) -> None:
    """Empty, malformed, huge, NUL, wrong-typed or unknown input: an error line, no exception."""
    record = session(MemoryRecord())
    text = execute_history_tool(record, name, arguments, max_tokens=2000)
    assert text.startswith(f"{name} error: ")
    assert reason in text


def test_an_unknown_tool_name_is_an_error_text() -> None:
    """The executor answers only its two tools, and says which they are."""
    text = execute_history_tool(MemoryRecord(), "history_delete", "{}", max_tokens=2000)
    assert text == (
        "error: unknown tool 'history_delete'; the history tools are history_search and "
        "history_read"
    )


def test_arguments_may_be_a_mapping() -> None:
    """Anthropic's `tool_use.input` is already a dict: the executor takes it as is."""
    record = session(MemoryRecord())
    assert execute_history_tool(record, HISTORY_READ, {"seq": 3}, max_tokens=2000).startswith(
        "[seq 3]"
    )


def test_an_unexpected_failure_is_an_error_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure inside the search (here a broken index) becomes the result, not a crash."""
    from steerable_compaction.recall import tools

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(tools, "search_history", broken)
    text = run(session(MemoryRecord()), HISTORY_SEARCH, {"query": "port"})
    assert text == "history_search error: the history could not be read (OSError: disk gone)"


@pytest.mark.parametrize("cap", [255, 0, True, 2000.0, "2000"])
def test_a_cap_below_256_is_a_config_error(cap: object) -> None:
    """The integrator's cap, not the model's input, is validated by raising `ConfigError`."""
    with pytest.raises(ConfigError, match="recall_result_tokens"):
        execute_history_tool(MemoryRecord(), HISTORY_SEARCH, "{}", max_tokens=cap)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="recall_result_tokens"):
        history_tools(MemoryRecord(), max_tokens=cap)  # type: ignore[arg-type]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    name=st.sampled_from([HISTORY_SEARCH, HISTORY_READ]),
    arguments=st.one_of(
        st.text(max_size=200),
        st.builds(json.dumps, _JSON),
        st.builds(
            lambda q, lim: json.dumps({"query": q, "limit": lim}),
            st.text(max_size=120),
            st.integers(-3, 30),
        ),
        st.builds(
            lambda seq, off: json.dumps({"seq": seq, "offset": off}),
            st.integers(-3, 12),
            st.integers(-5, 100),
        ),
    ),
)
def test_no_call_ever_raises(name: str, arguments: str) -> None:
    """Whatever the model sends (any text, any JSON), the executor returns text."""
    record = session(MemoryRecord())
    assert isinstance(execute_history_tool(record, name, arguments, max_tokens=256), str)


# -- the shapes: Tool objects, OpenAI and Anthropic schemas ---------------------------------------


async def test_tools_run_in_the_core_loop_and_their_results_are_not_hits() -> None:
    """`CoreLoop` offers the tools; the model searches and reads; the results are never hits."""
    record = session(MemoryRecord())
    provider = ScriptedProvider(
        [
            Message.assistant(
                "", [ToolCall(id="s1", name=HISTORY_SEARCH, arguments='{"query": "5432"}')]
            ),
            Message.assistant("", [ToolCall(id="r1", name=HISTORY_READ, arguments='{"seq": 3}')]),
            "The error was ConnectionRefusedError on port 5432.",
        ]
    )
    tools = [
        Tool(name=t.name, fn=t.fn, description=t.description, parameters=t.parameters)
        for t in history_tools(record, max_tokens=2000)
    ]
    loop = CoreLoop(provider, record, tools=tools)
    assert [spec.name for spec in loop.tool_specs] == [HISTORY_SEARCH, HISTORY_READ]
    result = await loop.run_turn("What was the error?")
    assert result.stop == "answered"
    search_result, read_result = (m.text for m in record.messages() if m.role == "tool")
    assert "[seq 3] tool result of read_file" in search_result
    assert read_result.startswith("[seq 3] tool result of read_file, characters 0-61 of 61:")
    summarize(record, 3, len(record.projection) - 1)
    assert all(hit.seq < 9 for hit in search_history(record, "5432", limit=20))


async def test_tool_objects_answer_bad_arguments_with_text() -> None:
    """A `Tool`'s function gets parsed arguments; wrong types come back as error text."""
    search, read = history_tools(session(MemoryRecord()), max_tokens=2000)
    searched, read_back = await search.fn({"query": 1}), await read.fn({"seq": "x"})
    assert searched.startswith("history_search error: the query must be")
    assert read_back.startswith("history_read error: seq must be an integer")


def test_schemas_are_fresh_copies() -> None:
    """Callers may edit the returned schemas without changing later ones."""
    first = openai_tool_schemas()
    first[0]["function"]["parameters"]["properties"].clear()
    assert openai_tool_schemas()[0]["function"]["parameters"]["properties"]
    mine = anthropic_tool_schemas()
    mine[1]["input_schema"]["required"].append("x")
    assert anthropic_tool_schemas()[1]["input_schema"]["required"] == ["seq"]


def test_the_three_shapes_describe_the_same_tools() -> None:
    """OpenAI, Anthropic and `HistoryTool` carry the same names, descriptions and parameters."""
    tools = history_tools(MemoryRecord(), max_tokens=2000)
    for tool, oa, an in zip(tools, openai_tool_schemas(), anthropic_tool_schemas(), strict=True):
        assert oa == {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        assert an == {
            "name": tool.name,
            "description": tool.description,
            "input_schema": dict(tool.parameters),
        }


class Server:
    """A fake endpoint answering with one canned body, keeping each request's JSON."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.reply = body
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=self.reply)


def _openai_reply(arguments: str) -> dict[str, Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": HISTORY_SEARCH, "arguments": arguments},
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [call],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


async def _with_transport(server: Server, use: Callable[[httpx2.AsyncClient], Any]) -> Any:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(server)) as http:
        return await use(http)


async def test_openai_sdk_sends_the_schemas_and_its_call_executes() -> None:
    """The schemas pass the OpenAI SDK as `tools=`; the call it returns runs in the executor."""
    record = session(MemoryRecord())
    server = Server(_openai_reply('{"query": "ConnectionRefusedError"}'))

    async def use(http: httpx2.AsyncClient) -> Any:
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="https://api.test/v1",
            http_client=http,
            max_retries=0,
            _strict_response_validation=True,
        )
        return await client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            tools=openai_tool_schemas(),  # type: ignore[arg-type]
        )

    reply = await _with_transport(server, use)
    assert server.bodies[0]["tools"] == openai_tool_schemas()
    tool_call = reply.choices[0].message.tool_calls[0]
    text = execute_history_tool(
        record, tool_call.function.name, tool_call.function.arguments, max_tokens=2000
    )
    assert "[seq 3] tool result of read_file" in text


async def test_anthropic_sdk_sends_the_schemas_and_its_call_executes() -> None:
    """The schemas pass the Anthropic SDK as `tools=`; its `tool_use` input runs as a dict."""
    record = session(MemoryRecord())
    server = Server(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": HISTORY_READ, "input": {"seq": 4}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )

    async def use(http: httpx2.AsyncClient) -> Any:
        client = anthropic.AsyncAnthropic(
            api_key="sk-ant-test",
            base_url="https://api.test",
            http_client=http,
            max_retries=0,
            _strict_response_validation=True,
        )
        return await client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            tools=anthropic_tool_schemas(),  # type: ignore[arg-type]
        )

    reply = await _with_transport(server, use)
    assert server.bodies[0]["tools"] == anthropic_tool_schemas()
    block = reply.content[0]
    text = execute_history_tool(record, block.name, block.input, max_tokens=2000)
    assert text.startswith("[seq 4] assistant, characters 0-")
    assert "数据库连接失败" in text


def test_the_two_schemas_cost_little_of_a_small_window() -> None:
    """The schemas ride along in every request after the first compaction, so they stay short.

    They took 418 estimated tokens (OpenAI shape), a quarter of a 2,048-token window's
    threshold; now 312.
    """
    for schemas in (openai_tool_schemas(), anthropic_tool_schemas()):
        assert sum(estimate_tokens(json.dumps(schema)) for schema in schemas) <= 320
