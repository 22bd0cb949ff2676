"""A resident working set that requests read: what makes swapping hurt a service.

Real inference services keep large read-mostly memory (embedding tables,
feature stores, tokenizer vocabularies). :class:`ResidentSet` allocates
``mb`` MB with numpy and writes every page at start, so the pages are really
resident (and charged to the process's memory cgroup). :meth:`ResidentSet.read_slice`
reads one byte from each 4 KiB page of a random window of ``touch_kb`` KB:
about 1 µs per 100 pages when resident, a major page fault per page (tens to
hundreds of µs each) when the window was swapped out.
"""

from __future__ import annotations

import random

import numpy as np

PAGE_BYTES = 4096


class ResidentSet:
    """``mb`` MB of touched memory; ``read_slice`` reads ``touch_kb`` KB of it, one byte per page."""

    def __init__(self, mb: int, touch_kb: int, seed: int = 0) -> None:
        if mb < 0 or touch_kb < 4:
            raise ValueError(f"need mb >= 0 and touch_kb >= 4, got {mb}, {touch_kb}")
        self._memory = np.ones(mb * 1024 * 1024, dtype=np.uint8) if mb else np.zeros(0, dtype=np.uint8)
        self._window = min(touch_kb * 1024, len(self._memory))
        self._random = random.Random(seed)

    @property
    def size_bytes(self) -> int:
        return len(self._memory)

    def read_slice(self) -> int:
        """Read one byte per page of a random window; return the number of pages read (0 when empty)."""
        if self._window == 0:
            return 0
        start = self._random.randrange(0, len(self._memory) - self._window + 1)
        start -= start % PAGE_BYTES
        pages = self._memory[start : start + self._window : PAGE_BYTES]
        int(pages.sum())
        return len(pages)
