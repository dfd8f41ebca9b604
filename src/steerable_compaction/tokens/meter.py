"""`TokenMeter`: context pressure anchored on billed usage (R7, R9, R10), calibrated by it (R8).

The meter adds the estimate of messages appended since the last billed request to that
request's `prompt_tokens` (R7), resets the anchor on every rewrite (R9) and keeps pressure
continuous across it (R10). Per-message estimates are cached by identity.

Calibration from usage: two billed requests in a row, with no rewrite between them, say what the
messages added between them really cost. The meter learns the ratio billed / estimated from such
spans (the first one sets it, later ones are averaged in, newest weighing most) and scales every
new-message estimate by it, so any model, known or not, is priced within a few percent after
two or three replies. A span too small to measure, a request after a rewrite, or a count that
shrank or moved implausibly (a count without its cached prefix, say) teaches nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..messages import Message
from .calibration import calibration_for
from .counting import pricer_for
from .estimate import _message_cost

__all__ = ["Observation", "TokenMeter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """A provider-billed request: `prompt_tokens` for the first `message_count` messages."""

    prompt_tokens: int
    message_count: int


_CACHE_MAX = 1 << 16
_MIN_SAMPLE = 200  # estimated tokens a span needs before it may teach the factor
_DECAY = 0.5  # weight left to the earlier spans each time a new one is learned
_SAMPLE_BOUNDS = (0.2, 5.0)  # a span billed outside these times its estimate is not believed
_FACTOR_BOUNDS = (0.25, 4.0)


def _clamp(value: float) -> float:
    return min(_FACTOR_BOUNDS[1], max(_FACTOR_BOUNDS[0], value))


def _missing(items: Sequence[Message], other: Sequence[Message]) -> list[Message]:
    """Members of `items` that `other` lacks, by identity and counting repeats."""
    left = Counter(map(id, other))
    out: list[Message] = []
    for m in items:
        if left[id(m)] > 0:
            left[id(m)] -= 1
        else:
            out.append(m)
    return out


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


class TokenMeter:
    """Context pressure: the last billed `prompt_tokens` plus estimates of what came after.

    Call `pressure` before a request, `observe` with the provider's usage after it, and
    `rewrite` whenever compaction replaces the transcript. Per-message estimates are cached by
    identity, so a call costs O(messages appended since the anchor). The factor learned from
    usage (`calibration`) scales `estimate` and new messages in `pressure`;
    `online_calibration=False` keeps it at 1.0.
    """

    def __init__(self, model: str | None = None, *, online_calibration: bool = True) -> None:
        self._model = model
        self._cal = calibration_for(model)
        self._price = pricer_for(self._cal).cost  # looked up once, not per message
        self._online = online_calibration
        self._factor = 1.0
        self._billed = 0.0  # decayed sums of the spans learned from: billed tokens ...
        self._estimated = 0.0  # ... and their raw estimate
        self._samples = 0
        self._anchor_tokens = 0  # tokens of messages[:_anchor_count]: billed or carried over
        self._anchor_count = 0
        # Whether the anchor is the last `observe` call's (not yet re-anchored by a rewrite or
        # the first estimate): the observation is then the anchor, and no value is made for it
        # on every step.
        self._observed = False
        self._epoch = 0  # bumped whenever the anchor moves
        self._pending: tuple[int, int, int] | None = None  # (epoch, message_count, raw tokens)
        self._cache: dict[int, tuple[Message, int]] = {}

    @property
    def model(self) -> str | None:
        """The model name this meter was made for."""
        return self._model

    @property
    def family(self) -> str:
        """The calibration family of `model`."""
        return self._cal.family

    @property
    def last_observed(self) -> Observation | None:
        """The last `observe` call, or `None` before the first one and after a `rewrite`."""
        if not self._observed:
            return None
        return Observation(prompt_tokens=self._anchor_tokens, message_count=self._anchor_count)

    @property
    def calibration(self) -> float:
        """Billed tokens per estimated token, learned from usage (1.0 until a span is measured).

        `estimate` and the new messages in `pressure` are already scaled by it; multiply any
        other raw estimate by it (or use `calibrated`) to get billed units.
        """
        return self._factor

    @property
    def calibration_samples(self) -> int:
        """How many billed spans the factor was learned from (0: still the static table)."""
        return self._samples

    def calibrated(self, raw_tokens: int) -> int:
        """`raw_tokens` (an `estimate_tokens` figure for this meter's model) in billed units."""
        return self._scaled(raw_tokens)

    def _raw(self, message: Message) -> int:
        entry = self._cache.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        return self._price_new(message)

    def _price_new(self, message: Message) -> int:
        """Price `message`, which the cache does not hold (`_raw` looked), and cache it."""
        value = _message_cost(message, self._cal, self._price)
        cache = self._cache
        if len(cache) >= _CACHE_MAX:
            for key in list(cache)[: _CACHE_MAX // 2]:
                del cache[key]
        cache[id(message)] = (message, value)
        return value

    def _scaled(self, raw: int) -> int:
        return raw if self._factor == 1.0 else math.ceil(raw * self._factor)

    def estimate(self, message: Message) -> int:
        """The meter's estimate of one message: cached by identity, online factor applied."""
        return self._scaled(self._raw(message))

    def pressure(self, messages: Sequence[Message]) -> int:
        """Tokens the next request will carry: the anchor plus `messages[anchor:]` estimated.

        Before any observation the whole transcript is estimated (R7).
        """
        count = len(messages)
        if count < self._anchor_count:
            raise ValueError(
                f"the transcript has {count} messages but the meter is anchored on the first "
                f"{self._anchor_count}; call rewrite() when the transcript is replaced"
            )
        raw = 0
        # The cache is looked up here, so a miss goes straight to pricing (no second lookup).
        cache, price = self._cache, self._price_new
        for i in range(self._anchor_count, count):  # a step adds a few: no generator for them
            message = messages[i]
            entry = cache.get(id(message))
            raw += entry[1] if entry is not None and entry[0] is message else price(message)
        if self._online and self._observed:
            self._pending = (self._epoch, count, raw)
        factor = self._factor  # `_scaled`, without the call
        total = self._anchor_tokens + (raw if factor == 1.0 else math.ceil(raw * factor))
        if not self._observed and self._anchor_count == 0 and count:
            # The first whole estimate becomes the anchor until a provider reports usage, so
            # the next call costs O(new messages) too (R7: only the first is estimated whole).
            self._anchor_tokens, self._anchor_count = total, count
        return total

    def observe(self, prompt_tokens: int, message_count: int) -> None:
        """Record that the request carrying the first `message_count` messages was billed."""
        if type(prompt_tokens) is not int or prompt_tokens < 0:  # a plain count: checked here
            _check_count("prompt_tokens", prompt_tokens)
        if type(message_count) is not int or message_count < 0:
            _check_count("message_count", message_count)
        pending = self._pending
        if (
            self._observed  # the anchor is the previous observation
            and pending is not None
            and pending[0] == self._epoch
            and pending[1] == message_count
            and message_count > self._anchor_count
            and pending[2] >= _MIN_SAMPLE
        ):
            self._learn(prompt_tokens - self._anchor_tokens, pending[2])
        self._observed = True
        self._anchor_tokens, self._anchor_count = prompt_tokens, message_count
        self._epoch += 1
        self._pending = None

    def _learn(self, billed: int, estimated: int) -> None:
        """Fold one span into the factor: the ratio of decayed sums, newest span weighing most."""
        sample = billed / estimated
        if not _SAMPLE_BOUNDS[0] <= sample <= _SAMPLE_BOUNDS[1]:
            return  # a shrinking or wildly moved count (no cached prefix in it, say): not a span
        self._billed = self._billed * _DECAY + billed
        self._estimated = self._estimated * _DECAY + estimated
        self._samples += 1
        self._factor = _clamp(self._billed / self._estimated)

    def preview_rewrite(self, before: Sequence[Message], after: Sequence[Message]) -> int:
        """The pressure `rewrite(before, after)` would leave, without changing the meter.

        Pressure stays continuous (R10): messages of `before` missing from `after` (by identity)
        are subtracted and new ones added. Where the billed anchor is below the estimate of the
        same messages (the estimate errs high on purpose), the difference is scaled down by
        `pressure / estimate(before)` (at most 2x): subtracting an over-estimated span from a
        billed count would otherwise drive the result towards zero. It is never scaled up, since
        a billed count above the estimate mostly holds overhead the estimate never sees (tool
        schemas), which compaction does not remove. Once the factor has been learned from billed
        spans (which leave such overhead out), the spans are scaled by it instead.
        """
        old = self.pressure(before)
        removed, added = _missing(before, after), _missing(after, before)
        removed_raw = sum(self._raw(m) for m in removed)
        added_raw = sum(self._raw(m) for m in added)
        if self._samples:
            ratio = self._factor  # learned from billed spans: the estimate's own error
        else:
            whole = sum(self._raw(m) for m in before)
            ratio = min(1.0, max(0.5, old / whole)) if whole else 1.0
        return max(0, round(old - ratio * removed_raw + ratio * added_raw))

    def rewrite(self, before: Sequence[Message], after: Sequence[Message]) -> int:
        """Re-anchor after compaction replaced `before` with `after`; returns the new pressure.

        The new pressure is `preview_rewrite(before, after)` (continuous, R10). The observation
        resets so the next request re-observes (R9).
        """
        new = self.preview_rewrite(before, after)
        removed = _missing(before, after)
        survivors = {id(m) for m in after}
        for m in removed:
            if id(m) not in survivors:
                self._cache.pop(id(m), None)
        self._observed = False
        self._anchor_tokens, self._anchor_count = new, len(after)
        self._epoch += 1
        self._pending = None
        return new
