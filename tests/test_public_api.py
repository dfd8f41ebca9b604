"""The public contract: the top-level names, pinned; each one resolves to what it names."""

from __future__ import annotations

import subprocess
import sys

import steerable_compaction

PUBLIC = [
    "AnthropicProvider",
    "ChainHooks",
    "CompactionAbandoned",
    "CompactionBoundary",
    "CompactionError",
    "CompactionHooks",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionStart",
    "CompactionSummary",
    "Compactor",
    "Completion",
    "CompletionRequest",
    "ConfigError",
    "ContextOverflowError",
    "ConversionError",
    "CoreLoop",
    "EngineState",
    "Harness",
    "Hooks",
    "ImagePart",
    "JsonlRecord",
    "MemoryRecord",
    "Message",
    "MessageAppended",
    "MessageError",
    "OpenAIProvider",
    "OverflowRetriesExhaustedError",
    "PostgresRecord",
    "PreStepAction",
    "Provider",
    "ProviderError",
    "RecallError",
    "Record",
    "RecordError",
    "RecordConnectionError",
    "RecordLockedError",
    "RecordLossError",
    "Reminder",
    "RequestErrorContext",
    "RequestTooLargeError",
    "RetryAction",
    "RetryHooks",
    "SpillHooks",
    "SqliteRecord",
    "StepContext",
    "Summarizer",
    "SummaryRequest",
    "TextPart",
    "TokenMeter",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolResultContext",
    "ToolSpec",
    "TurnResult",
    "__version__",
    "estimate_tokens",
    "from_anthropic",
    "from_openai",
    "load_harness",
    "open_record",
    "project",
    "read_history",
    "resolve_compaction_policy",
    "resolve_context_window",
    "search_history",
    "to_anthropic",
    "to_openai",
]


def test_the_top_level_exports_are_pinned() -> None:
    """Adding or removing a public name is a decision: this list changes with it."""
    assert sorted(steerable_compaction.__all__) == sorted(PUBLIC)


def test_every_public_name_resolves() -> None:
    """Each exported name is importable from the package root (the SDK adapters lazily)."""
    for name in PUBLIC:
        assert getattr(steerable_compaction, name) is not None, name


def test_the_hook_protocol_types_are_what_the_engine_uses() -> None:
    """What a user implements or receives is exported as the very objects the engine uses."""
    from steerable_compaction import compaction, hooks

    assert steerable_compaction.Hooks is hooks.Hooks
    assert steerable_compaction.StepContext is hooks.StepContext
    assert steerable_compaction.Summarizer is hooks.Summarizer
    assert steerable_compaction.SummaryRequest is compaction.SummaryRequest


def test_importing_the_package_imports_no_sdk_and_no_simulator() -> None:
    """`import steerable_compaction` stays light: the SDKs and the simulator load on use."""
    code = (
        "import sys, steerable_compaction as s; "
        "print(sorted(m for m in ('openai', 'anthropic', 'psycopg', 'steerable_compaction.sim') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    """The lazy loader answers only for the SDK adapters."""
    try:
        steerable_compaction.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")
