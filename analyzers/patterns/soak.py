"""The soak view: per-period summaries (hourly for long runs) with drift and leak verdicts.

Shown only for runs of at least ``SOAK_VIEW_MIN_S`` (10 minutes) or with
``retention:`` (a run planned as a soak); a shorter run's section is empty
(``shown`` false, ``reason`` says why). Slopes are stated per hour only from
at least ``PER_HOUR_MIN_SPAN_S`` of data (:mod:`.trends`); a shorter series
states its change over the run in MB (ms for latency).

Periods: one hour for runs of at least ``HOURLY_FROM_S`` (3 h); shorter runs
are cut into about ``TARGET_PERIODS`` periods of a round length (10 s … 30
min), so a 2-minute CI run still shows the trend. Each period has its
requests, errors, achieved rate, P50/P99 latency (from the per-window
histograms when the run retained records selectively, else from the
records), and the mean/max resident memory of the target (``proc.rss_bytes``)
and of tailscope's own processes (``harness.rss_bytes``, ``receiver.rss_bytes``,
``sampler.rss_bytes``).

Verdicts (when the diagnosis detectors' ``patterns`` are not in the analysis):

* **drift** — per-window P50 and P99 (windows with >= ``MIN_WINDOW_REQUESTS``
  successful requests), reduced to at most ``MAX_POINTS`` medians of equal
  time bins; Theil–Sen slope (robust to spikes) and Kendall's tau against time.
  ``drift`` when p < ``ALPHA`` and the fitted change over the run is at least
  ``DRIFT_MIN_SHARE`` of the median and ``DRIFT_MIN_MS``; ``stable`` otherwise;
  ``insufficient data`` with fewer than ``MIN_POINTS`` points.
* **leak** — the same test on each memory series: ``leak`` when p < ``ALPHA``,
  the slope is positive and the fitted growth over the run is at least
  ``LEAK_MIN_SHARE`` of the starting value and ``LEAK_MIN_BYTES``; ``growing``
  when significant and rising but smaller (the summary says so), ``flat`` only
  without a significant rise (:func:`~.trends.call_trend`).

Cost: O(windows + signal rows) plus Theil–Sen on <= 240 points.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.health import Soak, SoakPeriod
from tailscope.analysis_model.patterns import Patterns
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays, int_column
from tailscope.analyzers.patterns.trends import PER_HOUR_MIN_SPAN_S, call_trend
from tailscope.analyzers.stats.percentiles import grouped_quantile, min_samples_for_claim, stable_group_order

HOURLY_FROM_S = 3 * 3600
TARGET_PERIODS = 12
ROUND_PERIODS_S = (10, 15, 30, 60, 120, 300, 600, 900, 1800)
MIN_WINDOW_REQUESTS = 20
MAX_POINTS = 240
MIN_POINTS = 8
ALPHA = 0.01
DRIFT_MIN_SHARE = 0.10
DRIFT_MIN_MS = 1.0
LEAK_MIN_SHARE = 0.05
LEAK_MIN_BYTES = 16 * 2**20
MEMORY_SERIES = ("proc.rss_bytes", "harness.rss_bytes", "receiver.rss_bytes", "sampler.rss_bytes")
#: Shortest load period (s) that gets the soak view without ``retention:``.
SOAK_VIEW_MIN_S = 600.0


def period_length_s(duration_s: float) -> int:
    """Length of one soak period, seconds (see module docstring)."""
    if duration_s >= HOURLY_FROM_S:
        return 3600
    wanted = duration_s / TARGET_PERIODS
    return next((p for p in ROUND_PERIODS_S if p >= wanted), ROUND_PERIODS_S[-1])


def _series(signals: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(t_ns, value) of one signal series, time-ordered."""
    if signals is None or len(signals) == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    rows = signals.filter(pc.equal(signals.column("series"), name))
    t_ns, _ = int_column(rows, "t_ns")
    values = pc.fill_null(rows.column("value"), np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    order = np.argsort(t_ns, kind="stable")
    return t_ns[order], values[order]


def _memory_cells(series: dict, lo: int, hi: int) -> dict:
    cells = {}
    for name, (t_ns, values) in series.items():
        inside = values[(t_ns >= lo) & (t_ns < hi) & ~np.isnan(values)]
        key = name.replace(".rss_bytes", "").replace("proc", "target")
        cells[f"{key}_rss_mean_mb"] = float(inside.mean() / 2**20) if len(inside) else None
        cells[f"{key}_rss_max_mb"] = float(inside.max() / 2**20) if len(inside) else None
    return cells


def record_period_counts(req: RequestArrays, origin_ns: int, period_ns: int, n: int) -> dict:
    """Per period (by scheduled time): requests, errors, ok, P50 and P99 latency (ms) from records."""
    index = np.clip((req.scheduled_ns - origin_ns) // period_ns, 0, n - 1)
    ok_index = index[req.is_ok]
    rows = req.latency_rows(req.is_ok)
    ordered = req.latency_ms[rows[stable_group_order(index[rows])]]  # by (period, latency)
    ok = np.bincount(ok_index, minlength=n)
    starts = np.concatenate(([0], np.cumsum(ok)[:-1]))
    return {"requests": np.bincount(index, minlength=n), "errors": np.bincount(index[req.is_error], minlength=n),
            "ok": ok, "p50_ms": grouped_quantile(ordered, starts, ok, 0.50),
            "p99_ms": grouped_quantile(ordered, starts, ok, 0.99)}


def period_rows(counts: dict, period: tuple[int, int], period_s: int, memory: dict) -> list[SoakPeriod]:
    """One row per period from per-period ``counts`` (see :func:`record_period_counts`)."""
    origin, end = period
    period_ns = period_s * NS_PER_S
    rows = []
    for i in range(len(counts["requests"])):
        lo = origin + i * period_ns
        hi = min(lo + period_ns, end)
        span_s = max((hi - lo) / NS_PER_S, 1e-9)
        requests, errors, ok = (int(counts[k][i]) for k in ("requests", "errors", "ok"))
        p50, p99 = float(counts["p50_ms"][i]), float(counts["p99_ms"][i])
        rows.append(SoakPeriod(
            start_ns=int(lo), end_ns=int(hi), requests=requests, errors=errors,
            error_rate=errors / requests if requests else 0.0,
            achieved_rps=ok / span_s,
            p50_ms=None if math.isnan(p50) else p50,
            p99_ms=None if math.isnan(p99) else p99,
            p99_claimed=ok >= min_samples_for_claim(0.99, 0),
            **_memory_cells(memory, lo, hi),
        ))
    return rows


def period_count(period: tuple[int, int], period_s: int) -> int:
    """Number of periods covering ``period`` (epoch ns)."""
    return max(1, int(math.ceil((period[1] - period[0]) / (period_s * NS_PER_S))))


def _binned(t_ns: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_POINTS (hours since start, median value) points of equal time bins."""
    keep = ~np.isnan(values)
    t_ns, values = t_ns[keep], values[keep]
    if len(t_ns) == 0:
        return np.zeros(0), np.zeros(0)
    span = max(int(t_ns[-1] - t_ns[0]), 1)
    bins = np.minimum(((t_ns - t_ns[0]) * MAX_POINTS) // span, MAX_POINTS - 1)
    hours, medians = [], []
    for b in np.unique(bins):
        chosen = bins == b
        hours.append(float(np.median(t_ns[chosen] - t_ns[0])) / 3600e9)
        medians.append(float(np.median(values[chosen])))
    return np.array(hours), np.array(medians)


def trend(t_ns: np.ndarray, values: np.ndarray) -> dict | None:
    """Theil–Sen slope per hour, fitted change over the span, Kendall p-value; None if too few points."""
    hours, medians = _binned(np.asarray(t_ns), np.asarray(values, dtype=np.float64))
    if len(hours) < MIN_POINTS or hours[-1] <= 0:
        return None
    slope, intercept, low, high = stats.theilslopes(medians, hours)
    tau, p_value = stats.kendalltau(hours, medians)
    return {"slope_per_h": float(slope), "slope_ci_per_h": [float(low), float(high)],
            "span_s": float(hours[-1] * 3600), "per_hour": bool(hours[-1] * 3600 >= PER_HOUR_MIN_SPAN_S),
            "start": float(intercept), "change": float(slope * hours[-1]),
            "median": float(np.median(medians)), "kendall_tau": float(tau) if tau == tau else 0.0,
            "p_value": float(p_value) if p_value == p_value else 1.0, "points": int(len(hours))}


def drift_verdict(windows: dict) -> dict:
    """Latency drift over the run from the per-window P50 and P99 (ms per hour)."""
    eligible = windows["ok"] >= MIN_WINDOW_REQUESTS
    mid = (windows["start_ns"] + windows["end_ns"]) // 2
    result = {"verdict": "insufficient data", "metrics": {}}
    drifting = []
    for key in ("p50_ms", "p99_ms"):
        fit = trend(mid[eligible], windows[key][eligible])
        if fit is None:
            continue
        moved = abs(fit["change"]) >= max(DRIFT_MIN_SHARE * fit["median"], DRIFT_MIN_MS)
        verdict = "drift" if fit["p_value"] < ALPHA and moved else "stable"
        result["metrics"][key] = {**fit, "verdict": verdict}
        if verdict == "drift":
            rate = f"{fit['slope_per_h']:+.2f} ms/h, " if fit["per_hour"] else ""
            drifting.append(f"latency {key[:3].upper()} {fit['change']:+.1f} ms over the run "
                            f"({rate}p={fit['p_value']:.1g})")
    if result["metrics"]:
        result["verdict"] = "drift" if drifting else "stable"
    result["summary"] = ("latency drifted: " + "; ".join(drifting)) if drifting else (
        "no significant latency drift" if result["metrics"] else "too few busy windows to test drift")
    return result


def leak_verdict(memory: dict) -> dict:
    """Memory growth of the target and of tailscope's processes (MB per hour)."""
    result = {"verdict": "insufficient data", "series": {}}
    leaking = []
    for name, (t_ns, values) in memory.items():
        fit = trend(t_ns, values)
        if fit is None:
            continue
        mb = 2**20
        needed = max(LEAK_MIN_SHARE * max(fit["start"], 0.0), LEAK_MIN_BYTES)
        shortfalls = [] if fit["change"] >= needed else [f"growth below the {needed / mb:.0f} MB a leak needs"]
        verdict, note = call_trend(fit["p_value"] < ALPHA and fit["slope_per_h"] > 0, shortfalls,
                                   "leak", "growing", "flat")
        result["series"][name] = {"verdict": verdict,
                                  "slope_mb_per_h": fit["slope_per_h"] / mb if fit["per_hour"] else None,
                                  "growth_mb": fit["change"] / mb, "start_mb": fit["start"] / mb,
                                  "p_value": fit["p_value"], "points": fit["points"]}
        if verdict != "flat":
            rate = f"{fit['slope_per_h'] / mb:+.1f} MB/h, " if fit["per_hour"] else ""
            leaking.append((verdict, f"{name} {fit['change'] / mb:+.0f} MB over the run "
                                     f"({rate}p = {fit['p_value']:.2g})"
                                     + (f": {note}" if note else "")))
    if result["series"]:
        verdicts = {verdict for verdict, _ in leaking}
        result["verdict"] = "leak" if "leak" in verdicts else ("growing" if verdicts else "flat")
    result["summary"] = ("memory grew: " + "; ".join(text for _, text in leaking)) if leaking else (
        "no significant memory growth" if result["series"] else "no memory series to test")
    return result


def soak_section(windows: dict | None, signals: pa.Table, period: tuple[int, int] | None,
                 period_counts, patterns: Patterns | None = None, retained: bool = False) -> Soak:
    """The ``soak`` part of the analysis (see module docstring). ``period_counts(origin_ns,
    period_ns, n)`` gives the per-period counts and percentiles (records or histograms);
    ``patterns``: the diagnosis detectors' (:func:`.trends.analyze_patterns`), whose drift and leak
    verdicts the view then shows (None: its own tests'); ``retained``: the run kept records
    selectively (``retention:``), which shows the view whatever its length."""
    def empty(reason: str) -> Soak:
        return Soak(period_s=None, periods=[], drift=None, leak=None, verdicts_source=None, shown=False,
                    reason=reason)
    if period is None or windows is None:
        return empty("no load period")
    duration_s = (period[1] - period[0]) / NS_PER_S
    if duration_s < SOAK_VIEW_MIN_S and not retained:
        return empty(f"the run lasted {duration_s / 60:.1f} min: the soak view is for runs of at "
                     f"least {SOAK_VIEW_MIN_S / 60:.0f} min or with retention:")
    period_s = period_length_s(duration_s)
    memory = {name: _series(signals, name) for name in MEMORY_SERIES}
    memory = {name: series for name, series in memory.items() if len(series[0])}
    counts = period_counts(period[0], period_s * NS_PER_S, period_count(period, period_s))
    return Soak(
        period_s=period_s,
        periods=period_rows(counts, period, period_s, memory),
        drift=encode(patterns.drift) if patterns is not None else drift_verdict(windows),
        leak=encode(patterns.leak) if patterns is not None else leak_verdict(memory),
        verdicts_source="patterns" if patterns is not None else "soak",
        shown=True,
        reason=None,
    )
