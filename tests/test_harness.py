from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from steerable_compaction import ConfigError, Message
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.harness import SUMMARIZER_ENV, default_harness_text, load_harness
from steerable_compaction.record import MemoryRecord, SqliteRecord
from steerable_compaction.retry import RetryHooks
from steerable_compaction.spill import SpillHooks

from .test_loop import TOOLS, Queue


def harness_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "h.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_r3_default_harness_chains_compaction_then_spill_then_retry() -> None:
    """R3: the packaged harness runs `context: [pressure_compaction, spill]`, then retry."""
    assert yaml.safe_load(default_harness_text())["context"] == ["pressure_compaction", "spill"]
    h = load_harness(provider=Queue(), record=MemoryRecord(), model="gpt-4o", tools=TOOLS, env={})
    kinds = [type(hook) for hook in h.loop.hooks.hooks]  # type: ignore[attr-defined]
    assert kinds == [CompactionHooks, SpillHooks, RetryHooks]
    assert h.compaction is not None and h.spill is not None
    assert h.loop.max_rounds_per_turn == 50


def test_r4_r5_policy_is_resolved_once_from_model_and_window() -> None:
    """R4/R5: an explicit window wins over the catalogue; the hooks get that exact policy."""
    from_catalogue = load_harness(provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={})
    assert from_catalogue.policy.max_context_tokens == 128_000
    explicit = load_harness(
        provider=Queue(), record=MemoryRecord(), model="gpt-4o", max_context_tokens=32_000, env={}
    )
    assert explicit.policy.max_context_tokens == 32_000
    assert explicit.compaction is not None and explicit.compaction.policy is explicit.policy


def test_r5_unknown_model_without_a_window_is_a_config_error() -> None:
    """R5: no catalogue entry and no explicit window: a named error, not a guess."""
    with pytest.raises(ConfigError) as info:
        load_harness(provider=Queue(), record=MemoryRecord(), model="mystery-9000", env={})
    assert info.value.key == "max_context_tokens"


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({"STEERABLE_SIDECAR_SUMMARIZER": "0"}, False),
        ({"STEERABLE_SIDECAR_SUMMARIZER": "Off "}, False),
        ({"STEERABLE_SUMMARIZER": "false"}, False),  # the first name still works
        ({"STEERABLE_SIDECAR_SUMMARIZER": "1", "STEERABLE_SUMMARIZER": "0"}, True),
        ({"STEERABLE_SIDECAR_SUMMARIZER": "no", "STEERABLE_SUMMARIZER": "1"}, False),
        ({}, True),
    ],
)
def test_r6_the_specs_switch_name_and_the_old_one(env: dict[str, str], enabled: bool) -> None:
    """R6: `STEERABLE_SIDECAR_SUMMARIZER` switches the summarizer; it wins over the old name."""
    harness = load_harness(provider=Queue(), record=MemoryRecord(), model="gpt-4o", env=env)
    assert SUMMARIZER_ENV == "STEERABLE_SIDECAR_SUMMARIZER"
    assert harness.policy.summarizer_enabled is enabled


def test_r6_environment_switch_turns_the_llm_summarizer_off() -> None:
    """R6: STEERABLE_SIDECAR_SUMMARIZER=0 makes compaction use the excerpt summary."""
    off = load_harness(
        provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={SUMMARIZER_ENV: "0"}
    )
    assert off.policy.summarizer_enabled is False
    on = load_harness(
        provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={SUMMARIZER_ENV: "1"}
    )
    assert on.policy.summarizer_enabled is True


async def test_the_summarizer_is_the_turn_provider_with_the_sessions_tools() -> None:
    """R27/R28: summaries go to the turn provider, with tools and cache_retention none."""
    provider = Queue(Message.assistant("## Primary Request\nx"))
    h = load_harness(provider=provider, record=MemoryRecord(), model="gpt-4o", tools=TOOLS, env={})
    assert h.compaction is not None
    summarize = h.compaction.summarizer
    assert summarize is not None
    request = SummaryRequest(messages=(Message.user("a"), Message.user("summarize")), span=(0, 1))
    assert await summarize(request) == "## Primary Request\nx"
    (sent,) = provider.requests
    assert sent.cache_retention == "none"
    assert [t.name for t in sent.tools] == ["echo", "boom"]


def test_a_custom_file_sets_order_knobs_and_sections(tmp_path: Path) -> None:
    """A harness file can drop hooks, override policy knobs and loop settings."""
    path = harness_file(
        tmp_path,
        "context: [spill]\ncompaction: {threshold_ratio: 0.5}\n"
        f"spill: {{directory: {tmp_path / 's'}, max_chars: 500, excerpt_chars: 50}}\n"
        "retry: {max_retries: 1}\nloop: {max_rounds_per_turn: 7, max_output_tokens: 256}\n",
    )
    h = load_harness(path, provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={})
    assert h.compaction is None
    assert h.spill is not None and h.spill.max_chars == 500
    assert h.policy.threshold_ratio == 0.5
    assert (h.loop.max_rounds_per_turn, h.loop.max_output_tokens) == (7, 256)
    assert h.retry.max_retries == 1


def test_an_empty_file_means_every_default(tmp_path: Path) -> None:
    """An empty harness file takes the built-in defaults, spill directory included."""
    h = load_harness(
        harness_file(tmp_path, ""), provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={}
    )
    assert h.spill is not None and str(h.spill.directory) == ".steerable/spill"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("contxt: []\n", "contxt"),
        ("context: [pressure_compaction, teleport]\n", "context"),
        ("context: [spill, spill]\n", "context"),
        ("context: spill\n", "context"),
        ("compaction: [1]\n", "compaction"),
        ("compaction: {threshold_ratio: 2}\n", "threshold_ratio"),
        ("compaction: {colour: red}\n", "colour"),
        ("compaction: {max_context_tokens: 8000}\n", "compaction.max_context_tokens"),
        ("spill: {max_chars: lots}\n", "spill.max_chars"),
        ("spill: {size: 3}\n", "spill.size"),
        ("spill: 4\n", "spill"),
        ("retry: {max_retries: true}\n", "retry.max_retries"),
        ("loop: {max_output_tokens: 1.5}\n", "loop.max_output_tokens"),
        ("- a list\n", "harness"),
        ("context: [\n", "harness"),
    ],
)
def test_bad_harness_files_raise_config_error_naming_the_key(
    tmp_path: Path, text: str, key: str
) -> None:
    """Every bad value or key is a `ConfigError` that names it."""
    with pytest.raises(ConfigError) as info:
        load_harness(
            harness_file(tmp_path, text),
            provider=Queue(),
            record=MemoryRecord(),
            model="gpt-4o",
            env={},
        )
    assert key in info.value.key


def test_a_missing_harness_file_is_a_config_error(tmp_path: Path) -> None:
    """A path that cannot be read says so."""
    with pytest.raises(ConfigError, match="a readable file"):
        load_harness(
            tmp_path / "nope.yaml", provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={}
        )


def test_closing_the_harness_releases_the_records_writer_lock(tmp_path: Path) -> None:
    """`close()` and the `with` block close the record: its lock file goes, a writer may open it."""
    path = tmp_path / "session.db"
    lock = Path(str(path) + ".writer-lock")
    harness = load_harness(provider=Queue(), record=SqliteRecord(path), model="gpt-4o", env={})
    assert lock.exists()
    harness.close()
    harness.close()  # twice is harmless
    assert not lock.exists() and harness.loop.record.closed
    with load_harness(provider=Queue(), record=SqliteRecord(path), model="gpt-4o", env={}) as again:
        assert lock.exists() and not again.loop.record.closed
    assert not lock.exists() and again.loop.record.closed
