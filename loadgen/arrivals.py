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
- ``replay``: the offsets of a recorded arrival log (or LLM trace) divided by
  ``speed``, spaced at least ``1/max_rate`` s apart when ``max_rate`` is set;
  with ``loop`` the log starts again one mean gap after its last arrival.

**Rate profiles** (steps, ramp, periodic; :class:`~.spec.RateProfile`) use
time warping: the process is generated at rate 1 in "operational time" *u*
(expected number of arrivals), and each *u* is mapped to the wall time *t*
with Λ(t) = u, where Λ(t) = ∫₀ᵗ rate is the expected number of arrivals by
*t*. A Poisson process becomes the non-homogeneous Poisson process of that
rate; a constant one sends exactly where Λ crosses each integer; a gamma one
keeps its burstiness locally. Λ is inverted exactly for the piecewise-linear
profiles (steps, ramps: a quadratic per segment) and by 64 steps of
vectorised bisection for the periodic one (error below 1 ns).

The same ``seed`` gives the same schedule, chunk boundaries included.

**Registry.** :data:`ARRIVALS` declares every open-loop process, one
registration each (an :class:`ArrivalProcess`: its schedule and the arrivals it
offers by a time); the scenario's process names are its names plus ``closed``
(:data:`tailscope.loadgen.spec.ARRIVAL_PROCESSES`). Adding a process is one
function and one registration here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tailscope.support.registry import Registry
from tailscope.support.units import NS_PER_S


class RateCurve(Protocol):
    """What a schedule reads of a rate profile (:class:`tailscope.loadgen.spec.RateProfile` is one):
    rates in requests/s, times in seconds."""

    @property
    def kind(self) -> str: ...  # steps | ramp | periodic
    @property
    def steps(self) -> tuple[tuple[float, float], ...]: ...  # (duration_s, rate)
    @property
    def start_rate(self) -> float: ...
    @property
    def end_rate(self) -> float: ...
    @property
    def ramp_s(self) -> float: ...
    @property
    def mean(self) -> float: ...
    @property
    def amplitude(self) -> float: ...
    @property
    def period_s(self) -> float: ...
    @property
    def phase_s(self) -> float: ...


class OffsetsLog(Protocol):
    """What a replay reads of an arrival log (:class:`tailscope.loadgen.spec.ArrivalLog` is one)."""

    @property
    def offsets_ns(self) -> np.ndarray: ...  # int64 ns from the log's first arrival


class ScheduleSpec(Protocol):
    """What a schedule reads of the arrival settings (:class:`tailscope.loadgen.spec.ArrivalSpec`
    is one; the spec imports this module for :data:`ARRIVALS`' names, this module imports no spec)."""

    @property
    def process(self) -> str: ...
    @property
    def rate(self) -> float: ...  # requests/s
    @property
    def burstiness(self) -> float: ...
    @property
    def profile(self) -> RateCurve | None: ...
    @property
    def log(self) -> OffsetsLog | None: ...
    @property
    def speed(self) -> float: ...
    @property
    def loop(self) -> bool: ...
    @property
    def max_rate(self) -> float | None: ...  # requests/s
    @property
    def open_loop(self) -> bool: ...

#: Offsets per yielded chunk.
CHUNK_SIZE = 4096

#: A function returning ``CHUNK_SIZE`` random gaps in seconds.
GapDraw = Callable[[], np.ndarray]


def schedule_offsets_ns(
    spec: ScheduleSpec, duration_s: float, max_requests: int, seed: int
) -> Iterator[np.ndarray]:
    """Yield int64 arrays of send offsets (ns from run start) for an open-loop run.

    Stops at the first offset ``>= duration_s`` or after ``max_requests``
    offsets, whichever comes first. Raises ``ValueError`` for the closed-loop
    process, which has no schedule.
    """
    if not spec.open_loop:
        raise ValueError("a closed-loop arrival process has no schedule")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests!r}")
    end_ns = int(duration_s * NS_PER_S)
    yield from _bounded(ARRIVALS[spec.process].chunks(spec, seed, end_ns), end_ns, max_requests)


def replayed_offsets_ns(log_offsets_ns: np.ndarray, speed: float, max_rate: float | None = None) -> np.ndarray:
    """One round of a replayed log: its offsets divided by ``speed`` (rounded to the ns), then,
    with ``max_rate`` (requests/s), each at least ``round(1e9 / max_rate)`` ns after the one
    before (``t'_i = max(t_i, t'_{i-1} + gap)``, exact in integers)."""
    scaled = np.rint(log_offsets_ns / speed).astype(np.int64)
    if max_rate is not None and len(scaled) > 1:
        gap = int(round(NS_PER_S / max_rate))
        steps = np.arange(len(scaled), dtype=np.int64) * gap
        scaled = np.maximum.accumulate(scaled - steps) + steps
    return scaled


def _replay_chunks(log_offsets_ns: np.ndarray, speed: float, loop: bool,
                   max_rate: float | None = None) -> Iterator[np.ndarray]:
    """A recorded log's offsets, sped up (and spaced by ``max_rate``), repeated when ``loop``
    (one mean gap between rounds)."""
    scaled = replayed_offsets_ns(log_offsets_ns, speed, max_rate)
    span = int(scaled[-1])
    period = span + (span // max(len(scaled) - 1, 1) if len(scaled) > 1 else NS_PER_S)
    round_start = 0
    while True:
        for first in range(0, len(scaled), CHUNK_SIZE):
            yield scaled[first:first + CHUNK_SIZE] + round_start
        if not loop or period <= 0:
            return
        round_start += period


def _unit_constant_chunks() -> Iterator[np.ndarray]:
    """The constant process at rate 1, in operational time (float64, expected arrivals)."""
    first = 0
    while True:
        yield np.arange(first, first + CHUNK_SIZE, dtype=np.float64)
        first += CHUNK_SIZE


def _unit_renewal_chunks(draw_gaps_s: GapDraw) -> Iterator[np.ndarray]:
    """A renewal process at rate 1 (``draw_gaps_s`` drawn at rate 1), in operational time (float64)."""
    last = 0.0
    while True:
        points = np.cumsum(draw_gaps_s()) + last
        last = float(points[-1])
        yield points


def _warped_chunks(unit_chunks: Iterator[np.ndarray], inverse, end_ns: int) -> Iterator[np.ndarray]:
    """Map operational-time chunks to wall-time int64 ns offsets; past the end (or a
    rate that stays 0) maps to ``end_ns``, where :func:`_bounded` cuts."""
    for chunk in unit_chunks:
        seconds = inverse(chunk)
        finite = np.isfinite(seconds) & (seconds * NS_PER_S < end_ns)
        yield np.where(finite, np.rint(np.where(finite, seconds, 0.0) * NS_PER_S), end_ns).astype(np.int64)


def cumulative_rate_inverse(profile: RateCurve):
    """A vectorised function u → t (seconds) with Λ(t) = u for ``profile``
    (the earliest such t; inf when the rate stays 0 and u is never reached)."""
    if profile.kind == "periodic":
        return _periodic_inverse(profile)
    return _piecewise_linear_inverse(*rate_knots(profile))


def rate_knots(profile: RateCurve) -> tuple[np.ndarray, np.ndarray]:
    """(times s, rates req/s) of a steps or ramp profile: the rate is linear
    between knots and holds the last rate after the last knot."""
    if profile.kind == "ramp":
        return np.array([0.0, profile.ramp_s]), np.array([profile.start_rate, profile.end_rate])
    times, rates, t = [], [], 0.0
    for duration_s, rate in profile.steps:
        times += [t, t + duration_s]
        rates += [rate, rate]
        t += duration_s
    return np.array(times), np.array(rates)


def rate_at(profile: RateCurve, t_s: np.ndarray) -> np.ndarray:
    """The profile's rate (requests/s) at times ``t_s`` (seconds from the start)."""
    t_s = np.asarray(t_s, dtype=np.float64)
    if profile.kind == "periodic":
        return profile.mean + profile.amplitude * np.sin(2 * np.pi * (t_s - profile.phase_s) / profile.period_s)
    times, rates = rate_knots(profile)
    index = np.clip(np.searchsorted(times, t_s, side="right") - 1, 0, len(times) - 1)
    nxt = np.minimum(index + 1, len(times) - 1)
    span = times[nxt] - times[index]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(span > 0, (t_s - times[index]) / np.where(span > 0, span, 1.0), 0.0)
    return np.where(t_s >= times[-1], rates[-1], rates[index] + frac * (rates[nxt] - rates[index]))


def _piecewise_linear_inverse(times: np.ndarray, rates: np.ndarray):
    """Exact inverse of Λ for a piecewise-linear rate (quadratic within each segment)."""
    widths = np.diff(times)
    areas = widths * (rates[:-1] + rates[1:]) / 2
    cumulative = np.concatenate(([0.0], np.cumsum(areas)))
    last_rate = float(rates[-1])

    def inverse(u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        out = np.full(u.shape, np.inf)
        inside = u <= cumulative[-1]
        # segment i with cumulative[i] < u <= cumulative[i+1] (flat segments are skipped)
        seg = np.clip(np.searchsorted(cumulative, u[inside], side="left") - 1, 0, len(widths) - 1)
        du = np.maximum(u[inside] - cumulative[seg], 0.0)
        r0 = rates[seg]
        slope = np.where(widths[seg] > 0, (rates[seg + 1] - r0) / np.where(widths[seg] > 0, widths[seg], 1.0), 0.0)
        root = np.sqrt(np.maximum(r0 * r0 + 2 * slope * du, 0.0))
        with np.errstate(invalid="ignore", divide="ignore"):
            x = np.where(du > 0, 2 * du / (r0 + root), 0.0)
        out[inside] = times[seg] + np.minimum(x, widths[seg])
        if last_rate > 0:
            out[~inside] = times[-1] + (u[~inside] - cumulative[-1]) / last_rate
        return out

    return inverse


def _periodic_inverse(profile: RateCurve):
    """Inverse of Λ(t) = mean·t + A·P/2π·(cos(2π·(−phase)/P) − cos(2π·(t−phase)/P)), by bisection."""
    mean, amplitude, period = profile.mean, profile.amplitude, profile.period_s
    omega = 2 * np.pi / period
    c0 = np.cos(-omega * profile.phase_s)
    swing = amplitude / omega  # |Λ(t) − mean·t| <= 2·swing

    def cumulative(t: np.ndarray) -> np.ndarray:
        return mean * t + swing * (c0 - np.cos(omega * (t - profile.phase_s)))

    def inverse(u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        low = np.maximum((u - 2 * swing) / mean, 0.0)
        high = (u + 2 * swing) / mean
        for _ in range(64):
            middle = (low + high) / 2
            below = cumulative(middle) < u
            low = np.where(below, middle, low)
            high = np.where(below, high, middle)
        return high

    return inverse


def _constant_chunks(rate: float) -> Iterator[np.ndarray]:
    """Offsets ``round(i * 1e9 / rate)`` for i = 0, 1, 2, ... in chunks."""
    period_ns = NS_PER_S / rate
    first = 0
    while True:
        index = np.arange(first, first + CHUNK_SIZE, dtype=np.float64)
        yield np.rint(index * period_ns).astype(np.int64)
        first += CHUNK_SIZE


def _poisson_gaps(rate: float, burstiness: float, rng: np.random.Generator) -> GapDraw:
    """Exponential gaps with mean ``1/rate`` s (``burstiness`` unused)."""
    mean_gap_s = 1.0 / rate
    return lambda: rng.exponential(mean_gap_s, CHUNK_SIZE)


def _gamma_gaps(rate: float, burstiness: float, rng: np.random.Generator) -> GapDraw:
    """Gamma gaps: shape ``burstiness``, scale ``1/(rate·burstiness)`` (mean ``1/rate`` s)."""
    shape = burstiness
    scale = 1.0 / (rate * burstiness)
    return lambda: rng.gamma(shape, scale, CHUNK_SIZE)


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



def expected_arrivals(spec: ScheduleSpec, t_s: float) -> float:
    """Expected number of requests the schedule offers in ``[0, t_s)`` (Λ(t)):
    ``rate·t`` for a flat rate, the profile's integral, or the replayed log's
    count. Raises ``ValueError`` for the closed loop (no schedule)."""
    if not spec.open_loop:
        raise ValueError("a closed-loop arrival process offers no schedule")
    if t_s <= 0:
        return 0.0
    return ARRIVALS[spec.process].expected(spec, t_s)


def _expected_at_rate(spec: ScheduleSpec, t_s: float) -> float:
    """Λ(t_s) of a flat rate (``rate·t``) or of the rate profile (trapezoids on 2048 steps)."""
    if spec.profile is None:
        return spec.rate * t_s
    grid = np.linspace(0.0, t_s, 2049)
    rates = rate_at(spec.profile, grid)
    return float(np.sum((rates[1:] + rates[:-1]) / 2 * np.diff(grid)))


def _expected_replayed(spec: ScheduleSpec, t_s: float) -> float:
    """How many of the replayed log's arrivals (sped up, looped) fall before ``t_s``."""
    scaled_ns = replayed_offsets_ns(spec.log.offsets_ns, spec.speed, spec.max_rate).astype(np.float64)
    count = float(np.searchsorted(scaled_ns, t_s * NS_PER_S, side="left"))
    if spec.loop and len(scaled_ns) > 1:
        span = float(scaled_ns[-1]) + float(scaled_ns[-1]) / (len(scaled_ns) - 1)
        rounds, rest = divmod(t_s * NS_PER_S, span)
        count = rounds * len(scaled_ns) + float(np.searchsorted(scaled_ns, rest, side="left"))
    return count


# -- The arrival processes -------------------------------------------------------------------------

@dataclass(frozen=True)
class ArrivalProcess:
    """One open-loop process. ``chunks(spec, seed, end_ns)``: its unbounded schedule, int64 ns
    offsets in non-decreasing chunks (:func:`schedule_offsets_ns` cuts it at ``end_ns`` and
    ``max_requests``); ``expected(spec, t_s)``: the arrivals it offers in ``[0, t_s)``, t_s > 0."""

    chunks: Callable[[ScheduleSpec, int, int], Iterator[np.ndarray]]
    expected: Callable[[ScheduleSpec, float], float] = _expected_at_rate


def _constant(spec: ScheduleSpec, seed: int, end_ns: int) -> Iterator[np.ndarray]:
    """Exact multiples of the period, or where Λ crosses each integer under a rate profile."""
    if spec.profile is not None:
        return _warped_chunks(_unit_constant_chunks(), cumulative_rate_inverse(spec.profile), end_ns)
    return _constant_chunks(spec.rate)


def _renewal(gaps: Callable[[float, float, np.random.Generator], GapDraw]):
    """The schedule of a renewal process whose gaps ``gaps(rate, burstiness, rng)`` draws."""
    def chunks(spec: ScheduleSpec, seed: int, end_ns: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(seed)
        if spec.profile is not None:
            return _warped_chunks(_unit_renewal_chunks(gaps(1.0, spec.burstiness, rng)),
                                  cumulative_rate_inverse(spec.profile), end_ns)
        return _renewal_chunks(gaps(spec.rate, spec.burstiness, rng))
    return chunks


def _replay(spec: ScheduleSpec, seed: int, end_ns: int) -> Iterator[np.ndarray]:
    """The recorded log's offsets, sped up, looped when asked."""
    return _replay_chunks(spec.log.offsets_ns, spec.speed, spec.loop, spec.max_rate)


#: Every open-loop arrival process, by name, in the order scenario errors list them.
ARRIVALS: Registry[ArrivalProcess] = Registry("arrival process")
ARRIVALS.register(ArrivalProcess(_constant), name="constant")
ARRIVALS.register(ArrivalProcess(_renewal(_poisson_gaps)), name="poisson")
ARRIVALS.register(ArrivalProcess(_renewal(_gamma_gaps)), name="gamma")
ARRIVALS.register(ArrivalProcess(_replay, expected=_expected_replayed), name="replay")
