"""Tokenization of the LLM reference server: one token per whitespace-separated word.

A word's id is ``crc32(word) % (VOCAB_SIZE - 1) + 1`` (stable across runs and
processes); id :data:`EOS` (0) is never produced by a word. A generated token's
text is the reference target's :func:`~tailscope.targets.reference.generation.token_text`,
one word and a trailing space, so a client that splits the streamed text on
whitespace counts exactly the completion tokens of ``usage``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

from tailscope.targets.reference.generation import GENERATION_VOCAB, token_text

#: Token ids are in ``0 .. VOCAB_SIZE - 1``.
VOCAB_SIZE = GENERATION_VOCAB
#: The end-of-sequence token; it ends a sequence and is neither streamed nor counted.
EOS = 0

__all__ = ["EOS", "VOCAB_SIZE", "detokenize", "tokenize", "tokenize_texts"]


def tokenize(text: str) -> list[int]:
    """The token ids of ``text``: one per whitespace-separated word (an empty list for blank text)."""
    return [zlib.crc32(word.encode("utf-8")) % (VOCAB_SIZE - 1) + 1 for word in text.split()]


def tokenize_texts(texts: Iterable[str]) -> list[int]:
    """The token ids of several texts joined by whitespace (e.g. the contents of chat messages)."""
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenize(text))
    return ids


def detokenize(token_ids: Sequence[int]) -> str:
    """The text of generated tokens (each a word and a trailing space)."""
    return "".join(map(token_text, token_ids))
