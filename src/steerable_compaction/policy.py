"""The compaction policy and the one place that decides it (R4, R5, R11).

`resolve_compaction_policy(model, max_context_tokens, **overrides)` runs once at assembly time;
hooks only read the `CompactionPolicy` it returns. Order: window (explicit, else the model
catalogue) → window tier → model-family rule → explicit overrides (validated last).

| knob                            | desktop tier (< 200,000) | large tier (>= 200,000) |
|---------------------------------|--------------------------|-------------------------|
| `keep_last_messages`            | 6                        | 16                      |
| `keep_last_tool_results`        | 2                        | 16                      |
| `fold_excerpt_chars`            | 160                      | 4000                    |
| `keep_last_images`              | 1                        | 4                       |
| `fold_first`                    | False                    | True                    |
| `tail_token_ratio`              | 0.25                     | 0.25                    |
| `keep_user_messages_ratio`      | 0.125                    | 0.125                   |
| `head_token_ratio`              | 0.25                     | 0.25                    |
| `summary_chain_ratio`           | 0 (off)                  | 0 (off)                 |
| `retention_token_ratio`         | 0.3                      | 0.1                     |
| `threshold_ratio`               | 0.8                      | 0.8                     |
| `recompact_margin_ratio`        | 0.1                      | 0.1                     |
| `image_offload`                 | True                     | True                    |
| `micro_compact_interval_rounds` | 0 (off)                  | 0 (off)                 |
| `rapid_refill_window_rounds`    | 3                        | 3                       |
| `max_rapid_refills`             | 3                        | 3                       |
| `max_consecutive_failures`      | 3                        | 3                       |
| `max_overflow_retries`          | 2                        | 2                       |
| `summarizer_enabled`            | True                     | True                    |
| `recall_result_tokens`          | 2000                     | 2000                    |

Threshold (R11): `min(floor(window * threshold_ratio), window - reserve - headroom)`. Unless
set explicitly, `reserve = min(output need, window // 4, 32768)` (output need: the family rule,
else the catalogue's max output, else `window // 8`), raised to `window - max input` for models
with a separate input limit; `headroom = min(window // 16, 65536)` (65,536 is the reference
harness's fixed headroom). Input limits aside, the caps keep `reserve + headroom` within 5/16 of
the window, so a derived threshold is never below `min(window * ratio, 11/16 * window)`: 3,276
tokens at 4k, 6,553 at 8k. Explicit values are taken as given; a combination that leaves no room
raises `ConfigError`. `max_context_tokens` must lie in [1,024, 100,000,000].

`fold_first` (R17): whether a pressure compaction stops after the fold when folding alone frees
enough. Off in the desktop tier, where a fold keeps 160 characters of each old result: with a
summarizer wired, the engine summarizes instead, so no result leaves the projection unread
(measured by `steerable-compaction eval`; see the README). Without a summarizer the fold always
comes first, since the excerpt summary keeps less than a fold. `tail_token_ratio` caps the tail
at that share of the threshold (fewer messages, never fewer than the newest turn, R23), so a
summary frees room even when the last messages are large; the fold horizon (R18) moves with it.
`keep_user_messages_ratio` is the share of the threshold a summary keeps for the user's own
messages from the span it replaces, verbatim, newest first (0 turns it off).
`head_token_ratio` is the share of the threshold the opening may hold as the head: the system
messages, the goal (the newest user message before the first assistant message, or the one a
host named) and any user messages before it (a demonstration, say). An opening within it stays
as it is; a larger one keeps only the system messages and the goal in the head, and the user
messages before the goal are compacted like any others, oldest first (the newest of them stay
while they fit the kept-messages budget).
`summary_chain_ratio` is the share of the threshold the chain of earlier summaries (and the
messages kept in front of them) may hold: each summary covers only what came after the previous
one, and once the chain outgrows this share its oldest summaries are merged into one. 0 turns
the chain off: every summary then re-summarizes the earlier one with everything after it. Off
by default: `steerable-compaction eval` measured the chain at lower in-context recall and more
summarizer calls than re-summarizing (merges lose as much as re-summaries do, and incremental
summaries are shorter); `docs/memory.md` has the numbers. Turn it on with e.g. 0.3.
`retention_token_ratio` is the most the retention check may add to each summary, as a share of
the threshold: the span's stated facts the summary lacks, with `[history seq N]` references (0
turns it off). It is a ceiling, not a size: the block holds only what the summary left out, and
never more than a third of what the span held (a block an earlier summary in the span carried
counts whole) or half of what the summary freed. 0.3 was chosen
by `steerable-compaction eval` over seeds 0-3 (in-context recall 0.76 at 0.04, 0.97 at 0.3, for
4 % more prompt tokens); `docs/memory.md` has the table. The eval's windows are desktop-sized:
the large tier's 0.1 (16,000 tokens at a 160,000 threshold) is a judgement, not a measurement.
`recall_result_tokens` caps each `history_search` / `history_read` result (at least 256).
The cold-cache rule (`compaction.cold`): `cache_ttl_seconds` is the provider's cache lifetime
(`None`: not published), the three price ratios price a compaction against waiting, and
`cold_threshold_ratio` (0.6 of the threshold; 1 turns the rule off) is the lowest pressure it
compacts at. The catalogue's provider terms fill them; see `_CACHES`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final, NamedTuple, TypeVar

from .errors import ConfigError

__all__ = ["CompactionPolicy", "resolve_compaction_policy", "resolve_context_window"]


class _Tier(NamedTuple):
    keep_last_messages: int
    keep_last_tool_results: int
    fold_excerpt_chars: int
    keep_last_images: int
    fold_first: bool
    retention_token_ratio: float


# Large windows keep the spec's fold-first order: a 4,000-character excerpt keeps most results
# whole. The desktop tier's 160-character excerpt does not, so there a summary reads them first.
# The retention budget was measured on desktop windows (16k); at 200k+ a third of a span could
# be tens of thousands of tokens of extracted clauses, so the large tier keeps a smaller share.
_DESKTOP: Final = _Tier(
    keep_last_messages=6,
    keep_last_tool_results=2,
    fold_excerpt_chars=160,
    keep_last_images=1,
    fold_first=False,
    retention_token_ratio=0.3,
)
_LARGE: Final = _Tier(
    keep_last_messages=16,
    keep_last_tool_results=16,
    fold_excerpt_chars=4000,
    keep_last_images=4,
    fold_first=True,
    retention_token_ratio=0.1,
)
_LARGE_TIER_MIN_WINDOW: Final = 200_000

_MIN_WINDOW: Final = 1024
_MAX_WINDOW: Final = 100_000_000
_RESERVE_CAP: Final = 32_768  # longer replies are rare; the overflow path (R13) catches them
_HEADROOM_CAP: Final = 65_536

# Integer knobs: (lowest, highest or None). `None` as a value is allowed only for the two
# window-derived knobs, meaning "derive from the window" (see the module docstring).
_INT_BOUNDS: Final[Mapping[str, tuple[int, int | None]]] = {
    "max_context_tokens": (_MIN_WINDOW, _MAX_WINDOW),
    "keep_last_messages": (1, None),
    "keep_last_tool_results": (0, None),
    "fold_excerpt_chars": (0, None),
    "keep_last_images": (0, None),
    "micro_compact_interval_rounds": (0, None),
    "rapid_refill_window_rounds": (1, None),
    "max_rapid_refills": (1, None),
    "max_consecutive_failures": (1, None),
    "max_overflow_retries": (0, None),
    "reserved_output_tokens": (0, None),
    "headroom_tokens": (0, None),
    "recall_result_tokens": (256, None),
}
_DERIVED: Final = frozenset({"reserved_output_tokens", "headroom_tokens"})
_BOOLS: Final = ("image_offload", "summarizer_enabled", "fold_first")


def _check_int(key: str, value: object) -> int:
    """`value` if it is an int (not a bool) inside `_INT_BOUNDS[key]`, else `ConfigError`."""
    low, high = _INT_BOUNDS[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        allowed = f"an int in [{low}, {high}]" if high is not None else f"an int >= {low}"
        if key in _DERIVED:
            allowed += " or None (derive from the window)"
        raise ConfigError(key, value, allowed)
    return value


@functools.lru_cache(maxsize=512)  # the engine asks for the threshold every step
def _scaled(window: int, ratio: float) -> int:
    """`floor(window * ratio)` in decimal arithmetic, so 0.29 * 100 is 29, not 28."""
    return int(Decimal(window) * Decimal(repr(ratio)))


def _derived_reserve(window: int, output_need: int | None, max_input: int | None = None) -> int:
    need = window // 8 if output_need is None else output_need
    reserve = min(need, window // 4, _RESERVE_CAP)
    if max_input is not None:  # a hard input limit below the window fences off the rest
        reserve = max(reserve, window - max_input)
    return reserve


def _derived_headroom(window: int) -> int:
    return min(window // 16, _HEADROOM_CAP)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPolicy:
    """Every knob of compaction, validated on construction; see the module docstring table.

    Build one with `resolve_compaction_policy`; construct it directly only when you mean to set
    the knobs yourself. `reserved_output_tokens` / `headroom_tokens` of `None` derive from the
    window.
    """

    max_context_tokens: int
    threshold_ratio: float = 0.8
    keep_last_messages: int = _DESKTOP.keep_last_messages
    keep_last_tool_results: int = _DESKTOP.keep_last_tool_results
    fold_excerpt_chars: int = _DESKTOP.fold_excerpt_chars
    image_offload: bool = True
    keep_last_images: int = _DESKTOP.keep_last_images
    fold_first: bool = _DESKTOP.fold_first
    tail_token_ratio: float = 0.25
    keep_user_messages_ratio: float = 0.125
    head_token_ratio: float = 0.25
    summary_chain_ratio: float = 0.0
    retention_token_ratio: float = _DESKTOP.retention_token_ratio
    recompact_margin_ratio: float = 0.1
    micro_compact_interval_rounds: int = 0
    rapid_refill_window_rounds: int = 3
    max_rapid_refills: int = 3
    max_consecutive_failures: int = 3
    max_overflow_retries: int = 2
    reserved_output_tokens: int | None = None
    headroom_tokens: int | None = None
    summarizer_enabled: bool = True
    recall_result_tokens: int = 2000
    cache_ttl_seconds: float | None = None
    cold_threshold_ratio: float = 0.6
    cache_read_price_ratio: float = 0.1
    cache_write_price_ratio: float = 1.25
    output_price_ratio: float = 5.0

    def __post_init__(self) -> None:
        for key in _INT_BOUNDS:
            if getattr(self, key) is not None or key not in _DERIVED:
                _check_int(key, getattr(self, key))
        for key in _BOOLS:
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(key, getattr(self, key), "a bool")
        self._set_ratio("threshold_ratio", "a float in (0, 1]", lambda r: 0 < r <= 1)
        self._set_ratio("recompact_margin_ratio", "a float in [0, 1)", lambda r: 0 <= r < 1)
        self._set_ratio("tail_token_ratio", "a float in (0, 1]", lambda r: 0 < r <= 1)
        self._set_ratio("keep_user_messages_ratio", "a float in [0, 1)", lambda r: 0 <= r < 1)
        self._set_ratio("head_token_ratio", "a float in [0, 1]", lambda r: 0 <= r <= 1)
        self._set_ratio("summary_chain_ratio", "a float in [0, 1]", lambda r: 0 <= r <= 1)
        self._set_ratio("retention_token_ratio", "a float in [0, 1)", lambda r: 0 <= r < 1)
        self._set_ratio("cold_threshold_ratio", "a float in (0, 1]", lambda r: 0 < r <= 1)
        self._set_ratio("cache_read_price_ratio", "a float in [0, 1]", lambda r: 0 <= r <= 1)
        self._set_ratio("cache_write_price_ratio", "a float in [1, 10]", lambda r: 1 <= r <= 10)
        self._set_ratio("output_price_ratio", "a float in (0, 100]", lambda r: 0 < r <= 100)
        if self.cache_ttl_seconds is not None:
            self._set_ratio(
                "cache_ttl_seconds",
                "a number of seconds in (0, 604800] or None (unknown)",
                lambda r: 0 < r <= 604_800,
            )
        window = self.max_context_tokens
        if _scaled(window, self.threshold_ratio) < 1:
            raise ConfigError(
                "threshold_ratio",
                self.threshold_ratio,
                f"a float in (0, 1] with {window} * threshold_ratio >= 1 (max_context_tokens)",
            )
        reserve, headroom = self.effective_reserved_output_tokens, self.effective_headroom_tokens
        if window - reserve - headroom < 1:
            # Derived values always fit, so at least one of the two was set explicitly.
            explicit = [
                (value, key, getattr(self, key), other)
                for value, key, other in (
                    (reserve, "reserved_output_tokens", headroom),
                    (headroom, "headroom_tokens", reserve),
                )
                if getattr(self, key) is not None
            ]
            _, key, raw, other = max(explicit, key=lambda candidate: candidate[0])
            raise ConfigError(
                key,
                raw,
                f"an int in [0, {max(window - other - 1, 0)}] so that max_context_tokens - "
                "reserved_output_tokens - headroom_tokens >= 1",
            )

    def _set_ratio(self, key: str, allowed: str, ok: Callable[[float], bool]) -> None:
        value = getattr(self, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not ok(value):
            raise ConfigError(key, value, allowed)
        object.__setattr__(self, key, float(value))  # JSON may hand us `1`; store one type

    @property
    def effective_reserved_output_tokens(self) -> int:
        """`reserved_output_tokens`, or the window rule's reserve when it is `None`."""
        if self.reserved_output_tokens is not None:
            return self.reserved_output_tokens
        return _derived_reserve(self.max_context_tokens, None)

    @property
    def effective_headroom_tokens(self) -> int:
        """`headroom_tokens`, or `min(window // 16, 65536)` when it is `None`."""
        if self.headroom_tokens is not None:
            return self.headroom_tokens
        return _derived_headroom(self.max_context_tokens)

    @property
    def threshold_tokens(self) -> int:
        """Pressure at which compaction fires (R11); always >= 1 and <= window * ratio."""
        window = self.max_context_tokens
        room = window - self.effective_reserved_output_tokens - self.effective_headroom_tokens
        return min(_scaled(window, self.threshold_ratio), room)

    @property
    def limit_tokens(self) -> int:
        """The most a request may carry: the window less the reserved output (>= threshold)."""
        limit = self.max_context_tokens - self.effective_reserved_output_tokens
        return max(limit, self.threshold_tokens)

    @property
    def recompact_margin_tokens(self) -> int:
        """How far pressure must rise above the last post-compaction level (R31)."""
        return _scaled(self.max_context_tokens, self.recompact_margin_ratio)

    @property
    def max_tail_tokens(self) -> int:
        """The most estimated tokens a summary's tail keeps: `tail_token_ratio` of the threshold."""
        return max(_scaled(self.threshold_tokens, self.tail_token_ratio), 1)

    @property
    def user_message_tokens(self) -> int:
        """Budget for the user's messages a summary keeps verbatim (`keep_user_messages_ratio`)."""
        return _scaled(self.threshold_tokens, self.keep_user_messages_ratio)

    @property
    def head_tokens(self) -> int:
        """The most the opening may hold and still stay whole as the head (`head_token_ratio`)."""
        return _scaled(self.threshold_tokens, self.head_token_ratio)

    @property
    def summary_chain_tokens(self) -> int:
        """Most tokens the summary chain may hold before a merge; 0: no chain (see the table)."""
        if self.summary_chain_ratio == 0:
            return 0
        return max(_scaled(self.threshold_tokens, self.summary_chain_ratio), 1)

    @property
    def cold_threshold_tokens(self) -> int:
        """Pressure from which a cold cache may trigger a compaction (`cold_threshold_ratio`)."""
        return max(_scaled(self.threshold_tokens, self.cold_threshold_ratio), 1)

    @property
    def retention_tokens(self) -> int:
        """Most tokens the retention check adds to one summary (`retention_token_ratio`)."""
        return _scaled(self.threshold_tokens, self.retention_token_ratio)

    def replace(self, **changes: object) -> CompactionPolicy:
        """A copy with `changes` applied and validated again; unknown knobs raise `ConfigError`."""
        _reject_unknown(changes)
        values: dict[str, Any] = dict(changes)  # each value is checked in `__post_init__`
        return dataclasses.replace(self, **values)

    def to_dict(self) -> dict[str, int | float | bool | None]:
        """Every knob by name, JSON-ready, for harness files; `from_dict` reads it back."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CompactionPolicy:
        """The policy in `data` (as `to_dict` writes it); unknown or missing knobs raise."""
        if not isinstance(data, Mapping):
            raise ConfigError("policy", data, "a mapping of knob names to values")
        _reject_unknown(data)
        if "max_context_tokens" not in data:
            raise ConfigError("max_context_tokens", None, "a required int (the context window)")
        values: dict[str, Any] = dict(data)
        return cls(**values)


_KNOBS: Final = frozenset(field.name for field in dataclasses.fields(CompactionPolicy))


def _reject_unknown(data: Mapping[str, object]) -> None:
    unknown = sorted(str(key) for key in data if key not in _KNOBS)
    if unknown:
        raise ConfigError(
            ", ".join(unknown),
            {key: data[key] for key in data if key not in _KNOBS},
            "a CompactionPolicy knob: " + ", ".join(sorted(_KNOBS)),
        )


# -- model catalogue (R5) and family rules (R4) -------------------------------------------------


_T = TypeVar("_T")


class _ModelInfo(NamedTuple):
    context_window: int
    max_output_tokens: int | None = None
    max_input_tokens: int | None = None  # only where the provider limits input below the window


# Public provider figures. A pattern matches at a word start of the name after its last `/`
# (so `openai/gpt-4o`, `us.anthropic.claude-…` and `llama3.1:8b` all work), case-insensitively;
# the longest matched text wins, so `gpt-4o` beats `gpt-4`. Native windows only: a deployment
# that extends one (Qwen with YaRN) passes `max_context_tokens` explicitly.
_CATALOGUE: Final[tuple[tuple[str, _ModelInfo], ...]] = (
    (r"gpt-3\.5-turbo", _ModelInfo(16_385, 4_096)),
    (r"gpt-4", _ModelInfo(8_192, 8_192)),
    (r"gpt-4-turbo", _ModelInfo(128_000, 4_096)),
    (r"gpt-4o", _ModelInfo(128_000, 16_384)),
    (r"gpt-4\.1", _ModelInfo(1_047_576, 32_768)),
    (r"gpt-5", _ModelInfo(400_000, 128_000, max_input_tokens=272_000)),
    (r"gpt-5(?:\.\d+)?-chat", _ModelInfo(128_000, 16_384)),
    (r"o1", _ModelInfo(200_000, 100_000)),
    (r"o1-mini", _ModelInfo(128_000, 65_536)),
    (r"o1-preview", _ModelInfo(128_000, 32_768)),
    (r"o3", _ModelInfo(200_000, 100_000)),
    (r"o4-mini", _ModelInfo(200_000, 100_000)),
    (r"claude-3", _ModelInfo(200_000, 4_096)),
    (r"claude-3[.-]5", _ModelInfo(200_000, 8_192)),
    (r"claude-3[.-]7", _ModelInfo(200_000, 64_000)),
    (r"claude-sonnet-4", _ModelInfo(200_000, 64_000)),
    (r"claude-opus-4", _ModelInfo(200_000, 32_000)),
    (r"claude-haiku-4", _ModelInfo(200_000, 64_000)),
    (r"deepseek-chat", _ModelInfo(128_000, 8_192)),
    (r"deepseek-reasoner", _ModelInfo(128_000, 65_536)),
    (r"qwen2\.5", _ModelInfo(32_768, 8_192)),
    (r"qwen3", _ModelInfo(32_768)),
    (r"qwen3[-:].*2507", _ModelInfo(262_144)),
    (r"qwen3-coder", _ModelInfo(262_144)),
    (r"gemma-?3", _ModelInfo(131_072)),
    (r"gemma-?3[-:](?:270m|1b)", _ModelInfo(32_768)),
    (r"gemma-?3n", _ModelInfo(32_768)),
    (r"llama-?3", _ModelInfo(8_192)),
    (r"llama-?3[.-][123](?!\d)", _ModelInfo(131_072)),
)


class _CacheInfo(NamedTuple):
    """A provider's prompt cache: lifetime after the last use, and prices per uncached input."""

    ttl_seconds: float | None  # None: not published (a host may still report a cold cache)
    read: float
    write: float
    output: float


# Public provider figures, matched like the catalogue (the longest match wins). Anthropic: a
# cache entry lives 5 minutes, refreshed on each use (1 hour on request, with 2x writes); reads
# cost 0.1x input, writes 1.25x, output 5x (Claude pricing and prompt-caching docs). OpenAI: an
# in-memory cache is "typically" cleared after 5-10 minutes without use and always within an
# hour (prompt-caching guide); 5 minutes is taken, the time after which it may be gone; no write
# premium; cached input 0.5x (gpt-4o), 0.25x (gpt-4.1, o3, o4-mini), 0.1x (gpt-5), output 4x
# (8x for gpt-5). DeepSeek's disk cache lasts hours to days, with no published lifetime: read
# 0.1x, output 1.5x. A deployment with other terms overrides the knobs.
_CACHES: Final[tuple[tuple[str, _CacheInfo], ...]] = (
    (r"claude", _CacheInfo(300.0, 0.1, 1.25, 5.0)),
    (r"gpt-4o", _CacheInfo(300.0, 0.5, 1.0, 4.0)),
    (r"gpt-4\.1", _CacheInfo(300.0, 0.25, 1.0, 4.0)),
    (r"gpt-5", _CacheInfo(300.0, 0.1, 1.0, 8.0)),
    (r"o[34](?:-mini)?(?!\d)", _CacheInfo(300.0, 0.25, 1.0, 4.0)),
    (r"deepseek", _CacheInfo(None, 0.1, 1.0, 1.5)),
)


class _FamilyRule(NamedTuple):
    why: str
    output_need: int | None = None  # replaces the catalogue's max output; the window caps apply
    knobs: Mapping[str, object] = MappingProxyType({})


# Per-family overrides, matched like the catalogue; they win over the window tier. Add a row only
# with evidence from real runs of that family.
_FAMILY_RULES: tuple[tuple[str, _FamilyRule], ...] = (
    (
        r"o[134](?!\d)|deepseek-r(?:easoner|1)|qwq",
        _FamilyRule("reasoning tokens are output: reserve the full cap", output_need=_RESERVE_CAP),
    ),
)


def _longest_match(model: str | None, table: tuple[tuple[str, _T], ...]) -> _T | None:
    if model is None:
        return None
    name = model.strip().lower().rsplit("/", 1)[-1]
    best: tuple[int, _T] | None = None
    for pattern, value in table:
        found = re.search(rf"(?<![a-z0-9]){pattern}", name)
        if found is not None and (best is None or len(found.group()) > best[0]):
            best = (len(found.group()), value)
    return None if best is None else best[1]


def resolve_context_window(model: str | None) -> int | None:
    """The catalogue's context window for `model`, or `None` when the model is unknown (R5)."""
    info = _longest_match(model, _CATALOGUE)
    return None if info is None else info.context_window


def resolve_compaction_policy(
    model: str | None, max_context_tokens: int | None = None, **overrides: object
) -> CompactionPolicy:
    """The policy for `model`: the single decision point (R4), run once at assembly time.

    The window is `max_context_tokens` if given, else the catalogue's (R5); with neither this
    raises `ConfigError("max_context_tokens", None, …)`. Family rules win over the window tier;
    `overrides` (any knob but the window) win last and are validated like the rest.
    """
    if model is not None and not isinstance(model, str):
        raise ConfigError("model", model, "a model name (str) or None")
    info = _longest_match(model, _CATALOGUE)
    if max_context_tokens is not None:
        window = _check_int("max_context_tokens", max_context_tokens)
    elif info is not None:
        window = info.context_window
    else:
        raise ConfigError(
            "max_context_tokens",
            None,
            f"an int in [{_MIN_WINDOW}, {_MAX_WINDOW}]: model {model!r} is not in the catalogue",
        )
    tier = _LARGE if window >= _LARGE_TIER_MIN_WINDOW else _DESKTOP
    knobs: dict[str, object] = {"max_context_tokens": window, **tier._asdict()}
    output_need = None if info is None else info.max_output_tokens
    rule = _longest_match(model, _FAMILY_RULES)
    if rule is not None:
        knobs.update(rule.knobs)
        if rule.output_need is not None:
            output_need = rule.output_need
    cache = _longest_match(model, _CACHES)
    if cache is not None:
        knobs["cache_ttl_seconds"] = cache.ttl_seconds
        knobs["cache_read_price_ratio"] = cache.read
        knobs["cache_write_price_ratio"] = cache.write
        knobs["output_price_ratio"] = cache.output
    max_input = None if info is None else info.max_input_tokens
    knobs["reserved_output_tokens"] = _derived_reserve(window, output_need, max_input)
    knobs["headroom_tokens"] = _derived_headroom(window)
    _reject_unknown(overrides)
    knobs.update(overrides)
    return CompactionPolicy.from_dict(knobs)
