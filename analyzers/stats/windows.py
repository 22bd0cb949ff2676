"""Per-window latency percentiles (default 1 s windows).

A request belongs to the window of its *scheduled* send time, so a stall
shows up where the affected requests were meant to start. Window i covers
``[origin + i·window, origin + (i+1)·window)`` epoch ns. Percentiles are
nearest-rank over the window's latency samples (``RequestArrays.in_latency``)
and are only *printed when claimed*: a window with fewer samples than the
early-stopping rule needs (7 for P50, 44 for P90, 459 for P99, 4,603 for
P99.9) has that percentile set to NaN (null in JSON) and listed in
``too_few_samples`` instead of a number that would really be its maximum.
``max_ms`` (a measured value) is always given. ``slow_share`` is the share of
the window's latency samples above ``slow_threshold_ms`` (the run's P99).
Cost: one O(n log n) lexsort; memory O(n + windows).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.records import Window
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.percentiles import grouped_quantile, min_samples_for_claim, stable_group_order


def window_index(times_ns: np.ndarray, origin_ns: int, window_ns: int) -> np.ndarray:
    """Index of the window of each time (int64)."""
    return (times_ns - origin_ns) // window_ns


def window_table(req: RequestArrays, origin_ns: int, end_ns: int, window_s: float = 1.0,
                 slow_threshold_ms: float | None = None) -> dict[str, np.ndarray]:
    """Columns (numpy arrays, one entry per window) of the windowed statistics."""
    window_ns = max(1, int(round(window_s * NS_PER_S)))
    n_windows = max(1, int(-(-(end_ns - origin_ns) // window_ns))) if req.n else 0
    index = window_index(req.scheduled_ns, origin_ns, window_ns).clip(0, max(n_windows - 1, 0))
    counts_all = np.bincount(index, minlength=n_windows)
    errors = np.bincount(index[req.is_error], minlength=n_windows)
    ok_index = index[req.in_latency]
    ok_latency = req.latency_ms[req.in_latency]
    rows = req.latency_rows(req.in_latency)
    sorted_latency = req.latency_ms[rows[stable_group_order(index[rows])]]  # by (window, latency)
    ok_counts = np.bincount(ok_index, minlength=n_windows)
    starts = np.concatenate(([0], np.cumsum(ok_counts)[:-1])) if n_windows else np.zeros(0, np.int64)
    slow = (np.bincount(ok_index[ok_latency > slow_threshold_ms], minlength=n_windows)
            if slow_threshold_ms is not None else np.zeros(n_windows, np.int64))
    start_ns = origin_ns + np.arange(n_windows, dtype=np.int64) * window_ns
    with np.errstate(invalid="ignore", divide="ignore"):
        slow_share = np.where(ok_counts > 0, slow / np.maximum(ok_counts, 1), np.nan)
    return {
        "start_ns": start_ns,
        "end_ns": start_ns + window_ns,
        "count": counts_all,
        "ok": ok_counts,
        "errors": errors,
        **claimed_quantiles(sorted_latency, starts, ok_counts),
        "max_ms": grouped_quantile(sorted_latency, starts, ok_counts, 1.0),
        "slow_share": slow_share,
    }


#: Window percentiles: (column prefix, fraction).
WINDOW_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999))


def claimed_quantiles(sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    """``{pXX_ms, pXX_claimed}`` per window: the quantile where claimed (early stopping), else NaN."""
    out = {}
    for name, p in WINDOW_PERCENTILES:
        claimed = counts >= min_samples_for_claim(p, 0)
        values = grouped_quantile(sorted_values, starts, counts, p)
        out[f"{name}_ms"] = np.where(claimed, values, np.nan)
        out[f"{name}_claimed"] = claimed
    return out


def windows_as_records(table: dict[str, np.ndarray]) -> list[Window]:
    """The window table as the analysis's :class:`~tailscope.analysis_model.records.Window` records
    (NaN → None)."""
    def number(x):
        return None if x != x else float(x)

    return [
        Window(
            start_ns=int(table["start_ns"][i]),
            end_ns=int(table["end_ns"][i]),
            count=int(table["count"][i]),
            errors=int(table["errors"][i]),
            n=int(table["ok"][i]),
            p50_ms=number(table["p50_ms"][i]),
            p90_ms=number(table["p90_ms"][i]),
            p99_ms=number(table["p99_ms"][i]),
            p999_ms=number(table["p999_ms"][i]),
            p99_claimed=bool(table["p99_claimed"][i]),
            too_few_samples=tuple(name for name, _ in WINDOW_PERCENTILES
                                  if table["ok"][i] > 0 and not table[f"{name}_claimed"][i]),
            max_ms=number(table["max_ms"][i]),
            slow_share=number(table["slow_share"][i]),
        )
        for i in range(len(table["start_ns"]))
    ]
