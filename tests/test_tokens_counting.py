from __future__ import annotations

import math
import operator
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steerable_compaction import tokens
from steerable_compaction.tokens import (
    TextCounts,
    calibration_for,
    count_text,
    estimate_tokens,
)
from steerable_compaction.tokens.counting import TextPricer

from .token_reference import reference_counts

ZH = "我们今天下午在会议室讨论了新版本的发布计划。"  # 21 ideographs + ideographic full stop
EN = "We discussed the release plan for the new version in the meeting room this afternoon."


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


def spied_pricer(monkeypatch: pytest.MonkeyPatch) -> tuple[TextPricer, list[str]]:
    """A fresh gpt-4o pricer and the list of texts it counts (each `_counts` call)."""
    from steerable_compaction.tokens import counting

    counted: list[str] = []
    real = counting._counts

    def spy(text: str) -> tuple[int, ...]:
        counted.append(text)
        return real(text)

    monkeypatch.setattr(counting, "_counts", spy)
    return counting.TextPricer(calibration_for("gpt-4o")), counted


def test_r8_short_texts_are_remembered_with_the_same_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short text is counted once per calibration, a long one every time; the memo is bounded."""
    from steerable_compaction.tokens import counting

    pricer, counted = spied_pricer(monkeypatch)
    assert pricer.cost("read_file") == pricer.cost("read_file") == 2 * 1.029 + 0.1764 + 0.4312
    long = "x" * (counting._MEMO_CHARS + 1)
    pricer.cost(long)
    pricer.cost(long)
    assert counted == ["read_file", long, long]
    for i in range(counting._MEMO_SIZE + 10):
        pricer.cost(f"id_{i}")
    assert len(pricer._memo) <= counting._MEMO_SIZE
    assert pricer.cost("") == 0.0


def test_r8_short_ascii_texts_of_one_shape_are_counted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fresh call ids of one shape cost one count; other shapes and non-ASCII texts their own."""
    from steerable_compaction.tokens import counting

    pricer, counted = spied_pricer(monkeypatch)
    ids = [f"call_{n}" for n in range(100_000, 100_050)]
    assert {pricer.cost(i) for i in ids} == {pricer.cost("call_999999")}
    assert pricer.cost("call_99999X") != pricer.cost("call_999999")  # an upper-case letter
    assert pricer.cost("café_1") == pricer.cost("café_1")
    assert pricer.cost("cafë_1") > 0
    assert counted == ["call_100000", "call_99999X", "café_1", "cafë_1"]
    two_classes = str.maketrans("01", "a-")  # every 13-character string of a and -: a shape each
    for i in range(counting._MEMO_SIZE + 10):
        pricer.cost(format(i, "013b").translate(two_classes))
    assert 0 < len(pricer._shapes) <= counting._MEMO_SIZE


@given(st.lists(st.text(st.sampled_from("aZq09 \t\n\r._-\x00\x7f"), max_size=12), max_size=20))
def test_r8_a_text_priced_by_its_shape_costs_what_counting_it_costs(texts: list[str]) -> None:
    """Texts priced one after another by one pricer (shapes repeat): each as counted alone."""
    from steerable_compaction.tokens import counting

    pricer = counting.TextPricer(calibration_for("claude-sonnet-4"))
    for text in texts:
        counts = reference_counts(text) + scripts(text) if text else (0,)
        assert pricer.cost(text) == pytest.approx(sum(map(operator.mul, pricer.weights, counts)))


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


@pytest.fixture
def numpy_for_all_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text of two bytes or more goes to numpy, cut into pieces of about 8 bytes."""
    pytest.importorskip("numpy")
    from steerable_compaction.tokens import counting

    monkeypatch.setattr(counting, "_VECTOR_MIN", 2)
    monkeypatch.setattr(counting, "_VECTOR_PIECE", 8)


@pytest.mark.usefixtures("numpy_for_all_texts")
@given(edge_texts)
def test_r8_numpy_counting_equals_the_reference_counting(text: str) -> None:
    """The numpy pass (long texts) gives exactly the reference counts, in pieces or whole."""
    for longer in (text, text * 4):
        counts = count_text(longer)
        assert as_tuple(counts) == reference_counts(longer)
        assert (counts.latin_greek, counts.arabic, counts.indic, counts.thai) == scripts(longer)


@given(edge_texts.filter(lambda text: len(text.encode("utf-8", "surrogatepass")) >= 2))
def test_r8_numpy_and_bit_operations_count_a_piece_alike(text: str) -> None:
    """The two passes agree field by field on the same bytes, ASCII or not."""
    pytest.importorskip("numpy")
    from steerable_compaction.tokens import counting, vectorized

    raw = text.encode("utf-8", "surrogatepass")
    assert vectorized.piece_counts(raw, text.isascii()) == counting._piece(raw, text.isascii())


def test_r8_long_texts_use_numpy_when_installed_and_count_alike_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long text goes to numpy; with numpy missing the bit operations give the same counts."""
    pytest.importorskip("numpy")
    import sys

    from steerable_compaction.tokens import counting, vectorized

    text = (EN + "\n" + ZH + " 3.14 fooBar\t\t x\n\n\n") * 400
    assert len(text.encode()) > counting._VECTOR_MIN
    seen: list[int] = []

    def spy(raw: bytes, ascii_only: bool) -> tuple[int, ...]:
        seen.append(len(raw))
        return vectorized.piece_counts(raw, ascii_only)

    monkeypatch.setattr(counting, "_vector", [spy])
    with_numpy = count_text(text)
    assert seen == [len(text.encode())]
    monkeypatch.setattr(counting, "_vector", [])
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
    monkeypatch.delitem(sys.modules, "steerable_compaction.tokens.vectorized")
    assert counting._vectorized() is None
    assert (
        count_text(text)
        == with_numpy
        == TextCounts(
            **dict(zip(TextCounts.__slots__, reference_counts(text) + scripts(text), strict=True))
        )
    )
