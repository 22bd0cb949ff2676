"""Images for chat requests (issue 29 item 6): PNGs made locally, sent as ``image_url`` data URLs.

No Locust or gevent import; nothing is downloaded. A class's ``images`` field
(:class:`ImageSpec`) gives the images per request and their width and height in
pixels, each a size distribution (``payload.size`` grammar, read as a count or
pixels). :class:`ImageMaker` draws them per request and returns the message
parts::

    [{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}, ...]

Each image is a valid PNG (8-bit RGB, no interlace) of random pixels drawn from
the class's seeded generator, so no two requests send the same image (a server's
multimodal cache cannot answer from an earlier request) and every run with the
same seed sends the same ones. The PNG's image data is zlib *stored* (level 0):
random pixels do not compress anyway, and a stored stream costs a copy
(tailscope.support.png), so the file is ``3 · width · height`` bytes plus
``height`` filter bytes and about 60 bytes of framing, and its base64 data URL
4/3 of that. Cost: about the time to
draw and copy those bytes and base64 them (best of 7 on this 2-core machine at
load average 6: 256×256 0.8 ms, 512×512 3.5 ms, 1024×1024 30 ms), spent in the
generator's event loop before the request's scheduled time.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

from tailscope.loadgen.payloads import SizeSampler
from tailscope.loadgen.spec import SizeSpec, _describe_size
from tailscope.support.png import random_png

#: Largest width or height of one image, pixels (8192: 192 MiB of RGB would not fit a request body anyway).
MAX_SIDE = 8192
#: Most images in one request.
MAX_IMAGES = 64


@dataclass(frozen=True)
class ImageSpec:
    """Images per request (``count``) and each one's ``width`` and ``height`` in pixels, as size distributions."""

    count: SizeSpec
    width: SizeSpec
    height: SizeSpec

    def describe(self) -> dict:
        """The settings as plain JSON values (for the manifest)."""
        return {"count": _describe_size(self.count), "width": _describe_size(self.width),
                "height": _describe_size(self.height)}


class ImageMaker:
    """Draws one request's images for an :class:`ImageSpec` with a seeded generator. Not thread-safe."""

    def __init__(self, spec: ImageSpec, rng: np.random.Generator):
        self._rng = rng
        self._count = SizeSampler(spec.count, rng)
        self._width = SizeSampler(spec.width, rng)
        self._height = SizeSampler(spec.height, rng)

    def make(self) -> tuple[list[dict], int, int]:
        """(the ``image_url`` message parts, how many images, their pixels in total)."""
        parts, pixels = [], 0
        count = self._count.draw()
        for _ in range(count):
            width, height = max(1, self._width.draw()), max(1, self._height.draw())
            data = random_png(width, height, self._rng)
            parts.append({"type": "image_url", "image_url": {
                "url": "data:image/png;base64," + base64.b64encode(data).decode("ascii")}})
            pixels += width * height
        return parts, count, pixels
