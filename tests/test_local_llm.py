"""L3: the warm-prefix replay measured on a real model (llama.cpp, Gemma 3 270M from PyPI).

These tests need the `local` extra. Without it they skip with the reason; under CI (`CI` set)
they fail instead, so a CI that forgot the extra cannot pass silently.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from steerable_compaction import (
    ContextOverflowError,
    Message,
    ProviderError,
    resolve_compaction_policy,
)
from steerable_compaction.compaction.judge import judge_summary
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.loop import CoreLoop
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import MemoryRecord
from steerable_compaction.trace import check_trace

from .local_session import need_local

pytestmark = [pytest.mark.local_llm, pytest.mark.slow]


@pytest.fixture(scope="module")
def model() -> object:
    need_local()
    from steerable_compaction.providers.llamacpp import LlamaCppProvider

    from .local_session import N_CTX

    return LlamaCppProvider(n_ctx=N_CTX)


def test_l3_summarizer_reuses_the_cached_prefix_and_a_cold_request_does_not(
    model: object, tmp_path: Path
) -> None:
    """R24-R27 on a real model: the summary request is paid by the KV cache.

    It reuses >= 95 % of its prompt; the `naive` arm's cold request over the same span reuses
    ~0 % and takes longer.
    """
    from steerable_compaction.providers.llamacpp import LlamaCppProvider

    from .local_session import cold_request, run_until_summary

    assert isinstance(model, LlamaCppProvider)
    harness, agent = asyncio.run(run_until_summary(tmp_path / "local.jsonl", model))
    assert agent.summary_calls, "the session never summarized"
    warm = agent.summary_calls[0]
    usage = warm.completion.usage
    assert usage.cached_tokens / usage.prompt_tokens >= 0.95, usage
    cold = asyncio.run(model.complete(cold_request(warm.request)))
    assert cold.usage.cached_tokens / cold.usage.prompt_tokens <= 0.05, cold.usage
    # Prompt evaluation (llama.cpp's own timer): the cold request re-reads the whole span.
    assert model.last_prompt_eval_ms > 5 * warm.prompt_eval_ms
    # A 270M base model cannot write a summary (it continues the transcript instead): each
    # text it returns is refused, and its bracket closes with the excerpt.
    texts = [call.completion.message.text for call in agent.summary_calls]
    accepted = [t for t in texts if judge_summary(t).text is not None]
    closed = {c.action for c in harness.loop.record.compactions() if c.status == "closed"}
    assert closed and closed <= {"summarize", "excerpt"}
    assert ("summarize" in closed) == bool(accepted)
    # L2 over the real run: brackets shrink, hysteresis holds, summaries are prefix replays.
    requests = [call.request for call in agent.calls]
    report = check_trace(harness.loop.record, requests, policy=harness.policy, strict=True)
    assert report.ok


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The llama-cpp-python OpenAI-compatible server on 127.0.0.1 with a free port."""
    need_local()
    from steerable_compaction.providers.llamacpp import default_model_path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2",
        "--logits_all", "False",
    ]  # fmt: skip
    # Its log goes to a file: an unread pipe fills up and stalls the server.
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with (
        open(log_path, "wb") as log,
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log) as proc,
    ):
        base = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/models", timeout=2) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        err = log_path.read_text(errors="replace")
                        pytest.fail(f"llama.cpp server did not start: {err[-2000:]}")
                    time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_openai_adapter_classifies_a_real_server_overflow(server: str) -> None:
    """The real llama.cpp server's 400 for an over-long prompt becomes `ContextOverflowError`."""
    from steerable_compaction.providers import OpenAIProvider

    async def run() -> None:
        provider = OpenAIProvider("gemma-3-270m", base_url=server)
        try:
            with pytest.raises(ContextOverflowError) as info:
                await provider.complete(
                    CompletionRequest(messages=(Message.user("word " * 3000),), max_output_tokens=8)
                )
            assert info.value.status_code == 400
        finally:
            await provider.aclose()

    asyncio.run(run())


def test_r13_compaction_and_retry_recover_from_a_real_server_overflow(server: str) -> None:
    """R13 against a real server: a session that overflows on purpose is compacted and retried."""
    from steerable_compaction.providers import OpenAIProvider

    async def run() -> None:
        provider = OpenAIProvider("gemma-3-270m", base_url=server)
        record = MemoryRecord()
        record.append_message(Message.system("You are a terse assistant. Answer in one line."))
        # The policy believes in a larger window than the server has: only the overflow path
        # can save this session (summaries by excerpt, to keep the test short).
        policy = resolve_compaction_policy(
            None, 16_384, keep_last_messages=2, summarizer_enabled=False
        )
        hooks = CompactionHooks(record, policy)
        loop = CoreLoop(provider, record, hooks=[hooks], max_output_tokens=8)
        try:
            retries = 0
            for turn in range(6):
                note = f"Note {turn}: the build cache for module {turn} lives in .cache/{turn}. "
                result = await loop.run_turn(note * 40)
                assert result.stop == "answered"
                retries += result.retries
            assert retries >= 1
            overflow = [c for c in record.compactions() if c.trigger == "overflow"]
            assert overflow and all(c.status == "closed" for c in overflow)
        finally:
            await provider.aclose()

    asyncio.run(run())


def test_loading_and_unloading_the_model_prints_nothing(tmp_path: Path) -> None:
    """llama.cpp's own log lines go to `logging`, and the model is freed before shutdown.

    Left alone, it printed its SWA-cache notice on stderr and, at exit, `Llama.__del__` could
    raise a TypeError once llama_cpp's globals were gone.
    """
    need_local()
    probe = (
        "import asyncio\n"
        "from steerable_compaction import Message\n"
        "from steerable_compaction.providers.base import CompletionRequest\n"
        "from steerable_compaction.providers.llamacpp import LlamaCppProvider\n"
        "request = CompletionRequest(messages=(Message.user('hi'),), max_output_tokens=2)\n"
        "print(asyncio.run(LlamaCppProvider(n_ctx=512).complete(request)).usage.prompt_tokens)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert int(done.stdout) > 0
    assert done.stderr == ""


def test_a_file_llama_cpp_cannot_load_is_a_provider_error(tmp_path: Path) -> None:
    """A corrupt GGUF is a `ProviderError` naming the file, not llama.cpp's bare ValueError."""
    need_local()
    from steerable_compaction.providers.llamacpp import LlamaCppProvider

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    request = CompletionRequest(messages=(Message.user("hi"),), max_output_tokens=1)
    with pytest.raises(ProviderError, match=f"cannot load {bad}"):
        asyncio.run(LlamaCppProvider(bad, n_ctx=256).complete(request))
