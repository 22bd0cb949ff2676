"""Garbage-collector load of a Python service: per-request cycles and a run-time switchable GC storm.

Two mechanisms, both real CPython garbage collection:

* :func:`make_request_garbage` — what a request's preprocessing leaves
  behind in real services (parsed JSON trees with parent links): ``count``
  dict↔list reference cycles, dropped at once, freed only by the cycle
  collector. About 400 bytes and 2 tracked objects per cycle.
* :class:`GcPressure` — a background thread that, while on, keeps a live
  heap of ``retained_mb`` of small GC-tracked objects (a cache) and allocates
  ``mb_per_s`` of cyclic garbage that stays alive for about
  :data:`GARBAGE_LIFETIME_S` (a per-request session cache) before it is
  dropped. Surviving garbage is promoted to generation 2, so only full
  collections free it, and every full collection traverses the retained heap:
  about 60 ns per tracked object on the development machine, i.e. a 128 MB
  heap (~1.5 M objects) makes each gen-2 pause roughly 100 ms. The collector
  holds the GIL, so every thread of the service stops for the pause.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import asdict, dataclass

#: How long allocated garbage stays alive before it is dropped (s): long
#: enough to survive the young generations and be promoted to generation 2.
GARBAGE_LIFETIME_S = 2.0
#: Allocation ticks per second of the pressure thread.
TICKS_PER_S = 50
#: Approximate bytes of one garbage cycle (two lists pointing at each other) and of one retained object.
CYCLE_BYTES = 160
RETAINED_OBJECT_BYTES = 88
_MB = 1024 * 1024


def make_request_garbage(count: int) -> int:
    """Create ``count`` dict↔list reference cycles and drop them; return ``count``."""
    for index in range(count):
        node: dict = {"index": index, "children": []}
        node["children"].append(node)
    return count


@dataclass(frozen=True)
class GcPressureState:
    """The switch as the admin endpoint reports it. Sizes in MB, rate in MB/s."""

    enabled: bool
    mb_per_s: float
    retained_mb: float
    allocated_mb: float  # garbage allocated since the process started
    retained_objects: int

    def as_dict(self) -> dict:
        return asdict(self)


class GcPressure:
    """The switchable GC storm (see the module docstring). Thread-safe; ``close()`` stops the thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mb_per_s = 0.0
        self._retained_mb = 0.0
        self._retained: list[list] = []
        self._live: collections.deque[tuple[float, list]] = collections.deque()
        self._allocated_bytes = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def configure(self, enabled: bool, mb_per_s: float, retained_mb: float) -> GcPressureState:
        """Switch the storm on (``mb_per_s`` > 0) or off; the retained heap is built or freed here."""
        if mb_per_s < 0 or retained_mb < 0:
            raise ValueError(f"mb_per_s and retained_mb must be >= 0, got {mb_per_s}, {retained_mb}")
        on = enabled and mb_per_s > 0
        with self._lock:
            self._mb_per_s = mb_per_s if on else 0.0
            if not on:
                self._retained = []
                self._live.clear()
                self._retained_mb = 0.0
            elif retained_mb != self._retained_mb:
                count = int(retained_mb * _MB / RETAINED_OBJECT_BYTES)
                self._retained = [[i, None] for i in range(count)]
                self._retained_mb = retained_mb
            if on and self._thread is None:
                self._thread = threading.Thread(target=self._allocate_loop, name="gc-pressure", daemon=True)
                self._thread.start()
        self._wake.set()
        return self.state()

    def state(self) -> GcPressureState:
        with self._lock:
            return GcPressureState(
                enabled=self._mb_per_s > 0,
                mb_per_s=self._mb_per_s,
                retained_mb=self._retained_mb,
                allocated_mb=round(self._allocated_bytes / _MB, 3),
                retained_objects=len(self._retained),
            )

    def close(self) -> None:
        """Stop the thread and free everything (idempotent)."""
        self._closed = True
        self.configure(False, 0.0, 0.0)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _allocate_loop(self) -> None:
        tick_s = 1.0 / TICKS_PER_S
        while not self._closed:
            with self._lock:
                rate = self._mb_per_s
            if rate <= 0:
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            started = time.monotonic()
            self._allocate_tick(rate * _MB * tick_s, started)
            time.sleep(max(0.0, tick_s - (time.monotonic() - started)))

    def _allocate_tick(self, nbytes: float, now: float) -> None:
        cycles = max(1, int(nbytes / CYCLE_BYTES))
        batch = []
        for _ in range(cycles):
            left: list = []
            right: list = [left]
            left.append(right)
            batch.append(left)
        with self._lock:
            self._live.append((now, batch))
            self._allocated_bytes += cycles * CYCLE_BYTES
            while self._live and now - self._live[0][0] > GARBAGE_LIFETIME_S:
                self._live.popleft()
