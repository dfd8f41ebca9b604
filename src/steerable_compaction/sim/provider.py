"""The simulated provider: `CachingProvider` plus a clock, an exchange log and strict pairing.

`SimProvider` is the prompt-cache model of `steerable_compaction.testing` with two additions a
real provider has: it refuses a request carrying an orphan tool result or an unanswered call
(HTTP 400, as OpenAI and Anthropic do), and it logs every request it got, answered or not, with
the simulated time, for metrics and trace assertions. `SimClock` moves only when told, so cache
expiry is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..compaction import pair_issues
from ..errors import ProviderError
from ..messages import Message
from ..providers.base import Completion, CompletionRequest, provider_error
from ..testing import CacheRules, CachingProvider

__all__ = ["Exchange", "SimClock", "SimProvider"]


class SimClock:
    """Simulated seconds; `advance` moves them."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        """The current simulated time."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass."""
        self.now += seconds


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and how it ended: a completion, or the error the provider raised."""

    request: CompletionRequest
    completion: Completion | None
    error: ProviderError | None
    at: float


class SimProvider(CachingProvider):
    """A `CachingProvider` that logs `exchanges` and rejects broken tool pairs with a 400."""

    def __init__(
        self,
        answer: Callable[[CompletionRequest], Message | str],
        *,
        window: int,
        rules: CacheRules,
        clock: SimClock,
        token_scale: float = 1.0,
        on_request: Callable[[CompletionRequest], None] | None = None,
    ) -> None:
        super().__init__(
            answer, window=window, rules=rules, clock=clock, name="sim", token_scale=token_scale
        )
        self.clock = clock
        self.exchanges: list[Exchange] = []
        self.on_request = on_request

    async def complete(self, request: CompletionRequest) -> Completion:
        """Answer `request` (or raise as the real provider would) and log the exchange.

        `on_request`, when set, sees every request first, answered or not (the runner counts
        the ones the sender's own estimate put over the window).
        """
        if self.on_request is not None:
            self.on_request(request)
        issues = pair_issues(request.messages)
        try:
            if issues:
                raise provider_error(
                    self.name,
                    status_code=400,
                    code="invalid_request_error",
                    message="messages with role 'tool' must answer a preceding tool call, and "
                    f"every tool call needs a result (orphans at {list(issues.orphan_results)}, "
                    f"unanswered {[c for _, c in issues.unanswered_calls]})",
                )
            completion = await super().complete(request)
        except ProviderError as error:
            self.exchanges.append(Exchange(request, None, error, self.clock.now))
            raise
        self.exchanges.append(Exchange(request, completion, None, self.clock.now))
        return completion
