from __future__ import annotations

import zlib

import pytest

from steerable_compaction import ImagePart, Message, TextPart
from steerable_compaction.tokens import (
    estimate_tokens,
    image_dimensions,
    image_tokens,
)


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
