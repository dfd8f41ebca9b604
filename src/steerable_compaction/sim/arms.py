"""Strategy arms: how each context-management strategy plugs into `CoreLoop` as hooks.

Every arm runs the same scripted session over the same provider, record and summarizer; arms
differ only in what they keep and how they ask for summaries. Reimplemented arms measure
pressure like the engine (the last billed `prompt_tokens` plus an estimate of what came since)
and trigger at the same threshold, so triggers are normalized and the comparison is about the
strategy. They write their rewrites into the record as the engine does (brackets for summaries,
boundaries with edits for folds and masks), so the L2 trace assertions read every arm alike.

This module holds the shared plumbing and the in-house arms (`none`, `naive`, `fold_only`,
`current`) plus observation masking; `peers` holds the other published strategies.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..compaction import newest_turn, prune, select_regions
from ..engine import newest_usage
from ..errors import ContextOverflowError
from ..harness import default_harness_text, load_harness
from ..hooks import (
    CompactionOutcome,
    PreStepAction,
    RequestErrorContext,
    RetryAction,
    StepContext,
    ToolResultContext,
)
from ..loop import CoreLoop, Tool
from ..messages import Message, TextPart, ToolResult
from ..policy import CompactionPolicy
from ..providers.base import CompletionRequest, Provider
from ..record import (
    CompactionAction,
    CompactionTrigger,
    Edit,
    Record,
)
from ..tokens import TokenMeter
from ..writer import CompactionWriter
from .summarizer import NAIVE_HEAD, TRANSCRIPT_CLOSE, TRANSCRIPT_OPEN, flatten

__all__ = [
    "ArmContext",
    "ArmHooks",
    "BuiltArm",
    "FoldOnlyArm",
    "NaiveArm",
    "ObservationMaskingArm",
    "build_current",
    "build_none",
]

MAX_ROUNDS_PER_TURN = 50  # as the packaged harness


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmContext:
    """What an arm is built from: one run's record, provider, policy and tools."""

    record: Record
    provider: Provider
    policy: CompactionPolicy
    tools: tuple[Tool, ...]
    spill_dir: Path
    summary_max_tokens: int  # every arm's summary call gets the engine's output room
    model: str | None = None  # the model whose token calibration the meters use
    harness: Mapping[str, Any] | None = None  # `current`'s harness (`read_harness`); None: default
    clock: Callable[[], float] | None = None  # the simulated clock (the engine's cold-cache rule)
    # The simulated provider's cache lifetime and prices, as policy knobs: what a host knows of
    # its provider. `current` takes them where its harness does not set them.
    cache_terms: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltArm:
    """A ready loop, its policy, and the policy whose hysteresis it claims (trace check)."""

    loop: CoreLoop
    policy: CompactionPolicy
    trace_policy: CompactionPolicy | None = None
    pressure: Callable[[], int] | None = None  # the arm's own estimate of its next request
    meter: TokenMeter | None = None  # the meter that prices its summary requests


def leading_system(messages: Sequence[Message]) -> int:
    """How many system messages open `messages`."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n


class ArmHooks:
    """Hooks plumbing for reimplemented arms: pressure, overflow retries, record writes.

    Subclasses override `every_step` (runs before every request), `compact` (runs at or above
    the threshold, and on a context overflow) and `post_tool_result`.
    """

    max_overflow_retries = 2

    def __init__(self, ctx: ArmContext) -> None:
        self.record = ctx.record
        self.provider = ctx.provider
        self.policy = ctx.policy
        self.tool_specs = tuple(tool.spec for tool in ctx.tools)
        self.summary_max_tokens = ctx.summary_max_tokens
        self.meter = TokenMeter(ctx.model, online_calibration=False)  # peers price statically
        self.writer = CompactionWriter(
            ctx.record,
            self.meter,
            threshold_tokens=ctx.policy.threshold_tokens,
            id_prefix=f"{type(self).__name__.lower()}-",
        )
        self._scanned = 0
        self._turn = -1
        self._retries = 0

    # -- measuring ------------------------------------------------------------------------------

    def _observe(self) -> None:
        """Anchor the meter on the newest billed reply unless a rewrite came after it."""
        found = newest_usage(self.record, self._scanned)
        self._scanned = len(self.record.entries)
        if found is not None:
            self.meter.observe(*found)

    def pressure(self) -> int:
        """Tokens the next request will carry (estimated from the last billed request)."""
        return self.meter.pressure(self.record.projection.messages)

    def next_request_tokens(self) -> int:
        """`pressure` anchored on the newest billed reply: this arm's estimate of its request."""
        self._observe()
        return self.pressure()

    # -- hooks ----------------------------------------------------------------------------------

    async def pre_step(self, ctx: StepContext, /) -> PreStepAction:
        """Run `every_step`, then `compact` when pressure is at or above the threshold."""
        self._observe()
        done: list[CompactionOutcome] = []
        outcome = await self.every_step()
        if outcome is not None:
            done.append(outcome)
        pressure = self.pressure()
        if pressure >= self.policy.threshold_tokens:
            outcome = await self.compact("pressure", pressure)
            if outcome is not None:
                done.append(outcome)
        return PreStepAction(compactions=tuple(done))

    async def on_request_error(self, ctx: RequestErrorContext, /) -> RetryAction | None:
        """On a context overflow, compact and retry (at most twice a turn); else let it fail."""
        if not isinstance(ctx.error, ContextOverflowError):
            return None
        if ctx.turn != self._turn:
            self._turn, self._retries = ctx.turn, 0
        if self._retries >= self.max_overflow_retries:
            return None
        self._retries += 1
        self._observe()
        outcome = await self.compact("overflow", self.pressure())
        if outcome is None:
            return None
        return RetryAction(reason=f"{type(self).__name__} compacted after a context overflow")

    async def post_tool_result(self, ctx: ToolResultContext, /) -> ToolResult:
        """Leave tool results as they are (arms that truncate override this)."""
        return ctx.result

    async def every_step(self) -> CompactionOutcome | None:
        """Work done before every request, whatever the pressure (none by default)."""
        return None

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Compact now; `None` when there is nothing this arm can do."""
        return None

    # -- writing --------------------------------------------------------------------------------

    def write_edits(
        self,
        edits: Sequence[Edit],
        trigger: CompactionTrigger,
        pressure: int,
        action: CompactionAction = "compact",
    ) -> CompactionOutcome:
        """Record a fold-like rewrite (a boundary with `edits`, no bracket)."""
        return self.writer.fold(edits, action=action, trigger=trigger, pre_tokens=pressure)

    async def ask(self, request: CompletionRequest) -> str:
        """Send a summary request to the provider; the reply's text is the summary."""
        completion = await self.provider.complete(request)
        return completion.message.text

    async def write_summary(
        self,
        span: tuple[int, int],
        request: CompletionRequest,
        replacement: Callable[[str], Sequence[Message]],
        trigger: CompactionTrigger,
        pressure: int,
        *,
        summary: str | None = None,
        called: bool | None = None,
    ) -> CompactionOutcome:
        """Record a summary as a bracket: start, (ask unless `summary`), summary, boundary.

        Pass `summary` when it was already asked for (`called=True`) or made without the model.
        """
        cid = self.writer.open(span=span, pre_tokens=pressure, action="summarize", trigger=trigger)
        called = summary is None if called is None else called
        text = await self.ask(request) if summary is None else summary
        self.writer.summary(cid, text)
        return self.writer.close(
            cid,
            span=span,
            replacement=replacement(text),
            action="summarize",
            trigger=trigger,
            pre_tokens=pressure,
            summarizer_called=called,
        )


# -- in-house arms --------------------------------------------------------------------------------


def build_none(ctx: ArmContext) -> BuiltArm:
    """`none`: no context management at all; the first context overflow ends the session."""
    loop = CoreLoop(
        ctx.provider, ctx.record, tools=ctx.tools, max_rounds_per_turn=MAX_ROUNDS_PER_TURN
    )
    return BuiltArm(loop=loop, policy=ctx.policy)


NAIVE_SYSTEM = "You are a helpful assistant that writes summaries of conversations."
NAIVE_PROMPT = (
    "Summarize the conversation below. Your summary will replace the conversation, so keep "
    "what is needed to continue the work."
)


class NaiveArm(ArmHooks):
    """`naive`: at the threshold, summarize everything with a cold request; no fold, no tail.

    The known-bad baseline of the spec's suite, shaped like the summarizer the spec retired in
    v0.6.18: a foreign system prompt, every message flattened to `[role] text` and cut to its
    first 2,000 characters, all in one user message (nothing is cached). The summary replaces
    every message but the system prompt: the goal and the newest work included.
    """

    max_chars = 2_000

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Replace everything after the system prompt with one cold summary."""
        messages = list(self.record.projection.messages)
        start = leading_system(messages)
        if len(messages) - start < 2:
            return None
        flat = flatten(messages[start:], max_chars=self.max_chars)
        text = f"{NAIVE_PROMPT}\n\n{TRANSCRIPT_OPEN}\n{flat}\n{TRANSCRIPT_CLOSE}"
        request = CompletionRequest(
            messages=(Message.system(NAIVE_SYSTEM), Message.user(text)),
            max_output_tokens=self.summary_max_tokens,
        )
        return await self.write_summary(
            (start, len(messages)),
            request,
            lambda summary: [Message.user(f"{NAIVE_HEAD}\n{summary}")],
            trigger,
            pressure,
        )


class FoldOnlyArm(ArmHooks):
    """`fold_only`: the engine's fold stage alone (R17-R19), never a summary.

    At the threshold, every tool result but the newest `keep_last_tool_results` (and the newest
    turn's) becomes the engine's fold marker and old images become pointers, over the whole
    transcript. When folding has nothing left, the session runs into the window.
    """

    async def compact(self, trigger: CompactionTrigger, pressure: int) -> CompactionOutcome | None:
        """Fold everything foldable before the newest turn."""
        messages = list(self.record.projection.messages)
        regions = select_regions(messages, self.policy.keep_last_messages)
        pruned = prune(
            messages,
            start=regions.head_end,
            horizon=len(messages),
            keep_last_tool_results=self.policy.keep_last_tool_results,
            fold_excerpt_chars=self.policy.fold_excerpt_chars,
            image_offload=self.policy.image_offload,
            keep_last_images=self.policy.keep_last_images,
            estimate=self.meter.estimate,
            seqs=list(self.record.projection.seqs),
            protect=newest_turn(messages),
        )
        if not pruned.changed:
            return None
        return self.write_edits(pruned.edits, trigger, pressure)


MASK_TEXT = "Old environment output: ({lines} lines omitted)"


class ObservationMaskingArm(ArmHooks):
    """`masking`: keep the last `keep` tool outputs, mask the rest (no summary, no threshold).

    Public source: SWE-agent's `last_n_observations` history processor (docs example `n: 5`),
    which replaces every older observation with "Old environment output: (N lines omitted)"
    before each model query; the masking baseline of Lindenbauer et al., "The Complexity Trap"
    (JetBrains Research, 2025). Masking runs before every request, so each newly masked result
    moves the first changed byte of the prompt (the cache holds up to it).
    """

    keep = 5

    async def every_step(self) -> CompactionOutcome | None:
        """Mask every tool result older than the newest `keep`."""
        messages = self.record.projection.messages
        results = [i for i, m in enumerate(messages) if m.role == "tool"]
        edits: list[Edit] = []
        for i in results[: max(len(results) - self.keep, 0)]:
            result = messages[i].tool_result
            assert result is not None
            if result.text.startswith("Old environment output: ("):
                continue
            mask = MASK_TEXT.format(lines=result.text.count("\n") + 1)
            masked = ToolResult(
                call_id=result.call_id, content=(TextPart(text=mask),), is_error=result.is_error
            )
            edits.append(Edit(index=i, message=Message(role="tool", parts=(masked,))))
        if not edits:
            return None
        return self.write_edits(edits, "micro", self.pressure())


def build_current(ctx: ArmContext) -> BuiltArm:
    """`current`: the full engine as shipped, assembled by `load_harness` from the packaged harness.

    Pressure compaction (the warm-prefix summary with the turn provider as the summarizer,
    images replayed; the policy's `fold_first` puts a fold before it), spill of oversized
    results, retry; only the spill directory is moved to the run's scratch directory, and its
    file names count up instead of being random, so a session's token counts are reproducible.
    `eval --harness FILE` runs a harness of your own here.
    """
    if ctx.harness is None:
        config = yaml.safe_load(default_harness_text())
    else:
        config = copy.deepcopy(dict(ctx.harness))
    config.setdefault("spill", {})["directory"] = os.fspath(ctx.spill_dir / "spill")
    knobs = config.setdefault("compaction", {})
    for key, value in ctx.cache_terms.items():
        knobs.setdefault(key, value)
    path = ctx.spill_dir / "harness.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    harness = load_harness(
        path,
        provider=ctx.provider,
        record=ctx.record,
        model=ctx.model,
        max_context_tokens=ctx.policy.max_context_tokens,
        tools=ctx.tools,
        env={},
        clock=ctx.clock,
    )
    if harness.spill is not None:  # names that do not vary from run to run (see SpillHooks)
        counter = itertools.count()
        harness.spill.name_token = lambda: f"{next(counter):08x}"
    engine = harness.compaction
    return BuiltArm(
        loop=harness.loop,
        policy=harness.policy,
        trace_policy=harness.policy,
        pressure=None if engine is None else engine.pressure,
        meter=None if engine is None else engine.meter,
    )


def build_hooks(kind: type[ArmHooks]) -> Callable[[ArmContext], BuiltArm]:
    """A builder running `kind` as the loop's only hook."""

    def build(ctx: ArmContext) -> BuiltArm:
        hooks = kind(ctx)
        loop = CoreLoop(
            ctx.provider,
            ctx.record,
            hooks=[hooks],
            tools=ctx.tools,
            max_rounds_per_turn=MAX_ROUNDS_PER_TURN,
        )
        return BuiltArm(
            loop=loop, policy=ctx.policy, pressure=hooks.next_request_tokens, meter=hooks.meter
        )

    build.__doc__ = kind.__doc__
    return build
