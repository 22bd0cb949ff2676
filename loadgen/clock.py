"""The run clock: epoch nanoseconds that never jump, and deadlines from offsets.

Wall-clock time (``time.time_ns``) is read once, at the run's start; every
later timestamp is that origin plus the elapsed ``perf_counter_ns``. Records
are therefore in epoch ns (to join with spans and signals) yet immune to NTP
steps during the run, and a schedule offset maps to exactly one deadline on
the monotonic clock (no drift however long the run).
"""

from __future__ import annotations

import time


class RunClock:
    """Maps monotonic time to epoch ns from one origin.

    The origin is the moment of construction, or ``start_ns`` (epoch ns; may
    lie in the future) when given: distributed workers share the master's
    origin so that their shares of one schedule interleave exactly.
    """

    def __init__(self, start_ns: int | None = None):
        perf_ns, wall_ns = time.perf_counter_ns(), time.time_ns()
        self.start_ns = wall_ns if start_ns is None else int(start_ns)  # epoch ns of offset 0
        self.start_perf_ns = perf_ns + (self.start_ns - wall_ns)

    def now_ns(self) -> int:
        """Current time, epoch ns (monotonic since the origin)."""
        return self.start_ns + (time.perf_counter_ns() - self.start_perf_ns)

    def elapsed_ns(self) -> int:
        """Nanoseconds since the origin."""
        return time.perf_counter_ns() - self.start_perf_ns

    def seconds_until(self, offset_ns: int) -> float:
        """Seconds from now until ``offset_ns`` after the origin (negative when past)."""
        return (offset_ns - (time.perf_counter_ns() - self.start_perf_ns)) / 1e9
