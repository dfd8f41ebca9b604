"""`RetryHooks`: bounded exponential backoff with full jitter for retryable provider errors.

Only errors the provider error table marks retryable (429, 5xx, overloaded, timeouts,
connection failures) are retried; a context overflow never is: that is compaction's business.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .errors import ConfigError, ContextOverflowError, ProviderError
from .hooks import PreStepAction, RequestErrorContext, RetryAction, StepContext, ToolResultContext
from .messages import ToolResult

__all__ = ["RetryHooks"]


class RetryHooks:
    """Retry retryable errors up to `max_retries` times per request.

    Before retry number `attempt` it waits `uniform(0, min(max_delay_s, base_delay_s *
    2 ** (attempt - 1)))` seconds ("full jitter").
    """

    def __init__(
        self,
        *,
        max_retries: int = 3,
        base_delay_s: float = 1.0,
        max_delay_s: float = 30.0,
        rng: Callable[[float, float], float] = random.uniform,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError("retry.max_retries", max_retries, "an integer >= 0")
        for key, value in (
            ("retry.base_delay_s", base_delay_s),
            ("retry.max_delay_s", max_delay_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(key, value, "a number of seconds >= 0")
        self.max_retries = max_retries
        self.base_delay_s = float(base_delay_s)
        self.max_delay_s = float(max_delay_s)
        self._rng = rng

    def delay(self, attempt: int) -> float:
        """The (jittered) wait before retry number `attempt` (1-based)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return self._rng(0.0, cap)

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Nothing to do before a request."""
        return PreStepAction()

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """Retry a retryable `ProviderError` while attempts remain; let anything else through."""
        error = ctx.error
        if (
            not isinstance(error, ProviderError)
            or isinstance(error, ContextOverflowError)
            or not error.retryable
            or ctx.attempt > self.max_retries
        ):
            return None
        return RetryAction(
            delay_s=self.delay(ctx.attempt),
            reason=f"{error.provider} error {error.status_code}: retry {ctx.attempt}"
            f" of {self.max_retries}",
        )

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Tool results pass unchanged."""
        return ctx.result
