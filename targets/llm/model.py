"""The numeric decoder of the LLM reference server: one attention layer over a paged KV cache, in numpy.

Real float32 arithmetic with seeded weights (``dim`` wide, MLP ``4 * dim``,
vocabulary :data:`~tailscope.targets.llm.tokens.VOCAB_SIZE`):

* a token's state ``x = tanh(e + relu(e @ W1) @ W2)`` from its embedding ``e``;
  its key ``x @ Wk`` and value ``x @ Wv`` are written into the KV arrays
  ``(num_blocks, block_size, dim)`` at its block and offset;
* the position that samples attends over the whole stored context of its
  sequence (gathered from its blocks: softmax of ``K q / sqrt(dim)``, then the
  weighted sum of ``V``), and ``h = x + attention`` gives the logits ``h @ Wout``.

Costs: a prefill chunk of ``n`` tokens is ``O(n * dim^2)`` (every token's state,
key and value); a decode step is ``O(B * dim^2 + B * dim * vocab)`` for ``B``
sequences plus ``O(context * dim)`` attention per sequence, so a step grows
with the running sequences and their context. No thread-safety: the engine
thread alone calls it.

Sampling (:func:`sample`): a token from ``softmax(logits)`` over the
non-EOS vocabulary, with the EOS logit set so that EOS has probability
``eos_probability`` where EOS is allowed (never for a first token, never with
``ignore_eos``).
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

import numpy as np

from tailscope.targets.llm.kv_cache import blocks_for
from tailscope.targets.llm.tokens import EOS, VOCAB_SIZE
from tailscope.targets.reference.generation import seeded_weights

_HIDDEN_FACTOR = 4


class TinyDecoder:
    """Seeded weights and the K/V arrays of a paged cache with ``num_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, dim: int, num_blocks: int, block_size: int, seed: int = 0,
                 vocab_size: int = VOCAB_SIZE) -> None:
        rng = np.random.default_rng(seed + 104_729)
        self.dim = dim
        self.block_size = block_size
        self.vocab_size = vocab_size
        self._embedding = (rng.standard_normal((vocab_size, dim), dtype=np.float32) * 0.5).astype(np.float32)
        self._w1 = seeded_weights(rng, (dim, _HIDDEN_FACTOR * dim))
        self._w2 = seeded_weights(rng, (_HIDDEN_FACTOR * dim, dim))
        self._wq = seeded_weights(rng, (dim, dim))
        self._wkv = seeded_weights(rng, (dim, 2 * dim))  # keys and values in one product
        self._out = seeded_weights(rng, (dim, vocab_size))
        self._scale = np.float32(1.0 / np.sqrt(dim))
        self.keys = np.zeros((num_blocks, block_size, dim), dtype=np.float32)
        self.values = np.zeros((num_blocks, block_size, dim), dtype=np.float32)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the K/V arrays."""
        return self.keys.nbytes + self.values.nbytes

    def _states(self, token_ids: SequenceOf[int]) -> np.ndarray:
        embedded = self._embedding[np.asarray(token_ids, dtype=np.int64)]
        return np.tanh(embedded + np.maximum(embedded @ self._w1, 0.0) @ self._w2)

    def _store(self, block_ids: SequenceOf[int], start: int, states: np.ndarray) -> None:
        """Write the keys and values of ``states`` (positions ``start ..``) into the sequence's blocks."""
        kv = states @ self._wkv
        positions = np.arange(start, start + len(states))
        blocks = np.asarray(block_ids, dtype=np.int64)[positions // self.block_size]
        offsets = positions % self.block_size
        self.keys[blocks, offsets] = kv[:, : self.dim]
        self.values[blocks, offsets] = kv[:, self.dim:]

    def _attend(self, block_ids: SequenceOf[int], context: int, query: np.ndarray) -> np.ndarray:
        """Attention of one query over the ``context`` stored positions of a sequence: ``(dim,)``."""
        used = np.asarray(block_ids[: blocks_for(context, self.block_size)], dtype=np.int64)
        keys = self.keys[used].reshape(-1, self.dim)[:context]
        values = self.values[used].reshape(-1, self.dim)[:context]
        scores = (keys @ query) * self._scale
        weights = np.exp(scores - scores.max())
        return (weights / weights.sum()) @ values

    def store(self, block_ids: SequenceOf[int], start: int, token_ids: SequenceOf[int]) -> np.ndarray:
        """Compute and store the keys and values of positions ``start .. start+len(token_ids)-1``;
        their states ``(n, dim)``."""
        states = self._states(token_ids)
        self._store(block_ids, start, states)
        return states

    def prefill(self, block_ids: SequenceOf[int], start: int, token_ids: SequenceOf[int],
                *, sample: bool) -> np.ndarray | None:
        """:meth:`store` a chunk; with ``sample``, the hidden state ``(dim,)`` of its last position (whose
        logits give the next token) after attending over the whole stored context, else None."""
        states = self.store(block_ids, start, token_ids)
        if not sample:
            return None
        last = states[-1]
        return last + self._attend(block_ids, start + len(token_ids), last @ self._wq)

    def decode(self, items: SequenceOf[tuple[SequenceOf[int], int, int]]) -> np.ndarray:
        """One decode step for ``B`` sequences, each ``(block ids, position, input token)``: hidden ``(B, dim)``.

        Every sequence's input token is stored at ``position`` and then attends over
        its ``position + 1`` stored tokens.
        """
        states = self._states([token for _, _, token in items])
        queries = states @ self._wq
        attended = np.empty_like(states)
        for row, (block_ids, position, _) in enumerate(items):
            self._store(block_ids, position, states[row: row + 1])
            attended[row] = self._attend(block_ids, position + 1, queries[row])
        return states + attended

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Logits ``(B, vocab)`` of hidden states ``(B, dim)``."""
        return hidden @ self._out



def unit_mean(state_sum: np.ndarray, count: int) -> list[float]:
    """The embedding of a pooled sequence: the mean of its ``count`` token states, scaled to unit length."""
    mean = state_sum / max(1, count)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).astype(np.float32).tolist()


def sample(logits: np.ndarray, allow_eos: np.ndarray, eos_probability: float,
           rng: np.random.Generator) -> list[int]:
    """One token per row of ``logits (B, vocab)``: EOS with probability ``eos_probability`` where
    ``allow_eos`` is true, else a draw from the softmax over the other tokens."""
    body = logits[:, EOS + 1:].astype(np.float64)
    weights = np.exp(body - body.max(axis=1, keepdims=True))
    cumulative = np.cumsum(weights, axis=1)
    draws = rng.random(len(body)) * cumulative[:, -1]
    tokens = np.minimum((cumulative < draws[:, None]).sum(axis=1), body.shape[1] - 1) + EOS + 1
    if eos_probability > 0:
        eos = allow_eos & (rng.random(len(body)) < eos_probability)
        tokens = np.where(eos, EOS, tokens)
    return tokens.tolist()
