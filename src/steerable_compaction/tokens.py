"""Token estimates and the usage-anchored pressure meter (R7-R10).

`estimate_tokens` prices text by character class (ASCII words, digits, punctuation, whitespace
runs, CJK ideographs, kana, hangul, other non-ASCII) and adds message framing, tool-call JSON and
images. A per-family `Calibration` scales the classes (R8); the table lives here, in the measuring
layer. `TokenMeter` anchors the estimate on the provider's billed `prompt_tokens` (R7), resets the
anchor on every rewrite (R9) and keeps pressure continuous across it (R10).

Counting is done on the UTF-8 bytes with `bytes.translate` (one byte per class) and `bytes.count`,
so no Python loop runs per character; `benchmarks/tokens_accuracy.py` measures speed and accuracy
against real tokenizers.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Literal, TypeAlias

from .messages import ImagePart, Message, TextPart, ToolCall, ToolResult

__all__ = [
    "DEFAULT_FAMILY",
    "FAMILY_CALIBRATIONS",
    "Calibration",
    "ImageRule",
    "Observation",
    "TextCounts",
    "TokenMeter",
    "calibration_for",
    "count_text",
    "estimate_tokens",
    "image_dimensions",
    "image_tokens",
    "model_family",
]

ImageRule: TypeAlias = Literal["tiles", "area", "patch", "gemini", "fixed", "max"]

# -- calibration table (R8) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Per-family costs: `text` scales the ASCII estimate, the rest are tokens per character.

    `digit` prices each digit after the first of a run (about 1/3 when a tokenizer groups
    three digits, 1.0 when it splits them); `other` scales the non-CJK non-ASCII classes.
    """

    family: str
    text: float
    digit: float
    han: float
    kana: float
    hangul: float
    other: float
    image: ImageRule


# Measured rows were fitted against the real tokenizers on `benchmarks/corpora` plus held-out
# text (`benchmarks/tokens_accuracy.py` prints the ratios). The others are set by analogy with a
# tokenizer of the same kind and lean high: an under-estimate overflows the window, an
# over-estimate only compacts a little early.
_Row: TypeAlias = tuple[str, float, float, float, float, float, float, ImageRule]
_TABLE: tuple[_Row, ...] = (
    # (family, text, digit, han, kana, hangul, other, image)
    ("o200k", 0.98, 0.35, 0.89, 0.72, 0.80, 0.70, "tiles"),  # gpt-4o/4.1/5, o-series: measured
    ("cl100k", 0.97, 0.37, 1.39, 0.97, 1.40, 1.30, "tiles"),  # gpt-4, gpt-3.5: measured
    ("qwen", 0.97, 1.24, 0.69, 0.58, 0.90, 1.00, "patch"),  # Qwen2.5 (3.5+ ~10 % less): measured
    ("deepseek", 1.06, 0.20, 0.62, 0.65, 0.92, 0.85, "tiles"),  # DeepSeek-V3: measured
    ("claude", 1.20, 1.00, 1.40, 1.00, 1.40, 1.30, "area"),  # ~10-30 % above cl100k (published)
    ("gemini", 1.05, 1.00, 0.75, 0.75, 0.95, 1.00, "gemini"),  # SentencePiece 256k, split digits
    ("gemma", 1.05, 1.00, 0.75, 0.75, 0.95, 1.00, "fixed"),  # as gemini
    ("llama", 1.00, 1.00, 1.39, 0.97, 1.40, 1.30, "tiles"),  # Llama 3 extends cl100k
    ("mistral", 1.00, 1.00, 1.00, 0.90, 1.10, 1.00, "patch"),  # Tekken, tiktoken-style 131k
)
_FAMILIES: dict[str, Calibration] = {
    f: Calibration(family=f, text=t, digit=d, han=h, kana=k, hangul=g, other=o, image=i)
    for f, t, d, h, k, g, o, i in _TABLE
}

DEFAULT_FAMILY = "default"
_MARGIN = 1.05  # the unknown-model default sits this far above the costliest family


def _top(name: str) -> float:
    return round(max(float(getattr(c, name)) for c in _FAMILIES.values()) * _MARGIN, 3)


_NUMERIC = ("text", "digit", "han", "kana", "hangul", "other")
_FAMILIES[DEFAULT_FAMILY] = Calibration(
    family=DEFAULT_FAMILY, image="max", **{name: _top(name) for name in _NUMERIC}
)

FAMILY_CALIBRATIONS: Mapping[str, Calibration] = MappingProxyType(_FAMILIES)
"""Every family's `Calibration`, `DEFAULT_FAMILY` included (read-only)."""

# First match wins; patterns see the lower-cased last path segment of the model name, so
# "openai/gpt-4o", "ft:gpt-4o-mini:acme::x1" and "anthropic.claude-3-5-sonnet-v2:0" resolve.
_FAMILY_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), f)
    for p, f in (
        (r"\b(?:chat)?gpt-(?:4o|4\.1|4\.5|5|oss)|\bo\d|\bcodex|\bcomputer-use", "o200k"),
        (r"\bgpt-(?:4|3\.5|35)|\btext-embedding-3", "cl100k"),
        (r"claude", "claude"),
        (r"qwen|qwq", "qwen"),
        (r"deepseek", "deepseek"),
        (r"gemma", "gemma"),
        (r"gemini", "gemini"),
        (r"llama", "llama"),
        (r"mistral|mixtral|codestral|devstral|magistral|ministral|pixtral", "mistral"),
    )
)


@lru_cache(maxsize=256)
def model_family(model: str | None) -> str:
    """The calibration family of `model` or family name (`DEFAULT_FAMILY` when unknown)."""
    if not model:
        return DEFAULT_FAMILY
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name in _FAMILIES:  # a family name is accepted as a model ("o200k", "default")
        return name
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(name):
            return family
    return DEFAULT_FAMILY


def calibration_for(model: str | None) -> Calibration:
    """The `Calibration` used for `model`; unknown models get the conservative default."""
    return _FAMILIES[model_family(model)]


# -- character classes -----------------------------------------------------------------------------

_LOWER = b"abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_DIGITS = b"0123456789"
_LETTERS = _LOWER + _UPPER
_PUNCT = bytes(b for b in range(0x21, 0x7F) if not chr(b).isalnum())
_CONT = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes


def _table(default: bytes, **groups: tuple[bytes, bytes]) -> bytes:
    table = bytearray(default * 256)
    for members, cls in groups.values():
        for b in members:
            table[b] = cls[0]
    return bytes(table)


def _keep_only(members: bytes) -> bytes:
    return bytes(b for b in range(256) if b not in members)


# Run counts use a two-letter needle on a translated copy: "a " counts letter runs by their ends.
# Needles are chosen for speed (`bytes.count` is slower when the needle's last byte is common).
_T_LETTER = _table(b" ", letters=(_LETTERS, b"a"))
_T_DIGIT = _table(b" ", digits=(_DIGITS, b"0"))
_T_SPACED_DIGIT = _table(b"x", digits=(_DIGITS, b"0"), space=(b" ", b"s"))
_T_PUNCT = _table(b" ", punct=(_PUNCT, b"."))
_T_CASE = _table(b" ", lower=(_LOWER, b"a"), upper=(_UPPER, b"A"))
_T_SPACE = _table(b"x", space=(b" \t", b" "))
_DEL_NOT_UPPER = _keep_only(_UPPER)
_DEL_NOT_DIGIT = _keep_only(_DIGITS)
_DEL_NOT_PUNCT = _keep_only(_PUNCT)
# Non-ASCII characters by UTF-8 lead byte (continuation bytes and ASCII are deleted):
#   C2-DF two-byte (Latin-1, Greek, Cyrillic, ...)   E0-E2 three-byte symbols, Indic, punctuation
#   E3 U+3000-3FFF (CJK punctuation, kana, ...)      E4-E9 CJK ideographs U+4000-9FFF
#   EA-ED hangul syllables U+AC00-D7A3 (approx.)     EE-EF private use, fullwidth forms
#   F0-F4 four-byte (emoji, rare ideographs)
_T_NONASCII = _table(
    b"?",
    two=(bytes(range(0xC2, 0xE0)), b"l"),
    three=(bytes(range(0xE0, 0xE3)), b"o"),
    kana=(b"\xe3", b"j"),
    han=(bytes(range(0xE4, 0xEA)), b"H"),
    hangul=(bytes(range(0xEA, 0xEE)), b"K"),
    wide=(b"\xee\xef", b"f"),
    four=(bytes(range(0xF0, 0xF8)), b"e"),
)
_T_TWO_BYTE = _table(b" ", two=(bytes(range(0xC2, 0xE0)), b"l"))
_DEL_ASCII_CONT = bytes(range(0x80)) + _CONT
_PUNCT_ENDS = frozenset(_PUNCT)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextCounts:
    """Character-class counts of one text (the estimator's input; exposed for tuning)."""

    words: int = 0  # runs of ASCII letters
    upper: int = 0  # uppercase ASCII letters
    humps: int = 0  # lower-to-upper case changes (camelCase)
    digit_runs: int = 0
    spaced_digit_runs: int = 0  # digit runs right after a space (the space is its own token)
    digits: int = 0
    punct: int = 0  # ASCII punctuation and symbols
    punct_runs: int = 0
    newline_runs: int = 0
    space_runs: int = 0  # runs of two or more spaces/tabs followed by more text
    han: int = 0
    kana: int = 0
    hangul: int = 0
    cjk_punct: int = 0  # U+3000-303F and U+E000-FFFF (fullwidth forms, CJK compatibility)
    two_byte: int = 0  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic ...
    two_byte_runs: int = 0
    three_byte: int = 0  # U+0800-2FFF: symbols, arrows, box drawing, Indic, Thai ...
    four_byte: int = 0  # U+10000 and up: emoji, rare ideographs


_NO_NONASCII = (0, 0, 0, 0, 0, 0, 0, 0)


def _counts(text: str) -> tuple[int, ...]:
    """`TextCounts` fields in order, as a tuple (the hot path builds no objects)."""
    raw = text.encode("utf-8", "surrogatepass")
    last = raw[-1]
    ascii_counts = (
        raw.translate(_T_LETTER).count(b"a ") + (last in _LETTERS),
        len(raw.translate(None, _DEL_NOT_UPPER)),
        raw.translate(_T_CASE).count(b"aA"),
        raw.translate(_T_DIGIT).count(b"0 ") + (last in _DIGITS),
        raw.translate(_T_SPACED_DIGIT).count(b"s0"),
        len(raw.translate(None, _DEL_NOT_DIGIT)),
        len(raw.translate(None, _DEL_NOT_PUNCT)),
        raw.translate(_T_PUNCT).count(b". ") + (last in _PUNCT_ENDS),
        raw.count(b"\n") - raw.count(b"\n\n"),  # exact for runs of one or two newlines
        raw.translate(_T_SPACE).count(b"  x"),
    )
    if text.isascii():
        return (*ascii_counts, *_NO_NONASCII)
    cls = raw.translate(_T_NONASCII, _DEL_ASCII_CONT)
    e3 = cls.count(b"j")
    e3_punct = raw.count(b"\xe3\x80") if e3 else 0  # U+3000-303F: ideographic comma, stop, brackets
    wide = cls.count(b"f")  # fullwidth forms, CJK compatibility, private use: ~1 token each
    two = cls.count(b"l")
    two_runs = 0
    if two:
        two_runs = raw.translate(_T_TWO_BYTE, _CONT).count(b"l ") + (0xC2 <= raw[-2] <= 0xDF)
    return (
        *ascii_counts,
        cls.count(b"H"),
        e3 - e3_punct,
        cls.count(b"K"),
        e3_punct + wide,
        two,
        two_runs,
        cls.count(b"o"),
        cls.count(b"e"),
    )


def count_text(text: str) -> TextCounts:
    """Count `text`'s character classes with a few `translate`/`count` passes."""
    if not text:
        return TextCounts()
    return TextCounts(**dict(zip(TextCounts.__slots__, _counts(text), strict=True)))


# Base costs in tokens per counted unit, fitted on ASCII text (code, JSON, prose, shell output).
# A letter run is about one token whatever its length; a space before a digit run is a token of
# its own; an upper-case letter and a camelCase hump usually start a new token.
_COST_WORD = 1.05
_COST_UPPER = 0.18
_COST_HUMP = 1.7
_COST_DIGIT_RUN = 1.25
_COST_SPACED_DIGIT_RUN = 1.2
_COST_PUNCT = 0.18
_COST_PUNCT_RUN = 0.44
_COST_NEWLINE_RUN = 0.92
_COST_SPACE_RUN = 0.57
# Non-ASCII costs outside the family table: CJK punctuation is one token everywhere; the `other`
# classes are scaled by `Calibration.other`.
_COST_CJK_PUNCT = 1.0
_COST_TWO_BYTE_RUN = 1.0  # an accented letter splits its word; a Cyrillic word starts a token
_COST_TWO_BYTE = 0.25
_COST_THREE_BYTE = 0.8
_COST_FOUR_BYTE = 2.0


@lru_cache(maxsize=64)
def _weights(cal: Calibration) -> tuple[float, ...]:
    """Tokens per unit of each `TextCounts` field under `cal`."""
    text, other = cal.text, cal.other
    return (
        text * _COST_WORD,
        text * _COST_UPPER,
        text * _COST_HUMP,
        text * _COST_DIGIT_RUN - cal.digit,  # digits after the first of a run cost `cal.digit`
        text * _COST_SPACED_DIGIT_RUN,
        cal.digit,
        text * _COST_PUNCT,
        text * _COST_PUNCT_RUN,
        text * _COST_NEWLINE_RUN,
        text * _COST_SPACE_RUN,
        cal.han,
        cal.kana,
        cal.hangul,
        _COST_CJK_PUNCT,
        other * _COST_TWO_BYTE,
        other * _COST_TWO_BYTE_RUN,
        other * _COST_THREE_BYTE,
        other * _COST_FOUR_BYTE,
    )


def _text_cost(text: str, cal: Calibration) -> float:
    if not text:
        return 0.0
    total: float = sum(map(operator.mul, _weights(cal), _counts(text)))
    return total


# -- images ----------------------------------------------------------------------------------------


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """`(width, height)` from a PNG, GIF, WebP or JPEG header, or `None` if unrecognised."""
    size: tuple[int, int] | None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        size = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        size = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_dimensions(data)
    elif data[:2] == b"\xff\xd8":
        size = _jpeg_dimensions(data)
    else:
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _webp_dimensions(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return (
            int.from_bytes(data[26:28], "little") & 0x3FFF,
            int.from_bytes(data[28:30], "little") & 0x3FFF,
        )
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_dimensions(data: bytes) -> tuple[int, int] | None:
    pos = 2
    for _ in range(256):  # segments are skipped by length, so this stays cheap
        while pos < len(data) and data[pos] == 0xFF:
            pos += 1  # fill bytes; the marker follows
        if pos + 3 > len(data):
            return None
        marker = data[pos]
        if marker in _JPEG_SOF:
            if pos + 8 > len(data):
                return None
            return int.from_bytes(data[pos + 6 : pos + 8], "big"), int.from_bytes(
                data[pos + 4 : pos + 6], "big"
            )
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 1  # markers without a length field
            continue
        length = int.from_bytes(data[pos + 1 : pos + 3], "big")
        if length < 2:
            return None
        pos += 1 + length
    return None


def _scale_to_fit(w: float, h: float, box: float) -> tuple[float, float]:
    s = min(1.0, box / max(w, h))
    return w * s, h * s


def _tiles(w: int, h: int) -> int:
    """OpenAI high detail: fit 2048², shortest side to 768, 170 per 512-px tile plus 85."""
    fw, fh = _scale_to_fit(w, h, 2048)
    s = min(1.0, 768 / min(fw, fh))
    return 85 + 170 * math.ceil(fw * s / 512) * math.ceil(fh * s / 512)


def _area(w: int, h: int) -> int:
    """Anthropic: long edge at most 1568 px and about 1.15 MP, then one token per 750 px²."""
    fw, fh = _scale_to_fit(w, h, 1568)
    s = min(1.0, math.sqrt(1_150_000 / (fw * fh)))
    return math.ceil(fw * fh * s * s / 750)


def _patch(w: int, h: int) -> int:
    """Qwen-VL style: 28-px merged patches, capped at 1280 patches, plus two markers."""
    s = min(1.0, math.sqrt(1280 * 28 * 28 / (w * h)))
    return min(1280, math.ceil(w * s / 28) * math.ceil(h * s / 28)) + 2


def _gemini(w: int, h: int) -> int:
    """Gemini: 258 for an image within 384 px, else 258 per 768-px tile."""
    if w <= 384 and h <= 384:
        return 258
    return 258 * math.ceil(w / 768) * math.ceil(h / 768)


_IMAGE_RULES: dict[str, Callable[[int, int], int]] = {
    "tiles": _tiles,
    "area": _area,
    "patch": _patch,
    "gemini": _gemini,
    "fixed": lambda w, h: 256,  # Gemma 3: every image is 256 soft tokens
}
_UNKNOWN_SIZE = (1920, 1080)  # an image whose size is unknown is priced as a full-HD screenshot


def image_tokens(image: ImagePart, model: str | None = None) -> int:
    """Tokens for `image`: from its pixel size when the header is readable, else a fixed cost."""
    return _image_part_cost(image, calibration_for(model))


def _image_cost(size: tuple[int, int], rule: ImageRule) -> int:
    if rule == "max":
        return max(fn(*size) for fn in _IMAGE_RULES.values())
    return _IMAGE_RULES[rule](*size)


# -- messages --------------------------------------------------------------------------------------

_MESSAGE_OVERHEAD = 4  # role header and end-of-turn markers
_PART_OVERHEAD = 1  # separator between content blocks
_TOOL_CALL_OVERHEAD = 18  # the call's JSON wrapper (keys, braces, markers) around name/args/id
_TOOL_RESULT_OVERHEAD = 6  # the result's wrapper around its call id and content


def _message_cost(message: Message, cal: Calibration) -> int:
    """Whole tokens for one message: framing plus every part (the meter caches this)."""
    total = float(_MESSAGE_OVERHEAD)
    for part in message.parts:
        total += _PART_OVERHEAD
        if isinstance(part, TextPart):
            total += _text_cost(part.text, cal)
        elif isinstance(part, ImagePart):
            total += _image_part_cost(part, cal)
        elif isinstance(part, ToolCall):
            total += _TOOL_CALL_OVERHEAD + _text_cost(part.id, cal)
            total += _text_cost(part.name, cal) + _text_cost(part.arguments, cal)
        else:
            total += _TOOL_RESULT_OVERHEAD + _tool_result_cost(part, cal)
    return math.ceil(total)


def _image_part_cost(part: ImagePart, cal: Calibration) -> int:
    size = image_dimensions(part.data) if part.data is not None else None
    return _image_cost(size or _UNKNOWN_SIZE, cal.image)


def _tool_result_cost(part: ToolResult, cal: Calibration) -> float:
    total = _text_cost(part.call_id, cal)
    for item in part.content:
        total += _PART_OVERHEAD
        if isinstance(item, TextPart):
            total += _text_cost(item.text, cal)
        else:
            total += _image_part_cost(item, cal)
    return total


def estimate_tokens(x: str | Message | Sequence[Message], model: str | None = None) -> int:
    """Estimated tokens of a text, a message or a transcript under `model`'s calibration.

    A text is priced alone; messages include their framing. Unknown or `None` models use the
    conservative `DEFAULT_FAMILY`, which over-estimates rather than under-estimates.
    """
    cal = calibration_for(model)
    if isinstance(x, str):
        return math.ceil(_text_cost(x, cal))
    if isinstance(x, Message):
        return _message_cost(x, cal)
    return sum(_message_cost(m, cal) for m in x)


# -- the meter (R7, R9, R10) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """A provider-billed request: `prompt_tokens` for the first `message_count` messages."""

    prompt_tokens: int
    message_count: int


_CACHE_MAX = 1 << 16
_MIN_SAMPLE = 200  # estimated tokens a span needs before it may teach the online factor
_SMOOTHING = 0.3
_FACTOR_BOUNDS = (0.5, 2.0)


def _clamp(value: float) -> float:
    return min(_FACTOR_BOUNDS[1], max(_FACTOR_BOUNDS[0], value))


def _missing(items: Sequence[Message], other: Sequence[Message]) -> list[Message]:
    """Members of `items` that `other` lacks, by identity and counting repeats."""
    left = Counter(map(id, other))
    out: list[Message] = []
    for m in items:
        if left[id(m)] > 0:
            left[id(m)] -= 1
        else:
            out.append(m)
    return out


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


class TokenMeter:
    """Context pressure: the last billed `prompt_tokens` plus estimates of what came after.

    Call `pressure` before a request, `observe` with the provider's usage after it, and
    `rewrite` whenever compaction replaces the transcript. Per-message estimates are cached by
    identity, so a call costs O(messages appended since the anchor).
    """

    def __init__(self, model: str | None = None, *, online_calibration: bool = False) -> None:
        self._model = model
        self._cal = calibration_for(model)
        self._online = online_calibration
        self._factor = 1.0
        self._anchor_tokens = 0  # tokens of messages[:_anchor_count]: billed or carried over
        self._anchor_count = 0
        self._observed: Observation | None = None
        self._epoch = 0  # bumped whenever the anchor moves
        self._pending: tuple[int, int, int] | None = None  # (epoch, message_count, raw tokens)
        self._cache: dict[int, tuple[Message, int]] = {}

    @property
    def model(self) -> str | None:
        """The model name this meter was made for."""
        return self._model

    @property
    def family(self) -> str:
        """The calibration family of `model`."""
        return self._cal.family

    @property
    def last_observed(self) -> Observation | None:
        """The last `observe` call, or `None` before the first one and after a `rewrite`."""
        return self._observed

    @property
    def calibration(self) -> float:
        """The online factor applied to new-message estimates (1.0 unless learning is on)."""
        return self._factor

    def _raw(self, message: Message) -> int:
        entry = self._cache.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        value = _message_cost(message, self._cal)
        if len(self._cache) >= _CACHE_MAX:
            for key in list(self._cache)[: _CACHE_MAX // 2]:
                del self._cache[key]
        self._cache[id(message)] = (message, value)
        return value

    def _scaled(self, raw: int) -> int:
        return raw if self._factor == 1.0 else math.ceil(raw * self._factor)

    def estimate(self, message: Message) -> int:
        """The meter's estimate of one message: cached by identity, online factor applied."""
        return self._scaled(self._raw(message))

    def pressure(self, messages: Sequence[Message]) -> int:
        """Tokens the next request will carry: the anchor plus `messages[anchor:]` estimated.

        Before any observation the whole transcript is estimated (R7).
        """
        count = len(messages)
        if count < self._anchor_count:
            raise ValueError(
                f"the transcript has {count} messages but the meter is anchored on the first "
                f"{self._anchor_count}; call rewrite() when the transcript is replaced"
            )
        raw = sum(self._raw(messages[i]) for i in range(self._anchor_count, count))
        if self._online and self._observed is not None:
            self._pending = (self._epoch, count, raw)
        total = self._anchor_tokens + self._scaled(raw)
        if self._observed is None and self._anchor_count == 0 and count:
            # The first whole estimate becomes the anchor until a provider reports usage, so
            # the next call costs O(new messages) too (R7: only the first is estimated whole).
            self._anchor_tokens, self._anchor_count = total, count
        return total

    def observe(self, prompt_tokens: int, message_count: int) -> None:
        """Record that the request carrying the first `message_count` messages was billed."""
        _check_count("prompt_tokens", prompt_tokens)
        _check_count("message_count", message_count)
        previous, pending = self._observed, self._pending
        if (
            previous is not None
            and pending is not None
            and pending[:2] == (self._epoch, message_count)
            and pending[2] >= _MIN_SAMPLE
            and prompt_tokens > previous.prompt_tokens
        ):
            sample = _clamp((prompt_tokens - previous.prompt_tokens) / pending[2])
            self._factor = _clamp(self._factor + _SMOOTHING * (sample - self._factor))
        self._observed = Observation(prompt_tokens=prompt_tokens, message_count=message_count)
        self._anchor_tokens, self._anchor_count = prompt_tokens, message_count
        self._epoch += 1
        self._pending = None

    def preview_rewrite(self, before: Sequence[Message], after: Sequence[Message]) -> int:
        """The pressure `rewrite(before, after)` would leave, without changing the meter.

        Pressure stays continuous (R10): messages of `before` missing from `after` (by identity)
        are subtracted and new ones added. Where the billed anchor is below the estimate of the
        same messages (the estimate errs high on purpose), the difference is scaled down by
        `pressure / estimate(before)` (at most 2x): subtracting an over-estimated span from a
        billed count would otherwise drive the result towards zero. It is never scaled up, since
        a billed count above the estimate mostly holds overhead the estimate never sees (tool
        schemas), which compaction does not remove.
        """
        old = self.pressure(before)
        removed, added = _missing(before, after), _missing(after, before)
        removed_raw = sum(self._raw(m) for m in removed)
        added_raw = sum(self._raw(m) for m in added)
        whole = sum(self._raw(m) for m in before)
        ratio = min(1.0, max(0.5, old / whole)) if whole else 1.0
        return max(0, round(old - ratio * removed_raw + ratio * added_raw))

    def rewrite(self, before: Sequence[Message], after: Sequence[Message]) -> int:
        """Re-anchor after compaction replaced `before` with `after`; returns the new pressure.

        The new pressure is `preview_rewrite(before, after)` (continuous, R10). The observation
        resets so the next request re-observes (R9).
        """
        new = self.preview_rewrite(before, after)
        removed = _missing(before, after)
        survivors = {id(m) for m in after}
        for m in removed:
            if id(m) not in survivors:
                self._cache.pop(id(m), None)
        self._observed = None
        self._anchor_tokens, self._anchor_count = new, len(after)
        self._epoch += 1
        self._pending = None
        return new
