"""Tests for `steerable_compaction.adapters.langchain` on the real LangChain v1 agent loop.

The model is LangChain's own `GenericFakeChatModel` inside the adapter's `FakeSummaries`,
extended only to record each request (no network).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="needs the langchain extra")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableBinding, RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from steerable_compaction import (
    ConversionError,
    Message,
    MessageError,
    resolve_compaction_policy,
)
from steerable_compaction.adapters.langchain import (
    CompactionMiddleware,
    FakeSummaries,
    from_langchain,
    to_langchain,
)
from steerable_compaction.compaction import SUMMARY_INSTRUCTION, SummaryRequest
from steerable_compaction.messages import ImagePart, TextPart, ToolCall, ToolResult
from steerable_compaction.testing import FAKE_SUMMARY

SUMMARY = "## Primary Request\nRead the compiler modules.\n## Current Work\nRead " + ", ".join(
    f"m{i}.py" for i in range(20)
)
PNG = b"\x89PNG\r\n\x1a\n fake png bytes"
PNG_B64 = base64.b64encode(PNG).decode("ascii")


class RecordingFakeModel(FakeSummaries):
    """`FakeSummaries` around LangChain's fake chat model, recording every request in order."""

    requests: list[list[BaseMessage]] = Field(default_factory=list)

    def __init__(self, messages: Iterator[AIMessage | str]) -> None:
        super().__init__(GenericFakeChatModel(messages=messages), summary=SUMMARY)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.requests.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.requests.append(list(messages))
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


@tool
def read_file(path: str) -> str:
    """Read one source file."""
    return f"# {path}\n" + "the parser reads each token and records its position\n" * 40


def reads(count: int, first: int = 0) -> list[AIMessage | str]:
    """`count` tool-calling replies (from module `first` on), then a final answer."""
    calls: list[AIMessage | str] = [
        AIMessage(
            content="",
            tool_calls=[{"name": "read_file", "args": {"path": f"m{i}.py"}, "id": f"c{i}"}],
        )
        for i in range(first, first + count)
    ]
    return [*calls, "All modules read."]


def middleware(**knobs: Any) -> CompactionMiddleware:
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4, **knobs)
    return CompactionMiddleware(policy, env={})


def run(model: RecordingFakeModel, mw: CompactionMiddleware | None, text: str) -> Any:
    agent = create_agent(
        model, [read_file], system_prompt="You are terse.", middleware=[mw] if mw else []
    )
    return agent.invoke({"messages": [{"role": "user", "content": text}]})


# -- the fake -------------------------------------------------------------------------------------


def test_the_fake_sees_the_system_prompt_then_the_state_messages() -> None:
    """What the tests rely on: without middleware, each request is system + state messages."""
    model = RecordingFakeModel(iter(reads(2)))
    out = run(model, None, "Read the modules.")
    assert len(model.requests) == 3
    for request in model.requests:
        assert request[0] == SystemMessage(content="You are terse.")
    assert model.requests[-1][1:] == out["messages"][:-1]


# -- the agent loop -------------------------------------------------------------------------------


def test_a_long_run_is_compacted_and_the_state_keeps_everything() -> None:
    """The model sees the projection; the agent state and the record keep every message."""
    model = RecordingFakeModel(iter(reads(14)))
    mw = middleware()
    out = run(model, mw, "Read the modules.")
    infos = mw.record.compactions()
    assert [(c.action, c.status) for c in infos] == [("summarize", "closed")]
    assert len(out["messages"]) == 30  # the question, 14 calls and results, the answer
    assert mw.record.message_count == 30  # every message, the final answer included
    last = model.requests[-1]
    assert len(last) < len(out["messages"])
    assert any(SUMMARY in m.text for m in last)


def test_the_summary_request_is_the_previous_request_plus_one_instruction() -> None:
    """R24-R27 on LangChain: same system prompt, same leading messages, one instruction."""
    model = RecordingFakeModel(iter(reads(14)))
    run(model, middleware(), "Read the modules.")
    (k,) = [i for i, r in enumerate(model.requests) if r[-1].text == SUMMARY_INSTRUCTION]
    summary, previous = model.requests[k], model.requests[k - 1]
    assert summary[:-1] == previous[: len(summary) - 1]
    assert all(a is b for a, b in zip(summary[:-1], previous, strict=False))  # the same objects
    assert isinstance(summary[-1], HumanMessage)
    assert len(summary) - 1 < len(previous)  # the tail is not replayed


def test_the_async_loop_compacts_too() -> None:
    """`ainvoke` goes through `awrap_model_call` with the same result."""
    model = RecordingFakeModel(iter(reads(14)))
    mw = middleware()
    agent = create_agent(model, [read_file], system_prompt="You are terse.", middleware=[mw])
    out = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "Read."}]}))
    assert out["messages"][-1].text == "All modules read."
    assert [c.action for c in mw.record.compactions()] == ["summarize"]


def test_the_replys_usage_anchors_the_pressure() -> None:
    """R7: `usage_metadata.input_tokens` of a reply is the previous request's true cost."""
    replies: list[AIMessage | str] = [
        AIMessage(
            content="",
            tool_calls=[{"name": "read_file", "args": {"path": "a.py"}, "id": "c0"}],
            usage_metadata={"input_tokens": 4_900, "output_tokens": 9, "total_tokens": 4_909},
        ),
        "Done.",
    ]
    model = RecordingFakeModel(iter(replies))
    mw = middleware()
    run(model, mw, "Read a.py.")
    assert mw.compactor.pressure() >= 4_900


def raw_messages(mw: CompactionMiddleware) -> list[Message]:
    """Every message the record holds, in the order it was appended."""
    return [entry.event.message for entry in mw.record.history()]  # type: ignore[union-attr]


def test_the_record_holds_the_agents_whole_history_in_order() -> None:
    """Turns with tools and a compaction: the record is the state's history, final reply too."""
    model = RecordingFakeModel(iter(reads(14) + reads(3, first=14)))
    mw = middleware()
    agent = create_agent(
        model,
        [read_file],
        system_prompt="You are terse.",
        middleware=[mw],
        checkpointer=InMemorySaver(),
    )
    config: RunnableConfig = {"configurable": {"thread_id": "t1"}}
    first = agent.invoke({"messages": [{"role": "user", "content": "Read m0-m13."}]}, config)
    assert raw_messages(mw) == from_langchain(first["messages"])
    state = agent.invoke({"messages": [{"role": "user", "content": "Now m14-m16."}]}, config)
    assert {(c.action, c.status) for c in mw.record.compactions()} == {("summarize", "closed")}
    assert len(state["messages"]) == 30 + 8
    assert raw_messages(mw) == from_langchain(state["messages"])
    assert model.summary_requests and state["messages"][-1].text == "All modules read."


def test_the_async_loop_records_the_final_reply_too() -> None:
    """`ainvoke` records through `aafter_agent`: the record is the state's history."""
    mw = middleware()
    agent = create_agent(RecordingFakeModel(iter(reads(2))), [read_file], middleware=[mw])
    out = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "Read."}]}))
    assert raw_messages(mw) == from_langchain(out["messages"])


def test_the_final_replys_usage_anchors_the_next_turns_pressure() -> None:
    """R7: the usage of a reply recorded at the end of a run still reaches the next request."""
    final = AIMessage(
        content="Done.",
        usage_metadata={"input_tokens": 4_900, "output_tokens": 2, "total_tokens": 4_902},
    )
    model = RecordingFakeModel(iter([final, "Again."]))
    mw = middleware()
    first = run(model, mw, "Hello.")
    before = mw.compactor.pressure()
    agent = create_agent(model, [read_file], system_prompt="You are terse.", middleware=[mw])
    agent.invoke({"messages": [*first["messages"], HumanMessage(content="Once more.")]})
    assert before < 4_900 <= mw.compactor.pressure()


def test_summarizer_writes_the_summaries_instead_of_the_model() -> None:
    """`summarizer=` (sync here) is asked for each summary; the model never sees the request."""
    asked: list[SummaryRequest] = []

    def summarizer(request: SummaryRequest) -> str:
        asked.append(request)
        return SUMMARY

    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    mw = CompactionMiddleware(policy, summarizer=summarizer, env={})
    model = RecordingFakeModel(iter(reads(14)))
    run(model, mw, "Read the modules.")
    assert len(asked) == 1 and model.summary_requests == []
    assert [(c.action, c.status) for c in mw.record.compactions()] == [("summarize", "closed")]


@pytest.mark.parametrize("summarize", [True, False])
def test_summarize_is_a_deprecated_switch_of_the_llm_summarizer(summarize: bool) -> None:
    """`summarize=` warns; `False` compacts without the model, as `summarizer_enabled=False`."""
    policy = resolve_compaction_policy(None, 6_000, keep_last_messages=4)
    with pytest.deprecated_call(match="summarizer="):
        mw = CompactionMiddleware(policy, summarize=summarize, env={})
    assert mw.compactor.policy.summarizer_enabled is summarize
    model = RecordingFakeModel(iter(reads(14)))
    run(model, mw, "Read the modules.")
    assert mw.record.compactions() and bool(model.summary_requests) is summarize


def test_one_middleware_serves_one_conversation() -> None:
    """A history that does not continue the recorded one is refused with `MessageError`."""
    mw = middleware()
    run(RecordingFakeModel(iter(["Hi."])), mw, "First conversation.")
    with pytest.raises(MessageError, match="one conversation"):
        run(RecordingFakeModel(iter(["Hi."])), mw, "Another one.")


# -- FakeSummaries --------------------------------------------------------------------------------


class ToolBindingFake(FakeMessagesListChatModel):
    """A fake that binds tools the way real chat models do (`bind(tools=...)`)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[t.name for t in tools], **kwargs)


def test_fake_summaries_answers_summary_requests_and_leaves_the_script_alone() -> None:
    """Only summary requests get the summary; every other request is the wrapped fake's."""
    fake = FakeSummaries(FakeMessagesListChatModel(responses=[AIMessage(content="Hi.")]))
    ask = [SystemMessage(content="s"), HumanMessage(content=SUMMARY_INSTRUCTION)]
    assert fake.invoke(ask).text == FAKE_SUMMARY
    assert asyncio.run(fake.ainvoke(ask)).text == FAKE_SUMMARY
    assert fake.invoke([HumanMessage(content="Hello.")]).text == "Hi."
    assert fake.summary_requests == [ask, ask]
    quoted = [HumanMessage(content="x"), AIMessage(content=SUMMARY_INSTRUCTION)]
    assert fake.invoke(quoted).text == "Hi."  # the fake's list starts over
    assert len(fake.summary_requests) == 2


def test_fake_summaries_binds_tools_where_the_wrapped_model_can() -> None:
    """Tools reach a model that binds them; the copy shares `summary_requests`."""
    fake = FakeSummaries(ToolBindingFake(responses=[AIMessage(content="Hi.")]))
    bound = fake.bind_tools([read_file])
    assert isinstance(bound, FakeSummaries) and bound is not fake
    assert isinstance(bound.model, RunnableBinding)
    assert bound.model.kwargs["tools"] == ["read_file"]
    assert bound.summary_requests is fake.summary_requests
    assert bound.bind_tools([read_file]) is bound  # already bound: the binding is kept
    plain = FakeSummaries(GenericFakeChatModel(messages=iter(["Hi."])))
    assert plain.bind_tools([read_file]) is plain  # the fake cannot bind: tools are ignored


# -- conversion -----------------------------------------------------------------------------------

LANGCHAIN: list[AnyMessage] = [
    SystemMessage(content="You are terse."),
    HumanMessage(
        content=[
            {"type": "text", "text": "What is on "},
            {"type": "image", "base64": PNG_B64, "mime_type": "image/png"},
            {"type": "image", "url": "https://example.com/a.png"},
        ]
    ),
    AIMessage(
        content="Looking.",
        tool_calls=[{"name": "read_file", "args": {"path": "a.py", "n": [1, 2]}, "id": "c1"}],
    ),
    ToolMessage(content="no such file", tool_call_id="c1", status="error"),
    AIMessage(
        content="",
        invalid_tool_calls=[{"name": "read_file", "args": '{"path": ', "id": "c2", "error": None}],
    ),
    ToolMessage(
        content=[{"type": "image", "base64": PNG_B64, "mime_type": "image/png"}], tool_call_id="c2"
    ),
]


def test_conversion_carries_text_images_tool_calls_and_results() -> None:
    """Every kind of content reaches our values, and comes back as LangChain content."""
    ours = from_langchain(LANGCHAIN)
    assert ours[1].parts == (
        TextPart(text="What is on "),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/a.png"),
    )
    assert ours[2].tool_calls == (
        ToolCall(id="c1", name="read_file", arguments='{"path": "a.py", "n": [1, 2]}'),
    )
    assert ours[3].parts == (
        ToolResult(call_id="c1", content=(TextPart(text="no such file"),), is_error=True),
    )
    assert ours[4].tool_calls[0].arguments == '{"path": '
    back = to_langchain(ours)
    assert [type(m) for m in back] == [type(m) for m in LANGCHAIN]
    assert isinstance(back[2], AIMessage) and isinstance(LANGCHAIN[2], AIMessage)
    assert back[2].tool_calls == LANGCHAIN[2].tool_calls
    assert isinstance(back[4], AIMessage)
    assert back[4].invalid_tool_calls[0]["args"] == '{"path": '
    assert from_langchain(back) == ours  # a fixpoint: nothing is lost either way


def test_openai_style_image_blocks_are_read() -> None:
    """`image_url` blocks (a URL string or object, data URLs decoded) are images too."""
    message = HumanMessage(
        content=[
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            {"type": "image_url", "image_url": "https://example.com/b.png"},
        ]
    )
    (ours,) = from_langchain([message])
    assert ours.parts == (
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/b.png"),
    )


def test_our_messages_survive_a_round_trip() -> None:
    """`from_langchain(to_langchain(m)) == m` for each role."""
    ours = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant("a", [ToolCall(id="c", name="f", arguments='{"x": 1}')]),
        Message.tool("c", "r", is_error=True),
        Message.assistant(None, [ToolCall(id="d", name="f", arguments="not json")]),
    ]
    assert from_langchain(to_langchain(ours)) == ours


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            HumanMessage(content=[{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}]),
            "content[0]",
        ),
        (AIMessage(content=[{"type": "reasoning", "reasoning": "hmm"}]), "content[0]"),
        (
            HumanMessage(content=[{"type": "image", "base64": "!!", "mime_type": "image/png"}]),
            "content[0]",
        ),
        (SystemMessage(content=[{"type": "image", "url": "https://example.com/c.png"}]), "content"),
        (AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": None}]), "tool_calls"),
        (ChatMessage(content="x", role="critic"), None),
    ],
)
def test_what_ours_cannot_carry_is_a_conversion_error(
    message: AnyMessage, field: str | None
) -> None:
    """Audio, reasoning, bad images, id-less calls and unknown roles are named, not dropped."""
    with pytest.raises(ConversionError) as caught:
        from_langchain([SystemMessage(content="s"), message])
    assert (caught.value.index, caught.value.field) == (1, field)
