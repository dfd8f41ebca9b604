from __future__ import annotations

import pytest

from steerable_compaction import ConfigError, ContextOverflowError, ProviderError
from steerable_compaction.hooks import RequestErrorContext, RetryAction, StepContext
from steerable_compaction.record import MemoryRecord
from steerable_compaction.retry import RetryHooks


def ctx(error: BaseException, attempt: int) -> RequestErrorContext:
    return RequestErrorContext(record=MemoryRecord(), round=1, turn=1, error=error, attempt=attempt)


RATE = ProviderError("slow down", provider="p", status_code=429, retryable=True)


async def test_retryable_errors_back_off_exponentially_with_full_jitter() -> None:
    """Delay for attempt k is uniform in [0, min(max, base * 2**(k-1))]."""
    bounds: list[tuple[float, float]] = []

    def rng(low: float, high: float) -> float:
        bounds.append((low, high))
        return high

    hooks = RetryHooks(max_retries=4, base_delay_s=0.5, max_delay_s=3.0, rng=rng)
    delays = []
    for attempt in range(1, 5):
        action = await hooks.on_request_error(ctx(RATE, attempt))
        assert isinstance(action, RetryAction)
        delays.append(action.delay_s)
    assert delays == [0.5, 1.0, 2.0, 3.0]
    assert all(low == 0.0 for low, _ in bounds)
    assert "retry 4 of 4" in (await hooks.on_request_error(ctx(RATE, 4))).reason  # type: ignore[union-attr]


async def test_retries_are_bounded() -> None:
    """Past `max_retries` the error goes through (None)."""
    hooks = RetryHooks(max_retries=2, rng=lambda a, b: 0.0)
    assert await hooks.on_request_error(ctx(RATE, 2)) is not None
    assert await hooks.on_request_error(ctx(RATE, 3)) is None


@pytest.mark.parametrize(
    "error",
    [
        ContextOverflowError("too long", provider="p", status_code=400),
        ProviderError("bad request", provider="p", status_code=400),
        ValueError("not a provider error"),
    ],
)
async def test_overflow_and_fatal_errors_are_never_retried(error: BaseException) -> None:
    """R13: overflow belongs to compaction; fatal and foreign errors pass through."""
    assert await RetryHooks(rng=lambda a, b: 0.0).on_request_error(ctx(error, 1)) is None


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_retries": -1}, "retry.max_retries"),
        ({"max_retries": True}, "retry.max_retries"),
        ({"base_delay_s": -0.1}, "retry.base_delay_s"),
        ({"max_delay_s": "5"}, "retry.max_delay_s"),
    ],
)
def test_bad_settings_raise_config_error_naming_the_key(
    kwargs: dict[str, object], key: str
) -> None:
    """Every bad retry setting is a `ConfigError` naming the knob."""
    with pytest.raises(ConfigError) as info:
        RetryHooks(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


async def test_other_hooks_are_pass_through() -> None:
    """Retry does nothing before a request and leaves tool results alone."""
    from steerable_compaction.hooks import ToolResultContext
    from steerable_compaction.messages import ToolResult

    hooks = RetryHooks()
    assert (
        await hooks.pre_step(StepContext(record=MemoryRecord(), round=1, turn=1))
    ).compactions == ()
    result = ToolResult(call_id="c")
    assert (
        await hooks.post_tool_result(
            ToolResultContext(record=MemoryRecord(), tool_name="t", result=result)
        )
        is result
    )
