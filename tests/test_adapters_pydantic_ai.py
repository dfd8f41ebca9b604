"""Tests for `steerable_compaction.adapters.pydantic_ai` on the real pydantic-ai agent loop.

The model is pydantic-ai's own `FunctionModel`: a function plays the script and answers the
summary instruction with a summary (no network).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai.capabilities", reason="needs the pydantic-ai extra")

from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from steerable_compaction import ConversionError, Message, MessageError, resolve_compaction_policy
from steerable_compaction import messages as ours
from steerable_compaction.adapters.pydantic_ai import (
    CompactionHistory,
    CompactionProcessor,
    FakeSummaries,
    from_pydantic_ai,
    to_pydantic_ai,
)
from steerable_compaction.compaction import SUMMARY_INSTRUCTION, SummaryRequest
from steerable_compaction.messages import ImagePart, ToolCall, ToolResult
from steerable_compaction.record import Record
from steerable_compaction.testing import FAKE_SUMMARY

SUMMARY = "## Primary Request\nRead the compiler modules.\n## Current Work\nRead " + ", ".join(
    f"m{i}.py" for i in range(20)
)
PNG = b"\x89PNG\r\n\x1a\n fake png bytes"


def is_summary(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return (
        isinstance(last, ModelRequest)
        and isinstance(last.parts[-1], UserPromptPart)
        and last.parts[-1].content == SUMMARY_INSTRUCTION
    )


class Script:
    """A `FunctionModel` function: `reads` file reads, then an answer; summaries on request."""

    def __init__(self, *turns: int, usage: int = 0) -> None:
        self.replies: list[ModelResponse] = []
        first = 0
        for reads in turns:  # each turn reads its modules, then answers
            self.replies += [
                ModelResponse(
                    parts=[ToolCallPart("read_file", {"path": f"m{i}.py"}, tool_call_id=f"c{i}")],
                    usage=RequestUsage(input_tokens=usage),
                )
                for i in range(first, first + reads)
            ]
            self.replies.append(ModelResponse(parts=[TextPart("All modules read.")]))
            first += reads
        self.calls: list[tuple[list[ModelMessage], AgentInfo]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append((list(messages), info))
        if is_summary(messages):
            return ModelResponse(parts=[TextPart(SUMMARY)])
        return self.replies.pop(0)


def read_file(path: str) -> str:
    """Read one source file."""
    return f"# {path}\n" + "the parser reads each token and records its position\n" * 40


def history(**knobs: Any) -> CompactionHistory:
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4, **knobs)
    return CompactionHistory(policy, env={})


def run(
    pydantic_agent: Agent[None, str], prompt: str, after: AgentRunResult[str] | None = None
) -> AgentRunResult[str]:
    """`Agent.run` (continuing the run `after`) on a fresh event loop."""
    history = after.all_messages() if after is not None else None
    return asyncio.run(pydantic_agent.run(prompt, message_history=history))


def agent(script: Script | Model, capability: AbstractCapability[Any] | None) -> Agent[None, str]:
    return Agent(
        FunctionModel(script) if isinstance(script, Script) else script,
        system_prompt="You are terse.",
        tools=[read_file],
        capabilities=[capability] if capability else None,
    )


def raw_messages(record: Record) -> list[Message]:
    """Every message the record holds, in the order it was appended."""
    return [entry.event.message for entry in record.history()]  # type: ignore[union-attr]


# -- the function model ---------------------------------------------------------------------------


def test_the_function_model_gets_the_runs_history() -> None:
    """What the tests rely on: without the capability, each request is the whole history."""
    script = Script(2)
    result = run(agent(script, None), "Read the modules.")
    assert [len(m) for m, _ in script.calls] == [1, 3, 5]
    assert script.calls[-1][0] == result.all_messages()[:-1]
    assert [t.name for t in script.calls[0][1].function_tools] == ["read_file"]


# -- the agent loop -------------------------------------------------------------------------------


def test_a_long_run_is_compacted_and_the_runs_history_stays_whole() -> None:
    """The model sees the projection; the run's messages and the record keep everything."""
    script = Script(14)
    capability = history()
    result = run(agent(script, capability), "Read the modules.")
    assert result.output == "All modules read."
    assert [(c.action, c.status) for c in capability.record.compactions()] == [
        ("summarize", "closed")
    ]
    assert len(result.all_messages()) == 30
    assert capability.record.message_count == 31  # system + question, 14 rounds, answer
    requests = [m for m, _ in script.calls if not is_summary(m)]
    assert len(requests[-1]) < 29


def test_the_summary_request_is_the_previous_request_plus_one_instruction() -> None:
    """R24-R27: the same objects, the same tools, one instruction appended."""
    script = Script(14)
    run(agent(script, history()), "Read the modules.")
    (k,) = [i for i, (m, _) in enumerate(script.calls) if is_summary(m)]
    (summary, info), (previous, previous_info) = script.calls[k], script.calls[k - 1]
    assert len(summary) - 1 < len(previous)
    assert all(a is b for a, b in zip(summary[:-1], previous, strict=False))
    assert info.function_tools == previous_info.function_tools


def test_the_responses_usage_anchors_the_pressure() -> None:
    """R7: a response's `usage.input_tokens` is what the previous request cost."""
    capability = history()
    run(agent(Script(1, usage=4_900), capability), "Read m0.py.")
    assert capability.compactor.pressure() >= 4_900


def test_the_record_holds_the_runs_whole_history_in_order() -> None:
    """Runs with tools and a compaction: the record is the run's history, final reply too."""
    capability = history()
    pydantic_agent = agent(Script(14, 3), capability)
    first = run(pydantic_agent, "Read m0-m13.")
    assert raw_messages(capability.record) == from_pydantic_ai(first.all_messages())
    second = run(pydantic_agent, "Now m14-m16.", after=first)
    assert {(c.action, c.status) for c in capability.record.compactions()} == {
        ("summarize", "closed")
    }
    assert len(second.all_messages()) == 30 + 8
    assert raw_messages(capability.record) == from_pydantic_ai(second.all_messages())


def test_summarizer_writes_the_summaries_instead_of_the_model() -> None:
    """`summarizer=` is asked for each summary; the agent's model never sees a summary request."""
    asked: list[SummaryRequest] = []

    async def summarizer(request: SummaryRequest) -> str:
        asked.append(request)
        return SUMMARY

    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    capability = CompactionHistory(policy, summarizer=summarizer, env={})
    script = Script(14)
    run(agent(script, capability), "Read the modules.")
    assert len(asked) == 1 and not any(is_summary(m) for m, _ in script.calls)
    assert any(SUMMARY in m.text for m in capability.record.projection.messages)


@pytest.mark.parametrize("summarize", [True, False])
def test_summarize_is_a_deprecated_switch_of_the_llm_summarizer(summarize: bool) -> None:
    """`summarize=` warns; `False` compacts without the model, as `summarizer_enabled=False`."""
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    with pytest.deprecated_call(match="summarizer="):
        capability = CompactionHistory(policy, summarize=summarize, env={})
    assert capability.compactor.policy.summarizer_enabled is summarize
    script = Script(14)
    run(agent(script, capability), "Read the modules.")
    assert capability.record.compactions()
    assert any(is_summary(m) for m, _ in script.calls) is summarize


# -- the history processor ------------------------------------------------------------------------


def processor() -> CompactionProcessor:
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    return CompactionProcessor(policy, env={})


def test_a_processor_compacts_the_runs_history_and_the_record_keeps_everything() -> None:
    """The run continues from the projection; the record holds the uncompacted conversation."""
    plain_agent = agent(Script(14, 3), None)
    plain = run(plain_agent, "Read m0-m13.")
    uncompacted = run(plain_agent, "Now m14-m16.", after=plain)
    compact = processor()
    model = FakeSummaries(FunctionModel(Script(14, 3)))
    pydantic_agent = agent(model, ProcessHistory(compact))
    first = run(pydantic_agent, "Read m0-m13.")
    assert len(first.all_messages()) < len(plain.all_messages())
    second = run(pydantic_agent, "Now m14-m16.", after=first)  # from the compacted history
    compact.record_run(second.all_messages())
    assert {(c.action, c.status) for c in compact.record.compactions()} == {("summarize", "closed")}
    assert model.summary_requests
    assert raw_messages(compact.record) == from_pydantic_ai(uncompacted.all_messages())


def test_a_processor_records_a_runs_final_reply_when_the_next_run_starts() -> None:
    """Without `record_run`, the final reply is recorded, in its place, by the next request."""
    compact = processor()
    pydantic_agent = agent(Script(1, 0), ProcessHistory(compact))
    first = run(pydantic_agent, "Read m0.py.")
    assert compact.record.message_count == len(from_pydantic_ai(first.all_messages())) - 1
    second = run(pydantic_agent, "Thanks.", after=first)
    compact.record_run(second.all_messages())
    assert raw_messages(compact.record) == from_pydantic_ai(second.all_messages())


def test_a_processors_summary_request_carries_the_runs_tools() -> None:
    """The summary request is the previous request's prefix, asked with the run's tools."""
    script = Script(14)
    run(agent(script, ProcessHistory(processor())), "Read the modules.")
    (k,) = [i for i, (m, _) in enumerate(script.calls) if is_summary(m)]
    (summary, info), (previous, _) = script.calls[k], script.calls[k - 1]
    assert summary[:-1] == previous[: len(summary) - 1]
    assert [t.name for t in info.function_tools] == ["read_file"]


# -- FakeSummaries --------------------------------------------------------------------------------


@pytest.mark.parametrize(("wrapped", "action"), [(True, "summarize"), (False, "excerpt")])
def test_fake_summaries_makes_test_model_write_the_summary(wrapped: bool, action: str) -> None:
    """`TestModel` alone answers a summary request with its canned text, which is refused."""
    test_model = TestModel(custom_output_text="Done.")
    model = FakeSummaries(test_model) if wrapped else test_model
    capability = history()
    pydantic_agent = agent(model, capability)
    result = None
    for turn in range(4):
        result = run(pydantic_agent, f"Read the next module ({turn}).", after=result)
    capability.compactor.request_compact()
    result = run(pydantic_agent, "Sum it up.", after=result)
    assert [(c.action, c.status) for c in capability.record.compactions()] == [(action, "closed")]
    assert result.output == "Done."
    assert raw_messages(capability.record) == from_pydantic_ai(result.all_messages())


async def test_fake_summaries_passes_every_other_request_on() -> None:
    """Only a request ending with the summary instruction as a user prompt gets the summary."""
    done = ModelResponse(parts=[TextPart("Done.")])
    model = FakeSummaries(FunctionModel(lambda messages, info: done))
    parameters = ModelRequestParameters()
    ask: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(SUMMARY_INSTRUCTION)])]
    answer = await model.request(ask, None, parameters)
    assert answer.parts == [TextPart(FAKE_SUMMARY)]
    others: list[list[ModelMessage]] = [
        [ModelRequest(parts=[UserPromptPart("Hello.")])],
        [ModelRequest(parts=[UserPromptPart([SUMMARY_INSTRUCTION])])],  # not a plain prompt
        [ModelRequest(parts=[ToolReturnPart("read_file", "x", tool_call_id="c1")])],
        [ModelResponse(parts=[TextPart(SUMMARY_INSTRUCTION)])],
        [],
    ]
    for other in others:
        response = await model.request(other, None, parameters)
        assert response.parts == [TextPart("Done.")]
    assert model.summary_requests == [ask]


def test_one_capability_serves_one_conversation() -> None:
    """A second, unrelated conversation is refused with `MessageError`."""
    capability = history()
    run(agent(Script(0), capability), "First conversation.")
    with pytest.raises(MessageError, match="one conversation"):
        run(agent(Script(0), capability), "Another one.")


# -- conversion -----------------------------------------------------------------------------------

MESSAGES: list[ModelMessage] = [
    ModelRequest(
        parts=[
            SystemPromptPart("You are terse."),
            UserPromptPart(["What is on ", BinaryContent(PNG, media_type="image/png")]),
        ]
    ),
    ModelResponse(
        parts=[
            TextPart("Looking."),
            ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1"),
            ToolCallPart("read_file", '{"path": "b.py"}', tool_call_id="c2"),
        ]
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("read_file", {"lines": 3}, tool_call_id="c1"),
            ToolReturnPart("read_file", "no such file", tool_call_id="c2", outcome="failed"),
            UserPromptPart([ImageUrl("https://example.com/a.png")]),
        ]
    ),
]


def test_conversion_carries_text_images_tool_calls_and_results() -> None:
    """One message per part; calls keep their JSON, results their call id, images their bytes."""
    converted = from_pydantic_ai(MESSAGES)
    assert [m.role for m in converted] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert converted[1].parts == (
        ours.TextPart(text="What is on "),
        ImagePart(data=PNG, media_type="image/png"),
    )
    assert converted[2].tool_calls == (
        ToolCall(id="c1", name="read_file", arguments='{"path": "a.py"}'),
        ToolCall(id="c2", name="read_file", arguments='{"path": "b.py"}'),
    )
    assert converted[3].parts == (
        ToolResult(call_id="c1", content=(ours.TextPart(text='{"lines":3}'),)),
    )
    assert converted[4].parts == (
        ToolResult(call_id="c2", content=(ours.TextPart(text="no such file"),), is_error=True),
    )
    assert converted[5].parts == (ImagePart(url="https://example.com/a.png"),)
    assert from_pydantic_ai(to_pydantic_ai(converted)) == converted


def test_our_messages_survive_a_round_trip() -> None:
    """`from_pydantic_ai(to_pydantic_ai(m)) == m`, tool results finding their tool's name."""
    messages = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant(None, [ToolCall(id="c", name="f", arguments="{}")]),
        Message.tool("c", "r"),
        Message.tool("c", [ImagePart(data=PNG, media_type="image/png")]),
        Message.assistant("done"),
    ]
    back = to_pydantic_ai(messages)
    assert isinstance(back[3], ModelRequest) and isinstance(back[3].parts[0], ToolReturnPart)
    assert back[3].parts[0].tool_name == "f"
    assert from_pydantic_ai(back) == messages


def test_a_result_without_its_call_cannot_name_its_tool() -> None:
    """pydantic-ai needs the tool's name for a return: without the call, `ConversionError`."""
    with pytest.raises(ConversionError, match="names the tool"):
        to_pydantic_ai([Message.tool("gone", "r")])


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            ModelRequest(parts=[UserPromptPart([AudioUrl("https://example.com/a.wav")])]),
            "parts[0].content[0]",
        ),
        (ModelResponse(parts=[ThinkingPart("hmm")]), "parts[0]"),
        (
            ModelRequest(
                parts=[UserPromptPart([BinaryContent(b"%PDF", media_type="application/pdf")])]
            ),
            "parts[0].content[0]",
        ),
        (ModelResponse(parts=[ToolCallPart("", "{}", tool_call_id="c9")]), "name"),
    ],
)
def test_what_ours_cannot_carry_is_a_conversion_error(message: ModelMessage, field: str) -> None:
    """Audio, thinking, documents and nameless calls are named by message index and field."""
    first = ModelRequest(parts=[UserPromptPart("hi")])
    with pytest.raises(ConversionError) as caught:
        from_pydantic_ai([first, message])
    assert (caught.value.index, caught.value.field) == (1, field)


def test_retry_feedback_and_deprecated_retry_prompts_are_carried() -> None:
    """Retry feedback is a user message; a stored tool `RetryPromptPart` is an error result."""
    import warnings

    from pydantic_ai.messages import RetryFeedbackPart, RetryInfo, RetryPromptPart

    feedback = RetryFeedbackPart("Answer in JSON.", retry=RetryInfo("validation_error"))
    with warnings.catch_warnings():  # old histories still hold the deprecated part
        warnings.simplefilter("ignore")
        prompt = RetryPromptPart("bad path", tool_name="read_file", tool_call_id="c1")
        bare = RetryPromptPart("try again")
    converted = from_pydantic_ai([ModelRequest(parts=[feedback, prompt, bare])])
    assert [m.role for m in converted] == ["user", "tool", "user"]
    assert "Answer in JSON." in converted[0].text
    assert converted[1].parts == (
        ToolResult(call_id="c1", content=(ours.TextPart(text="bad path"),), is_error=True),
    )
    assert "try again" in converted[2].text
