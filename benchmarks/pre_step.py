"""`pre_step` cost under threshold, and the planning time of one compaction.

Run: `python benchmarks/pre_step.py`. For transcripts of 1k, 10k and 100k messages it times a
loop step as the engine runs it (append a reply and its tool result, observe the provider's
usage, `pre_step`) against a baseline that re-estimates the whole transcript each step, and
prints both and their ratio. Goal: our step is flat (<= 1.2x from 1k to 100k messages).

Then it plans one compaction of a ~200k-token transcript (fold tried, summary request built, no
summarizer called). Goal: <= 50 ms.
"""

from __future__ import annotations

import asyncio
import json
import time

from steerable_compaction import Message, ToolCall, estimate_tokens, resolve_compaction_policy
from steerable_compaction.compaction import SummaryNeeded, plan_compaction
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import MemoryRecord
from steerable_compaction.tokens import TokenMeter

STEPS = 300


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


def step_cost(size: int) -> tuple[float, float]:
    """Seconds per step for the engine and for a full-recount baseline at `size` messages."""
    record = MemoryRecord()
    record.append_message(Message.system("You are a coding agent."))
    record.append_message(Message.user("Rename fn everywhere."))
    for message in rounds(0, (size - 2) // 2):
        record.append_message(message)
    policy = resolve_compaction_policy(None, 100_000_000)  # never over threshold here
    hooks = CompactionHooks(record, policy)
    hooks.observe(estimate_tokens(record.messages()), len(record.projection))
    extra = rounds(10_000_000, STEPS)

    async def run() -> float:
        start = time.perf_counter()
        for k in range(STEPS):
            reply, result = extra[2 * k], extra[2 * k + 1]
            record.append_message(reply)
            hooks.observe(1_000_000 + k, len(record.projection) - 1)
            record.append_message(result)
            await hooks.pre_step(StepContext(record=record, round=k + 1, turn=1))
        return (time.perf_counter() - start) / STEPS

    ours = asyncio.run(run())
    start = time.perf_counter()
    for _ in range(10):
        estimate_tokens(record.messages())
    baseline = (time.perf_counter() - start) / 10
    return ours, baseline


def planning_cost() -> tuple[float, float, int, int]:
    """Cold and warm seconds to plan a compaction of a ~200k-token transcript.

    Cold: a fresh meter that has estimated nothing; warm: the meter has seen every message
    (as the engine's meter has, once pressure was measured). Also returns tokens and span size.
    """
    messages = [Message.system("You are a coding agent."), Message.user("Rename fn everywhere.")]
    messages += rounds(0, 172, chars=1_500)
    policy = resolve_compaction_policy(None, 128_000)

    def plan_once(meter: TokenMeter, tokens: int) -> tuple[float, SummaryNeeded]:
        start = time.perf_counter()
        plan = plan_compaction(
            messages,
            policy,
            pressure=tokens,
            estimate=meter.estimate,
            seqs=range(len(messages)),
            mode="aggressive",  # the full path: fold tried, then the summary request built
        )
        elapsed = time.perf_counter() - start
        assert isinstance(plan, SummaryNeeded)
        return elapsed, plan

    tokens = TokenMeter().pressure(messages)
    cold, _ = plan_once(TokenMeter(), tokens)
    meter = TokenMeter()
    meter.pressure(messages)
    warm, plan = min((plan_once(meter, tokens) for _ in range(5)), key=lambda r: r[0])
    return cold, warm, tokens, plan.replaced


def main() -> None:
    print(f"pre_step under threshold, {STEPS} steps (append reply + result, observe, pre_step)")
    print(f"{'messages':>9} {'ours us/step':>13} {'recount us/step':>16} {'recount/ours':>13}")
    costs: list[float] = []
    for size in (1_000, 10_000, 100_000):
        ours, baseline = step_cost(size)
        costs.append(ours)
        print(f"{size:>9,} {ours * 1e6:>13.1f} {baseline * 1e6:>16.1f} {baseline / ours:>13.0f}x")
    print(f"flatness: step at 100k / step at 1k = {costs[-1] / costs[0]:.2f}x (goal <= 1.2x)")
    cold, warm, tokens, replaced = planning_cost()
    print(
        f"\nplanning one compaction of {tokens:,} estimated tokens ({replaced} messages to "
        f"summarize): cold {cold * 1000:.1f} ms, warm {warm * 1000:.1f} ms (goal <= 50 ms)"
    )


if __name__ == "__main__":
    main()
