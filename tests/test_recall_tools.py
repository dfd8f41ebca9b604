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
from steerable_compaction.messages import ImagePart, Message, TextPart, ToolCall
from steerable_compaction.recall import (
    HISTORY_READ,
    HISTORY_SEARCH,
    anthropic_tool_schemas,
    execute_history_tool,
    hidden_image_messages,
    history_tools,
    openai_tool_schemas,
    read_history,
    search_history,
)
from steerable_compaction.record import MemoryRecord, Record
from steerable_compaction.sim.content import png_image
from steerable_compaction.testing import ScriptedProvider
from steerable_compaction.tokens import estimate_tokens, image_tokens
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
        execute_history_tool(MemoryRecord(), HISTORY_SEARCH, "{}", max_tokens=cap)  # type: ignore[call-overload]
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
    """Whatever the model sends (any text, any JSON), the executor returns text.

    With images allowed, over a record whose hidden messages hold images (seqs 3 and 5), it
    returns text or a text part followed by images, within the cap.
    """
    record = session(MemoryRecord())
    assert isinstance(execute_history_tool(record, name, arguments, max_tokens=256), str)
    pictures = image_session(MemoryRecord())
    answer = execute_history_tool(pictures, name, arguments, max_tokens=2000, images=True)
    if not isinstance(answer, str):
        head, *shown = answer
        assert isinstance(head, TextPart) and shown
        assert all(isinstance(p, ImagePart) for p in shown)
        priced = sum(image_tokens(p) for p in shown if isinstance(p, ImagePart))
        assert estimate_tokens(head.text) + priced <= 2000


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
    assert isinstance(searched, str) and isinstance(read_back, str)
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


# -- images: found by looking again -------------------------------------------------------------


def _png(width: int, height: int) -> ImagePart:
    """A PNG header of `width` x `height` (all the pricing reads)."""
    return ImagePart(media_type="image/png", data=png_image(width, height, "pixels"))


def image_session(record: Record) -> Record:
    """A session whose screenshots are hidden by a summary, but for the newest one.

    Seqs: 0 system, 1 task, 2 call, 3 screenshot result, 4 reply, 5 pasted screenshot (user),
    6 reply, 7 a still-visible screenshot (user); 8 summarizes projection [1, 7).
    """
    record.append_message(Message.system("You are a browsing agent."))  # 0
    record.append_message(Message.user("Check the dashboard."))  # 1
    record.append_message(Message.assistant("", [call("c1", "screenshot", url="x")]))  # 2
    record.append_message(
        Message.tool("c1", (TextPart(text="Screenshot of x."), _png(800, 600)))
    )  # 3
    record.append_message(Message.assistant("Looked."))  # 4
    record.append_message(Message.user((TextPart(text="Also this:"), _png(400, 300))))  # 5
    record.append_message(Message.assistant("Noted."))  # 6
    record.append_message(Message.user((TextPart(text="And now:"), _png(200, 100))))  # 7
    summarize(record, 1, 6)  # 8
    return record


def test_a_search_without_hits_lists_the_hidden_images_newest_first() -> None:
    """Text search cannot see pixels: it says so and names the hidden messages with images.

    The still-visible screenshot (seq 7) is not listed; a text-only answer lists none.
    """
    record = image_session(MemoryRecord())
    answer = execute_history_tool(
        record, HISTORY_SEARCH, {"query": "codename"}, max_tokens=2000, images=True
    )
    assert isinstance(answer, str)
    assert answer.splitlines()[1] == (
        "Text search cannot see into images. Hidden messages with images, newest first: "
        "user: seq 5; tool result of screenshot: seq 3. history_read one to look at its images "
        "again."
    )
    assert "images" not in run(record, HISTORY_SEARCH, {"query": "codename"})
    assert [hit.seq for hit in hidden_image_messages(record)] == [5, 3]
    assert [hit.snippet for hit in hidden_image_messages(record, limit=1)] == ["Also this:"]


def screenshots(count: int) -> MemoryRecord:
    """A record of a user's request and `count` screenshot calls, each answered by a picture."""
    record = MemoryRecord()
    record.append_message(Message.user("Go."))
    for i in range(count):
        record.append_message(Message.assistant("", [call(f"s{i}", "screenshot")]))
        record.append_message(Message.tool(f"s{i}", (_png(64, 64),)))
    return record


def test_the_image_list_groups_runs_and_never_names_a_history_result() -> None:
    """Consecutive messages from one source share a label; an image read back is no new image."""
    record = screenshots(3)
    record.append_message(Message.assistant("", [call("r1", HISTORY_READ, seq=2)]))
    record.append_message(Message.tool("r1", (TextPart(text="[seq 2]"), _png(64, 64))))
    summarize(record, 0, len(record.projection))
    answer = execute_history_tool(
        record, HISTORY_SEARCH, '{"query": "nothing"}', max_tokens=2000, images=True
    )
    assert "newest first: tool result of screenshot: seq 6, 4, 2. history_read" in answer
    assert "seq 8" not in answer


async def test_reading_a_hidden_image_message_returns_its_images() -> None:
    """`history_read` shows the text page and the images, which go back to the model as parts."""
    record = image_session(MemoryRecord())
    _, read = history_tools(record, max_tokens=2000)
    answer = await read.fn({"seq": 3})
    assert isinstance(answer, list)
    head, image = answer
    assert head == TextPart(
        text="[seq 3] tool result of screenshot, characters 0-48 of 48:\n"
        "Screenshot of x.\n[image: image/png, 2,337 bytes]"
    )
    assert image == record.entries[3].event.message.images[0]  # type: ignore[union-attr]
    text_only = run(record, HISTORY_READ, {"seq": 3})
    assert text_only == head.text  # the default answer is text, the image a line in it


def test_an_image_over_the_cap_is_left_out_and_the_page_says_so() -> None:
    """Images that do not fit the result's cap are not sent; the text names how many."""
    record = MemoryRecord()
    record.append_message(
        Message.user((TextPart(text="Two shots:"), _png(800, 600), _png(4000, 3000)))
    )
    record.append_message(Message.assistant("Seen."))
    summarize(record, 0, 2)
    answer = execute_history_tool(record, HISTORY_READ, {"seq": 0}, max_tokens=1100, images=True)
    assert isinstance(answer, list)
    head, *shown = answer
    assert shown == [record.entries[0].event.message.images[0]]  # type: ignore[union-attr]
    assert isinstance(head, TextPart)
    assert head.text.endswith(
        "[1 of its 2 image(s) not shown: they do not fit this result's cap of 1,100 tokens]"
    )
    priced = estimate_tokens(head.text) + sum(
        image_tokens(p) for p in shown if isinstance(p, ImagePart)
    )
    assert priced <= 1100


def test_a_later_page_carries_no_images() -> None:
    """The images come with the page at offset 0 only."""
    record = MemoryRecord()
    body = "".join(f"row {i} ok\n" for i in range(3000))
    record.append_message(Message.user((TextPart(text=body), _png(64, 64))))
    record.append_message(Message.assistant("Seen."))
    summarize(record, 0, 2)
    first = execute_history_tool(record, HISTORY_READ, {"seq": 0}, max_tokens=600, images=True)
    assert isinstance(first, list) and len(first) == 2
    assert isinstance(first[0], TextPart)
    footer = first[0].text.splitlines()[-1]
    offset = json.loads(footer.removeprefix("[continues: history_read ").removesuffix("]"))
    second = execute_history_tool(record, HISTORY_READ, offset, max_tokens=600, images=True)
    assert isinstance(second, str)
    assert read_history(record, 0, offset=offset["offset"]).images == ()


@pytest.mark.parametrize("cap", [256, 2000])
def test_a_long_page_with_an_image_left_out_still_says_how_to_read_on(cap: int) -> None:
    """The not-shown line has its own room: the continuation line is never cut."""
    record = MemoryRecord()
    body = "".join(f"row {i} ok\n" for i in range(3000))
    record.append_message(Message.user((TextPart(text=body), _png(4000, 3000))))
    record.append_message(Message.assistant("Seen."))
    summarize(record, 0, 2)
    answer = execute_history_tool(record, HISTORY_READ, {"seq": 0}, max_tokens=cap, images=True)
    assert isinstance(answer, str) and estimate_tokens(answer) <= cap
    footer, note = answer.splitlines()[-2:]
    json.loads(footer.removeprefix("[continues: history_read ").removesuffix("]"))
    assert note.startswith("[1 of its 1 image(s) not shown")


def test_a_long_image_list_is_cut_to_the_newest_and_still_parses() -> None:
    """Hundreds of hidden screenshots: the newest that fit, labelled, and `and older ones`."""
    from steerable_compaction.sim.agent import _listed_images

    record = screenshots(400)
    summarize(record, 0, len(record.projection))
    answer = execute_history_tool(
        record, HISTORY_SEARCH, '{"query": "nothing"}', max_tokens=256, images=True
    )
    assert isinstance(answer, str) and estimate_tokens(answer) <= 256
    assert " and older ones. history_read one to look at its images again." in answer
    listed = _listed_images([Message.tool("x", answer)])
    assert listed[:3] == [800, 798, 796] and len(listed) > 5
