"""Cache-expiry-aware compaction: whether to compact now, while the prompt cache is cold. Pure.

The engine delays compaction to keep the provider's prompt cache warm: every request re-reads
the same prefix at the cache-read price, and a compaction rewrites it. Once the cache has
expired (the time since the last request is over the provider's cache lifetime, or the host
says so) there is nothing warm left to protect: the next request pays to write the whole
prefix anyway. A compaction then costs only the summary's output and writing the shorter
prompt, and every later round reads the shorter prefix.

`price_cold_compaction` compares the two branches over a horizon of rounds, in units of one
uncached input token:

- **wait**: the full prompt written cold now, then each round reads the prefix and writes what
  it added; when the prefix reaches the threshold, a warm pressure compaction (the prefix read,
  the summary written as output, the compacted prompt written);
- **now**: the summary request written cold (the same prefix the full prompt would write), its
  output, the compacted prompt written; then the same rounds from the compacted level.

Each compaction is priced by what it sends. A fold, or the excerpt summary, asks no summarizer:
it reads no prefix and writes no output, only the compacted prompt (compacting now then writes
the shorter prompt instead of the longer one).

The horizon is the number of rounds the session has run so far (a session that ran N rounds
is, by the median estimate, halfway through, so N more are expected), at least one and at most
`MAX_HORIZON`. Growth per round is the caller's estimate (the engine reads both from the
session's record, `coldcache`). The price says nothing about
what a summary loses; `policy.cold_threshold_ratio` bounds that (no cold compaction below that
share of the threshold), and the hysteresis margin keeps a compaction from following another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigError

__all__ = [
    "MAX_HORIZON",
    "SAVING_MARGIN",
    "ColdPrices",
    "ColdVerdict",
    "cache_expired",
    "price_cold_compaction",
]

MAX_HORIZON = 400
"""The most rounds a cold compaction is priced over."""

SAVING_MARGIN = 0.25
"""A cold compaction must save this share of its own cost on top of paying for itself."""


class ColdPrices(Protocol):
    """The knobs the price reads; `CompactionPolicy` is the usual one."""

    @property
    def cache_read_price_ratio(self) -> float:
        """A cached input token's price over an uncached one's."""

    @property
    def cache_write_price_ratio(self) -> float:
        """A cache write's price over an uncached input token's (1: no premium)."""

    @property
    def output_price_ratio(self) -> float:
        """An output token's price over an uncached input token's."""

    @property
    def threshold_tokens(self) -> int:
        """Pressure at which the pressure path compacts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ColdVerdict:
    """The price of compacting now against waiting, in uncached input tokens, and the choice.

    `now` and `wait` cover the same `rounds`; `cost` is the compaction's own (its summary's
    output and the compacted prompt written). `compact` asks the saving to exceed
    `SAVING_MARGIN` of that cost: the horizon is a guess, and a session that ends sooner
    never earns a marginal saving back.
    """

    now: float
    wait: float
    rounds: int
    cost: float = 0.0

    @property
    def compact(self) -> bool:
        """Whether compacting now saves more than the margin over waiting for pressure."""
        return self.saving > SAVING_MARGIN * self.cost

    @property
    def saving(self) -> float:
        """What compacting now saves over the horizon (negative: it costs more)."""
        return self.wait - self.now


def cache_expired(
    last_request_at: float | None, now: float, ttl_seconds: float | None, *, reported: bool
) -> bool:
    """Whether the provider's cache for this session is cold.

    `reported` (the host said so) wins; otherwise it is cold when more than `ttl_seconds` passed
    since the last request. Without a last request in this process, or without a known
    lifetime, it is not known to be cold.
    """
    if reported:
        return True
    if last_request_at is None or ttl_seconds is None:
        return False
    return now - last_request_at > ttl_seconds


def price_cold_compaction(
    prices: ColdPrices,
    *,
    pressure: int,
    post_tokens: int,
    summary_tokens: int,
    growth_per_round: float,
    rounds_seen: int,
    asks_summarizer: bool,
) -> ColdVerdict:
    """Compacting now, with the cache cold, against waiting for the pressure path (see above).

    `pressure` is the prompt now, `post_tokens` what a compaction would leave, `summary_tokens`
    the summarizer's output, `growth_per_round` how much a round adds; `asks_summarizer` says
    the compaction sends a summary request (false: a fold or the excerpt, `summary_tokens` 0).
    A price or an input that is not a finite number >= 0 raises `ConfigError` naming it.
    """
    read = prices.cache_read_price_ratio
    write = prices.cache_write_price_ratio
    output = prices.output_price_ratio
    threshold = prices.threshold_tokens
    for key, value in (
        ("cache_read_price_ratio", read),
        ("cache_write_price_ratio", write),
        ("output_price_ratio", output),
        ("threshold_tokens", threshold),
        ("pressure", pressure),
        ("post_tokens", post_tokens),
        ("summary_tokens", summary_tokens),
        ("growth_per_round", growth_per_round),
        ("rounds_seen", rounds_seen),
    ):
        # NaN fails every comparison: unchecked, it would price any compaction as "wait".
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(key, value, "a finite number >= 0")
    if summary_tokens and not asks_summarizer:
        raise ConfigError("summary_tokens", summary_tokens, "0 when no summarizer is asked")
    rounds = min(max(rounds_seen, 1), MAX_HORIZON)
    compaction = output * summary_tokens + write * post_tokens
    request = read if asks_summarizer else 0.0  # what its request pays a prefix token, warm

    def rest(cost: float, level: float) -> float:
        for _ in range(rounds):
            cost += read * level + write * growth_per_round
            level += growth_per_round
            if level >= threshold:  # a warm pressure compaction
                cost += request * level + compaction
                level = post_tokens
        return cost

    wait = rest(write * pressure, pressure)
    sent = write * pressure if asks_summarizer else 0.0  # the summary request, written cold
    now = rest(sent + compaction, post_tokens)
    return ColdVerdict(now=now, wait=wait, rounds=rounds, cost=compaction)
