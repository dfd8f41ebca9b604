"""Fake providers for tests: scripted, function-backed, and a prompt-cache model.

`ScriptedProvider` answers requests in order and fails loudly when its script runs out;
`FunctionProvider` answers from the request; `CachingProvider` stands in for a real
prompt-caching provider (billed tokens, cache reads and writes by longest common prefix, TTL, the
400 context overflow), so cache behaviour is testable without a network. All three record every
request in `.requests` and every reply in `.completions`, and stream by replaying `complete`.

Compaction asks the session's own model for its summaries, so a scripted fake gets summary
requests between the steps of its script. `is_summary_request` tells them apart; a fake can
answer them with `fake_summary(request)`, a checkpoint naming what the request replays (the
engine refuses a canned text that keeps none of it). Each framework adapter has a
`FakeSummaries` wrapper that does this for the framework's own fake models.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .compaction import is_summary_instruction
from .compaction.judge import distinctive_values
from .errors import ConfigError, ProviderError
from .messages import ImagePart, Message, TextPart, ToolCall
from .providers.base import (
    Completion,
    CompletionRequest,
    StreamDone,
    StreamEvent,
    TextDelta,
    ToolSpec,
    provider_error,
)
from .record import Usage
from .tokens import estimate_tokens, image_tokens

__all__ = [
    "FAKE_SUMMARY",
    "CacheRules",
    "CachingProvider",
    "FunctionProvider",
    "Reply",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedProvider",
    "fake_summary",
    "is_summary_request",
]

Reply: TypeAlias = Completion | Message | str
"""What a fake may answer: a whole `Completion`, an assistant `Message`, or its text."""

ScriptItem: TypeAlias = Reply | BaseException | Callable[[CompletionRequest], Reply]
"""One step of a `ScriptedProvider` script: a reply, an error to raise, or a reply function."""


FAKE_SUMMARY = (
    "## Primary Request\nThe task the conversation started with (a test fake wrote this summary)."
    "\n## Current Work\nContinuing from the messages this checkpoint replaces."
)
"""The opening of `fake_summary`'s checkpoint (alone, a summary of a short span)."""

_FAKE_VALUES = 60


def fake_summary(request: CompletionRequest | Sequence[Message] = ()) -> str:
    """A checkpoint for a fake to answer a summary request with, naming what it replays.

    `FAKE_SUMMARY`, then up to 60 of the distinctive values (paths, identifiers, numbers) of
    the messages the request replays after its first user message. The engine judges a
    summary by its content (`compaction.judge`): a canned text that keeps none of the span's
    values is refused like an answer to the wrong question, so a fake names them, as a real
    summary would.
    """
    messages = list(request.messages if isinstance(request, CompletionRequest) else request)
    first = next((i for i, m in enumerate(messages) if m.role == "user"), 0)
    start, end = first + 1, len(messages) - 1  # after the goal, before the instruction
    values = sorted(distinctive_values(messages, (start, end))) if end > start else []
    if not values:
        return FAKE_SUMMARY
    return f"{FAKE_SUMMARY}\n## Files and Code\n" + ", ".join(values[:_FAKE_VALUES])


def is_summary_request(request: CompletionRequest | Sequence[Message] | str) -> bool:
    """Whether `request` asks the model for a checkpoint summary rather than its next step.

    A summary request ends with the engine's summary instruction as a user message. Pass a
    `CompletionRequest`, its messages, or the text of a request's last user message (what a
    framework's fake model can read from its own message types).
    """
    if isinstance(request, str):
        return is_summary_instruction(request)
    messages = request.messages if isinstance(request, CompletionRequest) else request
    last = messages[-1] if messages else None
    return last is not None and last.role == "user" and is_summary_instruction(last.text)


class ScriptExhaustedError(AssertionError):
    """A `ScriptedProvider` got a request after its script ran out.

    An `AssertionError` rather than a `CompactionError`: it means the test is wrong, so no
    library handler may mistake it for a provider failure, and pytest reports it as a failure.
    """

    def __init__(self, provider: str, answered: int) -> None:
        self.provider = provider
        self.answered = answered
        super().__init__(
            f"ScriptedProvider {provider!r} ran out of replies: its script answered {answered} "
            f"request(s) and has nothing for request {answered + 1}"
        )

    def __reduce__(self) -> tuple[type[ScriptExhaustedError], tuple[str, int]]:
        return (type(self), (self.provider, self.answered))


def _assistant(reply: Message | str) -> Message:
    message = Message.assistant(reply) if isinstance(reply, str) else reply
    if message.role != "assistant":
        raise ValueError(f"a fake's reply must be an assistant message, got role {message.role!r}")
    return message


def _stop_reason(message: Message) -> str:
    return "tool_calls" if message.tool_calls else "stop"


def _estimated(request: CompletionRequest, reply: Reply) -> Completion:
    """`reply` as a `Completion`, billed by `estimate_tokens` unless it carries its own usage."""
    if isinstance(reply, Completion):
        return reply
    message = _assistant(reply)
    usage = Usage(
        prompt_tokens=estimate_tokens(request.messages),
        completion_tokens=estimate_tokens(message),
    )
    return Completion(message=message, usage=usage, stop_reason=_stop_reason(message))


class _RecordingProvider:
    """Records requests and replies; streams a completion as word deltas then `StreamDone`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.requests: list[CompletionRequest] = []
        self.completions: list[Completion] = []

    @property
    def name(self) -> str:
        """The name errors and logs use."""
        return self._name

    async def complete(self, request: CompletionRequest) -> Completion:
        """Record `request`, then answer it (or raise what the fake raises for it)."""
        self.requests.append(request)
        completion = await self._answer(request)
        self.completions.append(completion)
        return completion

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """The same reply as `complete`, as text deltas (word by word) then one `StreamDone`."""
        completion = await self.complete(request)
        for piece in re.findall(r"\S+\s*|\s+", completion.message.text):
            yield TextDelta(piece)
        yield StreamDone(completion)

    async def _answer(self, request: CompletionRequest) -> Completion:
        raise NotImplementedError


class ScriptedProvider(_RecordingProvider):
    """Answers each request with the next script item; raises when the script runs out.

    A `str` becomes an assistant text message, a `Message` is sent as is, an exception instance
    is raised, and a callable is called with the request. Replies that are not a `Completion` are
    billed `estimate_tokens(request.messages)` prompt tokens. Past the end of the script every
    request raises `ScriptExhaustedError`.
    """

    def __init__(self, script: Sequence[ScriptItem], *, name: str = "scripted") -> None:
        super().__init__(name)
        for i, item in enumerate(script):
            if isinstance(item, type) or not (
                isinstance(item, Completion | Message | str | BaseException) or callable(item)
            ):
                raise TypeError(
                    f"script[{i}] must be a Completion, Message, str, exception instance or "
                    f"callable, got {item!r}"
                )
        self._script = list(script)
        self._next = 0

    @property
    def remaining(self) -> int:
        """How many script items are still unused."""
        return len(self._script) - self._next

    async def _answer(self, request: CompletionRequest) -> Completion:
        if self._next >= len(self._script):
            raise ScriptExhaustedError(self.name, self._next)
        item = self._script[self._next]
        self._next += 1
        if isinstance(item, BaseException):
            raise item
        reply = item if isinstance(item, Completion | Message | str) else item(request)
        return _estimated(request, reply)


class FunctionProvider(_RecordingProvider):
    """Answers every request with `fn(request)`, sync or async; what `fn` raises propagates."""

    def __init__(
        self,
        fn: Callable[[CompletionRequest], Reply | Awaitable[Reply]],
        *,
        name: str = "function",
    ) -> None:
        super().__init__(name)
        self._fn = fn

    async def _answer(self, request: CompletionRequest) -> Completion:
        result = self._fn(request)
        reply = result if isinstance(result, Completion | Message | str) else await result
        return _estimated(request, reply)


# -- the prompt-cache model ---------------------------------------------------------------------


def _check_int(key: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(key, value, f"an int >= {low}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheRules:
    """A provider's documented prompt-cache rules, as `CachingProvider` applies them.

    A request reads the longest token prefix it shares with a live cache entry, rounded down to
    a multiple of `step` and counted only from `min_cacheable` tokens. Entries expire
    `ttl_seconds` after they were last written or read. `reports_writes` says whether the
    provider bills cache writes (`Usage.cache_write_tokens`); `overflow` whose 400 error to copy.
    """

    name: str
    min_cacheable: int
    step: int = 1
    ttl_seconds: float
    reports_writes: bool = False
    overflow: Literal["openai", "anthropic"] = "openai"

    def __post_init__(self) -> None:
        _check_int("min_cacheable", self.min_cacheable, 0)
        _check_int("step", self.step, 1)
        if isinstance(self.ttl_seconds, bool) or not self.ttl_seconds > 0:
            raise ConfigError("ttl_seconds", self.ttl_seconds, "a number > 0")
        if self.overflow not in ("openai", "anthropic"):
            raise ConfigError("overflow", self.overflow, "'openai' or 'anthropic'")

    @classmethod
    def openai(cls, *, ttl_seconds: float = 300.0) -> CacheRules:
        """OpenAI: prompts of 1024+ tokens, hits in 128-token steps, writes not billed.

        https://developers.openai.com/api/docs/guides/prompt-caching ("enabled automatically for
        prompts that are 1024 tokens or longer"; in-memory caches are cleared after 5-10 minutes
        of inactivity, within an hour at most: the fake takes 5) and the Prompt Caching 201
        cookbook ("cache hits occurring in increments of 128 tokens"). Usage has no write count.
        """
        return cls(name="openai", min_cacheable=1024, step=128, ttl_seconds=ttl_seconds)

    @classmethod
    def anthropic(cls, *, min_cacheable: int = 1024, ttl_seconds: float = 300.0) -> CacheRules:
        """Anthropic: 1024+ tokens (most models), 5-minute TTL refreshed on use, writes billed.

        https://platform.claude.com/docs/en/build-with-claude/prompt-caching: the default
        lifetime is 5 minutes, refreshed each time the cached content is used (`"1h"` is
        optional); the minimum is 1024 tokens for Sonnet/Opus 4 and 3.7, 2048 for Haiku 3 and
        3.5, 4096 for Opus 4.5 and Haiku 4.5 (pass `min_cacheable`); `cache_creation_input_tokens`
        reports writes. Real reads stop at content-block boundaries; the fake reads to the token.
        """
        return cls(
            name="anthropic",
            min_cacheable=min_cacheable,
            ttl_seconds=ttl_seconds,
            reports_writes=True,
            overflow="anthropic",
        )

    @classmethod
    def deepseek(cls, *, ttl_seconds: float = 3600.0) -> CacheRules:
        """DeepSeek: context caching on disk in 64-token units, kept for hours, writes not billed.

        https://api-docs.deepseek.com/guides/kv_cache: the 2024 edition gives a 64-token storage
        unit (shorter content is not cached) and clears unused caches after hours to days (the
        fake takes one hour). The current edition matches whole "cache prefix units" cut at
        request ends and fixed intervals, which the longest-prefix model only approximates.
        """
        return cls(name="deepseek", min_cacheable=64, step=64, ttl_seconds=ttl_seconds)


# A chat-template-like tokenizer: every message is its role marker, the pieces of its parts and
# an end marker, so a request's tokens are the concatenation of its messages' tokens and two
# requests that share a message prefix share its tokens exactly. Inside a text, pieces are found
# left to right with at most one character of lookahead, so texts sharing a byte prefix share
# every piece of it but the last. Pieces follow BPE habits (a word with its leading space, long
# words in 7-letter pieces, digits in threes, punctuation in pairs, one token per CJK character).
# On `benchmarks/corpora` counts come out 0.6-0.95x the default `estimate_tokens` (which is
# meant to over-estimate) and 0.8-1.3x its o200k calibration.
_LETTER = r"[^\W\d_\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]"  # letters, CJK excluded
_PIECES = re.compile(
    rf" ?{_LETTER}{{1,7}}"  # a word and its leading space
    r"| ?[0-9]{1,3}"  # numbers in groups of three digits
    r"| ?[!-/:-@\[-`{-~]{1,2}"  # ASCII punctuation in pairs
    r"| ?[^\sA-Za-z0-9]"  # any other character (CJK, symbols), one at a time
    r"|[ \t]+(?=[ \t])"  # a run of blanks, leaving the last one to the next piece
    r"|\n+"  # newline runs
    r"|\s"  # any other whitespace character
)
_Block: TypeAlias = tuple[str, ...]
_Blocks: TypeAlias = tuple[_Block, ...]


def _content_tokens(part: TextPart | ImagePart) -> list[str]:
    if isinstance(part, TextPart):
        return _PIECES.findall(part.text)
    digest = hashlib.sha256(part.data if part.data is not None else str(part.url).encode())
    return [f"<|image {digest.hexdigest()[:16]} {k}|>" for k in range(image_tokens(part))]


def _message_block(message: Message) -> _Block:
    out = [f"<|{message.role}|>"]
    for part in message.parts:
        if isinstance(part, TextPart | ImagePart):
            out += _content_tokens(part)
        elif isinstance(part, ToolCall):
            out += ["<|call|>", *_PIECES.findall(f"{part.name} {part.id}\n{part.arguments}")]
        else:
            out += [
                "<|error|>" if part.is_error else "<|result|>",
                *_PIECES.findall(part.call_id + "\n"),
            ]
            for item in part.content:
                out += _content_tokens(item)
    out.append("<|end|>")
    return tuple(out)


def _tools_block(tools: tuple[ToolSpec, ...]) -> _Block:
    if not tools:
        return ()
    specs = [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]
    text = json.dumps(specs, sort_keys=True, ensure_ascii=False, default=dict)  # Mapping → dict
    return ("<|tools|>", *_PIECES.findall(text), "<|end|>")


def _common_prefix(a: _Blocks, b: _Blocks) -> int:
    """Length in tokens of the longest common prefix of two block sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is y or x == y:
            n += len(x)
            continue
        for s, t in zip(x, y, strict=False):
            if s != t:
                break
            n += 1
        break
    return n


def _cut(blocks: _Blocks, tokens: int) -> _Blocks:
    """The first `tokens` tokens of `blocks`, still as blocks."""
    out: list[_Block] = []
    for block in blocks:
        if tokens <= 0:
            break
        out.append(block if len(block) <= tokens else block[:tokens])
        tokens -= len(block)
    return tuple(out)


@dataclass(slots=True)
class _Entry:
    blocks: _Blocks
    tokens: int
    last_used: float


class CachingProvider(_RecordingProvider):
    """A deterministic stand-in for a prompt-caching provider with a `window`-token context.

    Each request is tokenized as a chat template (tool specs first, then each message as
    role marker, BPE-like pieces, end marker; images as `image_tokens` opaque tokens) and billed
    that many prompt tokens. `cached_tokens` is the longest prefix shared with a live earlier
    entry under `rules` (default `CacheRules.openai()`); a read refreshes what it read. A request
    writes its whole prompt as an entry unless `cache_retention="none"` or it is shorter than
    `rules.min_cacheable`. Prompt plus `max_output_tokens` above `window` raises the provider's
    400 `ContextOverflowError`. `answer` makes the reply (default: `"Reply <n>."`).
    `token_scale` bills that many tokens per counted piece (rounded up), to stand in for a
    tokenizer denser (below 1) or sparser (above 1) than the library's estimate.
    """

    def __init__(
        self,
        answer: Callable[[CompletionRequest], Message | str] | None = None,
        *,
        window: int,
        rules: CacheRules | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "caching",
        token_scale: float = 1.0,
    ) -> None:
        super().__init__(name)
        _check_int("window", window, 1)
        if isinstance(token_scale, bool) or not isinstance(token_scale, int | float):
            raise TypeError(f"token_scale must be a number, got {type(token_scale).__name__}")
        if not 0.1 <= token_scale <= 10:
            raise ValueError(f"token_scale must be in [0.1, 10], got {token_scale!r}")
        self.token_scale = float(token_scale)
        self._answer_fn = answer
        self.window = window
        self.rules = rules if rules is not None else CacheRules.openai()
        self._clock = clock
        self._entries: list[_Entry] = []
        self._blocks_of: dict[Message, _Block] = {}

    def count_tokens(self, request: CompletionRequest) -> int:
        """The prompt tokens `request` would be billed (tool specs included)."""
        return self._bill(sum(map(len, self._blocks(request))))

    def _bill(self, pieces: int) -> int:
        """Billed tokens for `pieces` counted pieces (`token_scale`)."""
        return pieces if self.token_scale == 1.0 else math.ceil(pieces * self.token_scale)

    def cache_hit_rate(self) -> float:
        """Cached prompt tokens over all prompt tokens billed so far (0.0 before any reply)."""
        prompt = sum(c.usage.prompt_tokens for c in self.completions)
        cached = sum(c.usage.cached_tokens for c in self.completions)
        return cached / prompt if prompt else 0.0

    def clear_cache(self) -> None:
        """Drop every cache entry, as if the provider had evicted them all."""
        self._entries.clear()

    def _message_block(self, message: Message) -> _Block:
        block = self._blocks_of.get(message)
        if block is None:
            block = self._blocks_of[message] = _message_block(message)
        return block

    def _blocks(self, request: CompletionRequest) -> _Blocks:
        return (_tools_block(request.tools), *map(self._message_block, request.messages))

    def _overflow(self, prompt: int, output: int) -> ProviderError:
        """The 400 error the imitated provider sends, worded as its API words it."""
        window, code = self.window, "context_length_exceeded"
        if self.rules.overflow == "anthropic":
            code = "invalid_request_error"
            text = (
                f"prompt is too long: {prompt} tokens > {window} maximum"
                if prompt > window
                else f"input length and `max_tokens` exceed context limit: {prompt} + {output} > "
                f"{window}, decrease input length or `max_tokens` and try again"
            )
        elif output:
            text = (
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{prompt + output} tokens ({prompt} in the messages, {output} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        else:
            text = (
                f"This model's maximum context length is {window} tokens. However, your messages "
                f"resulted in {prompt} tokens. Please reduce the length of the messages."
            )
        return provider_error(self.name, status_code=400, code=code, message=text)

    async def _answer(self, request: CompletionRequest) -> Completion:
        blocks = self._blocks(request)
        pieces = sum(map(len, blocks))
        prompt = self._bill(pieces)
        output = request.max_output_tokens or 0
        if prompt + output > self.window:
            raise self._overflow(prompt, output)
        answer = self._answer_fn or (lambda _: f"Reply {len(self.completions) + 1}.")
        message = _assistant(answer(request))
        cached, written = self._use_cache(blocks, pieces, request.cache_retention == "default")
        cached = min(self._bill(cached), prompt)
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=self._bill(len(self._message_block(message))),
            cached_tokens=cached,
            cache_write_tokens=prompt - cached if written and self.rules.reports_writes else 0,
        )
        return Completion(message=message, usage=usage, stop_reason=_stop_reason(message))

    def _use_cache(self, blocks: _Blocks, prompt: int, write: bool) -> tuple[int, int]:
        """Read (and refresh) the best live prefix, then write `blocks`: `(cached, written)`."""
        rules, now = self.rules, self._clock()
        self._entries = [e for e in self._entries if now < e.last_used + rules.ttl_seconds]
        best, source = 0, None
        for entry in self._entries:
            shared = _common_prefix(blocks, entry.blocks)
            if shared > best:
                best, source = shared, entry
        cached = best // rules.step * rules.step
        if cached < rules.min_cacheable:
            cached = 0
        if source is not None and cached:
            if cached >= source.tokens:
                source.last_used = now
            else:  # only the part read stays warm
                self._entries.append(_Entry(_cut(source.blocks, cached), cached, now))
        if not write or prompt < rules.min_cacheable:
            return cached, 0
        # An entry that is a prefix of the new one can never match better than it does.
        self._entries = [e for e in self._entries if _common_prefix(blocks, e.blocks) < e.tokens]
        self._entries.append(_Entry(blocks, prompt, now))
        return cached, prompt - cached
