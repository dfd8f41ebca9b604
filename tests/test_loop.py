from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from steerable_compaction import (
    ContextOverflowError,
    Message,
    ProviderError,
    RecordError,
    ToolCall,
    resolve_compaction_policy,
)
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import (
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
    ToolResultContext,
)
from steerable_compaction.loop import CoreLoop, Tool
from steerable_compaction.messages import ToolResult
from steerable_compaction.policy import CompactionPolicy
from steerable_compaction.providers.base import (
    Completion,
    CompletionRequest,
    StreamDone,
    StreamEvent,
)
from steerable_compaction.record import MemoryRecord, MessageAppended, Usage
from steerable_compaction.retry import RetryHooks


class Queue:
    """A minimal provider: answers from a list, records requests (the loop's own unit fake)."""

    name = "queue"

    def __init__(self, *replies: Message | BaseException) -> None:
        self.replies = list(replies)
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return Completion(message=reply, usage=Usage(prompt_tokens=100 * len(self.requests)))

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        yield StreamDone(await self.complete(request))


def call(cid: str, name: str = "echo", arguments: str = '{"text": "hi"}') -> Message:
    return Message.assistant(None, [ToolCall(id=cid, name=name, arguments=arguments)])


async def echo(arguments: Mapping[str, Any]) -> str:
    return f"echo: {arguments.get('text')}"


async def boom(arguments: Mapping[str, Any]) -> str:
    raise RuntimeError("disk on fire")


TOOLS = [
    Tool(
        name="echo",
        fn=echo,
        description="Echo text.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
    Tool(name="boom", fn=boom),
]


async def test_a_turn_runs_rounds_until_the_model_answers() -> None:
    """R3: request → tool calls → results → request … until a reply without calls."""
    provider = Queue(call("c1"), call("c2"), Message.assistant("done"))
    record = MemoryRecord()
    loop = CoreLoop(provider, record, tools=TOOLS)
    result = await loop.run_turn("please echo")
    assert result.stop == "answered"
    assert result.reply == Message.assistant("done")
    assert result.rounds == 3
    roles = [m.role for m in record.messages()]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert record.messages()[2] == Message.tool("c1", "echo: hi")
    assert provider.requests[0].tools[0].name == "echo"
    assert provider.requests[1].messages == tuple(record.messages()[:3])


async def test_an_input_the_record_refuses_is_no_turn() -> None:
    """Issue 26: the turn counter moves only once the user's input is recorded."""
    record = MemoryRecord()
    record.close()
    loop = CoreLoop(Queue(Message.assistant("never")), record)
    with pytest.raises(RecordError, match="closed"):
        await loop.run_turn("hi")
    assert loop.turn == 0


async def test_replies_are_recorded_with_their_usage() -> None:
    """R7: each reply is appended with the usage of the request that produced it."""
    record = MemoryRecord()
    await CoreLoop(Queue(Message.assistant("hi")), record).run_turn("hello")
    event = record.entries[-1].event
    assert isinstance(event, MessageAppended)
    assert event.usage == Usage(prompt_tokens=100)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (call("c1", "nope"), "unknown tool 'nope'"),
        (call("c1", "echo", "{not json"), "not valid JSON"),
        (call("c1", "echo", "[1, 2]"), "must be a JSON object"),
        (call("c1", "boom"), "RuntimeError: disk on fire"),
    ],
)
async def test_bad_calls_and_failing_tools_become_error_results(
    reply: Message, expected: str
) -> None:
    """A bad call or a raising tool is reported to the model as an error result."""
    record = MemoryRecord()
    await CoreLoop(Queue(reply, Message.assistant("ok")), record, tools=TOOLS).run_turn("go")
    result = record.messages()[2].tool_result
    assert result is not None and result.is_error
    assert expected in result.text


async def test_max_rounds_stops_a_runaway_turn() -> None:
    """A model that never stops calling tools is cut off after `max_rounds_per_turn`."""
    loop = CoreLoop(
        Queue(*[call(f"c{i}") for i in range(3)]),
        MemoryRecord(),
        tools=TOOLS,
        max_rounds_per_turn=3,
    )
    result = await loop.run_turn("go")
    assert (result.stop, result.reply, result.rounds) == ("max_rounds", None, 3)


async def test_hooks_run_in_order_around_each_request() -> None:
    """R3: pre_step before each request, post_tool_result before each result is appended."""
    seen: list[str] = []

    class Spy:
        async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
            seen.append(f"pre {ctx.round}/{ctx.turn} compact={ctx.compact_requested}")
            return PreStepAction()

        async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
            return None

        async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
            seen.append(f"post {ctx.tool_name}")
            return ToolResult(call_id=ctx.result.call_id, content=ctx.result.content[:0])

    loop = CoreLoop(
        Queue(call("c1"), Message.assistant("x")), MemoryRecord(), hooks=[Spy()], tools=TOOLS
    )
    loop.request_compact()
    await loop.run_turn("go")
    assert seen == ["pre 1/1 compact=True", "post echo", "pre 2/1 compact=False"]
    assert loop.record.messages()[2].text == ""  # the hook's replacement was appended


async def test_retryable_errors_are_retried_by_retry_hooks() -> None:
    """A 429 is retried (no real sleep: zero delay) and the turn completes."""
    rate = ProviderError("slow down", provider="queue", status_code=429, retryable=True)
    loop = CoreLoop(
        Queue(rate, rate, Message.assistant("ok")),
        MemoryRecord(),
        hooks=[RetryHooks(rng=lambda a, b: 0.0)],
    )
    result = await loop.run_turn("go")
    assert result.retries == 2
    assert result.reply == Message.assistant("ok")


async def test_unhandled_errors_propagate_and_nothing_is_recorded_for_them() -> None:
    """A fatal provider error reaches the caller; the record holds only the user message."""
    record = MemoryRecord()
    loop = CoreLoop(Queue(ProviderError("bad key", status_code=401)), record)
    with pytest.raises(ProviderError, match="bad key"):
        await loop.run_turn("go")
    assert [m.role for m in record.messages()] == ["user"]


async def test_r13_overflow_compacts_and_retries_with_the_compacted_transcript() -> None:
    """R13: on overflow the compaction hook rewrites, and the retry sends the new projection."""
    record = MemoryRecord()
    record.append_message(Message.system("s"))
    record.append_message(Message.user("goal"))
    for i in range(8):
        record.append_message(call(f"old{i}"))
        record.append_message(Message.tool(f"old{i}", "x" * 4000))
    overflow = ContextOverflowError("prompt is too long", provider="queue", status_code=400)
    provider = Queue(overflow, Message.assistant("fits now"))
    policy = resolve_compaction_policy(None, 200_000, keep_last_messages=2)
    loop = CoreLoop(provider, record, hooks=[CompactionHooks(record, policy)], tools=TOOLS)
    result = await loop.run_turn("continue")
    assert result.retries == 1
    first, second = provider.requests
    assert len(second.messages) < len(first.messages)
    assert second.messages[2].text.startswith("<compacted-summary>")


def overflowing_record() -> MemoryRecord:
    """A record of ~17k estimated tokens whose eight old tool results leave plenty to compact."""
    record = MemoryRecord()
    record.append_message(Message.system("s"))
    record.append_message(Message.user("goal"))
    lines = "".join(f"line {j}: the parser reads token {j}\n" for j in range(120))
    for i in range(8):
        record.append_message(call(f"old{i}"))
        record.append_message(Message.tool(f"old{i}", lines))
    return record


async def test_r13_overflow_compactions_are_reported_in_the_turn_result() -> None:
    """`TurnResult.compactions` includes what `on_request_error` compacted (issue 14 item 10)."""
    record = overflowing_record()
    overflow = ContextOverflowError("prompt is too long", provider="queue", status_code=400)
    provider = Queue(overflow, Message.assistant("fits now"))
    policy = resolve_compaction_policy(None, 200_000, keep_last_messages=2)
    hooks = CompactionHooks(record, policy)
    loop = CoreLoop(provider, record, hooks=[hooks, RetryHooks()], tools=TOOLS)
    result = await loop.run_turn("continue")
    (outcome,) = result.compactions
    assert (outcome.trigger, outcome.written) == ("overflow", True)
    assert outcome == hooks.last_outcome
    assert [c.trigger for c in record.compactions()] == ["overflow"]


def near_window_policy() -> CompactionPolicy:
    """An 18k window whose 98 % threshold lets `overflowing_record` through `pre_step`."""
    return resolve_compaction_policy(
        None,
        18_000,
        keep_last_messages=2,
        threshold_ratio=0.98,
        reserved_output_tokens=0,
        headroom_tokens=0,
    )


async def test_an_unknown_400_near_the_window_is_compacted_and_retried() -> None:
    """A 400 no table knows, at >= 90 % of the window, is compacted once and retried."""
    record = overflowing_record()
    rejected = ProviderError("Invalid request", provider="queue", status_code=400)
    provider = Queue(rejected, Message.assistant("fits now"))
    policy = near_window_policy()
    hooks = CompactionHooks(record, policy)
    assert 0.9 * policy.max_context_tokens <= hooks.pressure() < policy.threshold_tokens
    loop = CoreLoop(provider, record, hooks=[hooks, RetryHooks()], tools=TOOLS)
    result = await loop.run_turn("continue")
    assert (result.reply, result.retries) == (Message.assistant("fits now"), 1)
    (outcome,) = result.compactions
    assert "probable overflow" in outcome.reason
    first, second = provider.requests
    size = [sum(len(m.text) for m in r.messages) for r in (first, second)]
    assert size[1] < size[0]


async def test_an_unknown_400_that_persists_after_one_compaction_is_fatal() -> None:
    """The probable-overflow compaction is tried once; the same 400 again ends the turn."""
    record = overflowing_record()
    rejected = ProviderError("Invalid request", provider="queue", status_code=400)
    provider = Queue(rejected, rejected)
    policy = near_window_policy()
    loop = CoreLoop(provider, record, hooks=[CompactionHooks(record, policy)], tools=TOOLS)
    with pytest.raises(ProviderError, match="Invalid request"):
        await loop.run_turn("continue")
    assert len(provider.requests) == 2


async def test_requests_never_carry_broken_tool_pairs() -> None:
    """R22b: a restored orphan result in the record is sent as a note, not as a tool message."""
    record = MemoryRecord()
    record.append_message(Message.tool("gone", "restored output"))
    provider = Queue(Message.assistant("ok"))
    await CoreLoop(provider, record).run_turn("hi")
    (request,) = provider.requests
    assert request.messages[0].role == "user"
    assert "restored output" in request.messages[0].text
    assert record.messages()[0].role == "tool"  # the record keeps the original


async def test_r22b_each_round_repairs_only_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests are repaired incrementally: each message is taken in once across rounds."""
    from steerable_compaction.compaction.pairs import PairRepair

    taken: list[Message] = []
    real = PairRepair.extend

    def counting(self: PairRepair, messages: Sequence[Message]) -> None:
        taken.extend(messages)
        real(self, messages)

    monkeypatch.setattr(PairRepair, "extend", counting)
    record = MemoryRecord()
    provider = Queue(call("c1"), call("c2"), call("c3"), Message.assistant("done"))
    await CoreLoop(provider, record, tools=TOOLS).run_turn("please echo")
    assert taken == record.messages()[:-1]  # the final reply was never part of a request
    assert provider.requests[-1].messages == tuple(record.messages()[:-1])


async def test_r22b_a_restored_dangling_call_is_answered_until_its_result_arrives() -> None:
    """A call without a result in a restored record gets a stand-in answer in every request."""
    record = MemoryRecord()
    record.append_message(Message.user("goal"))
    record.append_message(call("lost"))
    provider = Queue(call("c1"), Message.assistant("done"))
    await CoreLoop(provider, record, tools=TOOLS).run_turn("go on")
    first, second = provider.requests
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "user"]
    assert first.messages[2].text.startswith("[no result recorded for echo call 'lost'")
    assert second.messages[:4] == first.messages
    assert second.messages[4:] == tuple(record.messages()[3:5])


async def test_a_non_assistant_reply_is_a_provider_error() -> None:
    """A provider that answers with another role is refused, not recorded."""
    with pytest.raises(ProviderError, match="expected 'assistant'"):
        await CoreLoop(Queue(Message.user("??")), MemoryRecord()).run_turn("go")


def test_loop_settings_are_validated() -> None:
    """Zero rounds or duplicate tool names are programming errors."""
    with pytest.raises(ValueError, match="max_rounds_per_turn"):
        CoreLoop(Queue(), MemoryRecord(), max_rounds_per_turn=0)
    with pytest.raises(ValueError, match="unique"):
        CoreLoop(Queue(), MemoryRecord(), tools=[TOOLS[0], TOOLS[0]])


async def lone_surrogate(arguments: Mapping[str, Any]) -> str:
    return "bytes? \udcff end"


async def test_tool_output_with_lone_surrogates_is_made_storable() -> None:
    """Undecodable tool output (a lone surrogate) becomes U+FFFD instead of crashing the turn."""
    record = MemoryRecord()
    tools = [Tool(name="echo", fn=lone_surrogate)]
    await CoreLoop(Queue(call("c1"), Message.assistant("ok")), record, tools=tools).run_turn("go")
    # Python encodes the surrogate as 3 invalid bytes; each decodes to one U+FFFD.
    assert record.messages()[2].text == "bytes? \ufffd\ufffd\ufffd end"
