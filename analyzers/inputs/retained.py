"""Run numbers from the per-window histograms (``windows.arrow``) of a retained run.

A run with a ``retention`` policy keeps full per-request records only around
spikes and a sample elsewhere, so percentiles over its records would be biased
towards the spikes. Its counts, rates, error kinds, latency / service-time /
lateness percentiles, per-class summaries, per-window P50/P99, each spike's P99 and
request count (:meth:`RetainedView.spike_window`), the latency distribution, the count of
requests above the P99 (:meth:`RetainedView.count_above`) and, when every per-request SLO is a
latency one, goodput (:meth:`RetainedView.goodput`) are therefore
computed here from the histograms the harness wrote for *every* request
(``tailscope.rundir.histograms``: log buckets 2 % wide, values within ±1 %),
and spike detection reads them too (:meth:`RetainedView.latency_samples`:
a sampled window's few records are no evidence of its slow share).
The records still serve what needs them: spike decomposition (full around
spikes), stage statistics and trace joins (sampled).

Percentile confidence intervals and the early-stopping claim use the same
order-statistic ranks as :mod:`.percentiles`, read from the histogram.
Windows: the analysis window must be a whole multiple of the harness's window
(``retention.window``, default 1 s); others are rounded to the nearest one.
Cost: O(rows × non-empty buckets); memory: one dense histogram per analysis
window (9.6 kB each).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.health import Retention
from tailscope.analysis_model.percentiles import PercentileSet
from tailscope.analysis_model.records import Distribution
from tailscope.analysis_model.summary import Goodput, GoodputShare, Lateness, RequestSummary
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays
from tailscope.analyzers.stats.distribution import ALL_CLASSES, bin_counts, bin_edges_ms, distribution_section
from tailscope.analyzers.stats.goodput import per_request_slos
from tailscope.analyzers.stats.percentiles import (
    STANDARD_PERCENTILES,
    as_percentile_set,
    min_samples_for_claim,
    percentile_ci,
    weighted_grouped_quantiles,
)
from tailscope.analyzers.stats.slo import OPERATORS, PERCENTILE_METRICS
from tailscope.analyzers.stats.summary import GENERATOR_LIMITED_SHARE, top_errors
from tailscope.analyzers.stats.windows import WINDOW_PERCENTILES
from tailscope.rundir import Run
from tailscope.rundir import histograms as hist
from tailscope.rundir.retention_policy import load_retention
from tailscope.rundir.schema import ERROR_KINDS


@dataclass
class RetainedView:
    """Histogram-based replacements for the record-based analysis parts."""

    period: tuple[int, int]
    #: Every request's summary, and each class's (from the histograms; percentiles ±1 %).
    summary: RequestSummary
    classes: dict[str, RequestSummary]
    windows: dict[str, np.ndarray]
    #: The analysis's ``retention`` section.
    retention: Retention
    table: dict  # the windows.arrow columns, histograms flattened
    #: The ``distribution`` section from the latency histograms (:func:`histogram_distribution`).
    distribution: Distribution

    def period_counts(self, origin_ns: int, period_ns: int, n: int) -> dict:
        """Per period: requests, errors, ok and P50/P99 (ms) merged from the histograms."""
        return histogram_period_counts(self.table, origin_ns, period_ns, n)

    def latency_samples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every successful request's latency as weighted samples, one per non-empty
        histogram bucket of each harness window: (the window's start, epoch ns; the
        bucket's value, ms, ±1 %; its count). Unlike the records, these count every
        request of every window, so a window's share of slow requests is exact."""
        latency = self.table["latency"]
        return self.table["start_ns"][latency.row], hist.bucket_value_ms(latency.bucket), latency.count

    def spike_window(self, lo_ns: int, hi_ns: int) -> tuple[SortedHistogramView, int]:
        """The harness windows that start in [``lo_ns``, ``hi_ns``) (epoch ns): their successful
        requests' latencies as one ascending sample (:class:`SortedHistogramView`, ms, ±1 %) and
        how many requests were sent in them (errors included). Exact counts whatever was kept:
        a spike's percentiles come from here, not from its (possibly absent) records."""
        rows = (self.table["start_ns"] >= lo_ns) & (self.table["start_ns"] < hi_ns)
        return SortedHistogramView(self.table["latency"].dense(rows)), int(self.table["requests"][rows].sum())

    def count_above(self, threshold_ms: float | None) -> int | None:
        """Successful requests whose latency bucket lies above ``threshold_ms`` (the window table's
        slow rule); None without a threshold."""
        if threshold_ms is None:
            return None
        latency = self.table["latency"]
        return int(latency.count[latency.bucket > hist.bucket_of(int(threshold_ms * 1e6))].sum())

    def goodput(self, slos: list, from_records: Goodput) -> Goodput:
        """``summary.goodput`` over every request, from the latency histograms, when every
        per-request SLO is a latency one (``p99 < 250ms``, ``e2e p99 < 8s``): a request is good when
        it succeeded and its latency bucket's value (±1 %) meets each SLO that applies to its class
        (``from_records``' criteria and definition kept). Per-token SLOs (TTFT, ITL, TPOT) need the
        records: then ``from_records`` (the kept records' goodput, :func:`.goodput.goodput_summary`)
        is returned as it is."""
        chosen = per_request_slos(slos)
        if any(s.metric not in PERCENTILE_METRICS and not s.metric.startswith("e2e_") for s in chosen):
            return from_records
        latency, table = self.table["latency"], self.table
        values, cls = hist.bucket_value_ms(latency.bucket), table["cls"][latency.row]
        by_class, good_all, total_all = {}, 0, 0
        for name in sorted({c for c in table["cls"] if c is not None}):
            met = cls == name
            for slo in chosen:
                if slo.cls is None or slo.cls == name:
                    met &= OPERATORS[slo.op](values, slo.threshold)
            good, total = int(latency.count[met].sum()), int(table["requests"][table["cls"] == name].sum())
            by_class[str(name)] = GoodputShare(share=good / total if total else None, good=good, total=total)
            good_all, total_all = good_all + good, total_all + total
        duration_s = self.duration_s
        return replace(from_records, share=good_all / total_all if total_all else None, good=good_all,
                       total=total_all, rps=good_all / duration_s if duration_s > 0 else None, by_class=by_class)

    @property
    def duration_s(self) -> float:
        return (self.period[1] - self.period[0]) / NS_PER_S


class SortedHistogramView:
    """A histogram seen as its ascending sample: ``len()`` is the count and item ``k``
    (0-based) the value (ms) of rank k+1 — so the order-statistic functions of
    :mod:`.percentiles` apply unchanged, in O(buckets) memory."""

    def __init__(self, dense: np.ndarray):
        self._cumulative = np.cumsum(dense)
        self._n = int(self._cumulative[-1]) if len(self._cumulative) else 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k: int) -> float:
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        return float(hist.bucket_value_ms(int(np.searchsorted(self._cumulative, k + 1, side="left"))))


def histogram_percentile(dense: np.ndarray, p: float) -> dict:
    """One percentile entry (as :func:`.percentiles.percentile_ci`) from a histogram."""
    return percentile_ci(SortedHistogramView(dense), p)


def histogram_percentile_set(dense: np.ndarray) -> PercentileSet:
    """The percentile set of :func:`.percentiles.typed_percentile_set` (ms), from a histogram."""
    view = SortedHistogramView(dense)
    result = {name: percentile_ci(view, p) for name, p in STANDARD_PERCENTILES}
    result["max"] = {"value_ms": view[len(view) - 1] if len(view) else None, "n": len(view)}
    return as_percentile_set(result)


@dataclass
class _Flat:
    """One histogram column of the windows table, flattened: an element per
    (row, bucket) with its row index, bucket and count (numpy int64 arrays)."""

    row: np.ndarray
    bucket: np.ndarray
    count: np.ndarray

    def dense(self, rows: np.ndarray) -> np.ndarray:
        """The merged histogram of the rows selected by a boolean mask."""
        chosen = rows[self.row]
        return np.bincount(self.bucket[chosen], weights=self.count[chosen],
                           minlength=hist.BUCKETS).astype(np.int64)


def _flat(windows: pa.Table, prefix: str) -> _Flat:
    buckets, counts = windows.column(f"{prefix}_bucket"), windows.column(f"{prefix}_count")
    bucket = pc.list_flatten(buckets).to_numpy(zero_copy_only=False).astype(np.int64)
    count = pc.list_flatten(counts).to_numpy(zero_copy_only=False).astype(np.int64)
    row = pc.list_parent_indices(buckets).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(bucket) != len(count):
        from tailscope.rundir import RunDirError

        raise RunDirError(f"windows.arrow: {prefix} histogram has {len(bucket)} buckets "
                          f"but {len(count)} counts")
    return _Flat(row, np.clip(bucket, 0, hist.BUCKETS - 1), count)


def grouped_quantiles_ms(group: np.ndarray, bucket: np.ndarray, count: np.ndarray,
                         n_groups: int, qs: tuple[float, ...]) -> dict[float, np.ndarray]:
    """Nearest-rank quantiles (ms) of many histograms given as (group, bucket, count)
    elements, without dense arrays (:func:`.percentiles.weighted_grouped_quantiles`):
    O(elements log elements). Empty groups give NaN."""
    return weighted_grouped_quantiles(group, hist.bucket_value_ms(bucket), count, n_groups, qs)


def _summary(table: dict, mask: np.ndarray, duration_s: float, req: RequestArrays,
             class_name: str | None) -> RequestSummary:
    """The summary (as :func:`.summary.summarize`'s) of the chosen rows, from their histograms;
    the error messages from the kept records (every error is kept)."""
    requests = int(table["requests"][mask].sum())
    ok = int(table["ok"][mask].sum())
    errors = int(table["errors"][mask].sum())
    by_kind = {kind: int(table[f"err_{kind}"][mask].sum()) for kind in ERROR_KINDS}
    lateness = table["lateness"].dense(mask)
    sent = int(lateness.sum())
    late = int(table["late"][mask].sum())
    late_share = late / requests if requests else 0.0
    chosen = req.is_error if class_name is None else req.is_error & req.class_mask(class_name)
    messages = Counter(m if m is not None else "" for m in req.error[chosen])
    per_second = (lambda count: count / duration_s) if duration_s > 0 else (lambda count: None)
    return RequestSummary(
        requests=requests,
        completed=ok,
        errors=errors,
        error_rate=errors / requests if requests else 0.0,
        errors_by_kind={k: v for k, v in sorted(by_kind.items()) if v},
        top_errors=top_errors(messages),
        duration_s=duration_s,
        offered_rps=per_second(requests),
        achieved_rps=per_second(ok),
        latency_ms=histogram_percentile_set(table["latency"].dense(mask)),
        service_time_ms=histogram_percentile_set(table["service"].dense(mask)),
        lateness_ms=Lateness(
            p50_ms=hist.quantile_ms(lateness, 0.5) if sent else None,
            p99_ms=hist.quantile_ms(lateness, 0.99) if sent else None,
            late_share=late_share,
            generator_limited=late_share > GENERATOR_LIMITED_SHARE,
        ),
    )


def _columns(windows: pa.Table) -> dict:
    table = {name: pc.fill_null(windows.column(name), 0).to_numpy()
             for name in ("start_ns", "end_ns", "requests", "ok", "errors", "late", "kept")}
    for kind in ERROR_KINDS:
        table[f"err_{kind}"] = pc.fill_null(windows.column(f"err_{kind}"), 0).to_numpy()
    table["cls"] = windows.column("cls").to_numpy(zero_copy_only=False)
    for prefix in ("latency", "service", "lateness"):
        table[prefix] = _flat(windows, prefix)
    return table


def _window_table(table: dict, origin_ns: int, end_ns: int, window_ns: int,
                  slow_threshold_ms: float | None) -> dict[str, np.ndarray]:
    """Per analysis window: the same columns as :func:`.windows.window_table`."""
    n = max(1, int(-(-(end_ns - origin_ns) // window_ns)))
    row_window = np.clip((table["start_ns"] - origin_ns) // window_ns, 0, n - 1)
    latency = table["latency"]
    group = row_window[latency.row]
    ok = np.bincount(group, weights=latency.count, minlength=n).astype(np.int64)
    if slow_threshold_ms is not None:
        above = latency.bucket > hist.bucket_of(int(slow_threshold_ms * 1e6))
        slow = np.bincount(group[above], weights=latency.count[above], minlength=n)
    else:
        slow = np.zeros(n)
    fractions = tuple(p for _, p in WINDOW_PERCENTILES) + (1.0,)
    quantiles = grouped_quantiles_ms(group, latency.bucket, latency.count, n, fractions)
    claimed = {}
    for name, p in WINDOW_PERCENTILES:  # the same claim rule as the record-based window table
        enough = ok >= min_samples_for_claim(p, 0)
        claimed[f"{name}_ms"] = np.where(enough, quantiles[p], np.nan)
        claimed[f"{name}_claimed"] = enough
    start = origin_ns + np.arange(n, dtype=np.int64) * window_ns
    with np.errstate(invalid="ignore", divide="ignore"):
        slow_share = np.where(ok > 0, slow / np.maximum(ok, 1), np.nan)
    return {
        "start_ns": start,
        "end_ns": start + window_ns,
        "count": np.bincount(row_window, weights=table["requests"], minlength=n).astype(np.int64),
        "ok": ok,
        "errors": np.bincount(row_window, weights=table["errors"], minlength=n).astype(np.int64),
        **claimed,
        "max_ms": quantiles[1.0],
        "slow_share": slow_share,
    }


def histogram_distribution(table: dict) -> Distribution:
    """The ``distribution`` section (as :func:`.distribution.latency_distribution`) from the
    latency histograms of every successful request: each bucket's value (±1 %) binned on the fixed
    grid with its count, per class and for all. A value within 1 % of a grid edge may land in the
    neighbouring bin (bins are 12 % wide)."""
    latency = table["latency"]
    edges = bin_edges_ms()
    values = hist.bucket_value_ms(latency.bucket)
    full = {ALL_CLASSES: bin_counts(values, edges, latency.count)}
    cls = table["cls"][latency.row]
    for name in sorted({c for c in table["cls"] if c is not None}):
        chosen = cls == name
        if latency.count[chosen].sum() > 0:
            full[str(name)] = bin_counts(values[chosen], edges, latency.count[chosen])
    return distribution_section(full, edges)


def histogram_period_counts(table: dict, origin_ns: int, period_ns: int, n: int) -> dict:
    """Per period of ``period_ns`` from ``origin_ns``: requests, errors, ok, P50/P99 (ms)."""
    row_period = np.clip((table["start_ns"] - origin_ns) // period_ns, 0, n - 1)
    latency = table["latency"]
    group = row_period[latency.row]
    quantiles = grouped_quantiles_ms(group, latency.bucket, latency.count, n, (0.5, 0.99))
    return {"requests": np.bincount(row_period, weights=table["requests"], minlength=n),
            "errors": np.bincount(row_period, weights=table["errors"], minlength=n),
            "ok": np.bincount(group, weights=latency.count, minlength=n),
            "p50_ms": quantiles[0.5], "p99_ms": quantiles[0.99]}


def retained_view(run: Run, req: RequestArrays, window_s: float) -> RetainedView | None:
    """The histogram-based view of a run whose records were retained selectively;
    None for a run that kept every record (or has no windows.arrow)."""
    state = load_retention(run.path)
    windows = run.windows
    if state is None or windows is None or len(windows) == 0:
        return None
    table = _columns(windows)
    harness_window_ns = int(table["end_ns"][0] - table["start_ns"][0])
    window_ns = max(1, round(window_s * NS_PER_S / harness_window_ns)) * harness_window_ns
    origin, end = int(table["start_ns"].min()), int(table["end_ns"].max())
    everything = np.ones(len(table["start_ns"]), dtype=bool)
    summary = _summary(table, everything, (end - origin) / NS_PER_S, req, None)
    duration_s = (end - origin) / NS_PER_S
    classes = {str(name): _summary(table, table["cls"] == name, duration_s, req, str(name))
               for name in sorted({c for c in table["cls"] if c is not None})}
    requests = int(table["requests"].sum())
    kept = int(table["kept"].sum())
    return RetainedView(
        period=(origin, end),
        summary=summary,
        classes=classes,
        windows=_window_table(table, origin, end, window_ns, summary.latency_ms.p99.value_ms),
        retention=Retention(
            sampled=True,
            requests=requests,
            records_kept=int(req.n),
            records_kept_counted=kept,
            kept_share=req.n / requests if requests else 0.0,
            sample_rate=state.sample_rate,
            configured_sample_rate=state.configured_sample_rate,
            full_records_around_spikes_s=state.full_records_around_spikes_s,
            keep_intervals=[[int(lo), int(hi)] for lo, hi in state.keep],
            disk_budget_bytes=state.disk_budget_bytes,
            window_s=window_ns / NS_PER_S,
        ),
        table=table,
        distribution=histogram_distribution(table),
    )
