from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from steerable_compaction import ConfigError, Message, Tool, ToolCall
from steerable_compaction.compaction import SummaryRequest, is_summary_instruction
from steerable_compaction.engine import CompactionHooks
from steerable_compaction.harness import (
    SUMMARIZER_ENV,
    default_harness_text,
    load_harness,
    read_harness,
)
from steerable_compaction.providers.base import CompletionRequest
from steerable_compaction.record import MemoryRecord, SqliteRecord
from steerable_compaction.retry import RetryHooks
from steerable_compaction.spill import SPILL_PREFIX, SpillHooks
from steerable_compaction.testing import CachingProvider

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


def test_the_spill_stage_sets_the_records_spill_directory(tmp_path: Path) -> None:
    """Issue 26: recall reads the files of earlier runs from the directory the harness spills to.

    `spill_directory=` replaces the file's `spill.directory`; without a spill stage it stays unset.
    """
    path = harness_file(tmp_path, f"spill: {{directory: {tmp_path / 'from-file'}}}\n")
    record = MemoryRecord()
    h = load_harness(path, provider=Queue(), record=record, model="gpt-4o", env={})
    assert h.spill is not None and record.spill_directory == tmp_path / "from-file"
    given = tmp_path / "given"
    load_harness(
        path, provider=Queue(), record=record, model="gpt-4o", env={}, spill_directory=given
    )
    assert record.spill_directory == given
    bare = MemoryRecord()
    load_harness(
        harness_file(tmp_path, "context: [pressure_compaction]\n"),
        provider=Queue(),
        record=bare,
        model="gpt-4o",
        env={},
        spill_directory=given,
    )
    assert bare.spill_directory is None


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


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("spill: {max_chars: 0}\n", "spill.max_chars"),
        ("spill: {max_chars: 10, excerpt_chars: 10}\n", "spill.excerpt_chars"),
        ("retry: {max_retries: -5}\n", "retry.max_retries"),
        ("retry: {base_delay_s: -1}\n", "retry.base_delay_s"),
        ("loop: {max_rounds_per_turn: 0}\n", "loop.max_rounds_per_turn"),
        ("loop: {max_output_tokens: 0}\n", "loop.max_output_tokens"),
    ],
)
def test_values_out_of_range_are_refused_when_the_file_is_read(
    tmp_path: Path, text: str, key: str
) -> None:
    """Issue 26: `read_harness` checks values, not only types: `eval` refuses before it runs."""
    with pytest.raises(ConfigError) as info:
        read_harness(harness_file(tmp_path, text))
    assert info.value.key == key


def test_a_spill_directory_that_would_be_refused_is_refused_when_read(tmp_path: Path) -> None:
    """The file's own spill directory, unless a given one replaces it (`load_harness`)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    path = harness_file(tmp_path, f"spill: {{directory: {tmp_path / 'link'}}}\n")
    with pytest.raises(ConfigError, match=r"spill\.directory"):
        read_harness(path)
    h = load_harness(
        path,
        provider=Queue(),
        record=MemoryRecord(),
        model="gpt-4o",
        env={},
        spill_directory=tmp_path / "spill",
    )
    assert h.spill is not None and h.spill.directory == tmp_path / "spill"
    assert read_harness(harness_file(tmp_path, f"context: []\n{path.read_text()}"))


def test_a_file_that_is_not_utf8_text_or_yaml_is_one_line(tmp_path: Path) -> None:
    """Issue 26: bytes that are not UTF-8, or YAML errors, are a `ConfigError` on one line."""
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00 binary")
    with pytest.raises(ConfigError, match=r"a UTF-8 text file \(byte 0 is not UTF-8\)"):
        read_harness(binary)
    for text, problem in (
        ("a: b: c\n", "mapping values are not allowed here at line 1, column 5"),
        ("x\x00y\n", "unacceptable character #x0000"),
    ):
        with pytest.raises(ConfigError) as info:
            read_harness(harness_file(tmp_path, text))
        assert problem in str(info.value) and "\n" not in str(info.value)


def test_a_missing_harness_file_is_a_config_error(tmp_path: Path) -> None:
    """A path that cannot be read says so."""
    with pytest.raises(ConfigError, match="a readable file"):
        load_harness(
            tmp_path / "nope.yaml", provider=Queue(), record=MemoryRecord(), model="gpt-4o", env={}
        )


# -- what counts as oversized follows the window (issue 30 item 7) --------------------------------


def _one_big_read(chars: int) -> list[Tool]:
    async def read_dump(arguments: object) -> str:
        return "\n".join(
            f"line {i}: worker {i} answered in {i % 97} ms" for i in range(chars // 40)
        )

    return [Tool(name="read_dump", fn=read_dump)]


@pytest.mark.parametrize("window", [2_048, 8_192, 200_000])
@pytest.mark.parametrize("chars", [39_000, 45_000])
async def test_no_single_result_leaves_a_turn_stuck(
    window: int, chars: int, tmp_path: Path
) -> None:
    """A result too large for the window is spilled (a share of it, in tokens), never stuck.

    Issue 30: in an 8k window a 39,000-character result was under the fixed 40,000-character
    bound, the newest-turn rule protected it from folding, and the turn ended in
    `OverflowRetriesExhaustedError`.
    """
    answers = iter(
        [
            Message.assistant(None, [ToolCall(id="c1", name="read_dump", arguments="{}")]),
            Message.assistant("Read it."),
        ]
    )

    def answer(request: CompletionRequest) -> Message | str:
        if is_summary_instruction(request.messages[-1].text):
            return "## Current Work\nRead the dump: worker 1 answered in 1 ms."
        return next(answers)

    record = MemoryRecord()
    record.append_message(Message.system("You read dumps."))
    harness = load_harness(
        provider=CachingProvider(answer, window=window),
        record=record,
        model=None,
        max_context_tokens=window,
        tools=_one_big_read(chars),
        env={},
        spill_directory=tmp_path / "spill",
    )
    result = await harness.loop.run_turn("Read the dump.")
    assert result.reply == Message.assistant("Read it.")
    (stored,) = [m for m in record.messages() if m.tool_result is not None]
    small = window < 100_000
    assert stored.text.startswith(SPILL_PREFIX) is (small or chars > 40_000)
    assert (
        harness.spill is not None and harness.spill.max_tokens == harness.policy.limit_tokens // 2
    )


def test_a_harness_may_set_the_token_bound_of_spill(tmp_path: Path) -> None:
    """`spill.max_tokens` in the file wins over the window's share."""
    path = harness_file(tmp_path, "spill:\n  max_tokens: 1234\n")
    harness = load_harness(
        path, provider=Queue(), record=MemoryRecord(), model=None, max_context_tokens=8_192, env={}
    )
    assert harness.spill is not None and harness.spill.max_tokens == 1234


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
