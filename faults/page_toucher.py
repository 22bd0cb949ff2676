"""``python -m tailscope.faults.page_toucher MB MB_PER_S SECONDS``: a process that keeps re-reading its memory.

The neighbour of memory_swap's ``victim: neighbour`` mode: it allocates ``MB``
MB, writes one byte of every page (so each is really backed), prints
``READY`` on stdout, and then reads one byte of each page in turn, cycling
through the whole buffer at about ``MB_PER_S`` MB per second (paced in 10 ms
ticks), for at most ``SECONDS`` s (SIGTERM ends it at once). Under a memory
limit below ``MB`` with swap enabled, the pages it is about to read are the
ones reclaim evicted longest ago, so nearly every read is a major fault that
swaps a page in: steady host paging (``pswpin``, ``pgmajfault``, memory and
I/O pressure) that belongs to this process only.
"""

from __future__ import annotations

import sys
import time

PAGE_BYTES = 4096
TICK_S = 0.01
_MB = 1024 * 1024


def touch(buffer: bytearray, mb_per_s: float, seconds: float) -> tuple[int, int]:
    """Read one byte per page of ``buffer`` cyclically at ``mb_per_s`` for ``seconds``;
    return (pages read, sum of the bytes read)."""
    pages = len(buffer) // PAGE_BYTES
    per_tick = max(1, int(mb_per_s * _MB / PAGE_BYTES * TICK_S))
    deadline = time.monotonic() + seconds
    page, done, checksum = 0, 0, 0
    while True:
        tick_end = time.monotonic() + TICK_S
        for _ in range(per_tick):
            checksum += buffer[page * PAGE_BYTES]  # the read is the point: a swapped-out page faults back in
            page = (page + 1) % pages
        done += per_tick
        now = time.monotonic()
        if now >= deadline:
            return done, checksum
        if tick_end > now:
            time.sleep(tick_end - now)


def main(argv: list[str]) -> int:
    size_mb, mb_per_s, seconds = int(argv[0]), float(argv[1]), float(argv[2])
    buffer = bytearray(size_mb * _MB)
    for offset in range(0, len(buffer), PAGE_BYTES):
        buffer[offset] = 1
    print("READY", flush=True)
    touch(buffer, mb_per_s, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
