"""Seeded per-request latency series (scheduled epoch ns, latency ms) without a run directory.

The spike test's sweeps and unit cases need millions of latencies at rates from 0.5 to
20,000 requests/s and runs up to an hour; writing a run directory for each would take
minutes (:func:`~tailscope.testkit.synthetic.write_synthetic_run`, about 4 s per million
requests). These are the same requests' latencies: Poisson arrivals at ``rate``, each the
sum of the five stages of the synthetic target's ``short`` class (lognormal, medians and
sigmas :data:`~tailscope.testkit.synthetic.STAGE_MEDIANS_MS` and ``STAGE_SIGMAS``, about
12 ms at the median) plus 0.4 ms of network and unaccounted time.

An *incident* multiplies the latency of the requests scheduled in ``[at_s, at_s +
duration_s)`` by ``factor`` (a factor 2 raises the tail 2×). *Stalls* are recurring
stop-the-world pauses: ``length_ms`` long, one every ``period_s`` (± ``jitter`` of it,
uniform); a request whose service time overlaps a pause waits out the rest of it.
Memory: 16 bytes per request (the stages are summed one at a time).
"""

from __future__ import annotations

import numpy as np

from tailscope.testkit.synthetic import NS_PER_MS, NS_PER_S, STAGE_MEDIANS_MS, STAGE_SIGMAS, SYNTHETIC_START_NS

#: Network both ways plus unaccounted server time (ms) added to the stage sum.
OVERHEAD_MS = 0.4


def latency_series(rate: float, duration_s: float, seed: int, *, incident: tuple[float, float, float] | None = None,
                   stalls: tuple[float, float, float] | None = None,
                   start_ns: int = SYNTHETIC_START_NS) -> tuple[np.ndarray, np.ndarray]:
    """(scheduled epoch ns ascending int64, latency ms float64) of a seeded run.

    ``incident``: (at_s, duration_s, factor) — latency × factor for requests scheduled in it.
    ``stalls``: (period_s, length_ms, jitter) — pauses from ``period_s / 2`` on, each period
    ``period_s × U(1 − jitter, 1 + jitter)``; a request in service during one waits its end."""
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration_s must be positive (got {rate}, {duration_s})")
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * duration_s))
    offsets_ns = np.sort(rng.integers(0, int(duration_s * NS_PER_S), size=n, dtype=np.int64))
    latency = np.full(n, OVERHEAD_MS)
    for median, sigma in zip(STAGE_MEDIANS_MS["short"], STAGE_SIGMAS):
        latency += median * np.exp(sigma * rng.standard_normal(n))
    if incident is not None:
        at_s, length_s, factor = incident
        inside = (offsets_ns >= int(at_s * NS_PER_S)) & (offsets_ns < int((at_s + length_s) * NS_PER_S))
        latency[inside] *= factor
    if stalls is not None:
        latency += _stall_delay_ms(rng, offsets_ns, latency, duration_s, *stalls)
    return start_ns + offsets_ns, latency


def stall_starts_ns(rng: np.random.Generator, duration_s: float, period_s: float, jitter: float) -> np.ndarray:
    """Offsets (ns from the run's start) of recurring pauses: the first at ``period_s / 2``."""
    count = int(duration_s / period_s) + 2
    gaps = period_s * rng.uniform(1 - jitter, 1 + jitter, size=count)
    starts = period_s / 2 + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return (starts[starts < duration_s] * NS_PER_S).astype(np.int64)


def _stall_delay_ms(rng, offsets_ns, latency_ms, duration_s, period_s, length_ms, jitter) -> np.ndarray:
    starts = stall_starts_ns(rng, duration_s, period_s, jitter)
    ends = starts + int(length_ms * NS_PER_MS)
    # the last pause starting before each request's end; it delays the request when it ends after the send
    finish = offsets_ns + (latency_ms * NS_PER_MS).astype(np.int64)
    k = np.searchsorted(starts, finish, side="right") - 1
    has = k >= 0
    end = np.where(has, ends[np.maximum(k, 0)], 0)
    start = np.where(has, starts[np.maximum(k, 0)], 0)
    overlaps = has & (end > offsets_ns)
    return np.where(overlaps, (end - np.maximum(start, offsets_ns)) / NS_PER_MS, 0.0)
