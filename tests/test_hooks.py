"""The hook protocol and `ChainHooks` (R3)."""

from __future__ import annotations

from steerable_compaction.hooks import (
    ChainHooks,
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
    ToolResultContext,
)
from steerable_compaction.messages import TextPart, ToolResult
from steerable_compaction.record import MemoryRecord


async def test_chain_hooks_run_in_order_and_first_retry_wins() -> None:
    """`ChainHooks`: every pre_step runs; the first retrying error hook wins; results thread."""
    calls: list[str] = []

    class Tag:
        def __init__(self, name: str, retry: bool) -> None:
            self.name, self.retry = name, retry

        async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
            calls.append(f"pre:{self.name}")
            return PreStepAction()

        async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
            calls.append(f"err:{self.name}")
            return RetryAction(reason=self.name) if self.retry else None

        async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
            calls.append(f"post:{self.name}")
            return ToolResult(
                call_id=ctx.result.call_id,
                content=(*ctx.result.content, TextPart(text=self.name)),
            )

    chain = ChainHooks([Tag("a", False), Tag("b", True), Tag("c", True)])
    record = MemoryRecord()
    await chain.pre_step(StepContext(record=record, round=1, turn=1))
    action = await chain.on_request_error(
        RequestErrorContext(record=record, round=1, turn=1, error=ValueError(), attempt=1)
    )
    assert action == RetryAction(reason="b")
    result = await chain.post_tool_result(
        ToolResultContext(record=record, tool_name="t", result=ToolResult(call_id="x"))
    )
    assert result.text == "abc"
    assert calls == ["pre:a", "pre:b", "pre:c", "err:a", "err:b", "post:a", "post:b", "post:c"]
