"""Tests for the public fakes: scripted, function-backed and caching providers."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import (
    Compactor,
    ConfigError,
    ContextOverflowError,
    ImagePart,
    Message,
    ToolCall,
    resolve_compaction_policy,
)
from steerable_compaction.compaction import SummaryRequest
from steerable_compaction.providers import (
    OVERFLOW_PATTERNS,
    Completion,
    CompletionRequest,
    Provider,
    StreamDone,
    TextDelta,
    ToolSpec,
    classify_error,
    provider_summarizer,
)
from steerable_compaction.record import Usage
from steerable_compaction.sim.provider import SimClock
from steerable_compaction.testing import (
    FAKE_SUMMARY,
    CacheRules,
    CachingProvider,
    FunctionProvider,
    ScriptedProvider,
    ScriptExhaustedError,
    fake_summary,
    is_summary_request,
)
from steerable_compaction.tokens import estimate_tokens, image_tokens


def req(*messages: Message, **kwargs: object) -> CompletionRequest:
    return CompletionRequest(messages=messages, **kwargs)  # type: ignore[arg-type]


def transcript(rounds: int, tag: str = "") -> list[Message]:
    """A system prompt, a goal and `rounds` tool rounds of about 170 tokens each."""
    out = [Message.system(f"You are a coding agent.{tag}"), Message.user("Fix the failing test.")]
    for i in range(rounds):
        call = ToolCall(id=f"call_{i}", name="read_file", arguments=f'{{"path": "src/m{i}.py"}}')
        body = f"# module {i}\n" + "".join(f"value_{k} = compute({k}, {i})\n" for k in range(16))
        out += [Message.assistant(f"Reading module {i}.", [call]), Message.tool(f"call_{i}", body)]
    return out


async def collect(provider: Provider, request: CompletionRequest) -> tuple[str, Completion]:
    """The streamed text and the `StreamDone` completion."""
    text, done = [], []
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            text.append(event.text)
        else:
            assert isinstance(event, StreamDone)
            done.append(event.completion)
    assert len(done) == 1
    return "".join(text), done[0]


# -- ScriptedProvider ---------------------------------------------------------------------------


async def test_scripted_answers_in_order_from_every_kind_of_item() -> None:
    """A str becomes assistant text, a Message or Completion passes as is, a callable is called."""
    own = Completion(message=Message.assistant("c"), usage=Usage(prompt_tokens=7))
    reply = Message.assistant("m", [ToolCall(id="t1", name="ls")])
    provider = ScriptedProvider(["s", reply, own, lambda r: f"saw {len(r.messages)}"])
    answers = [await provider.complete(req(Message.user(f"q{i}"))) for i in range(4)]
    assert [a.message for a in answers[:3]] == [Message.assistant("s"), reply, own.message]
    assert answers[2] is own
    assert answers[3].message.text == "saw 1"
    assert answers[1].stop_reason == "tool_calls" and answers[0].stop_reason == "stop"
    assert provider.completions == answers and provider.remaining == 0


async def test_scripted_bills_the_estimate_unless_the_completion_has_its_own_usage() -> None:
    """Prompt tokens are `estimate_tokens(request.messages)`; a Completion keeps its own usage."""
    own = Completion(message=Message.assistant("c"), usage=Usage(prompt_tokens=7))
    provider = ScriptedProvider(["hello there", own])
    messages = (Message.system("sys"), Message.user("what is up?"))
    first = await provider.complete(CompletionRequest(messages=messages))
    assert first.usage.prompt_tokens == estimate_tokens(messages)
    assert first.usage.completion_tokens == estimate_tokens(Message.assistant("hello there"))
    assert (await provider.complete(req(*messages))).usage.prompt_tokens == 7


async def test_scripted_raises_scripted_errors_and_records_the_request() -> None:
    """An exception instance in the script is raised for its request, which is still recorded."""
    error = ContextOverflowError("prompt is too long", provider="x", status_code=400)
    provider = ScriptedProvider([error, "after"])
    with pytest.raises(ContextOverflowError):
        await provider.complete(req(Message.user("a")))
    assert (await provider.complete(req(Message.user("b")))).message.text == "after"
    assert [r.messages[0].text for r in provider.requests] == ["a", "b"]
    assert len(provider.completions) == 1


async def test_scripted_fails_loudly_when_exhausted_and_keeps_recording() -> None:
    """Past the script's end every request raises an AssertionError naming the count answered."""
    provider = ScriptedProvider(["one"], name="agent")
    await provider.complete(req(Message.user("a")))
    with pytest.raises(ScriptExhaustedError) as info:
        await provider.complete(req(Message.user("b")))
    assert isinstance(info.value, AssertionError)
    assert info.value.answered == 1 and info.value.provider == "agent"
    assert "'agent'" in str(info.value) and "answered 1 request" in str(info.value)
    assert "request 2" in str(info.value)
    assert len(provider.requests) == 2


def test_script_exhausted_error_pickles() -> None:
    """The exhaustion error crosses process boundaries intact."""
    error = ScriptExhaustedError("scripted", 3)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ScriptExhaustedError
    assert (str(back), back.answered, back.provider) == (str(error), 3, "scripted")


@pytest.mark.parametrize("item", [ValueError, 42, None])
def test_scripted_rejects_items_it_cannot_answer_with(item: object) -> None:
    """Exception classes (not instances) and other values are refused when the script is built."""
    with pytest.raises(TypeError, match=r"script\[1\]"):
        ScriptedProvider(["ok", item])  # type: ignore[list-item]


async def test_a_reply_must_be_an_assistant_message() -> None:
    """A scripted user message is a test bug and raises at once."""
    provider = ScriptedProvider([Message.user("me?")])
    with pytest.raises(ValueError, match="'user'"):
        await provider.complete(req(Message.user("q")))


async def test_scripted_stream_matches_complete() -> None:
    """Streaming yields word deltas that join to the text, then the same completion."""
    script: Sequence[str] = ["  Several words,\nand a  tail. "]
    whole = await ScriptedProvider(script).complete(req(Message.user("q")))
    text, done = await collect(ScriptedProvider(script), req(Message.user("q")))
    assert done == whole and text == whole.message.text


# -- FunctionProvider ---------------------------------------------------------------------------


async def test_function_provider_answers_sync_and_async_functions() -> None:
    """`fn` may return a reply or an awaitable of one; every request is recorded."""

    async def later(request: CompletionRequest) -> Message:
        return Message.assistant(request.messages[-1].text.upper())

    sync = FunctionProvider(lambda r: f"echo {r.messages[-1].text}")
    asynchronous = FunctionProvider(later, name="async")
    assert (await sync.complete(req(Message.user("hi")))).message.text == "echo hi"
    assert (await asynchronous.complete(req(Message.user("hi")))).message.text == "HI"
    assert len(sync.requests) == len(asynchronous.requests) == 1
    assert (sync.name, asynchronous.name) == ("function", "async")


async def test_function_provider_propagates_errors() -> None:
    """What `fn` raises reaches the caller; the request is still recorded."""

    def fail(request: CompletionRequest) -> str:
        raise ContextOverflowError("prompt is too long", provider="f", status_code=400)

    provider = FunctionProvider(fail)
    with pytest.raises(ContextOverflowError):
        await provider.complete(req(Message.user("q")))
    assert len(provider.requests) == 1 and provider.completions == []


def test_every_fake_satisfies_the_provider_protocol() -> None:
    """The three fakes are `Provider`s."""
    fakes = [ScriptedProvider([]), FunctionProvider(lambda r: "x"), CachingProvider(window=10)]
    assert all(isinstance(f, Provider) for f in fakes)


# -- CachingProvider: like the real thing ------------------------------------------------------

REAL_OVERFLOWS = {
    # The error bodies of real 400 responses (OpenAI Chat Completions, Anthropic Messages).
    "openai": (
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130412 tokens. Please reduce the length of the messages.",
    ),
    "anthropic": ("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"),
}


def matching_patterns(text: str) -> set[str]:
    return {label for label, pattern in OVERFLOW_PATTERNS if pattern.search(text)}


@pytest.mark.parametrize(
    "rules", [CacheRules.openai(), CacheRules.anthropic()], ids=["openai", "anthropic"]
)
async def test_overflow_is_classified_like_the_real_providers_400(rules: CacheRules) -> None:
    """The overflow is a 400 `ContextOverflowError` matching the same patterns as the real one."""
    code, real = REAL_OVERFLOWS[rules.overflow]
    assert classify_error(status_code=400, code=code, message=real) == "overflow"
    provider = CachingProvider(window=50, rules=rules)
    with pytest.raises(ContextOverflowError) as info:
        await provider.complete(req(*transcript(1)))
    error = info.value
    assert (error.status_code, error.provider) == (400, "caching")
    assert classify_error(status_code=error.status_code, message=error.message) == "overflow"
    assert matching_patterns(error.message) == matching_patterns(real)
    assert len(provider.requests) == 1 and provider.completions == []


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (CacheRules.openai(), "you requested {total} tokens ({prompt} in the messages, 11 in"),
        (CacheRules.anthropic(), "exceed context limit: {prompt} + 11 > {window}, decrease"),
    ],
    ids=["openai", "anthropic"],
)
async def test_overflow_counts_the_requested_output(rules: CacheRules, expected: str) -> None:
    """Prompt plus `max_output_tokens` above the window overflows; the prompt alone fits."""
    prompt = CachingProvider(window=1, rules=rules).count_tokens(req(*transcript(1)))
    provider = CachingProvider(window=prompt + 10, rules=rules)
    await provider.complete(req(*transcript(1)))
    with pytest.raises(ContextOverflowError) as info:
        await provider.complete(req(*transcript(1), max_output_tokens=11))
    text = expected.format(total=prompt + 11, prompt=prompt, window=prompt + 10)
    assert text in info.value.message


async def test_replaying_the_prefix_plus_one_message_reads_nearly_all_of_it() -> None:
    """The next turn reads the previous prompt from cache (to a 128 step); a new prefix reads 0."""
    provider = CachingProvider(window=100_000)
    first = await provider.complete(req(*transcript(12)))
    assert first.usage.cached_tokens == 0 and first.usage.prompt_tokens > 2_000
    second = await provider.complete(req(*transcript(12), Message.user("And now?")))
    previous = first.usage.prompt_tokens
    assert previous - 128 < second.usage.cached_tokens <= previous
    assert second.usage.cached_tokens % 128 == 0
    other = await provider.complete(req(*transcript(12, tag=" Be brief.")))
    assert other.usage.cached_tokens == 0


async def test_tool_specs_are_part_of_the_cached_prefix() -> None:
    """The same messages under different tools share no cached prefix."""
    provider = CachingProvider(window=100_000)
    tools = (ToolSpec(name="read_file", parameters={"type": "object", "properties": {}}),)
    await provider.complete(req(*transcript(12), tools=tools))
    again = await provider.complete(req(*transcript(12), tools=tools))
    assert again.usage.cached_tokens > 0
    assert (await provider.complete(req(*transcript(12)))).usage.cached_tokens == 0


@pytest.mark.parametrize(
    ("rules", "step"),
    [(CacheRules.openai(), 128), (CacheRules.deepseek(), 64), (CacheRules.anthropic(), 1)],
    ids=["openai", "deepseek", "anthropic"],
)
async def test_reads_are_rounded_down_to_the_documented_step(rules: CacheRules, step: int) -> None:
    """OpenAI hits come in 128-token steps, DeepSeek in 64-token units, Anthropic to the token."""
    provider = CachingProvider(window=100_000, rules=rules)
    base = transcript(12)
    await provider.complete(req(*base))
    # The shared prefix ends inside the last message, after its header (role, call id).
    reach = provider.count_tokens(req(*base[:-1], Message.tool("call_11", ""))) - 1
    hit = await provider.complete(req(*base[:-1], Message.tool("call_11", "changed")))
    cached = hit.usage.cached_tokens
    assert cached % step == 0
    assert reach - step < cached <= reach


@pytest.mark.parametrize(
    ("rules", "minimum"),
    [(CacheRules.openai(), 1024), (CacheRules.anthropic(), 1024), (CacheRules.deepseek(), 64)],
    ids=["openai", "anthropic", "deepseek"],
)
async def test_prefixes_below_the_minimum_are_neither_read_nor_written(
    rules: CacheRules, minimum: int
) -> None:
    """A repeated prompt shorter than `min_cacheable` is never cached; a longer one is."""
    provider = CachingProvider(window=100_000, rules=rules)
    short = [Message.user("word " * (minimum // 2))]
    assert provider.count_tokens(req(*short)) < minimum
    await provider.complete(req(*short))
    assert (await provider.complete(req(*short))).usage.cached_tokens == 0
    long = [Message.user("word " * (minimum + 10))]
    await provider.complete(req(*long))
    assert (await provider.complete(req(*long))).usage.cached_tokens >= minimum


async def test_entries_expire_after_the_ttl() -> None:
    """An entry unread for `ttl_seconds` is gone (OpenAI's fake TTL is 5 minutes)."""
    clock = SimClock()
    provider = CachingProvider(window=100_000, clock=clock)
    await provider.complete(req(*transcript(12)))
    clock.now = 299.0
    warm = await provider.complete(req(*transcript(12), cache_retention="none"))
    clock.now = 299.0 + 300.0
    cold = await provider.complete(req(*transcript(12)))
    assert warm.usage.cached_tokens > 0 and cold.usage.cached_tokens == 0


async def test_a_read_refreshes_the_ttl_of_what_it_read() -> None:
    """Anthropic refreshes an entry each time it is used, so steady reads keep it alive."""
    clock = SimClock()
    provider = CachingProvider(window=100_000, rules=CacheRules.anthropic(), clock=clock)
    base = transcript(12)
    await provider.complete(req(*base))
    for now in (200.0, 450.0, 700.0):  # each read is < 300 s after the previous one
        clock.now = now
        read = await provider.complete(
            req(*base, Message.user("Summarize."), cache_retention="none")
        )
        assert read.usage.cached_tokens >= provider.count_tokens(req(*base)) - 1
    clock.now = 1001.0
    assert (await provider.complete(req(*base))).usage.cached_tokens == 0


async def test_a_partial_read_keeps_only_the_part_read_warm() -> None:
    """Reading a prefix of an entry refreshes that prefix, not the rest of the entry."""
    clock = SimClock()
    provider = CachingProvider(window=100_000, rules=CacheRules.anthropic(), clock=clock)
    base = transcript(12)
    await provider.complete(req(*base))
    clock.now = 200.0
    head_tokens = provider.count_tokens(req(*base[:12]))
    head = req(*base[:12], Message.user("Summarize."), cache_retention="none")
    assert (await provider.complete(head)).usage.cached_tokens == head_tokens > 1024
    clock.now = 400.0  # the entry written at 0 is gone; the head read at 200 is not
    whole = await provider.complete(req(*base, cache_retention="none"))
    assert whole.usage.cached_tokens == head_tokens


async def test_cache_retention_none_reads_but_writes_nothing() -> None:
    """A `cache_retention="none"` request reads the warm prefix but adds no entry (R27)."""
    provider = CachingProvider(window=100_000, rules=CacheRules.anthropic())
    base = transcript(12)
    first = await provider.complete(req(*base))
    assert first.usage.cache_write_tokens == first.usage.prompt_tokens
    extra = [Message.user("A long instruction. " * 200)]
    summary = await provider.complete(req(*base, *extra, cache_retention="none"))
    assert summary.usage.cached_tokens >= first.usage.prompt_tokens - 1
    assert summary.usage.cache_write_tokens == 0
    again = await provider.complete(req(*base, *extra))
    assert again.usage.cached_tokens == summary.usage.cached_tokens
    assert again.usage.cache_write_tokens == again.usage.prompt_tokens - again.usage.cached_tokens


async def test_writes_are_reported_only_where_the_provider_bills_them() -> None:
    """OpenAI and DeepSeek report no cache writes; Anthropic reports what it wrote."""
    cases = [(CacheRules.openai(), False), (CacheRules.deepseek(), False)]
    for rules, billed in [*cases, (CacheRules.anthropic(), True)]:
        provider = CachingProvider(window=100_000, rules=rules)
        usage = (await provider.complete(req(*transcript(12)))).usage
        assert (usage.cache_write_tokens > 0) is billed


async def test_caching_stream_equals_complete() -> None:
    """For the same requests `stream` and `complete` give equal completions, usage included."""

    def answer(request: CompletionRequest) -> str:
        return f"Seen {len(request.messages)} messages, all of them."

    clocks = SimClock(), SimClock()
    a = CachingProvider(answer, window=100_000, clock=clocks[0])
    b = CachingProvider(answer, window=100_000, clock=clocks[1])
    for request in (req(*transcript(12)), req(*transcript(12), Message.user("More?"))):
        whole = await a.complete(request)
        text, done = await collect(b, request)
        assert done == whole and text == whole.message.text
    assert whole.usage.cached_tokens > 0
    assert a.completions == b.completions and a.requests == b.requests


# -- CachingProvider: its own behaviour ---------------------------------------------------------


async def test_default_answer_is_short_and_deterministic() -> None:
    """Without `answer` the reply is `Reply <n>.`; completion tokens count the reply."""
    provider = CachingProvider(window=1_000)
    first = await provider.complete(req(Message.user("q")))
    second = await provider.complete(req(Message.user("q")))
    assert (first.message.text, second.message.text) == ("Reply 1.", "Reply 2.")
    assert first.usage.completion_tokens > 0 and first.stop_reason == "stop"


async def test_cache_hit_rate_and_clear_cache() -> None:
    """The hit rate is cached over billed prompt tokens; `clear_cache` evicts everything."""
    provider = CachingProvider(window=100_000)
    assert provider.cache_hit_rate() == 0.0
    await provider.complete(req(*transcript(12)))
    second = await provider.complete(req(*transcript(12)))
    total = sum(c.usage.prompt_tokens for c in provider.completions)
    assert provider.cache_hit_rate() == second.usage.cached_tokens / total > 0.4
    provider.clear_cache()
    assert (await provider.complete(req(*transcript(12)))).usage.cached_tokens == 0


async def test_counts_stay_near_the_estimate() -> None:
    """Billed prompt tokens sit under the conservative default estimate but not far under."""
    provider = CachingProvider(window=100_000)
    messages = transcript(12)
    ratio = provider.count_tokens(req(*messages)) / estimate_tokens(messages)
    assert 0.5 < ratio <= 1.0


async def test_images_are_opaque_token_blocks() -> None:
    """An image costs `image_tokens` tokens; a different image shares none of them."""
    png = b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR" + (64).to_bytes(4, "big") * 2
    image = ImagePart(media_type="image/png", data=png)
    other = ImagePart(media_type="image/png", data=png + b"x")
    provider = CachingProvider(window=100_000, rules=CacheRules.anthropic(min_cacheable=0))
    cost = provider.count_tokens(req(Message.user([image])))
    assert cost == image_tokens(image) + 2  # role and end markers
    await provider.complete(req(Message.user([image])))
    assert (await provider.complete(req(Message.user([other])))).usage.cached_tokens == 1


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_cacheable": -1}, "min_cacheable"),
        ({"min_cacheable": True}, "min_cacheable"),
        ({"step": 0}, "step"),
        ({"ttl_seconds": 0}, "ttl_seconds"),
        ({"overflow": "gemini"}, "overflow"),
    ],
)
def test_cache_rules_reject_bad_values(kwargs: dict[str, object], key: str) -> None:
    """Out-of-range rules raise `ConfigError` naming the key."""
    values: dict[str, object] = {"name": "x", "min_cacheable": 0, "ttl_seconds": 1.0}
    values.update(kwargs)
    with pytest.raises(ConfigError) as info:
        CacheRules(**values)  # type: ignore[arg-type]
    assert info.value.key == key


@pytest.mark.parametrize("window", [0, -5, True, 1.5])
def test_window_must_be_a_positive_int(window: object) -> None:
    """A bad `window` raises `ConfigError`."""
    with pytest.raises(ConfigError, match="window"):
        CachingProvider(window=window)  # type: ignore[arg-type]


@given(st.text(max_size=60), st.text(max_size=20), st.text(max_size=20))
async def test_texts_sharing_a_byte_prefix_share_its_tokens(shared: str, a: str, b: str) -> None:
    """Two prompts sharing a text prefix share all of its tokens but the last piece."""
    rules = CacheRules(name="exact", min_cacheable=0, ttl_seconds=60.0)
    provider = CachingProvider(window=10_000, rules=rules)
    await provider.complete(req(Message.user(shared + a)))
    usage = (await provider.complete(req(Message.user(shared + b)))).usage
    prefix_tokens = provider.count_tokens(req(Message.user(shared))) - 1  # its end marker
    assert prefix_tokens - 1 <= usage.cached_tokens <= usage.prompt_tokens
    if a == b:
        assert usage.cached_tokens == usage.prompt_tokens


async def test_token_scale_bills_a_denser_tokenizer_and_refuses_by_the_billed_count() -> None:
    """`token_scale` scales every billed figure (prompt, cached, completion) and the overflow.

    It stands in for a model whose tokenizer the library's estimate over-counts (the estimate
    is then 1 / scale times the bill).
    """
    messages = transcript(12)
    plain = CachingProvider(window=100_000)
    dense = CachingProvider(window=100_000, token_scale=0.7)
    assert dense.count_tokens(req(*messages)) == -(-plain.count_tokens(req(*messages)) * 7 // 10)
    await dense.complete(req(*messages))
    second = await dense.complete(req(*messages))
    assert second.usage.prompt_tokens == dense.count_tokens(req(*messages))
    assert 0 < second.usage.cached_tokens <= second.usage.prompt_tokens
    fits = CachingProvider(window=dense.count_tokens(req(*messages)), token_scale=0.7)
    await fits.complete(req(*messages))  # over the window unscaled, inside it billed
    assert plain.count_tokens(req(*messages)) > fits.window


@pytest.mark.parametrize(
    ("scale", "error"), [(0.05, ValueError), (True, TypeError), (11, ValueError)]
)
def test_token_scale_must_be_a_plausible_number(scale: object, error: type[Exception]) -> None:
    """A scale outside [0.1, 10], or not a number, is refused at construction."""
    with pytest.raises(error, match="token_scale"):
        CachingProvider(window=10, token_scale=scale)  # type: ignore[arg-type]


# -- telling summary requests apart -------------------------------------------------------------


def test_a_summary_request_is_told_from_a_normal_one_in_every_form() -> None:
    """`is_summary_request` reads a request, its messages or its last text.

    Only the engine's summary instruction as the last user message counts.
    """
    seen: list[SummaryRequest] = []

    def summarizer(request: SummaryRequest) -> str:
        seen.append(request)
        return fake_summary(request.messages)

    Compactor(resolve_compaction_policy(None, 4_000), summarizer=summarizer).prepare(transcript(40))
    summary = seen[0]
    assert is_summary_request(summary.messages)
    assert is_summary_request(req(*summary.messages))
    assert is_summary_request(summary.instruction.text)
    normal = transcript(2)
    assert not is_summary_request(normal)
    assert not is_summary_request(req(*normal))
    assert not is_summary_request(normal[-1].text)
    assert not is_summary_request([])
    quoted = Message.assistant(summary.instruction.text)  # the instruction, but not asked
    assert not is_summary_request([*summary.replay, quoted])


async def test_a_fake_answering_summary_requests_with_the_fake_summary_is_summarized() -> None:
    """`fake_summary` is a checkpoint the engine accepts: a fake can answer summaries with it.

    The canned opening alone keeps none of the span's values, and the engine refuses it.
    """
    provider = FunctionProvider(
        lambda r: fake_summary(r) if is_summary_request(r) else Message.assistant("next")
    )
    compactor = Compactor(
        resolve_compaction_policy(None, 4_000), summarizer=provider_summarizer(provider)
    )
    await compactor.prepare_async(transcript(40))
    assert {(c.action, c.status) for c in compactor.record.compactions()} == {
        ("summarize", "closed")
    }
    assert all(is_summary_request(r) for r in provider.requests)
    canned = FunctionProvider(lambda r: FAKE_SUMMARY)
    refusing = Compactor(
        resolve_compaction_policy(None, 4_000), summarizer=provider_summarizer(canned)
    )
    await refusing.prepare_async(transcript(40))
    assert {c.action for c in refusing.record.compactions()} == {"excerpt"}
