"""`serve` memory under a client that never reads its replies (Linux: RSS from /proc).

Run: `python benchmarks/serve_memory.py [--requests N] [--line-mib M]`. Each scenario starts
`steerable-compaction serve` on a fresh record and writes to its stdin from a thread without ever
reading its stdout, sampling the server's RSS until the writer is done or has stalled for
`--stall` seconds (the server stopped reading: backpressure). Scenarios: N small status requests,
then one line of M MiB. Prints RSS at start and at peak, their ratio, and how much the server
took in before it stopped reading.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

STATUS = b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.status"}\n'


def rss_kib(pid: int) -> int:
    """The resident set size of `pid` in KiB (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def small_requests(count: int) -> Iterator[bytes]:
    """`count` status requests, written a few hundred at a time."""
    batch = 256
    for start in range(0, count, batch):
        yield STATUS * min(batch, count - start)


def one_long_line(mib: int) -> Iterator[bytes]:
    """One request whose `input` holds `mib` MiB of text, in 1 MiB chunks."""
    yield b'{"jsonrpc":"2.0","id":1,"method":"agent.chat.send","params":{"input":"'
    for _ in range(mib):
        yield b"x" * (1 << 20)
    yield b'"}}\n'


def run(name: str, chunks: Iterator[bytes], stall: float) -> tuple[int, int, int]:
    """Feed `chunks` to a fresh server; returns (start KiB, peak KiB, bytes the server took)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = ["serve", "--record", os.path.join(tmp, "r.jsonl")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "steerable_compaction", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,  # never read: the client under test does not read
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None
        stdin = proc.stdin
        # Wait until the server is up (its RSS stops growing) before taking the baseline.
        previous, start = -1, rss_kib(proc.pid)
        while start != previous:
            time.sleep(0.5)
            previous, start = start, rss_kib(proc.pid)
        written = [0]
        done = threading.Event()

        def writer() -> None:
            try:
                for chunk in chunks:
                    stdin.write(chunk)
                    stdin.flush()
                    written[0] += len(chunk)
            except (BrokenPipeError, ValueError):
                pass
            done.set()

        threading.Thread(target=writer, daemon=True).start()
        peak, last_progress, seen = start, time.monotonic(), 0
        while not done.is_set() and time.monotonic() - last_progress < stall:
            time.sleep(0.05)
            peak = max(peak, rss_kib(proc.pid))
            if written[0] != seen:
                seen, last_progress = written[0], time.monotonic()
        time.sleep(0.5)
        peak = max(peak, rss_kib(proc.pid))
        state = "all written" if done.is_set() else f"writer stalled for {stall:.0f} s"
        alive = proc.poll() is None
        proc.kill()
        proc.wait()
        state += ", server up" if alive else f", server exited {proc.returncode}"
        print(
            f"{name:<28} start {start / 1024:7.1f} MiB  peak {peak / 1024:7.1f} MiB  "
            f"ratio {peak / start:5.2f}  server took {written[0] / (1 << 20):6.1f} MiB ({state})"
        )
        return start, peak, written[0]


def main() -> None:
    """Run both scenarios and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400_000, help="small requests to send")
    parser.add_argument("--line-mib", type=int, default=256, help="size of the long line, MiB")
    parser.add_argument("--stall", type=float, default=3.0, help="seconds without progress")
    args = parser.parse_args()
    run(f"{args.requests:,} status requests", small_requests(args.requests), args.stall)
    run(f"one {args.line_mib} MiB line", one_long_line(args.line_mib), args.stall)


if __name__ == "__main__":
    main()
