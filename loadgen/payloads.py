"""Request bodies: random text or bytes with a size distribution, templates with
random fields, or recorded bodies replayed — made cheaply.

No Locust or gevent import. A :class:`PayloadMaker` pre-generates one pool of
random content per request class at construction and serves each body as a
slice of it at a random start, so a request costs one slice copy of its own
size and no random generation. Sizes are drawn in batches of
``SIZE_BATCH`` from the seeded generator.

Sizes are in bytes; text is ASCII (lowercase letters and spaces), so a text
length in characters equals its length in bytes and needs no JSON escaping.
"""

from __future__ import annotations

import json

import numpy as np

from tailscope.loadgen.spec import PayloadSpec, SizeSpec
from tailscope.loadgen.templates import TemplateMaker

#: Sizes drawn per call into the generator.
SIZE_BATCH = 1024
#: Smallest pool, bytes: enough variety for small bodies.
MIN_POOL_BYTES = 64 * 1024
#: Share of spaces in random text (mean word length about 5 letters).
SPACE_SHARE = 1 / 6

CONTENT_TYPES = {
    "random_text": "text/plain; charset=utf-8",
    "json_text": "application/json",
    "random_bytes": "application/octet-stream",
    "replay": "application/json",
}


class SizeSampler:
    """Draws sizes (bytes) from a :class:`SizeSpec`, in batches, with a seeded generator."""

    def __init__(self, spec: SizeSpec, rng: np.random.Generator):
        self.spec = spec
        self._rng = rng
        self._batch: list[int] = []
        self._next = 0

    @property
    def upper_bound(self) -> int:
        """The largest size this sampler can return, bytes."""
        if self.spec.dist == "fixed":
            return self.spec.value
        if self.spec.dist == "empirical":
            return int(self.spec.values.max())
        return self.spec.max

    def draw(self) -> int:
        """One size in bytes."""
        if self._next >= len(self._batch):
            self._batch = self._draw_batch().tolist()
            self._next = 0
        size = self._batch[self._next]
        self._next += 1
        return size

    def _draw_batch(self) -> np.ndarray:
        spec, rng = self.spec, self._rng
        if spec.dist == "fixed":
            return np.full(SIZE_BATCH, spec.value, dtype=np.int64)
        if spec.dist == "uniform":
            return rng.integers(spec.min, spec.max, size=SIZE_BATCH, endpoint=True)
        if spec.dist == "empirical":
            return spec.values[rng.integers(0, len(spec.values), size=SIZE_BATCH)]
        sizes = spec.median * np.exp(spec.sigma * rng.standard_normal(SIZE_BATCH))
        return np.clip(np.rint(sizes), spec.min, spec.max).astype(np.int64)


def random_text_pool(n_bytes: int, rng: np.random.Generator) -> bytes:
    """``n_bytes`` of lowercase letters with spaces between words."""
    letters = rng.integers(ord("a"), ord("z") + 1, size=n_bytes, dtype=np.uint8)
    letters[rng.random(n_bytes) < SPACE_SHARE] = ord(" ")
    return letters.tobytes()


def random_bytes_pool(n_bytes: int, rng: np.random.Generator) -> bytes:
    """``n_bytes`` uniformly random bytes."""
    return rng.integers(0, 256, size=n_bytes, dtype=np.uint8).tobytes()


class PayloadMaker:
    """Makes request bodies for one request class.

    ``make()`` returns the body as bytes (``b""`` for kind ``none``). Memory:
    one pool of about twice the largest body (at least ``MIN_POOL_BYTES``).
    Not thread-safe: one maker per request class per event loop.
    """

    def __init__(self, spec: PayloadSpec, rng: np.random.Generator):
        self.spec = spec
        self.content_type: str | None = CONTENT_TYPES.get(spec.kind) or _template_content_type(spec)
        self._rng = rng
        self._fixed = spec.body.encode("utf-8")
        self._sizes = SizeSampler(spec.size, rng)
        self._pool = self._make_pool()
        self._json_prefix = b'{' + json.dumps(spec.field).encode("utf-8") + b': "'
        self._starts: list[int] = []
        self._next_start = 0
        self._template = (TemplateMaker(spec.body, rng, self._pool, self._sizes.draw)
                          if spec.kind == "template" else None)
        self._replay_index = 0

    def _make_pool(self) -> bytes:
        if self.spec.kind not in ("random_text", "json_text", "random_bytes", "template"):
            return b""
        largest = self._sizes.upper_bound
        if self.spec.kind == "template":
            largest = max(largest, TemplateMaker.longest_text(self.spec.body))
        n_bytes = largest + max(largest, MIN_POOL_BYTES)
        if self.spec.kind == "random_bytes":
            return random_bytes_pool(n_bytes, self._rng)
        return random_text_pool(n_bytes, self._rng)

    def make(self) -> bytes:
        """One request body, bytes."""
        kind = self.spec.kind
        if kind == "none":
            return b""
        if kind == "fixed":
            return self._fixed
        if kind == "template":
            return self._template.make()
        if kind == "replay":
            return self._replayed()
        size = self._sizes.draw()
        start = self._start_fraction() * (len(self._pool) - size)
        content = self._pool[int(start): int(start) + size]
        if kind == "json_text":
            return b"".join((self._json_prefix, content, b'"}'))
        return content

    def _replayed(self) -> bytes:
        """The next recorded body: in file order (wrapping around) or drawn at random."""
        bodies = self.spec.bodies
        if self.spec.order == "random":
            return bodies[int(self._start_fraction() * len(bodies))]
        body = bodies[self._replay_index]
        self._replay_index = (self._replay_index + 1) % len(bodies)
        return body

    def _start_fraction(self) -> float:
        """A uniform number in [0, 1), drawn in batches."""
        if self._next_start >= len(self._starts):
            self._starts = self._rng.random(SIZE_BATCH).tolist()
            self._next_start = 0
        value = self._starts[self._next_start]
        self._next_start += 1
        return value


def _template_content_type(spec: PayloadSpec) -> str | None:
    """A template that looks like JSON is sent as JSON, any other as text."""
    if spec.kind != "template":
        return None
    return "application/json" if spec.body.lstrip()[:1] in ("{", "[") else "text/plain; charset=utf-8"
