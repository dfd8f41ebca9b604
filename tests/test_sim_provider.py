"""`sim.provider`: the simulated provider (prompt cache, strict tool pairing)."""

from __future__ import annotations

import pytest

from steerable_compaction import Message
from steerable_compaction.errors import ContextOverflowError, ProviderError
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.sim.provider import SimClock, SimProvider
from steerable_compaction.testing import CacheRules


async def test_sim_provider_rejects_broken_tool_pairs_and_logs_every_exchange() -> None:
    """Orphan results get a non-overflow 400, like a real provider; all requests are logged."""
    clock = SimClock(5.0)
    provider = SimProvider(lambda r: "ok", window=10_000, rules=CacheRules.openai(), clock=clock)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(CompletionRequest(messages=(Message.tool("gone", "x"),)))
    assert caught.value.status_code == 400 and not isinstance(caught.value, ContextOverflowError)
    clock.advance(2)
    done = await provider.complete(CompletionRequest(messages=(Message.user("hi"),)))
    assert done.message.text == "ok"
    assert [(e.error is None, e.at) for e in provider.exchanges] == [(False, 5.0), (True, 7.0)]
