"""Which time windows hold significantly more slow requests than a steady run would.

The test, and why it works at any rate
--------------------------------------
Let τ be the run's *baseline* P99: the 0.99-quantile of the latencies of the
requests outside every flagged window (computed iteratively, below). In a
steady run each request is above τ with probability p0 = 1 − 0.99 = 1%, so the
number of slow requests k among the n requests of a window follows
Binomial(n, p0). A window's P99 exceeds τ exactly when its share of requests
above τ exceeds 1%, so the one-sided binomial test ``P(Binomial(n, p0) >= k)``
is the exact, distribution-free test of "this window's P99 is above the
baseline P99" (beta-binomial once τ's own uncertainty is counted, below) — and unlike a window P99 it needs no 459 samples: at 20
requests/s, 4 slow requests out of 20 in one second is already significant
after correction.

Windows are tested at several scales (1, 2, 4, 8 consecutive detection windows,
non-overlapping; from 2 up each scale twice, its groups aligned at the first window and shifted
by half a group, so an episode across two aligned groups is whole in a shifted one), so a long
moderate spike is found as well as a short sharp one; of a group flagged at a larger scale, only the windows that are elevated
on their own (uncorrected p < ``member_alpha`` and share >= the material
share) join the spike, so quiet edges do not widen it. Multiple testing: Bonferroni over every window tested at every scale, so
the probability that a steady run shows any flagged window is at most
``alpha`` (1% by default), whatever its length.

Significance alone is not enough at 20,000 requests/s (a 1.3% share is
"significant" there), so a window is flagged only when also *material*: its
slow share is at least ``min_tail_ratio`` × p0 (4%), it holds at least
``min_slow_requests`` slow requests, and the upper quartile of its slow
requests' latencies is at least ``max(τ·(1 + min_relative_excess), τ + min_excess_ms)``.

The detection window is the display window (``window_s``) made longer, in whole
multiples, until ``min_expected_per_window`` (20) latency samples are expected
in it — fewer, down to ``min_expected_floor`` (8), where 20 would leave fewer
than ``min_windows`` (10) windows — so very low rates still get testable windows.
A run with fewer than ``min_tested_windows × min_expected_floor`` (6 × 8 = 48) samples after
the warm-up is *too short to tell* (:func:`too_short` says how long would be
enough at its rate) and is not tested.

Iteration: a spike holding more than 1% of the run's requests would lift τ
into itself and hide. So τ is first the P99 of the samples outside *outlying*
windows — windows whose median or P90 lies more than ``outlier_k`` scaled MADs
(and ``min_relative_excess``) above the median over windows of that statistic,
and stretches of at least ``LONG_RUN_WINDOWS`` (3) consecutive windows more than
``outlier_k`` σ above the quiet windows' level, read from the lowest 40% of the
windows (:func:`quiet_level`), so an incident holding up to 60% of the tested
windows moves neither the level nor σ (single windows above the quiet level are
not enough: a plain FastAPI service's window medians alternated 10 / 46 ms and
the screen left 29 samples for τ);
after each test, τ is recomputed from the samples outside every
window outlying or flagged so far and the test repeated (at most
``max_iterations`` times, or until no window joins the excluded set). The
excluded set only grows, so τ only falls: outlying windows beside a spike that
the test does not flag cannot come back into τ, lift it above the spike and
make it vanish on the next iteration (seen in a 10 s lab run: τ went 285 →
514 ms and the overload spike was lost). Only the binomial test flags
windows; the outlier screen only keeps windows out of τ.

A baseline that is never the incident: when fewer than ``min_samples`` (100)
quiet samples remain for a P99, τ is a lower quantile of them
(``baseline_ladder``: P95 from 40, P90 from 16) with its own p0, never the
whole run's P99 (which, at 2 requests/s, lay inside a 60-s KV-cache burst and
hid it). τ is an order statistic of N quiet samples, so the share of a steady
window's samples above it is itself uncertain: Beta(a, b) with a = (quiet
samples above τ) + 1, b = N − (above); a window's count above τ then follows
the beta-binomial, and the p-value is its tail (:func:`_sf`) — the exact
predictive test at any N, the binomial as N grows.

Each group against the quiet samples outside it: up to ``LEAVE_OUT_MAX_SAMPLES`` (200,000) quiet
samples, every group of every scale and shift is tested against τ_g, the same quantile of the quiet
samples *outside that group*, with its own Beta (:func:`_leave_out`) — so the requests of the group
being tested never set the threshold they are compared with (under a steady run the group's
samples are then independent of τ_g: the beta-binomial tail is exact). Before, an incident that the
outlier screen did not set aside lifted τ into itself: on the real vLLM pinned to one core, a 15-s
prompt storm at 8 req/s held 21 of its 137 TTFTs above the P99 of the TTFTs outside it (66 ms), but
its own slowest requests made the baseline's P99 101 ms and nothing was flagged (3-s windows of 24
requests: their medians and P90s too noisy for the screen). Above 200,000 quiet samples one group's
share of the baseline is too small to lift τ and the screen's per-window figures are steady: every
group is tested against all of them. Weighted elements count as the samples they stand for.

The group's neighbours are left out too (its *guard*: :data:`LEAVE_OUT_GUARD_GROUPS` groups of its
size on each side), where what remains still makes a baseline, and τ_g is then the highest quantile
of the ladder the remaining quiet samples suffice for, with its own p0 — not the shared τ, which
holds the incident. An incident rarely fits one group: its requests just outside the group tested
are the likeliest to lift τ_g into it. On the real vLLM at 2 req/s, a 15-s prompt storm slowed
the streams' time per output token: a 6-s window in it held 10 of its 17 TPOTs above the P95 of
the TPOTs outside it and its neighbours (7.4 ms, 82 samples; p = 9 × 10⁻⁷), but none above the
P99 of the 110 outside it alone (11.3 ms: the storm's other slow streams), and nothing was
flagged. Under a steady run the guard only costs samples: τ_g still comes from samples
independent of the group's.

Episodes: flagged windows at most ``merge_gap`` apart are one spike, and so are
flagged runs whose gap's median (the gap's samples pooled) stays raised — at
least (1 + ``min_relative_excess``) × the quiet median (``raised`` counts,
:meth:`TailTestResult.episodes`): a 15-s CPU-contention episode with its median
doubled throughout is one spike even where a window inside it holds few slow
requests.

Materiality uses the ``material_quantile`` (0.75) of a window's slow samples,
not their median: where a window's whole distribution doubled, its slow
samples' median is only 1.22 τ at a log-sigma of 0.3. A window joins a
flagged larger-scale group only when its own slow samples clear that floor.

Weighted samples: an element may stand for several samples of one value
(``weights``): a retained run is tested on its per-window latency histograms,
one element per bucket weighted by its count, which gives the same test as the
samples expanded (but for the outlier screen's subsample above 500,000 samples;
:mod:`tailscope.analyzers.spikes.detection`).

Cost: O(n) per iteration for the counts plus O(k log k) for the k slow
requests' medians, and, up to 200,000 quiet samples, one O(n log n) sort per iteration and
O(m log² n) per grouping (m windows) for the leave-out baselines; memory O(n) booleans and int64
window indices (n: elements; weighted quantiles sort the elements, O(n log n)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from tailscope.analyzers.stats.percentiles import group_sort, grouped_quantile, nearest_rank_value, weighted_grouped_quantiles


@dataclass(frozen=True)
class TailTestRules:
    """Thresholds of the tail-share test (see the module docstring)."""

    alpha: float = 0.01
    tail_p: float = 0.99
    min_tail_ratio: float = 4.0
    min_slow_requests: int = 3
    min_relative_excess: float = 0.25
    min_excess_ms: float = 1.0
    min_expected_per_window: float = 20.0
    scales: tuple[int, ...] = (1, 2, 4, 8)
    max_iterations: int = 4
    min_samples: int = 100
    outlier_k: float = 5.0
    member_alpha: float = 0.05
    #: Which quantile of a window's slow samples must clear the material floor (0.5 was the
    #: median: a window whose whole distribution doubled has slow samples whose median is
    #: only 1.22 τ at a 0.3 log-sigma, and missed the 1.25 τ floor).
    material_quantile: float = 0.75
    #: The baseline quantile when few samples lie outside the outlying windows: (quantile, the
    #: quiet samples it needs), first that fits; P99 needs ``min_samples`` (module docstring).
    baseline_ladder: tuple[tuple[float, int], ...] = ((0.95, 40), (0.9, 16))
    #: Detection windows are made shorter (down to ``min_expected_floor`` expected samples each)
    #: so a short or slow run still has ``min_windows`` of them; fewer samples than
    #: ``min_tested_windows × min_expected_floor`` after the warm-up is too short to tell.
    min_windows: int = 10
    min_expected_floor: float = 8.0
    min_tested_windows: int = 6

    def ladder(self) -> tuple[tuple[float, int], ...]:
        """(quantile, quiet samples needed) from the highest: ``tail_p`` with ``min_samples``, then the ladder."""
        return ((self.tail_p, self.min_samples), *self.baseline_ladder)

    def samples_to_tell(self) -> int:
        """Fewest latency samples (after the warm-up) the test runs on."""
        return int(np.ceil(self.min_tested_windows * self.min_expected_floor))


@dataclass(frozen=True)
class TailTestResult:
    """Per detection window (length ``window_ns``): counts, test outcome and the final baseline."""

    origin_ns: int
    window_ns: int
    n: np.ndarray  # latency samples per window
    slow: np.ndarray  # samples above ``threshold_ms`` per window
    p_value: np.ndarray  # one-sided binomial p-value at scale 1 (1.0 for empty windows)
    flagged: np.ndarray  # bool
    threshold_ms: float  # τ: the baseline's ``quantile`` from samples outside flagged windows
    expected_share: float  # p0: the predictive share above τ, (above + 1) / (quiet samples + 1)
    tests: int  # number of window groups tested over all scales and shifts (the Bonferroni divisor)
    iterations: int
    quantile: float = 0.99  # the baseline quantile τ is (``TailTestRules.ladder``)
    baseline_samples: int = 0  # quiet samples τ came from
    beta: tuple[float, float] = (1.0, 99.0)  # share above τ ~ Beta(a, b) (module docstring)
    #: samples per window above (1 + min_relative_excess) × the quiet samples' median
    raised: np.ndarray | None = None

    def episodes(self, merge_gap: int) -> list[tuple[int, int]]:
        """[(first, last)] window indices of the spikes: flagged runs at most ``merge_gap`` windows
        apart join (:func:`merge_runs`), and so do runs whose gap's median (its windows' samples
        pooled) is raised — at least (1 + min_relative_excess) × the quiet median: one episode
        whose median stays raised while windows in it hold fewer slow requests."""
        runs = merge_runs(self.flagged, merge_gap)
        if self.raised is None or len(runs) < 2:
            return runs
        joined = [runs[0]]
        for first, last in runs[1:]:
            gap = slice(joined[-1][1] + 1, first)
            if 2 * int(self.raised[gap].sum()) >= int(self.n[gap].sum()):
                joined[-1] = (joined[-1][0], last)
            else:
                joined.append((first, last))
        return joined

    def tail_p_value(self, slow: int, n: int) -> float:
        """One-sided p-value of ``slow`` samples above τ among ``n`` (beta-binomial, module docstring)."""
        return float(_sf(np.asarray([slow]), np.asarray([n]), self.beta)[0])

    def window_bounds(self, first: int, last: int) -> tuple[int, int]:
        """(start, end) epoch ns of detection windows ``first..last`` inclusive."""
        return self.origin_ns + first * self.window_ns, self.origin_ns + (last + 1) * self.window_ns


def detection_window_ns(samples: int, duration_ns: int, window_ns: int, rules: TailTestRules) -> int:
    """The display window times the smallest whole factor giving ``min_expected_per_window`` samples
    — fewer (down to ``min_expected_floor``) where that leaves under ``min_windows`` windows."""
    if samples <= 0 or duration_ns <= 0:
        return window_ns
    expected = samples * window_ns / duration_ns
    target = min(rules.min_expected_per_window, max(rules.min_expected_floor, samples / rules.min_windows))
    factor = max(1, int(np.ceil(target / max(expected, 1e-12) - 1e-9)))
    return window_ns * factor


def too_short(samples: int, duration_ns: int, rules: TailTestRules) -> dict | None:
    """None when the test can run on ``samples`` latency samples over ``duration_ns``; else
    ``{samples, needed, rate_per_s, enough_s}``: the test needs ``needed`` samples, which at this
    rate take ``enough_s`` seconds (None at rate 0) after the warm-up."""
    needed = rules.samples_to_tell()
    if samples >= needed and duration_ns > 0:
        return None
    rate = samples / (duration_ns / 1e9) if duration_ns > 0 else 0.0
    return {"samples": int(samples), "needed": needed, "rate_per_s": rate,
            "enough_s": needed / rate if rate > 0 else None}


MAD_TO_SIGMA = 1.4826


#: The outlier screen reads at most this many samples (seeded subsample): per-window medians
#: and P90s from a few hundred samples each are accurate enough to choose a starting τ.
OUTLIER_SCREEN_SAMPLES = 500_000


def _count(index: np.ndarray, m: int, weights: np.ndarray | None) -> np.ndarray:
    """Samples per window (int64): one per element, or its weight."""
    return np.bincount(index, weights=weights, minlength=m).astype(np.int64)


def _total(chosen: np.ndarray, weights: np.ndarray | None) -> int:
    """Samples among the chosen elements (a boolean mask)."""
    return int(chosen.sum()) if weights is None else int(weights[chosen].sum())


def _window_quantiles(index: np.ndarray, values: np.ndarray, m: int, qs: tuple[float, ...],
                      weights: np.ndarray | None) -> dict[float, np.ndarray]:
    """Nearest-rank quantiles of each window's samples (NaN where none)."""
    if weights is not None:
        return weighted_grouped_quantiles(index, values, weights, m, qs)
    order = group_sort(index, values)
    counts = np.bincount(index, minlength=m)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return {q: grouped_quantile(values[order], starts, counts, q) for q in qs}


def outlying_windows(index: np.ndarray, latency_ms: np.ndarray, m: int, rules: TailTestRules,
                     weights: np.ndarray | None = None) -> np.ndarray:
    """Windows whose median or P90 is far above the typical window's (robust z > outlier_k).
    ``weights``: samples each element stands for (None: one each)."""
    if weights is None and len(index) > OUTLIER_SCREEN_SAMPLES:
        pick = np.random.default_rng(0).choice(len(index), size=OUTLIER_SCREEN_SAMPLES, replace=False)
        index, latency_ms = index[pick], latency_ms[pick]
    counts = _count(index, m, weights)
    outlying = np.zeros(m, dtype=bool)
    enough = counts >= 5
    if enough.sum() < 3:
        return outlying
    quantiles = _window_quantiles(index, latency_ms, m, (0.5, 0.9), weights)
    long_run = np.zeros(m, dtype=bool)
    for p in (0.5, 0.9):
        values = quantiles[p]
        # against the typical window (all windows' median): any window far above it
        typical = float(np.median(values[enough]))
        spread = float(np.median(np.abs(values[enough] - typical))) * MAD_TO_SIGMA
        outlying |= enough & (values > max(typical + rules.outlier_k * spread,
                                           typical * (1.0 + rules.min_relative_excess)))
        # against the quiet level (the lowest 40%): only stretches of consecutive windows above it,
        # an incident holding up to 60% of the run; single windows there are a service's own
        # alternation (a plain FastAPI service's window medians alternated 10 / 46 ms)
        typical, spread = quiet_level(values[enough])
        limit = max(typical + (rules.outlier_k + LOWER_HALF_CENTRE) * spread, typical * (1.0 + rules.min_relative_excess))
        long_run |= enough & (values > limit)
    return outlying | _in_runs(long_run, LONG_RUN_WINDOWS)


#: Consecutive windows above the quiet level that make an incident for the outlier screen.
LONG_RUN_WINDOWS = 3


def _in_runs(mask: np.ndarray, length: int) -> np.ndarray:
    """The windows of ``mask`` in runs of at least ``length`` consecutive ones."""
    out = np.zeros_like(mask)
    for first, last in merge_runs(mask, 0):
        if last - first + 1 >= length:
            out[first:last + 1] = True
    return out


#: The quiet level is read from the lowest 40% of the windows' values. Of a normal sample's lowest
#: 40%: its median (the 0.2-quantile) lies 0.841 σ below the centre, and σ is 2.79 times its median
#: absolute deviation from that median.
QUIET_SHARE, LOWER_HALF_CENTRE, LOWER_HALF_MAD_TO_SIGMA = 0.4, 0.841, 2.79


def quiet_level(values: np.ndarray) -> tuple[float, float]:
    """(typical, σ) of the quiet windows' statistic: from the lowest ``QUIET_SHARE`` of ``values``
    only, so windows of an incident holding up to 60% of them (half the run, more once the
    warm-up is cut) move neither (typical is ``LOWER_HALF_CENTRE`` σ below a steady run's centre)."""
    lower = values[values <= np.quantile(values, QUIET_SHARE)]
    typical = float(np.median(lower))
    return typical, float(np.median(np.abs(lower - typical))) * LOWER_HALF_MAD_TO_SIGMA


def _baseline_threshold(latency_ms: np.ndarray, clean: np.ndarray, p: float, weights: np.ndarray | None) -> float:
    if weights is None:
        return nearest_rank_value(latency_ms[clean], p)
    return float(weighted_grouped_quantiles(np.zeros(int(clean.sum()), dtype=np.int64), latency_ms[clean],
                                            weights[clean], 1, (p,))[p][0])


def _baseline(latency_ms: np.ndarray, clean: np.ndarray, rules: TailTestRules,
              weights: np.ndarray | None) -> tuple[float, float, int, tuple[float, float]] | None:
    """(τ, its quantile, quiet samples, Beta(a, b) of the share above τ) from the quiet samples:
    the highest quantile of ``rules.ladder()`` they suffice for; None when none does."""
    quiet = _total(clean, weights)
    for q, needed in rules.ladder():
        if quiet >= needed:
            tau = _baseline_threshold(latency_ms, clean, q, weights)
            above = _total(clean & (latency_ms > tau), weights)
            return tau, q, quiet, (above + 1.0, float(max(quiet - above, 1)))
    return None


def _sf(k: np.ndarray, n: np.ndarray, beta: tuple) -> np.ndarray:
    """P(K >= k), K ~ BetaBinomial(n, a, b): slow samples among n when the share above τ is Beta(a, b)
    (scalars, or one per element of ``k``); 1 where n = 0."""
    a, b = beta
    with np.errstate(invalid="ignore", divide="ignore"):
        p = stats.betabinom.sf(k - 1, np.maximum(n, 1), a, b)
    return np.where(n > 0, np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0), 1.0)


def _scaled(counts: np.ndarray, scale: int, offset: int = 0) -> np.ndarray:
    """Sums over non-overlapping groups of ``scale`` consecutive windows, the first group ending
    ``scale - offset`` windows in (``offset`` 0: groups start at window 0; first and last groups may
    be short). Window ``w`` is in group ``(w + offset) // scale``."""
    groups = -(-(len(counts) + offset) // scale)
    padded = np.zeros(groups * scale, dtype=counts.dtype)
    padded[offset:offset + len(counts)] = counts
    return padded.reshape(groups, scale).sum(axis=1)


def _groupings(rules: TailTestRules) -> list[tuple[int, int]]:
    """(scale, offset) of every grouping tested: each scale aligned at window 0 and, from 2
    windows up, also shifted by half a group, so an episode that straddles two aligned groups is
    whole in a shifted one (a 15-s prompt storm on the real vLLM held 9 of 103 TTFTs above τ in 5
    windows of 3 s, split 5 + 4 between two aligned 4-window groups, and no group passed)."""
    return [(scale, offset) for scale in rules.scales for offset in ((0,) if scale == 1 else (0, scale // 2))]


#: Up to this many quiet samples each group is tested against the quiet samples *outside* it
#: (:func:`_leave_out`); above it, against all of them (one group's share of the baseline is then
#: too small to lift τ, and the outlier screen's per-window medians are steady).
LEAVE_OUT_MAX_SAMPLES = 200_000


@dataclass(frozen=True)
class GroupBaselines:
    """Per group of one grouping: τ, its quantile's Beta(a, b) (module docstring), the floor
    its slow samples' ``material_quantile`` must clear (ms) and which quantile τ is."""

    tau: np.ndarray
    a: np.ndarray
    b: np.ndarray
    floor_ms: np.ndarray
    q: np.ndarray  # the quantile τ is, per group


def _floor_ms(tau, rules: TailTestRules):
    return np.maximum(tau * (1.0 + rules.min_relative_excess), tau + rules.min_excess_ms)


@dataclass(frozen=True)
class QuietOrder:
    """The quiet samples ordered once per pass, for every grouping's leave-out baselines (weighted
    elements count as the samples they stand for). ``ordered``: their values sorted, ``cum[i]`` the
    samples at or below ``ordered[i]`` (R(x) for x the last of its value); per window, its elements'
    R(x) sorted as ``keys`` (window · (N + 1) + R), ``starts`` each window's first position (m + 1)
    and ``key_cum`` the samples before each position (len(keys) + 1)."""

    ordered: np.ndarray
    cum: np.ndarray
    keys: np.ndarray
    starts: np.ndarray
    key_cum: np.ndarray

    @property
    def total(self) -> int:
        return int(self.cum[-1])

    @classmethod
    def of(cls, index: np.ndarray, latency_ms: np.ndarray, clean: np.ndarray, m: int,
           weights: np.ndarray | None = None) -> QuietOrder:
        values = latency_ms[clean]
        counts = np.ones(len(values), np.int64) if weights is None else weights[clean].astype(np.int64)
        by_value = np.argsort(values, kind="stable")
        ordered = values[by_value]
        cum = np.cumsum(counts[by_value])
        stride = int(cum[-1]) + 1
        key = index[clean].astype(np.int64) * stride + cum[np.searchsorted(ordered, values, side="right") - 1]
        by_key = np.argsort(key, kind="stable")
        keys = key[by_key]
        key_cum = np.concatenate(([0], np.cumsum(counts[by_key])))
        starts = np.searchsorted(keys, np.arange(m + 1, dtype=np.int64) * stride, side="left")
        return cls(ordered, cum, keys, starts, key_cum)

    def at_or_below(self, i: np.ndarray) -> np.ndarray:
        """R(ordered[i]): the quiet samples at or below each value."""
        return self.cum[np.searchsorted(self.ordered, self.ordered[i], side="right") - 1]

    def per_window(self) -> np.ndarray:
        """The quiet samples of each window."""
        return self.key_cum[self.starts[1:]] - self.key_cum[self.starts[:-1]]

    def in_windows_at_or_below(self, rank: np.ndarray) -> np.ndarray:
        """Per window w, its quiet samples with R(x) ≤ ``rank[w]``."""
        windows = np.arange(len(self.starts) - 1, dtype=np.int64)
        ends = np.searchsorted(self.keys, windows * (self.total + 1) + rank, side="right")
        return self.key_cum[ends] - self.key_cum[self.starts[:-1]]


#: Each group's baseline also leaves out this many groups of its size on each side (its *guard*),
#: where the quiet samples left still make a baseline: an incident's requests just outside the
#: group tested are the likeliest to lift τ_g into it (module docstring).
LEAVE_OUT_GUARD_GROUPS = 1


def _outside_at_or_below(order: QuietOrder, group_of: np.ndarray, groups: int, reach: int,
                         i: np.ndarray) -> np.ndarray:
    """Per group g: the quiet samples at or below ``order.ordered[i[g]]`` outside the windows of
    groups g − ``reach`` … g + ``reach``."""
    r_all = order.at_or_below(i)
    mine = np.zeros(groups, np.int64)
    for shift in range(-reach, reach + 1):
        target = group_of + shift  # the group whose guard holds each window, ``shift`` groups over
        valid = (target >= 0) & (target < groups)
        counts = order.in_windows_at_or_below(r_all[np.clip(target, 0, groups - 1)])
        mine += np.bincount(target[valid], weights=counts[valid], minlength=groups).astype(np.int64)
    return r_all - mine


def _ladder_quantile(outside: np.ndarray, rules: TailTestRules) -> np.ndarray:
    """Per group, the highest quantile of ``rules.ladder()`` its ``outside`` quiet samples suffice
    for (NaN: none)."""
    q_g = np.full(len(outside), np.nan)
    for q, needed in reversed(rules.ladder()):
        q_g = np.where(outside >= needed, q, q_g)
    return q_g


def _leave_out(order: QuietOrder, scale: int, offset: int, groups: int, tau: float, beta: tuple[float, float],
               q: float, rules: TailTestRules) -> GroupBaselines:
    """Each group's baseline from the quiet samples outside it and its guard (the
    :data:`LEAVE_OUT_GUARD_GROUPS` groups on each side): τ_g is their nearest-rank ``q_g``-quantile,
    ``q_g`` the highest of ``rules.ladder()`` their number suffices for, a_g − 1 of them lie above
    τ_g, b_g = the rest. Where too few remain, the group alone is left out; where even that leaves
    too few, the group keeps the shared ``tau``, ``beta`` and ``q``. Window ``w`` is in group
    ``(w + offset) // scale``.

    Exact and vectorised: with S the quiet samples sorted and R(x) = #{s ∈ S: s ≤ x}, the count
    outside group g's windows at or below S[i] is R(S[i]) − #{x in them: R(x) ≤ R(S[i])} — summed
    over those windows from :class:`QuietOrder` — non-decreasing in i; a bisection over i for all
    groups at once finds the smallest i where it reaches the rank. O(m log² n) per grouping (m
    windows), after the one O(n log n) sort of :class:`QuietOrder`."""
    m = len(order.starts) - 1
    group_of = (np.arange(m) + offset) // scale
    last = np.full(groups, len(order.ordered) - 1, np.int64)
    tau_g, a, b = np.full(groups, tau), np.full(groups, beta[0]), np.full(groups, beta[1])
    q_g = np.full(groups, q)
    pending = np.ones(groups, dtype=bool)
    for reach in (LEAVE_OUT_GUARD_GROUPS, 0):
        if not pending.any():
            break
        outside = _outside_at_or_below(order, group_of, groups, reach, last)
        level = _ladder_quantile(outside, rules)
        own = pending & np.isfinite(level)
        if not own.any():
            continue
        rank = np.ceil(outside * np.nan_to_num(level, nan=1.0) - 1e-9).astype(np.int64).clip(1, None)
        lo, hi = np.zeros(groups, np.int64), np.where(own, last, 0)
        while np.any(lo < hi):
            open_ = lo < hi
            mid = (lo + hi) // 2
            reached = _outside_at_or_below(order, group_of, groups, reach, mid) >= rank
            hi = np.where(open_ & reached, mid, hi)
            lo = np.where(open_ & ~reached, mid + 1, lo)
        above = outside - _outside_at_or_below(order, group_of, groups, reach, lo)
        tau_g = np.where(own, order.ordered[lo], tau_g)
        a = np.where(own, above + 1.0, a)
        b = np.where(own, np.maximum(outside - above, 1).astype(float), b)
        q_g = np.where(own, level, q_g)
        pending &= ~own
    return GroupBaselines(tau_g, a, b, _floor_ms(tau_g, rules), q_g)


def _shared(groups: int, tau: float, beta: tuple[float, float], q: float, rules: TailTestRules) -> GroupBaselines:
    """Every group against the one baseline (more than :data:`LEAVE_OUT_MAX_SAMPLES` quiet samples)."""
    tau_g = np.full(groups, tau)
    return GroupBaselines(tau_g, np.full(groups, beta[0]), np.full(groups, beta[1]), _floor_ms(tau_g, rules),
                          np.full(groups, q))


def _flag_once(index: np.ndarray, latency_ms: np.ndarray, m: int, tau: float, q: float, beta: tuple[float, float],
               rules: TailTestRules, weights: np.ndarray | None = None,
               clean: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One pass of the test at every scale and shift (module docstring). ``clean``: the quiet
    samples τ came from; with it (at most :data:`LEAVE_OUT_MAX_SAMPLES` of them)
    each group is tested against the quiet samples outside it (:func:`_leave_out`), so an
    incident's own requests never set the τ it is tested against."""
    is_slow = latency_ms > tau
    n = _count(index, m, weights)
    k = _count(index[is_slow], m, weights[is_slow] if weights is not None else None)
    leave_out = clean is not None and 0 < _total(clean, weights) <= LEAVE_OUT_MAX_SAMPLES
    order = QuietOrder.of(index, latency_ms, clean, m, weights) if leave_out else None
    tests = int(sum(np.count_nonzero(_scaled(n, s, o)) for s, o in _groupings(rules)))
    cutoff = rules.alpha / max(tests, 1)
    flagged = np.zeros(m, dtype=bool)
    p_unit, unit_share, unit_material = np.ones(m), np.zeros(m), np.zeros(m, dtype=bool)
    unit_least = np.full(m, rules.min_tail_ratio * (1.0 - q))
    q_m = rules.material_quantile
    for scale, offset in _groupings(rules):
        group = (index + offset) // scale
        n_s = _scaled(n, scale, offset)
        base = (_leave_out(order, scale, offset, len(n_s), tau, beta, q, rules) if order is not None
                else _shared(len(n_s), tau, beta, q, rules))
        least_share = rules.min_tail_ratio * (1.0 - base.q)
        slow = latency_ms > base.tau[group]
        slow_weights = weights[slow] if weights is not None else None
        k_s = _count(group[slow], len(n_s), slow_weights)
        p_s = _sf(k_s, n_s, (base.a, base.b))
        tail = _window_quantiles(group[slow], latency_ms[slow], len(n_s), (q_m,), slow_weights)[q_m]
        material = np.nan_to_num(tail, nan=-np.inf) >= base.floor_ms
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(n_s > 0, k_s / np.maximum(n_s, 1), 0.0)
        if scale == 1:
            p_unit, unit_share, unit_material, unit_least = p_s, share, material, least_share
        passed = (p_s < cutoff) & (share >= least_share) & (k_s >= rules.min_slow_requests) & material
        if not passed.any():
            continue
        member = np.repeat(passed, scale)[offset:offset + m]
        if scale == 1:
            flagged |= member
        else:  # only the elevated windows of a flagged group, so its quiet edges do not widen the spike
            flagged |= (member & (unit_share >= unit_least)
                        & (p_unit < rules.member_alpha) & unit_material)
    return flagged, n, k, p_unit, tests


def tail_test(scheduled_ns: np.ndarray, latency_ms: np.ndarray, origin_ns: int, end_ns: int,
              window_ns: int, rules: TailTestRules = TailTestRules(),
              weights: np.ndarray | None = None) -> TailTestResult | None:
    """Run the test on latency samples (scheduled time epoch ns, latency ms); None with too few samples.

    ``window_ns`` is the display window; the detection window is a whole multiple of it
    (:func:`detection_window_ns`). ``weights`` (non-negative integers, or None: one each)
    says how many samples each element stands for: a histogram bucket of one window is
    one element weighted by its count (its time must then place it in a single detection
    window: the window's start, on a grid the detection windows are whole multiples of).
    """
    total = len(latency_ms) if weights is None else int(weights.sum())
    if too_short(total, end_ns - origin_ns, rules) is not None:
        return None
    det_ns = detection_window_ns(total, end_ns - origin_ns, window_ns, rules)
    m = max(1, int(-(-(end_ns - origin_ns) // det_ns)))
    index = np.clip((scheduled_ns - origin_ns) // det_ns, 0, m - 1)
    excluded = outlying_windows(index, latency_ms, m, rules, weights)
    edges = excluded | np.concatenate(([False], excluded[:-1])) | np.concatenate((excluded[1:], [False]))
    if _baseline(latency_ms, ~edges[index], rules, weights) is not None:
        excluded = edges  # an incident's first and last windows hold some of it, below the screen's limits
    elif _baseline(latency_ms, ~excluded[index], rules, weights) is None:
        excluded[:] = False  # the screen left too little to stand for quiet time (it flags nothing itself)
    iterations = 0
    while True:
        iterations += 1
        clean = ~excluded[index]
        tau, q, quiet, beta = _baseline(latency_ms, clean, rules, weights)
        flagged, n, k, p_unit, tests = _flag_once(index, latency_ms, m, tau, q, beta, rules, weights, clean)
        # a window once outlying or flagged stays out of τ, so τ only falls and the iteration settles
        grown = excluded | flagged
        if (np.array_equal(grown, excluded) or iterations >= rules.max_iterations
                or _baseline(latency_ms, ~grown[index], rules, weights) is None):
            break
        excluded = grown
    quiet_median = _baseline_threshold(latency_ms, ~excluded[index], 0.5, weights)
    is_raised = latency_ms > quiet_median * (1.0 + rules.min_relative_excess)
    raised = _count(index[is_raised], m, weights[is_raised] if weights is not None else None)
    return TailTestResult(origin_ns, det_ns, n, k, p_unit, flagged, tau, beta[0] / (beta[0] + beta[1]), tests,
                          iterations, q, quiet, beta, raised)


def merge_runs(flagged: np.ndarray, merge_gap: int) -> list[tuple[int, int]]:
    """[(first, last)] window indices of flagged runs, joining gaps of at most ``merge_gap`` windows."""
    index = np.flatnonzero(flagged)
    if len(index) == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) > merge_gap + 1)
    firsts = np.concatenate(([index[0]], index[breaks + 1]))
    lasts = np.concatenate((index[breaks], [index[-1]]))
    return list(zip(firsts.tolist(), lasts.tolist()))
