"""This engine beside the seed's runtime (`steerable-agent-runtime`, extra `bench`), in one process.

Run: `python benchmarks/peer.py [--summary] [--repeats N]`. Each probe runs in turns with its
peer counterpart (A B A B ...), `--repeats` times (default 7), so a load change on the machine
hits both alike; a figure is the median of the per-repeat ratios, printed with their range.
Times are CPU time of this thread.

- One compaction pass of the ~210k-token transcript of `pre_step.py` (tool rounds of ~1.5k
  characters, a 128k window) with an instant summarizer: our `CompactionHooks.pre_step` on a
  memory record (fold tried, summary asked, judged, retention check, bracket written) against
  the peer's `CompactionHooks.pre_step` on the same transcript. Cold: a fresh engine whose meter
  has priced nothing; warm: the meter has priced every message, and for the peer the previous
  request's usage is known. Goal: <= 1.0x, cold and warm.
- The retention check's share of that pass, on a transcript of varied tool output (windows of
  `corpora/` texts, each round's assistant stating a fact), with a summarizer whose answer the
  judge accepts. Goal: <= 25 %.
- A tiny step (`ls` -> "ok") at 1k messages under the threshold: `Compactor.prepare` against
  the peer's `pre_step` with the previous request's usage. Goal: <= 1.5x.

The peer is a measured baseline only (nothing of it is used by the library).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _figures
from pre_step import TRANSCRIPTS, WARMUP, prepare_probe, rounds, settle, short_round
from steerable_compaction import Message, ToolCall, resolve_compaction_policy, summaries
from steerable_compaction.compaction import SummaryRequest, excerpt_summary
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.hooks import StepContext
from steerable_compaction.record import MemoryRecord

clock = time.thread_time_ns
WINDOW = 128_000
TINY_SIZE = 1_000
TINY_STEPS = 300
SUMMARY = (
    "The agent is renaming fn everywhere. It grepped src/mod_0.py through src/mod_189.py; each "
    "defines fn_N(x), which returns x. Next: rename the definitions and their callers."
)

figure = functools.partial(_figures.figure, "peer")


def transcript() -> list[Message]:
    """The compaction benchmark's transcript (as in `pre_step.py`): ~210k tokens."""
    head = [Message.system("You are a coding agent."), Message.user("Rename fn everywhere.")]
    return head + rounds(0, 190, chars=1_500)


def varied_transcript(count: int = 150, chars: int = 1_500) -> list[Message]:
    """Tool rounds whose results are windows of the `corpora/` texts (code, logs, prose, JSON)."""
    corpora = Path(__file__).resolve().parent / "corpora"
    names = ("python_code.txt", "shell_git.txt", "en_prose.txt", "misc_formats.txt")
    texts = [*(corpora.joinpath(n).read_text(encoding="utf-8") for n in names)]
    texts.append(corpora.joinpath("api_response.json").read_text(encoding="utf-8"))
    out = [Message.system("You are a coding agent."), Message.user("Find why the build fails.")]
    for i in range(count):
        text = texts[i % len(texts)]
        at = (i * 997) % (len(text) - chars)
        call = ToolCall(id=f"v{i}", name="run", arguments=json.dumps({"cmd": f"step {i}"}))
        stated = f"Step {i}: the staging port is {8000 + i} and build_{i} used node-{i}.internal."
        out.append(Message.assistant(stated, [call]))
        out.append(Message.tool(f"v{i}", text[at : at + chars]))
    return out


def retention_share(messages: list[Message], repeats: int) -> list[float]:
    """The retention check's share of our pass, once per repeat (fresh record and engine)."""
    policy = resolve_compaction_policy(None, WINDOW)
    answers: dict[tuple[int, int], str] = {}

    async def summarize(request: SummaryRequest) -> str:
        # The excerpt of the span, written before the pass is timed: an instant answer the
        # judge accepts, so the check runs.
        if request.span not in answers:
            answers[request.span] = excerpt_summary(request.replay, request.span, max_chars=6000)
        return answers[request.span]

    spent = [0]
    check = vars(summaries)["retention_check"]  # the engine's check, timed in place

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return check(*args, **kwargs)
        finally:
            spent[0] += clock() - start

    def once() -> float:
        record = MemoryRecord()
        with record.batch():
            for message in messages:
                record.append_message(message)
        hooks = CompactionHooks(record, policy, summarizer=summarize)
        spent[0] = 0
        vars(summaries)["retention_check"] = timed
        try:
            start = clock()
            action = asyncio.run(hooks.pre_step(StepContext(record=record, round=1, turn=1)))
            total = clock() - start
        finally:
            vars(summaries)["retention_check"] = check
        done = action.compactions
        assert done and done[0].action == "summarize" and done[0].written, action
        return spent[0] / total

    once()  # the summarizer's answers, outside the figures
    return [once() for _ in range(repeats)]


def peer_messages(messages: Sequence[Message]) -> list[Any]:
    """`messages` as the peer's `LLMMessage`s."""
    from steerable_agent_runtime.llm import LLMMessage, ToolCall

    out = []
    for m in messages:
        calls = [
            ToolCall(id=c.id, name=c.name, arguments=c.parsed_arguments()) for c in m.tool_calls
        ]
        result = m.tool_result
        out.append(
            LLMMessage.text_of(
                m.role,
                m.text,
                tool_call_id=None if result is None else result.call_id,
                tool_calls=calls or None,
            )
        )
    return out


class PeerSummarizer:
    """An instant summarizer for the peer: the same text as ours, at once."""

    async def complete(self, messages: Any, **kwargs: Any) -> Any:
        """The summary, with no usage."""
        from steerable_agent_runtime.llm import LLMMessage, LLMUsage

        return LLMMessage.text_of("assistant", SUMMARY), LLMUsage()


class PeerContext:
    """The attributes the peer's hooks read from their step context."""

    def __init__(self, round_index: int, tokens: int | None, length: int) -> None:
        self.round_index = round_index
        self.last_prompt_tokens = tokens
        self.last_prompt_transcript_len = length


async def instant(request: SummaryRequest) -> str:
    return SUMMARY


def ours_pass(messages: list[Message], *, warm: bool) -> Callable[[], float]:
    """Seconds of our compaction pass (a fresh record and engine each run)."""
    policy = resolve_compaction_policy(None, WINDOW)

    def probe() -> float:
        record = MemoryRecord()
        with record.batch():
            for message in messages:
                record.append_message(message)
        hooks = CompactionHooks(record, policy, summarizer=instant)
        if warm:
            hooks.pressure()  # the meter prices every message
        start = clock()
        action = asyncio.run(hooks.pre_step(StepContext(record=record, round=1, turn=1)))
        spent = clock() - start
        done = action.compactions
        assert done and done[0].written and done[0].summarizer_called, action
        return spent / 1e9

    return probe


def peer_pass(messages: list[Message], *, warm: bool) -> Callable[[], float]:
    """Seconds of the peer's compaction pass (a fresh engine each run)."""
    from steerable_agent_runtime.compaction import CompactionHooks as PeerHooks

    converted = peer_messages(messages)

    def probe() -> float:
        hooks = PeerHooks(max_context_tokens=WINDOW, summarizer=PeerSummarizer())
        transcript = list(converted)
        tokens = hooks._estimate(transcript) if warm else None
        ctx = PeerContext(1, tokens, len(transcript) if warm else 0)
        start = clock()
        # Its fold + summary pass: its own estimate puts this transcript under its threshold
        # (about 79k tokens), and its pressure path would stop at the fold.
        action = asyncio.run(hooks.compact_now(transcript, ctx))
        spent = clock() - start
        assert action.rewrite is not None
        return spent / 1e9

    return probe


def peer_tiny(size: int) -> Callable[[], float]:
    """Seconds of the peer's `pre_step` of a tiny step, the previous usage known."""
    from steerable_agent_runtime.compaction import CompactionHooks as PeerHooks

    base = peer_messages(TRANSCRIPTS[size])

    def probe() -> float:
        settle()
        hooks = PeerHooks(max_context_tokens=100_000_000)
        transcript = list(base)
        steps = [peer_messages(short_round(10_000_000 + k)) for k in range(WARMUP + TINY_STEPS)]

        async def run() -> int:
            spent = 0
            for k, step in enumerate(steps):
                sent = len(transcript)
                transcript.extend(step)
                ctx = PeerContext(k + 1, 1_000_000 + k, sent)
                start = clock()
                await hooks.pre_step(transcript, ctx)
                if k >= WARMUP:
                    spent += clock() - start
            return spent

        return asyncio.run(run()) / TINY_STEPS / 1e9

    return probe


def paired(
    a: Callable[[], float], b: Callable[[], float], repeats: int
) -> list[tuple[float, float]]:
    """`repeats` pairs (a, b), run A B A B ..."""
    a()  # imports and first-call costs of each side, outside the figures
    b()
    return [(a(), b()) for _ in range(repeats)]


def spread(pairs: list[tuple[float, float]]) -> tuple[float, float, float, float, float]:
    """Median of ours, of the peer's, and the median, least and most of the ratios."""
    ratios = [ours / peer for ours, peer in pairs]
    return (
        statistics.median(p[0] for p in pairs),
        statistics.median(p[1] for p in pairs),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
    )


def measure(repeats: int) -> list[tuple[str, dict[str, object]]]:
    """Every figure as (human line, summary figure)."""
    messages = transcript()
    out = []
    for warm in (False, True):
        label = "warm" if warm else "cold"
        ours, peer, ratio, low, high = spread(
            paired(ours_pass(messages, warm=warm), peer_pass(messages, warm=warm), repeats)
        )
        out.append(
            (
                f"fold + summary pass, {label}: ours {ours * 1e3:.1f} ms, peer {peer * 1e3:.1f} ms,"
                f" ratio {ratio:.2f}x (range {low:.2f}-{high:.2f}x over {repeats} repeats; goal "
                "<= 1.0x)",
                figure(
                    f"summary_pass_{label}_vs_peer",
                    ours * 1e3,
                    f"steerable-agent-runtime 0.6.72 compact_now (fold + summary), same transcript "
                    f"(ms; ratio range {low:.2f}-{high:.2f}x, {repeats} repeats)",
                    ratio,
                    "<= 1.0x",
                    ratio <= 1.0,
                ),
            )
        )
    shares = retention_share(varied_transcript(), repeats)
    share = statistics.median(shares)
    out.append(
        (
            f"retention check's share of a summary pass (varied tool output): {share:.0%} "
            f"(range {min(shares):.0%}-{max(shares):.0%}; goal <= 25 %)",
            figure(
                "retention_share_of_pass",
                share * 100,
                f"the whole pass it ran in (%; range {min(shares):.0%}-{max(shares):.0%}, "
                f"{repeats} repeats)",
                share,
                "<= 0.25",
                share <= 0.25,
            ),
        )
    )
    ours, peer, ratio, low, high = spread(
        paired(prepare_probe(TINY_SIZE), peer_tiny(TINY_SIZE), repeats)
    )
    out.append(
        (
            f"tiny step at {TINY_SIZE:,} messages: Compactor.prepare {ours * 1e6:.1f} us, peer "
            f"pre_step {peer * 1e6:.1f} us, ratio {ratio:.2f}x (range {low:.2f}-{high:.2f}x; "
            "goal <= 1.5x)",
            figure(
                "tiny_prepare_vs_peer",
                ours * 1e6,
                f"steerable-agent-runtime 0.6.72 pre_step with usage known "
                f"(us; ratio range {low:.2f}-{high:.2f}x, {repeats} repeats)",
                ratio,
                "<= 1.5x",
                ratio <= 1.5,
            ),
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print JSON lines of figures")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved pairs per figure")
    args = parser.parse_args()
    for line, summary in measure(args.repeats):
        if args.summary:
            print(json.dumps(summary), flush=True)
        else:
            print(line, flush=True)


if __name__ == "__main__":
    main()
