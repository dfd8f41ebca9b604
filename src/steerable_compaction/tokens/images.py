"""Image prices (R8): pixel size from the file header, then the family's rule.

`image_dimensions` reads PNG, GIF, WebP and JPEG headers; each `ImageRule` turns a size into
tokens the way a provider family bills it, and an image of unknown size is priced as a full-HD
screenshot.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..messages import ImagePart
from .calibration import Calibration, ImageRule, calibration_for

__all__ = ["image_dimensions", "image_tokens"]


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


def _image_part_cost(part: ImagePart, cal: Calibration) -> int:
    size = image_dimensions(part.data) if part.data is not None else None
    return _image_cost(size or _UNKNOWN_SIZE, cal.image)
