"""Tests for `steerable_compaction.adapters.openai_agents` on the real Agents SDK runner.

The model is the SDK's own `agents.testing.ScriptedModel`; each call is answered by a responder
that plays a scripted output, or a summary when the input ends with the summary instruction.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

pytest.importorskip("agents.testing", reason="needs the openai-agents extra")

from agents import Agent, ItemHelpers, ModelSettings, RunConfig, Runner, function_tool
from agents.items import TResponseInputItem
from agents.models.interface import Model, ModelTracing
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from steerable_compaction import (
    ConversionError,
    Message,
    MessageError,
    RecordError,
    resolve_compaction_policy,
)
from steerable_compaction.adapters.openai_agents import (
    CompactionSession,
    FakeSummaries,
    from_agents_items,
    to_agents_items,
)
from steerable_compaction.compaction import SUMMARY_INSTRUCTION
from steerable_compaction.messages import ImagePart, TextPart, ToolCall
from steerable_compaction.testing import FAKE_SUMMARY

SUMMARY = "## Primary Request\nRead the compiler modules.\n## Current Work\nRead " + ", ".join(
    f"m{i}.py" for i in range(20)
)
PNG = b"\x89PNG\r\n\x1a\n fake png bytes"
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode("ascii")


@function_tool
def read_file(path: str) -> str:
    """Read one source file."""
    return f"# {path}\n" + "the parser reads each token and records its position\n" * 40


def is_summary(call: ModelCall) -> bool:
    last = call.input[-1] if isinstance(call.input, list) and call.input else None
    return isinstance(last, dict) and last.get("content") == SUMMARY_INSTRUCTION


def scripted(reads: int) -> ScriptedModel:
    """`reads` file reads, then a final answer; a summary for every summary request."""
    outputs: list[Any] = [
        [function_call("read_file", {"path": f"m{i}.py"}, call_id=f"c{i}")] for i in range(reads)
    ]
    outputs.append([assistant_message("All modules read.")])

    def respond(call: ModelCall) -> Any:
        return [assistant_message(SUMMARY)] if is_summary(call) else outputs.pop(0)

    return ScriptedModel([ModelStep.respond(respond) for _ in range(reads + 8)])


def session(**knobs: Any) -> CompactionSession:
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4, **knobs)
    return CompactionSession(policy, session_id="s1", env={})


def run(model: Model, s: CompactionSession, text: str, *, filtered: bool = True) -> Any:
    agent = Agent(name="reader", instructions="You are terse.", model=model, tools=[read_file])
    config = RunConfig(
        call_model_input_filter=s.call_model_input_filter if filtered else None,
        tracing_disabled=True,
    )
    return asyncio.run(Runner.run(agent, text, session=s, run_config=config, max_turns=40))


def calls(model: ScriptedModel) -> list[ModelCall]:
    return [c for c in model.calls if not is_summary(c)]


# -- the scripted model ----------------------------------------------------------------------------


def test_the_scripted_model_gets_the_session_history_then_the_run_items() -> None:
    """What the tests rely on: a run's input is `get_items()` plus the run's new items."""
    s = session()
    run(scripted(1), s, "Read m0.py.")
    history = asyncio.run(s.get_items())
    model = scripted(0)
    run(model, s, "Anything else?")
    (call,) = model.calls
    assert call.input == [*history, {"content": "Anything else?", "role": "user"}]
    assert call.system_instructions == "You are terse."


# -- the runner -----------------------------------------------------------------------------------


def test_a_long_run_is_compacted_inside_the_run() -> None:
    """The filter compacts before model calls; the record keeps every item the runner stored."""
    s = session()
    model = scripted(14)
    result = run(model, s, "Read the modules.")
    assert result.final_output == "All modules read."
    assert [(c.action, c.status) for c in s.record.compactions()] == [("summarize", "closed")]
    assert s.record.message_count == 30  # question, 14 calls and results, answer
    last = calls(model)[-1].input
    assert len(last) < 29
    assert any(SUMMARY in str(item.get("content")) for item in last if isinstance(item, dict))


def test_the_summary_request_is_the_previous_request_plus_one_instruction() -> None:
    """R24-R27: same instructions and tools, the previous input's prefix, one instruction."""
    model = scripted(14)
    run(model, session(), "Read the modules.")
    (k,) = [i for i, c in enumerate(model.calls) if is_summary(c)]
    summary, previous = model.calls[k], model.calls[k - 1]
    assert isinstance(summary.input, list) and isinstance(previous.input, list)
    assert summary.input[:-1] == previous.input[: len(summary.input) - 1]
    assert len(summary.input) - 1 < len(previous.input)
    assert summary.system_instructions == previous.system_instructions
    assert [t.name for t in summary.tools] == [t.name for t in previous.tools]


def test_get_items_returns_the_compacted_projection() -> None:
    """The next run starts from the projection; the session alone compacts at run start."""
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    s = CompactionSession(policy, summarizer=lambda request: SUMMARY, env={})
    run(scripted(14), s, "Read the modules.", filtered=False)
    assert s.record.compactions() == []  # no filter: nothing compacted during the run
    items = asyncio.run(s.get_items())
    assert len(items) < s.record.message_count
    assert [(c.action, c.status) for c in s.record.compactions()] == [("summarize", "closed")]
    assert any(SUMMARY in str(item.get("content")) for item in items if isinstance(item, dict))
    assert asyncio.run(s.get_items(limit=2)) == items[-2:]
    assert asyncio.run(s.get_items(limit=0)) == []


def test_before_any_model_call_the_session_compacts_without_a_summary() -> None:
    """With no model seen and no `summarizer=`, compaction still happens, by fold or excerpt."""
    s = session()
    run(scripted(14), s, "Read the modules.", filtered=False)
    before = s.compactor.pressure()
    asyncio.run(s.get_items())
    infos = s.record.compactions()
    assert infos and all(c.status in ("fold", "closed") for c in infos)  # no bracket left open
    assert s.compactor.pressure() < before


def test_the_record_is_append_only() -> None:
    """`pop_item` and `clear_session` are refused with `RecordError`."""
    s = session()
    with pytest.raises(RecordError, match="append-only"):
        asyncio.run(s.pop_item())
    with pytest.raises(RecordError, match="append-only"):
        asyncio.run(s.clear_session())


def steps(count: int, first: int = 0) -> list[Any]:
    """`count` file reads (from module `first` on), then a final answer: a plain script."""
    reads = [
        [function_call("read_file", {"path": f"m{i}.py"}, call_id=f"c{i}")]
        for i in range(first, first + count)
    ]
    return [*reads, [assistant_message("All modules read.")]]


def test_the_record_holds_every_item_of_every_run_in_order() -> None:
    """Runs with tools and compactions: the record is each run's input and new items, in order."""
    s = session()
    model = FakeSummaries(ScriptedModel(steps(14) + steps(3, first=14)))
    history: list[TResponseInputItem] = []
    for text in ("Read m0-m13.", "Now m14-m16."):
        result = run(model, s, text)
        history += ItemHelpers.input_to_new_input_list(text)
        history += [item.to_input_item() for item in result.new_items]
    assert {(c.action, c.status) for c in s.record.compactions()} == {("summarize", "closed")}
    assert model.summary_requests and result.final_output == "All modules read."
    raw = [entry.event.message for entry in s.record.history()]  # type: ignore[union-attr]
    assert len(raw) == 30 + 8
    assert raw == from_agents_items(history)


def test_a_filter_input_that_does_not_continue_the_session_is_refused() -> None:
    """The filter serves the session's own runs; a foreign input raises `MessageError`."""
    from agents.run import CallModelData, ModelInputData

    s = session()
    run(scripted(1), s, "Read m0.py.")
    foreign = ModelInputData(input=[{"role": "user", "content": "Hi."}], instructions=None)
    data = CallModelData(model_data=foreign, agent=Agent(name="other"), context=None)
    with pytest.raises(MessageError, match="does not continue"):
        asyncio.run(s.call_model_input_filter(data))


# -- FakeSummaries --------------------------------------------------------------------------------


# A model call's arguments after the input: settings, tools, output schema, handoffs, tracing.
REST: tuple[Any, ...] = (ModelSettings(), [], None, [], ModelTracing.DISABLED)
IDS: dict[str, Any] = {"previous_response_id": None, "conversation_id": None, "prompt": None}


async def respond(model: FakeSummaries, items: Any) -> str:
    """The text `model` answers `items` with."""
    response = await model.get_response(None, items, *REST, **IDS)
    return "".join(ItemHelpers.extract_text(item) or "" for item in response.output)


async def test_fake_summaries_answers_summary_requests_and_leaves_the_script_alone() -> None:
    """Only a request ending with the summary instruction gets the summary; the rest is scripted."""
    model = FakeSummaries(ScriptedModel([[assistant_message("Hi.")], [assistant_message("Bye.")]]))
    ask: list[Any] = [
        {"role": "user", "content": "Go."},
        {"role": "user", "content": SUMMARY_INSTRUCTION},
    ]
    assert await respond(model, ask) == FAKE_SUMMARY
    assert model.summary_requests == [ask]
    assert await respond(model, "Hello.") == "Hi."
    reasoning: list[Any] = [{"type": "reasoning", "id": "rs_1", "summary": []}]
    assert await respond(model, reasoning) == "Bye."  # not a message ours can read
    assert len(model.summary_requests) == 1


async def test_fake_summaries_streams_from_the_wrapped_model() -> None:
    """A streamed request goes to the wrapped model whatever it asks."""
    scripted = ScriptedModel([[assistant_message("Hi.")]])
    model = FakeSummaries(scripted)
    stream = model.stream_response(None, "Hello.", *REST, **IDS)
    events = [event async for event in stream]
    assert events and scripted.remaining_steps == 0


# -- conversion -----------------------------------------------------------------------------------

ITEMS: list[TResponseInputItem] = [
    {"role": "developer", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is on "},
            {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
        ],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
    },
    {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path":"a.py"}'},
    {"type": "function_call", "call_id": "c2", "name": "read_file", "arguments": '{"path":"b.py"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "one"},
    {
        "type": "function_call_output",
        "call_id": "c2",
        "output": [{"type": "input_image", "image_url": "https://example.com/b.png"}],
    },
]


def test_conversion_groups_calls_with_their_message_and_carries_images() -> None:
    """An assistant message and the calls after it are one message; images are carried."""
    ours = from_agents_items(ITEMS)
    assert [m.role for m in ours] == ["system", "user", "assistant", "tool", "tool"]
    assert ours[1].parts == (
        TextPart(text="What is on "),
        ImagePart(data=PNG, media_type="image/png"),
    )
    assert ours[2].text == "Looking."
    assert ours[2].tool_calls == (
        ToolCall(id="c1", name="read_file", arguments='{"path":"a.py"}'),
        ToolCall(id="c2", name="read_file", arguments='{"path":"b.py"}'),
    )
    assert from_agents_items(to_agents_items(ours)) == ours


def test_our_messages_survive_a_round_trip() -> None:
    """`from_agents_items(to_agents_items(m)) == m` for each role, calls without text too."""
    ours = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant(None, [ToolCall(id="c", name="f", arguments="{}")]),
        Message.tool("c", "r"),
        Message.assistant("done"),
    ]
    assert from_agents_items(to_agents_items(ours)) == ours


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"type": "reasoning", "id": "rs_1", "summary": []}, "type"),
        ({"role": "user", "content": [{"type": "input_file", "file_id": "f1"}]}, "content[0]"),
        ({"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}, "content[0]"),
        ({"role": "user", "content": [{"type": "input_image", "file_id": "f2"}]}, "content[0]"),
        ({"role": "system", "content": [{"type": "input_image", "image_url": PNG_URL}]}, "content"),
        ({"role": "critic", "content": "x"}, "role"),
        ({"type": "function_call", "call_id": "", "name": "f", "arguments": "{}"}, "id"),
    ],
)
def test_what_ours_cannot_carry_is_a_conversion_error(item: Any, field: str) -> None:
    """Reasoning, files, refusals and bad calls are named by item index and field."""
    with pytest.raises(ConversionError) as caught:
        from_agents_items([{"role": "user", "content": "hi"}, item])
    assert (caught.value.index, caught.value.field) == (1, field)
