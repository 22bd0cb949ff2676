"""Minimal PNG writing and size reading: one home for the format, shared by the load generator's
image requests (tailscope.loadgen.llm_images) and the LLM reference server's image token count.

:func:`png_bytes` writes an 8-bit RGB PNG, no interlace, its image data zlib *stored* (level 0:
the callers send random pixels, which do not compress, and a stored stream costs a copy); the
file is ``(3 · width + 1) · height`` bytes of scanlines plus about 60 bytes of framing.
:func:`png_size` reads (width, height) from the IHDR chunk.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_bytes(pixels: np.ndarray) -> bytes:
    """A PNG file of ``pixels`` (uint8, shape (height, width, 3))."""
    height, width, _ = pixels.shape
    rows = np.empty((height, 1 + 3 * width), dtype=np.uint8)
    rows[:, 0] = 0  # filter type None on every row
    rows[:, 1:] = pixels.reshape(height, 3 * width)
    return scanlines_png(width, height, rows)


def random_png(width: int, height: int, rng: np.random.Generator) -> bytes:
    """A PNG of random pixels drawn from ``rng`` as bytes (one draw of the scanlines' length)."""
    rows = np.frombuffer(bytearray(rng.bytes(height * (1 + 3 * width))), dtype=np.uint8).reshape(height, -1)
    rows[:, 0] = 0
    return scanlines_png(width, height, rows)


def scanlines_png(width: int, height: int, rows: np.ndarray) -> bytes:
    """The PNG file of filtered scanlines ``rows`` (uint8 (height, 1 + 3 · width): a filter byte, the row's RGB)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 0))
            + chunk(b"IEND", b""))


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR (its first 24 bytes suffice), or None when ``data`` is not a PNG."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])
