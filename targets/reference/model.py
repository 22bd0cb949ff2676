"""The reference model: a small, real numpy classifier with fixed seeded weights.

Text: embedding lookup of every token → per-token dense layer with ReLU
(``dim → 4·dim``) → mean-pool per request → classifier (``4·dim → classes``).
The per-token layer runs on all tokens of a batch in one matrix product, so
cost grows with the total number of tokens and batching pays off, as in real
servers. Images: a flattened, normalised ``32×32×3`` input → dense ReLU layer
(``3072 → 4·dim``) → the same kind of classifier. numpy releases the GIL in its
matrix products, so batches can run in worker threads while the event loop
keeps accepting requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tailscope.targets.reference.preprocessing import IMAGE_SIDE

VOCAB_SIZE = 32768
NUM_CLASSES = 1000
_HIDDEN_FACTOR = 4


class ReferenceModel:
    """Text and image classifiers sharing nothing but the seed; weights are float32."""

    def __init__(self, dim: int, seed: int = 0, vocab_size: int = VOCAB_SIZE, num_classes: int = NUM_CLASSES) -> None:
        rng = np.random.default_rng(seed)
        hidden = _HIDDEN_FACTOR * dim
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self._embedding = seeded_weights(rng, (vocab_size, dim), fan_in=1)
        self._text_hidden = seeded_weights(rng, (dim, hidden), fan_in=dim)
        self._text_bias = np.zeros(hidden, dtype=np.float32)
        self._text_classes = seeded_weights(rng, (hidden, num_classes), fan_in=hidden)
        pixels = IMAGE_SIDE * IMAGE_SIDE * 3
        self._image_hidden = seeded_weights(rng, (pixels, hidden), fan_in=pixels)
        self._image_bias = np.zeros(hidden, dtype=np.float32)
        self._image_classes = seeded_weights(rng, (hidden, num_classes), fan_in=hidden)

    def classify_texts(self, token_ids: Sequence[np.ndarray]) -> np.ndarray:
        """Logits ``(len(token_ids), num_classes)`` for a batch of int32 token-id arrays (each non-empty)."""
        lengths = np.fromiter((len(ids) for ids in token_ids), dtype=np.int64, count=len(token_ids))
        if lengths.min(initial=1) < 1:
            raise ValueError("every token sequence needs at least one token")
        embedded = self._embedding[np.concatenate(token_ids)]
        hidden = np.maximum(embedded @ self._text_hidden + self._text_bias, 0.0)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        pooled = np.add.reduceat(hidden, starts, axis=0) / lengths[:, None].astype(np.float32)
        return pooled @ self._text_classes

    def classify_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Logits ``(len(images), num_classes)`` for a batch of float32 ``(32, 32, 3)`` images."""
        flat = np.stack(images).reshape(len(images), -1)
        hidden = np.maximum(flat @ self._image_hidden + self._image_bias, 0.0)
        return hidden @ self._image_classes


def seeded_weights(rng: np.random.Generator, shape: tuple[int, int], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))).astype(np.float32)
