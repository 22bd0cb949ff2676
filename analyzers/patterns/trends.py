"""Patterns across a run: periodic spikes, latency drift, memory leak.

**Periodic spikes.** Two views, either one suffices:

- recurring stalls (a spike record grouping them, analyzers/spikes/stalls.py) with a regular
  rhythm: their period;
- the spikes' start times: with at least 3 spikes whose intervals vary little
  (coefficient of variation <= 0.25), the period is their median interval;
- the spectrum of the per-second share of requests above the run's P90
  (``x_t``, mean removed): the periodogram's highest peak among periods
  that fit at least 3 times in the run, tested with Fisher's g
  (``g = max I_k / Σ I_k``, p ≈ M·(1 − g)^(M−1) for M frequencies); periodic
  when p < ``alpha`` and the autocorrelation at that lag is >= 0.2.

**Drift** (long runs). The load period is cut into at most 60 equal
segments; the trend of the segments' median latency (and their P99, when
every segment has enough samples to claim it) is the Theil–Sen slope, its
significance the Mann–Kendall test (Kendall's tau of value vs time). Drift is
flagged when p < ``alpha``, the change over the run is at least
``min_drift`` (10%) of the median, and the run lasts at least
``min_duration_s`` (10 minutes); the numbers are reported for any run. A mid-run bump (a stretch
slower than both before and after it, :func:`find_bump`) with no trend outside it is not a trend:
the trend reported leaves it out and ``bump`` names its span.

**Leak** (long runs). Theil–Sen slope and Mann–Kendall test of the target's
RSS (``proc.rss_bytes``, at most 500 evenly spaced readings); flagged when
p < ``alpha``, growth over the run is at least max(10 MB, 5% of the first
reading) and the run lasts ``min_duration_s``.

A slope is stated per hour (``ms/h``, ``MB/h``, ``slope_bytes_per_hour``)
only when the data behind it spans at least ``PER_HOUR_MIN_SPAN_S`` (10
minutes): a minute's slope times 60 is mostly noise (a 60-s demo read
"+5532.6 MB/h"). A shorter span states its change over the run instead.

A verdict never contradicts its own numbers (:func:`call_trend`): a trend that
is significant but too small or too short to be called a drift or a leak is
``trending`` / ``growing``, its summary saying what it lacked; ``stable`` /
``flat`` only when the trend is not significant (p >= ``alpha``).

Costs: O(n) for the share series plus an FFT of one value per second;
Theil–Sen is O(k²) on k <= 500 points.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import stats

from tailscope.analysis_model.patterns import Drift, Leak, Patterns, Periodic, Spectrum, SpikeIntervals, Trend
from tailscope.analysis_model.spikes import Spike
from tailscope.analysis_model.warning import AnalysisWarning
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.stats.percentiles import grouped_quantile, min_samples_for_claim, nearest_rank_value, stable_group_order

RSS_SERIES = ("proc.rss_bytes", "target.rss_bytes")
#: Shortest span of data (s) from which a slope is extrapolated per hour (module docstring).
PER_HOUR_MIN_SPAN_S = 600.0


@dataclass(frozen=True)
class PatternRules:
    alpha: float = 0.01
    min_cycles: int = 3
    max_interval_cv: float = 0.25
    min_autocorrelation: float = 0.2
    segments: int = 60
    min_drift: float = 0.10
    min_duration_s: float = 600.0
    min_leak_bytes: float = 10e6
    min_leak_share: float = 0.05
    max_trend_points: int = 500


def analyze_patterns(req: RequestArrays, spikes: list[Spike], signals: SignalIndex,
                     period: tuple[int, int] | None, rules: PatternRules = PatternRules()) -> Patterns:
    """The ``patterns`` section: periodic slow requests, latency drift, memory leak."""
    return Patterns(periodic=periodicity(req, spikes, period, rules), drift=drift(req, period, rules),
                    leak=leak(signals, period, rules))


# ---------------------------------------------------------------- periodicity
def spike_interval_period(spikes: list[Spike], rules: PatternRules) -> SpikeIntervals | None:
    """Period (s) from regularly spaced spike starts, or None."""
    if len(spikes) < 3:
        return None
    starts = np.array(sorted(s.start_ns for s in spikes), dtype=np.float64) / NS_PER_S
    intervals = np.diff(starts)
    mean = float(intervals.mean())
    cv = float(intervals.std() / mean) if mean > 0 else np.inf
    if cv > rules.max_interval_cv:
        return None
    return SpikeIntervals(period_s=float(np.median(intervals)), interval_cv=cv, spikes=len(spikes))


def tail_share_series(req: RequestArrays, period: tuple[int, int]) -> np.ndarray:
    """Per-second share of latency samples above the run's P90 (NaN-free: empty seconds → 0)."""
    mask = req.in_latency
    latency = req.latency_ms[mask]
    if len(latency) == 0:
        return np.zeros(0)
    p90 = nearest_rank_value(latency, 0.9)
    seconds = max(1, int(-(-(period[1] - period[0]) // NS_PER_S)))
    index = np.clip((req.scheduled_ns[mask] - period[0]) // NS_PER_S, 0, seconds - 1)
    counts = np.bincount(index, minlength=seconds)
    above = np.bincount(index[latency > p90], minlength=seconds)
    return np.where(counts > 0, above / np.maximum(counts, 1), 0.0)


def spectral_period(x: np.ndarray, rules: PatternRules) -> Spectrum | None:
    """Fisher's g test on the periodogram of ``x`` (one value per second); None if too short."""
    n = len(x)
    if n < 4 * rules.min_cycles:
        return None
    centred = x - x.mean()
    if not np.any(centred):
        return None
    power = np.abs(np.fft.rfft(centred)) ** 2
    freqs = np.fft.rfftfreq(n, d=1.0)
    usable = (freqs > 0) & (freqs >= rules.min_cycles / n) & (freqs < 0.5)
    if usable.sum() < 2:
        return None
    candidates = np.flatnonzero(usable)
    best = candidates[np.argmax(power[candidates])]
    m = len(candidates)
    g = float(power[best] / power[candidates].sum())
    p_value = float(min(1.0, m * (1.0 - g) ** (m - 1)))
    best = fundamental(power, best, candidates[0])
    period_s = float(1.0 / freqs[best])
    lag = int(round(period_s))
    acf = lag_correlation(centred, lag) if 0 < lag < n - 2 else 0.0
    return Spectrum(period_s=period_s, fisher_g=g, p_value=p_value, autocorrelation=acf)


def lag_correlation(x: np.ndarray, lag: int) -> float:
    """Pearson correlation of ``x`` with itself ``lag`` steps later; 0.0 when
    either part is constant (no correlation can be claimed)."""
    head, tail = x[:-lag], x[lag:]
    if np.ptp(head) == 0 or np.ptp(tail) == 0:
        return 0.0
    return float(np.corrcoef(head, tail)[0, 1])


def fundamental(power: np.ndarray, peak: int, lowest: int) -> int:
    """The lowest sub-harmonic bin (peak / k) still holding half the peak's power.

    A train of short spikes puts equal power at every multiple of its frequency, so the
    highest bin may be a harmonic; the period is the fundamental's.
    """
    best = peak
    for k in range(2, peak // max(lowest, 1) + 1):
        bin_ = int(round(peak / k))
        if bin_ < lowest:
            break
        if power[bin_] >= 0.5 * power[peak]:
            best = bin_
    return best


def periodicity(req: RequestArrays, spikes: list[Spike], period: tuple[int, int] | None,
                rules: PatternRules) -> Periodic:
    """Whether slow requests recur, and what each view found (:class:`~.Periodic`); a regular
    group of recurring stalls (a spike's ``recurring_stalls``, :mod:`~..spikes.stalls`) gives the
    period first (``method`` ``"recurring_stalls"``)."""
    stalls = next((s.recurring_stalls for s in spikes if s.recurring_stalls is not None and s.recurring_stalls.regular),
                  None)
    by_spikes = spike_interval_period([s for s in spikes if s.recurring_stalls is None], rules)
    spectrum = spectral_period(tail_share_series(req, period), rules) if period else None
    spectral_hit = (spectrum is not None and spectrum.p_value < rules.alpha
                    and spectrum.autocorrelation >= rules.min_autocorrelation)
    if stalls is not None:
        chosen, method = stalls.period_s, "recurring_stalls"
    elif by_spikes is not None:
        chosen, method = by_spikes.period_s, "spike_intervals"
    elif spectral_hit:
        chosen, method = spectrum.period_s, "spectrum"
    else:
        chosen, method = None, None
    summary = (f"slow requests recur every {chosen:.1f} s ({method.replace('_', ' ')})" if chosen is not None
               else "no periodic pattern")
    return Periodic(detected=chosen is not None, period_s=chosen, method=method, summary=summary,
                    spike_intervals=by_spikes, spectrum=spectrum)


# ---------------------------------------------------------------- trends
def call_trend(significant: bool, shortfalls: list[str], called: str, partial: str, none: str) -> tuple[str, str]:
    """(verdict, note) of a trend test, worded so the two never disagree: ``called`` when the trend
    is significant and lacks nothing; ``partial`` with "significant, but not called a <called>: <what
    it lacked>" when significant but short of a rule; ``none`` with "no significant trend" otherwise."""
    if significant and not shortfalls:
        return called, ""
    if significant:
        return partial, f"significant, but not called a {called}: " + "; ".join(shortfalls)
    return none, "no significant trend"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def trend(t_s: np.ndarray, values: np.ndarray) -> Trend | None:
    """Theil–Sen slope (per s) with its 95% interval and the Mann–Kendall p-value."""
    keep = np.isfinite(values)
    t_s, values = t_s[keep], values[keep]
    if len(values) < 8 or np.ptp(t_s) <= 0:
        return None
    slope, intercept, low, high = stats.theilslopes(values, t_s, alpha=0.95)
    tau, p_value = stats.kendalltau(t_s, values)
    return Trend(slope_per_s=float(slope), slope_low=float(low), slope_high=float(high), intercept=float(intercept),
                 kendall_tau=float(tau) if np.isfinite(tau) else 0.0,
                 p_value=float(p_value) if np.isfinite(p_value) else 1.0, points=int(len(values)))


def find_bump(medians: np.ndarray, ordered: np.ndarray, starts: np.ndarray, rules: PatternRules) -> dict | None:
    """The strongest mid-run bump of a run's segment medians (ms), or None.

    ``ordered`` holds the latencies (ms) sorted by segment, segment i's from ``starts[i]``.
    A bump is a stretch of consecutive segments whose latency lies above both the segments
    before it and those after it. Located on the segment medians: among every stretch with at
    least ``max(3, k // 10)`` of the k non-empty segments on each side, the best two-level fit of
    the log medians (the largest ``(mean_in − mean_out)·sqrt(n_in·n_out/k)``). Tested on the
    requests: the stretch's latencies are higher than those before it *and* than those after it
    (one-sided Mann–Whitney, the larger p, Bonferroni-corrected for the number of stretches
    tried, below ``alpha``), and its median is at least ``min_drift`` above the rest's.
    ``{"start", "end"}`` are segment indices ([start, end)), ``rise`` the relative rise of the
    stretch's median latency over the rest's, ``p_value`` the corrected p. O(k²) on k <=
    ``segments`` plus O(n log n) for the test."""
    index = np.flatnonzero(np.isfinite(medians))
    k = len(index)
    side = max(3, k // 10)
    if k < 2 * side + 1:
        return None
    level = np.log(np.maximum(medians[index], 1e-9))
    prefix = np.concatenate(([0.0], np.cumsum(level)))
    lo_all = np.arange(side, k - side)[:, None]
    hi_all = np.arange(side + 1, k - side + 1)[None, :]
    n_in = (hi_all - lo_all).astype(np.float64)
    valid = np.broadcast_to(n_in > 0, (len(lo_all), hi_all.shape[1]))
    n_in = np.where(valid, n_in, 1.0)
    inside = prefix[np.broadcast_to(hi_all, valid.shape)] - prefix[np.broadcast_to(lo_all, valid.shape)]
    score = np.where(valid, (inside / n_in - (prefix[-1] - inside) / (k - n_in)) * np.sqrt(n_in * (k - n_in) / k), -np.inf)
    row, col = np.unravel_index(int(np.argmax(score)), score.shape)
    if score[row, col] <= 0:
        return None
    first, end = int(index[int(lo_all[row, 0])]), int(index[int(hi_all[0, col]) - 1]) + 1
    cut_lo, cut_hi = int(starts[first]), (int(starts[end]) if end < len(starts) else len(ordered))
    bump, before, after = ordered[cut_lo:cut_hi], ordered[:cut_lo], ordered[cut_hi:]
    p_before = stats.mannwhitneyu(bump, before, alternative="greater").pvalue
    p_after = stats.mannwhitneyu(bump, after, alternative="greater").pvalue
    p_value = float(min(1.0, max(p_before, p_after) * int(valid.sum())))
    rest = float(np.median(np.concatenate((before, after))))
    rise = float(np.median(bump) / rest - 1.0) if rest > 0 else 0.0
    if p_value >= rules.alpha or rise < rules.min_drift:
        return None
    return {"start": first, "end": end, "rise": rise, "p_value": p_value}


def drift(req: RequestArrays, period: tuple[int, int] | None, rules: PatternRules) -> Drift:
    """Trend of segment median (and P99) latency; ``detected`` only for long, significant, material drift.

    A mid-run bump is not a trend: when the segment medians hold a bump (:func:`find_bump`: higher
    than both the segments before and after it, latency back after it) and without its segments
    they do not trend significantly, the trend reported is the one without them (``bump``: its
    [start, end] in s since the load start, on segment bounds), and the verdict follows it. A rise
    that lasts to the end of the run has no "after" and stays a trend; a bump in the middle of the
    run, which leaves no trend at all, is still named."""
    empty = Drift(detected=False, verdict="insufficient data", summary="not enough data for a trend",
                  median=None, p99=None, segments=0, segment_s=None, bump=None)
    mask = req.in_latency
    if period is None or mask.sum() < 100:
        return empty
    duration_ns = max(period[1] - period[0], 1)
    segments = int(min(rules.segments, max(8, duration_ns // NS_PER_S)))
    segment = np.clip(((req.scheduled_ns - period[0]) * segments) // duration_ns, 0, segments - 1)
    rows = req.latency_rows(mask)
    ordered = req.latency_ms[rows[stable_group_order(segment[rows])]]  # by (segment, latency)
    counts = np.bincount(segment[mask], minlength=segments)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    mid_s = (np.arange(segments) + 0.5) * duration_ns / segments / NS_PER_S
    medians = grouped_quantile(ordered, starts, counts, 0.5)
    p99 = grouped_quantile(ordered, starts, counts, 0.99)
    p99_claimed = bool(np.all(counts >= min_samples_for_claim(0.99, 0)))
    median_trend = trend(mid_s, medians)
    p99_trend = trend(mid_s, p99) if p99_claimed else None
    duration_s = duration_ns / NS_PER_S
    segment_s = duration_s / segments
    bump, found = None, find_bump(medians, ordered, starts, rules)
    if found is not None:
        outside = trend(mid_s, np.where((np.arange(segments) >= found["start"]) & (np.arange(segments) < found["end"]),
                                        np.nan, medians))
        if outside is not None and outside.p_value >= rules.alpha:
            bump = [[round(found["start"] * segment_s, 1), round(found["end"] * segment_s, 1)]]
            median_trend, p99_trend = outside, None
    typical = float(np.nanmedian(medians))
    detected, change = False, None
    verdict, summary = "insufficient data", empty.summary
    if median_trend is not None:
        change = median_trend.slope_per_s * duration_s / typical if typical > 0 else 0.0
        shortfalls = ([f"the change is below the {rules.min_drift:.0%} a drift needs"]
                      if abs(change) < rules.min_drift else [])
        if duration_s < rules.min_duration_s:
            shortfalls.append(f"the run lasted {_minutes(duration_s)}, shorter than the "
                              f"{_minutes(rules.min_duration_s)} a drift needs")
        verdict, note = call_trend(median_trend.p_value < rules.alpha, shortfalls, "drift", "trending", "stable")
        detected = verdict == "drift"
        rate = (f"Theil–Sen {median_trend.slope_per_s * 3600:+.2f} ms/h" if duration_s >= PER_HOUR_MIN_SPAN_S
                else f"Theil–Sen {median_trend.slope_per_s * duration_s:+.2f} ms over {_minutes(duration_s)}")
        summary = ("median latency " + ("rose" if change > 0 else "fell")
                   + f" {abs(change):.0%} over the run ({rate}, "
                   f"Mann–Kendall p = {median_trend.p_value:.2g})" + (f": {note}" if note else ""))
        if bump is not None:
            (low, high), = bump
            summary = (f"a mid-run bump, not a trend: the median rose {found['rise']:+.0%} at {low:.0f}–{high:.0f} s "
                       f"and came back (Mann–Whitney p = {found['p_value']:.2g}); outside it median latency changed "
                       f"{change:+.0%} over the run (Mann–Kendall p = {median_trend.p_value:.2g}, no significant trend)")
    return Drift(detected=detected, verdict=verdict, summary=summary, relative_change=change, median=median_trend,
                 p99=p99_trend, segments=segments, segment_s=segment_s, bump=bump)


def leak(signals: SignalIndex, period: tuple[int, int] | None, rules: PatternRules) -> Leak:
    """Trend of the target's RSS; ``detected`` only for long, significant, material growth."""
    name = next((n for n in RSS_SERIES if signals.has(n)), None)
    empty = Leak(detected=False, verdict="insufficient data", series=name, summary="no RSS series of the target",
                 trend=None, growth_bytes=None, slope_bytes_per_hour=None)
    if name is None or period is None:
        return empty
    t, v = signals.readings(name)
    inside = (t >= period[0]) & (t <= period[1])
    t, v = t[inside], v[inside]
    if len(t) > rules.max_trend_points:
        pick = np.linspace(0, len(t) - 1, rules.max_trend_points).round().astype(np.int64)
        t, v = t[pick], v[pick]
    found = trend((t - period[0]) / NS_PER_S, v)
    if found is None:
        return dataclasses.replace(empty, summary="too few RSS readings for a trend")
    duration_s = (period[1] - period[0]) / NS_PER_S
    growth = found.slope_per_s * duration_s
    span_s = float(t[-1] - t[0]) / NS_PER_S
    per_hour = span_s >= PER_HOUR_MIN_SPAN_S
    material = max(rules.min_leak_bytes, rules.min_leak_share * float(v[0]))
    shortfalls = [f"growth below the {material / 1e6:.0f} MB a leak needs"] if growth < material else []
    if duration_s < rules.min_duration_s:
        shortfalls.append(f"the run lasted {_minutes(duration_s)}, shorter than the "
                          f"{_minutes(rules.min_duration_s)} a leak needs")
    verdict, note = call_trend(found.p_value < rules.alpha and growth > 0, shortfalls, "leak", "growing", "flat")
    detected = verdict == "leak"
    rate = (f"{found.slope_per_s * 3600 / 1e6:+.1f} MB/h" if per_hour
            else f"{_minutes(span_s)} of readings: too short for a per-hour rate")
    summary = (f"target RSS {'grew' if growth >= 0 else 'fell'} {growth / 1e6:+.1f} MB over the run "
               f"({rate}, Mann–Kendall p = {found.p_value:.2g})"
               + (f": {note}" if note else ""))
    return Leak(detected=detected, verdict=verdict, series=name, summary=summary, trend=found, growth_bytes=growth,
                slope_bytes_per_hour=found.slope_per_s * 3600 if per_hour else None)


def pattern_warnings(patterns: Patterns) -> list[AnalysisWarning]:
    """A warning for every detected pattern (periodic_spikes, latency_drift, memory_leak), its
    summary the message."""
    return [AnalysisWarning(code, entry.summary) for entry, code in (
        (patterns.periodic, "periodic_spikes"), (patterns.drift, "latency_drift"), (patterns.leak, "memory_leak"))
        if entry.detected]
