"""Metrics of one simulated run: recall, cache reads, tokens, billed cost (see `standard.md`).

Prices are per million tokens, as each provider published them in late 2025:

- Anthropic, Claude Sonnet 4.5 (https://platform.claude.com/docs/en/about-claude/pricing):
  input $3.00, 5-minute cache writes $3.75, cache hits $0.30, output $15.00.
- OpenAI, GPT-5 (https://openai.com/api/pricing, August 2025): input $1.25, cached input
  $0.125, output $10.00; cache writes are not billed.
- DeepSeek, deepseek-chat V3.2-Exp (https://api-docs.deepseek.com/quick_start/pricing, the
  2025-09-29 price list): input cache hit $0.028, cache miss $0.28, output $0.42.

Each run is played once under the Anthropic cache rules; its successful requests are then
replayed, at the same simulated times, through a fresh cache model under the OpenAI and DeepSeek
rules (`CacheRules`), so every price table is applied to the cache reads its own rules give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..record import Usage
from ..testing import CacheRules, CachingProvider
from .provider import Exchange

__all__ = [
    "PRICES",
    "PRIMARY",
    "RULES",
    "Price",
    "billed_cost",
    "cache_hit_rate",
    "replay_usage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """Dollars per million tokens by billing class."""

    input: float
    cache_read: float
    output: float
    cache_write: float = 0.0  # only where the provider bills writes (`CacheRules.reports_writes`)


PRICES: dict[str, Price] = {
    "anthropic": Price(input=3.00, cache_write=3.75, cache_read=0.30, output=15.00),
    "openai": Price(input=1.25, cache_read=0.125, output=10.00),
    "deepseek": Price(input=0.28, cache_read=0.028, output=0.42),
}
RULES: dict[str, Callable[[], CacheRules]] = {
    "anthropic": CacheRules.anthropic,
    "openai": CacheRules.openai,
    "deepseek": CacheRules.deepseek,
}
PRIMARY = "anthropic"  # the rules the session itself runs under


def billed_cost(usages: Sequence[Usage], price: Price) -> float:
    """Dollars for `usages`: uncached input, cache reads, cache writes and output."""
    total = 0.0
    for u in usages:
        fresh = u.prompt_tokens - u.cached_tokens - u.cache_write_tokens
        total += fresh * price.input + u.cached_tokens * price.cache_read
        total += u.cache_write_tokens * price.cache_write + u.completion_tokens * price.output
    return total / 1_000_000


def cache_hit_rate(usages: Sequence[Usage]) -> float | None:
    """Cached prompt tokens over prompt tokens (`None` when nothing was billed)."""
    prompt = sum(u.prompt_tokens for u in usages)
    return sum(u.cached_tokens for u in usages) / prompt if prompt else None


async def replay_usage(
    exchanges: Sequence[Exchange], rules: CacheRules, window: int, token_scale: float = 1.0
) -> list[Usage]:
    """What the successful `exchanges` would have been billed under `rules`.

    Output tokens are the ones actually produced; only the cache accounting is redone, with the
    same tokenizer (`token_scale`) the session was billed with.
    """

    class _At:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = _At()
    model = CachingProvider(
        lambda _: "", window=window, rules=rules, clock=clock, token_scale=token_scale
    )
    out: list[Usage] = []
    for exchange in exchanges:
        if exchange.completion is None:
            continue
        clock.now = exchange.at
        again = await model.complete(exchange.request)
        out.append(
            Usage(
                prompt_tokens=again.usage.prompt_tokens,
                completion_tokens=exchange.completion.usage.completion_tokens,
                cached_tokens=again.usage.cached_tokens,
                cache_write_tokens=again.usage.cache_write_tokens,
            )
        )
    return out
