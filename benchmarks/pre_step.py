"""Per-step cost of the engine and of `Compactor.prepare`, and the cost of one compaction pass.

Run: `python benchmarks/pre_step.py [--summary]`. Times are CPU time of this thread, best of
several runs taken in turns across all probes, so another process on the machine moves them
less than it moves wall time and moves all of them alike. Every run starts from a fresh record.

- `pre_step` of `CompactionHooks` under threshold, at 1k / 10k / 100k messages, after two short
  new messages (a tool call and its result) and after two realistic ones (a ~400-character
  result), against a full re-estimate of the transcript. Goals: flat (100k / 1k <= 1.2x);
  two short messages <= 20 us on an idle machine and <= 1/5 of a full recount at 1k.
- `Compactor.prepare` per step (append, observe, pre-step, repaired request) at the same sizes
  with two new messages. Goals: flat (100k / 1k <= 1.2x) and <= 3x the hooks' pre-step alone.
- One compaction pass (plan: fold tried, then the summary request built) of a ~210k-token
  transcript, cold (a fresh meter that has priced nothing) against warm. Goal: cold <= 2x warm.

`--summary` prints one JSON line per headline figure instead (see `benchmarks/run_all.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import _figures
from steerable_compaction import Message, ToolCall, estimate_tokens, resolve_compaction_policy
from steerable_compaction.compaction import SummaryNeeded, plan_compaction
from steerable_compaction.compactor import Compactor
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import MemoryRecord
from steerable_compaction.tokens import TokenMeter

SIZES = (1_000, 10_000, 100_000)
STEPS = 300
WARMUP = 30  # untimed steps first in a per-step probe (`settle`)
REPEATS = 5
MODES: tuple[Literal["fold_only", "aggressive"], ...] = ("fold_only", "aggressive")
NEVER = resolve_compaction_policy(None, 100_000_000)  # never over threshold here
clock = time.thread_time_ns


def short_round(i: int) -> list[Message]:
    """A tool call and a short result: the smallest step an agent loop makes."""
    call = ToolCall(id=f"call_{i}", name="ls", arguments='{"path": "."}')
    return [Message.assistant(None, [call]), Message.tool(f"call_{i}", "ok")]


def rounds(first: int, count: int, chars: int = 400) -> list[Message]:
    """`count` tool rounds: an assistant call and its result of about `chars` characters."""
    out: list[Message] = []
    for i in range(first, first + count):
        call = ToolCall(id=f"c{i}", name="grep", arguments=json.dumps({"pattern": f"fn_{i}"}))
        out.append(Message.assistant(None, [call]))
        out.append(
            Message.tool(f"c{i}", f"src/mod_{i}.py:{i}: def fn_{i}(x): return x\n" * (chars // 40))
        )
    return out


def transcript(size: int) -> list[Message]:
    """A system prompt, the goal and tool rounds: `size` messages."""
    head = [Message.system("You are a coding agent."), Message.user("Rename fn everywhere.")]
    return head + rounds(0, (size - 2) // 2)


TRANSCRIPTS = {size: transcript(size) for size in SIZES}


def interleaved(probes: dict[str, Callable[[], float]]) -> dict[str, float]:
    """The best of `REPEATS` runs of every probe, taken in turns (load changes hit all alike)."""
    times: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(REPEATS):
        for name, probe in probes.items():
            times[name].append(probe())
    return {name: min(values) for name, values in times.items()}


def settle() -> None:
    """Collect the garbage of the probes before, first thing in a probe (before its setup).

    Without it a full collection, due to what earlier probes left (a 1k-message record each),
    can land inside the few milliseconds timed: one repeat of a tiny-step probe read 40x its
    median. The setup and `WARMUP` untimed steps run after it, so the timed steps do not start
    on caches the collection emptied; garbage the timed steps make is still collected, and
    counted, as it comes.
    """
    gc.collect()


def record_of(size: int) -> MemoryRecord:
    record = MemoryRecord()
    for message in TRANSCRIPTS[size]:
        record.append_message(message)
    return record


def pre_step_probe(size: int, new: Callable[[int], list[Message]]) -> Callable[[], float]:
    """Seconds of one `pre_step` after appending `new(k)` and observing the previous request."""
    first = [10_000_000]

    def probe() -> float:
        settle()
        record = record_of(size)
        hooks = CompactionHooks(record, NEVER)
        hooks.observe(1_000_000, len(record.projection))
        base = first[0]
        first[0] += WARMUP + STEPS
        steps = [new(base + k) for k in range(WARMUP + STEPS)]

        async def run() -> float:
            spent = 0
            for k, (reply, result) in enumerate(steps):
                record.append_message(reply)
                hooks.observe(1_000_000 + k, len(record.projection) - 1)
                record.append_message(result)
                context = StepContext(record=record, round=k + 1, turn=1)
                start = clock()
                await hooks.pre_step(context)
                if k >= WARMUP:
                    spent += clock() - start
            return spent / STEPS / 1e9

        return asyncio.run(run())

    return probe


def recount_probe(size: int) -> Callable[[], float]:
    """Seconds to estimate the whole transcript again (what a meter without a cache pays)."""

    def probe() -> float:
        start = clock()
        estimate_tokens(TRANSCRIPTS[size])
        return (clock() - start) / 1e9

    return probe


def prepare_probe(size: int) -> Callable[[], float]:
    """Seconds of one `Compactor.prepare` with two new messages (a tool call and its result)."""
    first = [20_000_000]

    def probe() -> float:
        settle()
        record = record_of(size)
        compactor = Compactor(NEVER, record=record)
        messages = compactor.prepare(record.messages(), last_prompt_tokens=None)
        base = first[0]
        first[0] += WARMUP + STEPS
        steps = [short_round(base + k) for k in range(WARMUP + STEPS)]
        spent = 0
        for k, step in enumerate(steps):
            messages.extend(step)
            start = clock()
            messages = compactor.prepare(messages, last_prompt_tokens=1_000_000 + k)
            if k >= WARMUP:
                spent += clock() - start
        close = getattr(compactor, "close", None)  # older versions had no loop to close
        if close is not None:
            close()
        return spent / STEPS / 1e9

    return probe


def pass_probes(
    mode: Literal["fold_only", "aggressive"],
) -> tuple[dict[str, Callable[[], float]], int]:
    """Probes of planning one compaction of a ~210k-token transcript, cold and warm."""
    messages = [Message.system("You are a coding agent."), Message.user("Rename fn everywhere.")]
    messages += rounds(0, 190, chars=1_500)
    policy = resolve_compaction_policy(None, 128_000)
    tokens = TokenMeter().pressure(messages)
    warm_meter = TokenMeter()
    warm_meter.pressure(messages)

    def plan_once(meter: TokenMeter) -> float:
        start = clock()
        plan = plan_compaction(
            messages,
            policy,
            pressure=tokens,
            estimate=meter.estimate,
            seqs=range(len(messages)),
            mode=mode,
        )
        elapsed = (clock() - start) / 1e9
        assert mode == "fold_only" or isinstance(plan, SummaryNeeded)
        return elapsed

    return {
        f"cold {mode}": lambda: plan_once(TokenMeter()),
        f"warm {mode}": lambda: plan_once(warm_meter),
    }, tokens


figure = functools.partial(_figures.figure, "pre_step")


def measure() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every measurement as (human line, summary figure or {})."""
    probes: dict[str, Callable[[], float]] = {}
    for size in SIZES:
        probes[f"short {size}"] = pre_step_probe(size, short_round)
        probes[f"real {size}"] = pre_step_probe(size, lambda k: rounds(k, 1))
        probes[f"prepare {size}"] = prepare_probe(size)
        probes[f"recount {size}"] = recount_probe(size)
    tokens = 0
    for mode in MODES:
        more, tokens = pass_probes(mode)
        probes.update(more)
    best = interleaved(probes)
    short = {size: best[f"short {size}"] for size in SIZES}
    real = {size: best[f"real {size}"] for size in SIZES}
    recount = {size: best[f"recount {size}"] for size in SIZES}
    prepare = {size: best[f"prepare {size}"] for size in SIZES}
    yield (
        f"{'messages':>9} {'pre_step short':>15} {'pre_step 400ch':>15} {'prepare':>10} "
        f"{'recount':>12}   (us per step, CPU time)",
        {},
    )
    for size in SIZES:
        yield (
            f"{size:>9,} {short[size] * 1e6:>15.1f} {real[size] * 1e6:>15.1f} "
            f"{prepare[size] * 1e6:>10.1f} {recount[size] * 1e6:>12.0f}",
            {},
        )
    flat = real[SIZES[-1]] / real[SIZES[0]]
    yield (
        f"pre_step flatness (400-char results, 100k / 1k): {flat:.2f}x (goal <= 1.2x)",
        figure("pre_step_flatness", flat, "pre_step at 1k messages", flat, "<= 1.2x", flat <= 1.2),
    )
    us = short[SIZES[0]] * 1e6
    below = recount[SIZES[0]] / short[SIZES[0]]
    yield (
        f"pre_step with two short messages at 1k: {us:.1f} us (goal <= 20 us idle); a full "
        f"recount costs {below:.0f}x that (goal >= 5x)",
        figure(
            "pre_step_two_short_us",
            us,
            "full recount at 1k messages",
            below,
            "<= 20 us (idle machine) and recount >= 5x",
            us <= 20 and below >= 5,
        ),
    )
    pflat = prepare[SIZES[-1]] / prepare[SIZES[0]]
    yield (
        f"Compactor.prepare flatness (100k / 1k): {pflat:.2f}x (goal <= 1.2x)",
        figure("prepare_flatness", pflat, "prepare at 1k messages", pflat, "<= 1.2x", pflat <= 1.2),
    )
    worst = max(prepare[size] / short[size] for size in SIZES)
    yield (
        f"Compactor.prepare / hooks pre_step (same two messages, worst size): {worst:.2f}x "
        "(goal <= 3x)",
        figure(
            "prepare_vs_pre_step",
            max(prepare.values()) * 1e6,
            "hooks' pre_step alone, same size",
            worst,
            "<= 3x",
            worst <= 3,
        ),
    )
    for mode in MODES:
        cold, warm = best[f"cold {mode}"], best[f"warm {mode}"]
        ratio = cold / warm
        label = "fold only" if mode == "fold_only" else "fold + summary request"
        yield (
            f"compaction pass of {tokens:,} tokens ({label}): cold {cold * 1e3:.1f} ms, warm "
            f"{warm * 1e3:.1f} ms, cold / warm {ratio:.2f}x (goal <= 2x)",
            figure(
                f"cold_vs_warm_pass_{mode}",
                cold * 1e3,
                "warm pass (meter has priced every message)",
                ratio,
                "<= 2x",
                ratio <= 2,
            ),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print JSON lines of figures")
    args = parser.parse_args()
    for line, summary in measure():
        if args.summary:
            if summary:
                print(json.dumps(summary), flush=True)
        else:
            print(line, flush=True)


if __name__ == "__main__":
    main()
