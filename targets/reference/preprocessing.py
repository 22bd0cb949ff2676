"""Preprocessing of the reference target: text tokenisation and image decoding, in plain Python/numpy.

Tokenisation is deliberately written like a real pure-Python tokenizer: it
normalises, splits with a regex, builds one token record (a tuple: a
GC-tracked container) per token and hashes each to an id. Work and allocations
grow linearly with the text, so large or many requests drive the garbage
collector like a real service does.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
import zlib
from typing import NamedTuple

import numpy as np

#: Id of the [CLS] token every sequence starts with (so no sequence is empty).
CLS_TOKEN_ID = 0
_WORD_OR_SYMBOL = re.compile(r"\w+|[^\w\s]")
_SUBWORD_THRESHOLD = 8
_SUBWORD_PIECE = 4

#: Side of the square image the model sees, and the per-channel normalisation.
IMAGE_SIDE = 32
_CHANNEL_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_CHANNEL_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class InvalidInputError(ValueError):
    """The request body cannot be turned into model input (answered with HTTP 400)."""


class Token(NamedTuple):
    """One token: its normalised text and its character span in the normalised input."""

    text: str
    start: int
    end: int


def text_from_body(body: bytes, content_type: str | None) -> str:
    """The text of a request: ``{"text": "..."}`` for ``application/json``, else the body as UTF-8.

    Raises InvalidInputError for malformed JSON or a missing/non-string ``text``.
    Undecodable bytes in a raw body are replaced (U+FFFD), as lenient servers do.
    """
    if content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json":
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"body is not valid JSON: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("text"), str):
            raise InvalidInputError('JSON body must be an object with a string "text"')
        return document["text"]
    return body.decode("utf-8", errors="replace")


def normalise_text(text: str) -> str:
    """NFKC-normalise and lower-case."""
    return unicodedata.normalize("NFKC", text).lower()


def split_tokens(normalised: str) -> list[Token]:
    """Words and punctuation marks; words longer than 8 characters split into 4-character pieces."""
    tokens: list[Token] = []
    for match in _WORD_OR_SYMBOL.finditer(normalised):
        word, start = match.group(), match.start()
        if len(word) <= _SUBWORD_THRESHOLD:
            tokens.append(Token(word, start, match.end()))
            continue
        for offset in range(0, len(word), _SUBWORD_PIECE):
            piece = word[offset : offset + _SUBWORD_PIECE]
            text = piece if offset == 0 else "##" + piece
            tokens.append(Token(text, start + offset, start + offset + len(piece)))
    return tokens


def token_id(token_text: str, vocab_size: int) -> int:
    """Stable id in ``1..vocab_size-1`` (CRC-32 of the UTF-8 text; 0 is [CLS])."""
    return 1 + zlib.crc32(token_text.encode("utf-8")) % (vocab_size - 1)


def tokenize(text: str, vocab_size: int, max_tokens: int) -> np.ndarray:
    """Token ids (int32) of ``text``: [CLS] then up to ``max_tokens - 1`` hashed tokens."""
    tokens = split_tokens(normalise_text(text))[: max_tokens - 1]
    ids = [CLS_TOKEN_ID]
    ids.extend(token_id(token.text, vocab_size) for token in tokens)
    return np.array(ids, dtype=np.int32)


def decode_image(body: bytes) -> np.ndarray:
    """Interpret raw bytes as a square RGB uint8 image; return it resized and normalised.

    The side is ``isqrt(len(body) // 3)``; trailing bytes that do not fill a
    row are ignored. Returns float32 ``(IMAGE_SIDE, IMAGE_SIDE, 3)``: area
    averaging when the image is larger, nearest neighbour when smaller, then
    per-channel ``(x/255 - mean) / std``. Raises InvalidInputError for fewer
    than 3 bytes.
    """
    side = math.isqrt(len(body) // 3)
    if side == 0:
        raise InvalidInputError(f"an image needs at least 3 bytes, got {len(body)}")
    pixels = np.frombuffer(body, dtype=np.uint8, count=side * side * 3).reshape(side, side, 3)
    resized = resize_square(pixels.astype(np.float32), IMAGE_SIDE)
    return (resized / 255.0 - _CHANNEL_MEAN) / _CHANNEL_STD


def resize_square(image: np.ndarray, side: int) -> np.ndarray:
    """Resize a float ``(s, s, c)`` image to ``(side, side, c)``: area average if s >= side, else nearest."""
    source = image.shape[0]
    if source < side:
        index = (np.arange(side) * source) // side
        return image[index][:, index]
    bounds = (np.arange(side) * source) // side
    counts = np.diff(np.append(bounds, source)).astype(np.float32)
    rows = np.add.reduceat(image, bounds, axis=0) / counts[:, None, None]
    return np.add.reduceat(rows, bounds, axis=1) / counts[None, :, None]
