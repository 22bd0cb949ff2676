"""Postprocessing of the reference target: logits → softmax → top-k classes."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D logit vector (float64 probabilities summing to 1)."""
    shifted = logits.astype(np.float64) - float(np.max(logits))
    exponentials = np.exp(shifted)
    return exponentials / exponentials.sum()


def top_classes(logits: np.ndarray, k: int) -> list[dict[str, float | int]]:
    """The ``k`` most probable classes, best first, as ``[{"class_id": int, "score": probability}]``."""
    probabilities = softmax(logits)
    k = min(k, probabilities.size)
    candidates = np.argpartition(probabilities, -k)[-k:]
    best_first = candidates[np.argsort(probabilities[candidates])[::-1]]
    return [{"class_id": int(i), "score": round(float(probabilities[i]), 6)} for i in best_first]
