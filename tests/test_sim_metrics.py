"""`sim.metrics`: prices, cache-hit rates and replays under other cache rules."""

from __future__ import annotations

import pytest

from steerable_compaction import Message
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import Usage
from steerable_compaction.sim.metrics import PRICES, billed_cost, cache_hit_rate, replay_usage
from steerable_compaction.sim.provider import SimClock, SimProvider
from steerable_compaction.testing import CacheRules


def test_billed_cost_is_hand_checked_for_each_price_table() -> None:
    """Uncached input, cache reads, cache writes and output at the table's prices."""
    usage = Usage(
        prompt_tokens=1_000_000,
        cached_tokens=400_000,
        cache_write_tokens=100_000,
        completion_tokens=10_000,
    )
    assert billed_cost([usage], PRICES["anthropic"]) == pytest.approx(
        0.5 * 3.00 + 0.4 * 0.30 + 0.1 * 3.75 + 0.01 * 15.00
    )
    plain = Usage(prompt_tokens=1_000_000, cached_tokens=400_000, completion_tokens=10_000)
    assert billed_cost([plain], PRICES["openai"]) == pytest.approx(0.6 * 1.25 + 0.4 * 0.125 + 0.1)
    assert billed_cost([plain], PRICES["deepseek"]) == pytest.approx(
        0.6 * 0.28 + 0.4 * 0.028 + 0.01 * 0.42
    )
    assert cache_hit_rate([plain, Usage(prompt_tokens=1_000_000)]) == pytest.approx(0.2)
    assert cache_hit_rate([]) is None


async def test_replay_under_other_rules_is_hand_checked() -> None:
    """A replay rebills the same requests: DeepSeek reads the shared prefix in 64-token units."""
    clock = SimClock()
    provider = SimProvider(lambda r: "ok", window=50_000, rules=CacheRules.anthropic(), clock=clock)
    first = CompletionRequest(messages=(Message.user("word " * 300),))
    second = CompletionRequest(
        messages=(*first.messages, Message.assistant("a"), Message.user("b"))
    )
    for request in (first, second):
        clock.advance(1)
        await provider.complete(request)
    shared = provider.count_tokens(first)
    usages = await replay_usage(provider.exchanges, CacheRules.deepseek(), 50_000)
    assert [u.prompt_tokens for u in usages] == [shared, provider.count_tokens(second)]
    assert [u.cached_tokens for u in usages] == [0, shared // 64 * 64]
    assert [u.completion_tokens for u in usages] == [
        e.completion.usage.completion_tokens for e in provider.exchanges if e.completion
    ]
