"""`sim.content`: the simulated tool output, screenshots included."""

from __future__ import annotations

from steerable_compaction import ImagePart
from steerable_compaction.sim.content import image_text, png_image, screenshot
from steerable_compaction.tokens import image_dimensions


def test_screenshots_are_real_pngs_whose_content_the_agent_can_read() -> None:
    """A simulated screenshot has its stated size; vision reads its text; others read nothing."""
    data = png_image(800, 600, "Banner: incident INC-12345")
    assert image_dimensions(data) == (800, 600)
    assert image_text(screenshot(800, 600, "Banner: x")) == "Banner: x"
    assert image_text(ImagePart(media_type="image/jpeg", data=b"\xff\xd8rest")) is None
    assert image_text(ImagePart(url="https://example.test/a.png")) is None
    assert (
        image_text(ImagePart(media_type="image/png", data=data.replace(b"tEXt", b"zTXt"))) is None
    )
