"""`Compactor`: the compaction engine for people who run their own agent loop.

```python
compactor = Compactor(resolve_compaction_policy("gpt-4o"), summarizer=my_summarizer)
messages = [Message.system("…"), Message.user("…")]
while True:
    messages = compactor.prepare(messages, last_prompt_tokens=usage)  # maybe compacted
    reply, usage = call_model(messages)                                # your own call
    messages.append(reply)                                             # + tool results …
```

Pass back the list `prepare` returned with the new messages appended; the compactor appends
those to its record, compacts when a path calls for it and returns what to send. The record (a
`MemoryRecord` unless you give one) keeps every original message. A new user message starts a
user turn, which renews the overflow retry budget (R13); `new_turn()` marks one explicitly.
Once it has compacted, add `history_tool_schemas("openai")` (or `"anthropic"`) to your
request's tools and answer those calls with `run_history_tool(name, arguments)`: the model
reads back what compaction took out of its context.

R6: `STEERABLE_SIDECAR_SUMMARIZER=0` (or `false`/`off`/`no`) in the environment turns the LLM
summarizer off, here and in `load_harness`; the older name `STEERABLE_SUMMARIZER` still works
when the new one is not set.

A step costs O(new messages): the continuity check looks at one message, tool pairs are repaired
incrementally, and when nothing was compacted or repaired the list you passed is returned as it
is. The sync methods share one event loop, closed by `close()` (or `with Compactor(...)`).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from .compaction import SummaryRequest
from .compaction.pairs import PairedProjection
from .engine import CompactionHooks
from .errors import ContextOverflowError, MessageError
from .hooks import RequestErrorContext, StepContext, Summarizer
from .messages import ContentPart, Message
from .policy import CompactionPolicy
from .recall import anthropic_tool_schemas, execute_history_tool, openai_tool_schemas
from .record import CompactionBoundary, MemoryRecord, Record
from .tokens import TokenMeter

__all__ = ["LEGACY_SUMMARIZER_ENV", "SUMMARIZER_ENV", "Compactor", "summarizer_switched_off"]

SUMMARIZER_ENV = "STEERABLE_SIDECAR_SUMMARIZER"
"""The R6 switch: `0`, `false`, `off` or `no` turns the LLM summarizer off."""
LEGACY_SUMMARIZER_ENV = "STEERABLE_SUMMARIZER"
"""The switch's first name, read when `SUMMARIZER_ENV` is not set."""
_OFF = frozenset({"0", "false", "off", "no"})

_T = TypeVar("_T")

AnySummarizer = Callable[[SummaryRequest], Awaitable[str]] | Callable[[SummaryRequest], str]


def summarizer_switched_off(env: Mapping[str, str]) -> bool:
    """Whether `env` turns the LLM summarizer off (R6); the new name wins over the old one."""
    value = env.get(SUMMARIZER_ENV)
    if value is None:
        value = env.get(LEGACY_SUMMARIZER_ENV, "")
    return value.strip().lower() in _OFF


def _as_async(summarizer: AnySummarizer | None) -> Summarizer | None:
    if summarizer is None:
        return None
    if inspect.iscoroutinefunction(summarizer) or inspect.iscoroutinefunction(
        getattr(summarizer, "__call__", None)  # noqa: B004 - callable objects with async __call__
    ):
        return summarizer  # type: ignore[return-value]
    sync = summarizer

    async def call(request: SummaryRequest) -> str:
        result = sync(request)
        if inspect.isawaitable(result):
            return await result
        return result

    return call


class Compactor:
    """Prepare each request of your own loop: append new messages, compact, return the projection.

    `summarizer` may be sync or async; it gets a `SummaryRequest` (send `request.messages` to
    your model, ideally the turn model itself, with no new cache breakpoint) and returns the
    summary text. Without one, or when `env` (default `os.environ`) switches it off (R6), the
    deterministic excerpt summary is used. The replay carries images as your requests did (the
    turn model saw them, and a pointer would break the cached prefix, R28); pass
    `replay_images=False` when the summarizer is a different, text-only model. `clock` is the
    engine's clock for the cold-cache rule (default `time.monotonic`): with a known cache
    lifetime, a request after a longer pause may compact first (`compaction.cold`);
    `report_cache_cold()` says the cache is cold whatever the clock says.
    """

    def __init__(
        self,
        policy: CompactionPolicy,
        *,
        record: Record | None = None,
        summarizer: AnySummarizer | None = None,
        model: str | None = None,
        meter: TokenMeter | None = None,
        replay_images: bool = True,
        summarizer_timeout: float | None = 300.0,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if summarizer_switched_off(os.environ if env is None else env):
            policy = policy.replace(summarizer_enabled=False)
        self.record = record if record is not None else MemoryRecord()
        self.hooks = CompactionHooks(
            self.record,
            policy,
            summarizer=_as_async(summarizer),
            meter=meter,
            model=model,
            replay_images=replay_images,
            summarizer_timeout=summarizer_timeout,
            clock=clock,
        )
        self._paired = PairedProjection(self.record)  # the repaired projection, kept in O(new)
        self._handed: tuple[int, Message | None] | None = None  # length, last of the last request
        self._sent_count: int | None = None  # projection length behind it (the meter's unit)
        self._round = 0
        self._turn = 0
        self._compacted = False
        self._scanned = 0
        self._turn_marked = False  # `new_turn()` was called since the last prepare
        self._runner: asyncio.Runner | None = None  # the sync methods' event loop, made lazily
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def close(self) -> None:
        """Close the event loop the sync methods use (the record stays open: it is yours)."""
        if self._finalizer is not None:
            self._finalizer()  # closes the runner once, and never again at garbage collection
            self._finalizer = None
        self._runner = None

    def __enter__(self) -> Compactor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def policy(self) -> CompactionPolicy:
        """The resolved policy in force."""
        return self.hooks.policy

    @property
    def compacted(self) -> bool:
        """Whether the record holds a compaction: from then on, offer the history tools."""
        if not self._compacted:
            entries = self.record.entries
            # A resumed record's checkpoint follows a boundary: the entries before it stay unread.
            self._compacted = self.record.resumed_at is not None or any(
                isinstance(e.event, CompactionBoundary) for e in entries[self._scanned :]
            )
            self._scanned = len(entries)
        return self._compacted

    def history_tool_schemas(self, flavor: Literal["openai", "anthropic"]) -> list[dict[str, Any]]:
        """The history tools for your request's `tools` once compacted (else an empty list)."""
        if not self.compacted:
            return []
        return openai_tool_schemas() if flavor == "openai" else anthropic_tool_schemas()

    @overload
    def run_history_tool(
        self, name: str, arguments: str | Mapping[str, Any], *, images: Literal[False] = False
    ) -> str: ...

    @overload
    def run_history_tool(
        self, name: str, arguments: str | Mapping[str, Any], *, images: bool
    ) -> str | list[ContentPart]: ...

    def run_history_tool(
        self, name: str, arguments: str | Mapping[str, Any], *, images: bool = False
    ) -> str | list[ContentPart]:
        """Answer the model's `history_search` / `history_read` call from this record.

        Returns the tool result text; a bad call gets an error text, never an exception.
        Results are capped at the policy's `recall_result_tokens`. With `images=True` (your
        tool results can carry images), reading a message with images returns its page and
        images as content parts, and a search that finds nothing lists the hidden messages
        holding images (`docs/recall.md`).
        """
        return execute_history_tool(
            self.record,
            name,
            arguments,
            max_tokens=self.policy.recall_result_tokens,
            images=images,
        )

    def new_turn(self) -> None:
        """Mark the start of a user turn (the overflow retry budget is per turn).

        Optional: a user message among the messages `prepare` receives starts a turn too.
        """
        self._turn += 1
        self._turn_marked = True

    def append(self, new_messages: Sequence[Message]) -> None:
        """Record `new_messages` without a step: nothing is compacted or handed out.

        For `extend` callers, when messages arrive that no request follows yet (a framework's
        final reply at the end of a run). A user message among them starts a turn, as in
        `extend`.
        """
        if any(m.role == "user" for m in new_messages):
            self.new_turn()
        self.record.append_messages(new_messages)

    def request_compact(self, focus: str | None = None) -> None:
        """Compact at the next `prepare`, whatever the pressure (R15).

        `focus` names what the summary must keep in full (`CompactionHooks.request_compact`).
        """
        self.hooks.request_compact(focus)

    def report_cache_cold(self) -> None:
        """The provider's prompt cache is cold: the next `prepare` may compact first.

        Above the cold threshold it compacts when that costs less than waiting for pressure
        (`CompactionHooks.report_cache_cold`).
        """
        self.hooks.report_cache_cold()

    def pressure(self) -> int:
        """The current pressure estimate in tokens."""
        return self.hooks.pressure()

    def _take_new(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The messages appended since the last `prepare`, after an O(1) continuity check.

        The list must start with what `prepare` returned last: its length and its last message
        are checked (comparing every message would make each step O(transcript)).
        """
        if self._handed is None:
            base = self._paired.sync()  # a reopened record: the request it would send
            self._handed = len(base), base[-1] if base else None
        length, last_message = self._handed
        if len(messages) < length:
            raise MessageError(
                f"got {len(messages)} messages but the last prepared request had {length}: "
                "pass back the list prepare() returned, with new messages appended"
            )
        if length:
            last = length - 1
            if messages[last] is not last_message and messages[last] != last_message:
                raise MessageError(
                    "differs from the message prepare() returned at this position; pass back "
                    "the list prepare() returned, with new messages appended",
                    index=last,
                )
        return messages[length:]

    async def prepare_async(
        self, messages: Sequence[Message], last_prompt_tokens: int | None = None
    ) -> list[Message]:
        """Append what is new in `messages`, compact if needed, and return what to send.

        `last_prompt_tokens` is the provider's `prompt_tokens` for the previous request.
        """
        await self._step(self._take_new(messages), last_prompt_tokens)
        return self._hand_out(messages)

    async def extend_async(
        self, new_messages: Sequence[Message], last_prompt_tokens: int | None = None
    ) -> list[Message]:
        """`prepare_async` for callers that hand over only the messages appended since.

        Framework adapters use it: their history is their own, so they pass what is new.
        """
        await self._step(new_messages, last_prompt_tokens)
        return self._hand_out()

    async def _step(self, new_messages: Sequence[Message], last_prompt_tokens: int | None) -> None:
        """Record `new_messages` and run the engine's pre-step on them."""
        await self.hooks.pre_step(self._record_step(new_messages, last_prompt_tokens))

    def _record_step(
        self, new_messages: Sequence[Message], last_prompt_tokens: int | None
    ) -> StepContext:
        """Record `new_messages` and the last usage; the context of the step they start."""
        self._record_new(new_messages, last_prompt_tokens)
        return StepContext(record=self.record, round=self._round, turn=self._turn)

    def _record_new(self, new_messages: Sequence[Message], last_prompt_tokens: int | None) -> None:
        """Record `new_messages` and the last usage, and count the step they start."""
        # Plain loops, not generators: a step brings two or three messages (the tiny-step
        # benchmark of `peer.py` counts every microsecond here).
        if not self._turn_marked:
            for message in new_messages:
                if message.role == "user":
                    self._turn += 1
                    break
        self._turn_marked = False
        if last_prompt_tokens is not None and self._sent_count is not None:
            self.hooks.observe(last_prompt_tokens, self._sent_count)
        self.record.append_messages(new_messages)
        self._round += 1

    def _sync_step(self, new_messages: Sequence[Message], last_prompt_tokens: int | None) -> None:
        """`_step` for the sync methods: the event loop (and a context) only if it may compact."""
        self._record_new(new_messages, last_prompt_tokens)
        if self.hooks.quiet_step_at(self._round, self._turn) is None:
            ctx = StepContext(record=self.record, round=self._round, turn=self._turn)
            self._run(self.hooks.pre_step(ctx))

    def _hand_out(self, given: Sequence[Message] = ()) -> list[Message]:
        """The request to send: the projection with broken tool pairs repaired (R22b).

        When it is exactly `given` (nothing compacted or repaired), `given` itself comes back,
        checked in O(new messages); otherwise a fresh list.
        """
        self._sent_count = len(self.record.projection)
        out = self._paired.sync()
        repair = self._paired.repair
        handed = self._handed[0] if self._handed is not None else 0
        if (
            isinstance(given, list)
            and len(given) == len(out)
            and repair.changed_from >= handed
            and given[handed:] == out[handed:]  # the new messages: identical, or at least equal
        ):
            result = given
        else:
            result = list(out)
        repair.mark()
        self._handed = len(out), out[-1] if out else None
        return result

    def prepare(
        self, messages: Sequence[Message], last_prompt_tokens: int | None = None
    ) -> list[Message]:
        """`prepare_async` for synchronous loops (not callable from a running event loop)."""
        self._check_no_running_loop()
        self._sync_step(self._take_new(messages), last_prompt_tokens)
        return self._hand_out(messages)

    async def recover_overflow_async(self, error: ContextOverflowError) -> list[Message]:
        """After a context-overflow error: compact and return the messages to retry with.

        Raises `OverflowRetriesExhaustedError` past the per-turn bound (R13).
        """
        await self.hooks.on_request_error(
            RequestErrorContext(
                record=self.record, round=self._round, turn=self._turn, error=error, attempt=1
            )
        )
        return self._hand_out()

    def extend(
        self, new_messages: Sequence[Message], last_prompt_tokens: int | None = None
    ) -> list[Message]:
        """`extend_async` for synchronous loops."""
        self._check_no_running_loop()
        self._sync_step(new_messages, last_prompt_tokens)
        return self._hand_out()

    def recover_overflow(self, error: ContextOverflowError) -> list[Message]:
        """`recover_overflow_async` for synchronous loops."""
        return self._run(self.recover_overflow_async(error))

    @staticmethod
    def _check_no_running_loop() -> None:
        # `get_running_loop` would raise when there is none, the common case: `_get_running_loop`
        # (public in `asyncio.events.__all__`) answers `None` at a tenth of that.
        if asyncio._get_running_loop() is not None:
            raise RuntimeError("called from a running event loop: use the *_async method instead")

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run `coro` on this compactor's own event loop (one per compactor, not one per call)."""
        try:
            self._check_no_running_loop()
        except RuntimeError:
            coro.close()
            raise
        if self._runner is None:
            # Its own loop factory: the runner then leaves the thread's current loop alone.
            self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
            self._finalizer = weakref.finalize(self, _close_runner, self._runner)
        loop = self._runner.get_loop()
        # `Runner.run` would also install a SIGINT handler on every call (about 4x the cost of
        # the step itself); an interrupt still cancels the task below before it propagates.
        task = loop.create_task(coro)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
                loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
            raise


def _close_runner(runner: asyncio.Runner) -> None:
    """Close `runner`; collected inside another running loop, only its (idle) loop is closed."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner.close()
    else:  # `Runner.close` would have to run its loop, which cannot start inside another
        runner.get_loop().close()
