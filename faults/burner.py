"""``python -m tailscope.faults.burner SECONDS``: spin one CPU for at most SECONDS, then exit.

A noisy neighbour for the cpu_contention fault: a pure busy loop (no
syscalls, no allocation), pinned by its parent. The bound makes a burner
whose parent vanished stop by itself; SIGTERM ends it at once.
"""

from __future__ import annotations

import sys
import time


def burn(seconds: float) -> int:
    """Busy-loop for ``seconds`` of wall time; return the loop count."""
    deadline = time.monotonic() + seconds
    count = 0
    while True:
        for _ in range(100_000):
            count += 1
        if time.monotonic() >= deadline:
            return count


if __name__ == "__main__":
    burn(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
