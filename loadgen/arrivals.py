"""Open-loop arrival schedules: when each request should be sent.

Pure numpy (no Locust, no gevent), so the analyzers, tests and other processes
can use it. A schedule is a sequence of int64 offsets in nanoseconds from the
run's start, strictly inside ``[0, duration)``, non-decreasing, at most
``max_requests`` long. It is produced in chunks so that an hours-long run never
holds its whole schedule in memory (memory: one chunk, ``CHUNK_SIZE`` values).

Processes (see :class:`tailscope.loadgen.spec.ArrivalSpec`):

- ``constant``: offset ``i`` is ``round(i * 1e9 / rate)`` — computed from the
  index, so there is no accumulated drift.
- ``poisson``: exponential gaps with mean ``1/rate`` s; the first arrival comes
  after one gap (a stationary process observed from time 0).
- ``gamma``: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)); mean gap
  ``1/rate``, coefficient of variation ``1/sqrt(burstiness)``.

The same ``seed`` gives the same schedule, chunk boundaries included.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .spec import ArrivalSpec

#: Offsets per yielded chunk.
CHUNK_SIZE = 4096

NS_PER_S = 1_000_000_000


def schedule_offsets_ns(
    spec: ArrivalSpec, duration_s: float, max_requests: int, seed: int
) -> Iterator[np.ndarray]:
    """Yield int64 arrays of send offsets (ns from run start) for an open-loop run.

    Stops at the first offset ``>= duration_s`` or after ``max_requests``
    offsets, whichever comes first. Raises ``ValueError`` for the closed-loop
    process, which has no schedule.
    """
    if spec.process == "closed":
        raise ValueError("a closed-loop arrival process has no schedule")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests!r}")
    end_ns = int(duration_s * NS_PER_S)
    if spec.process == "constant":
        chunks = _constant_chunks(spec.rate)
    else:
        chunks = _renewal_chunks(_gap_sampler(spec, np.random.default_rng(seed)))
    yield from _bounded(chunks, end_ns, max_requests)


def _constant_chunks(rate: float) -> Iterator[np.ndarray]:
    """Offsets ``round(i * 1e9 / rate)`` for i = 0, 1, 2, ... in chunks."""
    period_ns = NS_PER_S / rate
    first = 0
    while True:
        index = np.arange(first, first + CHUNK_SIZE, dtype=np.float64)
        yield np.rint(index * period_ns).astype(np.int64)
        first += CHUNK_SIZE


def _gap_sampler(spec: ArrivalSpec, rng: np.random.Generator):
    """A function returning ``CHUNK_SIZE`` random gaps in seconds for ``spec``."""
    if spec.process == "poisson":
        mean_gap_s = 1.0 / spec.rate
        return lambda: rng.exponential(mean_gap_s, CHUNK_SIZE)
    if spec.process == "gamma":
        shape = spec.burstiness
        scale = 1.0 / (spec.rate * spec.burstiness)
        return lambda: rng.gamma(shape, scale, CHUNK_SIZE)
    raise ValueError(f"no gap distribution for arrival process {spec.process!r}")


def _renewal_chunks(draw_gaps_s) -> Iterator[np.ndarray]:
    """Cumulative sums of random gaps, in integer ns (exact, no float drift)."""
    last_ns = 0
    while True:
        gaps_ns = np.rint(draw_gaps_s() * NS_PER_S).astype(np.int64)
        offsets = np.cumsum(gaps_ns) + last_ns
        last_ns = int(offsets[-1])
        yield offsets


def _bounded(chunks: Iterator[np.ndarray], end_ns: int, max_requests: int) -> Iterator[np.ndarray]:
    """Cut an infinite chunk stream at ``end_ns`` (exclusive) and ``max_requests``."""
    remaining = max_requests
    for chunk in chunks:
        inside = chunk[: int(np.searchsorted(chunk, end_ns, side="left"))]
        inside = inside[:remaining]
        if inside.size:
            yield inside
        remaining -= inside.size
        if remaining <= 0 or inside.size < chunk.size:
            return

