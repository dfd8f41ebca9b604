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
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from steerable_compaction import ConversionError, Message, MessageError, resolve_compaction_policy
from steerable_compaction import messages as ours
from steerable_compaction.adapters.pydantic_ai import (
    CompactionHistory,
    from_pydantic_ai,
    to_pydantic_ai,
)
from steerable_compaction.compaction import SUMMARY_INSTRUCTION
from steerable_compaction.messages import ImagePart, ToolCall, ToolResult

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

    def __init__(self, reads: int, usage: int = 0) -> None:
        self.replies = [
            ModelResponse(
                parts=[ToolCallPart("read_file", {"path": f"m{i}.py"}, tool_call_id=f"c{i}")],
                usage=RequestUsage(input_tokens=usage),
            )
            for i in range(reads)
        ]
        self.replies.append(ModelResponse(parts=[TextPart("All modules read.")]))
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


def run(pydantic_agent: Agent[None, str], prompt: str) -> AgentRunResult[str]:
    """`Agent.run` on a fresh event loop (`run_sync` leaves its loop open)."""
    return asyncio.run(pydantic_agent.run(prompt))


def agent(script: Script, capability: CompactionHistory | None) -> Agent[None, str]:
    return Agent(
        FunctionModel(script),
        system_prompt="You are terse.",
        tools=[read_file],
        capabilities=[capability] if capability else None,
    )


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
    assert capability.record.message_count == 30  # system + question, 14 calls and results
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
