"""The offline demo: a scripted code-reading agent in a virtual repository, and its providers.

`Workspace` is a deterministic in-memory repository with `list_files`, `read_file` and `grep`
tools; `ScriptedAgent` reads it the way a code-reading agent would; `build_provider` makes the
demo's `CachingProvider` around that agent, or a real provider (`openai`, `anthropic`, `local`);
`run_demo` drives a long session through the real loop and prints and charts its pressure.
"""

from __future__ import annotations

from .agent import ScriptedAgent, ScriptedOverProvider
from .providers import (
    DEMO_WINDOW,
    LOCAL_WINDOW,
    PROVIDERS,
    MissingKeyError,
    ProviderKind,
    build_provider,
    default_window,
)
from .run import DEMO_PROMPTS, SYSTEM_PROMPT, DemoOptions, DemoResult, run_demo, run_demo_sync
from .view import PressureView
from .workspace import Workspace

__all__ = [
    "DEMO_PROMPTS",
    "DEMO_WINDOW",
    "LOCAL_WINDOW",
    "PROVIDERS",
    "SYSTEM_PROMPT",
    "DemoOptions",
    "DemoResult",
    "MissingKeyError",
    "PressureView",
    "ProviderKind",
    "ScriptedAgent",
    "ScriptedOverProvider",
    "Workspace",
    "build_provider",
    "default_window",
    "run_demo",
    "run_demo_sync",
]
