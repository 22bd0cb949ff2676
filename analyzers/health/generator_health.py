"""The generator's own health: load model, achieved vs offered rate, lateness,
CPU, GC pauses and run-queue wait, per window; which windows it limited.

Pure numpy over the run directory's tables. Per window (the analysis windows,
by *scheduled* time for counts, by end time for completions):

- ``offered_rps``: requests scheduled in the window ÷ window length;
- ``sent_rps``: of those, requests that were sent;
- ``achieved_rps``: requests that ended without error in the window ÷ length;
- ``late_share``, ``lateness_p99_ms``: sends more than 1 ms after their
  scheduled time (perf_analyzer's rule), and the P99 of lateness;
- ``cpu_percent``, ``runqueue_wait_ms``, ``in_flight``: the generator's own
  gauges (``signals.generator.arrow``), mean of the readings in the window;
- ``gc_pause_ms``: the generator's GC pauses (``generator_gc`` events) that
  started in the window, summed.

Several generator processes (a distributed run's workers write
``generator.cpu_percent{worker="i"}`` etc.): per window, ``cpu_percent`` and
``runqueue_wait_ms`` are the busiest process's (each process is one event
loop, so one saturated worker limits its share of the schedule), ``in_flight``
the sum over processes, ``gc_pause_ms`` the sum of every process's pauses;
``processes`` lists each process's own CPU, run-queue wait and GC totals.

A window is **generator-limited** when more than 1% of its sends were late;
adjacent ones merge into intervals, each with its likely cause: ``cpu_contention``
(the event loop waited for a CPU ≥ 5 ms in a window: other processes),
``generator_cpu`` (≥ 90% of a core), ``gc`` (≥ 5 ms of pauses), ``in_flight_cap``
(the cap was full: requests waited for a slot), else ``unknown``. The run is
generator-limited by the same rule over all sends. Cost: O(n log n) for the
per-window lateness quantiles; memory O(n + windows).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pyarrow.compute as pc

from tailscope.analysis_model.health import (
    Generator,
    GeneratorCpu,
    GeneratorGc,
    GeneratorProcess,
    GeneratorWindow,
    LimitedCause,
    LimitedInterval,
)
from tailscope.analyzers.inputs.records import NS_PER_MS, NS_PER_S, RequestArrays, int_column
from tailscope.analyzers.stats.percentiles import group_sort, grouped_quantile
from tailscope.support.units import LATE_THRESHOLD_MS

#: Share of late sends above which a window (or the run) is generator-limited.
LIMITED_SHARE = 0.01
#: Thresholds that name the cause of a generator-limited interval.
CONTENTION_WAIT_MS = 5.0
SATURATED_CPU_PERCENT = 90.0
GC_CAUSE_MS = 5.0
#: Most intervals listed.
MAX_INTERVALS = 50
#: The generator's gauges, and how they combine over several generator processes.
GAUGES = {"generator.cpu_percent": "max", "generator.runqueue_wait_ms": "max", "generator.in_flight": "sum"}
_WORKER_LABEL = re.compile(r'\{worker="(\d+)"\}')


def load_model(manifest: dict) -> dict:
    """``{"loop": "open"|"closed", "process": ..., ...}`` from the manifest's
    ``arrival`` (runs before it existed: from the scenario's arrival process)."""
    arrival = manifest.get("arrival")
    if isinstance(arrival, dict) and arrival.get("loop") in ("open", "closed"):
        return dict(arrival)
    process = ((manifest.get("scenario") or {}).get("arrival") or {}).get("process", "poisson")
    return {"loop": "closed" if process == "closed" else "open", "process": process}


def _window_geometry(origin_ns: int, end_ns: int, window_s: float) -> tuple[int, int]:
    window_ns = max(1, int(round(window_s * NS_PER_S)))
    return window_ns, max(1, int(-(-(end_ns - origin_ns) // window_ns)))


def _bin(times_ns: np.ndarray, origin_ns: int, window_ns: int, n: int) -> np.ndarray:
    return ((times_ns - origin_ns) // window_ns).clip(0, n - 1)


def series_worker(series: str, base: str) -> tuple[bool, int | None]:
    """(whether ``series`` is ``base`` as written by a generator process, that process's
    worker index or None when unlabelled): ``base`` or ``base{worker="i"}``."""
    if series == base:
        return True, None
    found = _WORKER_LABEL.fullmatch(series, len(base)) if series.startswith(base) else None
    return (True, int(found.group(1))) if found else (False, None)


def _gauge_means(signals, origin_ns: int, window_ns: int, n: int) -> dict[str, dict]:
    """{gauge: {worker (None: unlabelled): per-window mean, NaN where no reading}} of
    the generator processes' gauges (:data:`GAUGES`)."""
    out: dict[str, dict] = {name: {} for name in GAUGES}
    if signals is None or len(signals) == 0:
        return out
    signals = signals.filter(pc.fill_null(pc.starts_with(signals.column("series"), "generator."), False))
    if len(signals) == 0:
        return out
    series = signals.column("series").to_numpy(zero_copy_only=False)
    t_ns, _ = int_column(signals, "t_ns")
    values = signals.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    for label in sorted(set(series)):
        for name in GAUGES:
            matched, worker = series_worker(label, name)
            if matched:
                out[name][worker] = _window_mean(t_ns, values, series == label, origin_ns, window_ns, n)
    return out


def _window_mean(t_ns, values, mask, origin_ns: int, window_ns: int, n: int) -> np.ndarray:
    # a reading at t covers the second before it: bin it by t - 1 ns
    index = _bin(t_ns[mask] - 1, origin_ns, window_ns, n)
    inside = (t_ns[mask] > origin_ns) & (t_ns[mask] <= origin_ns + n * window_ns)
    sums = np.bincount(index[inside], weights=values[mask][inside], minlength=n)
    counts = np.bincount(index[inside], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _combined(per_process: dict, how: str, n: int) -> np.ndarray:
    """One per-window series over the processes: the max, or the sum (NaN where none read)."""
    if not per_process:
        return np.full(n, np.nan)
    stacked = np.vstack(list(per_process.values()))
    if how == "max":
        return np.fmax.reduce(stacked, axis=0)
    covered = np.isfinite(stacked).any(axis=0)
    return np.where(covered, np.nansum(stacked, axis=0), np.nan)


def _process_records(gauges: dict, gc_by_worker: dict) -> list[GeneratorProcess]:
    """Each generator process's own CPU (mean and max of its window means, % of one core),
    run-queue wait (total ms) and GC pauses, by worker index (None: the only process)."""
    workers = set(gauges["generator.cpu_percent"]) | set(gauges["generator.runqueue_wait_ms"]) | set(gc_by_worker)
    out = []
    for worker in sorted(workers, key=lambda w: -1 if w is None else w):
        cpu = gauges["generator.cpu_percent"].get(worker, np.zeros(0))
        wait = gauges["generator.runqueue_wait_ms"].get(worker, np.zeros(0))
        pauses, total_ms = gc_by_worker.get(worker, (0, 0.0))
        out.append(GeneratorProcess(worker=worker, cpu_mean_percent=_finite_stat(np.nanmean, cpu),
                                    cpu_max_percent=_finite_stat(np.nanmax, cpu),
                                    runqueue_wait_ms=_finite_stat(np.nansum, wait),
                                    gc_pauses=pauses, gc_total_ms=total_ms))
    return out


def _gc_per_window(events, origin_ns: int, window_ns: int, n: int) -> tuple[np.ndarray, GeneratorGc, dict]:
    """(GC pause ms per window, totals, {worker: (pauses, total ms)}) of the generator
    processes' ``generator_gc`` events (worker None: events without a ``worker`` attribute)."""
    per_window = np.zeros(n)
    if events is None or len(events) == 0:
        return per_window, GeneratorGc(pauses=0, total_ms=0.0, max_ms=None), {}
    kinds = events.column("kind").to_numpy(zero_copy_only=False)
    start, _ = int_column(events, "start_ns")
    end, _ = int_column(events, "end_ns")
    mask = kinds == "generator_gc"
    pause_ms = (end[mask] - start[mask]) / NS_PER_MS
    inside = (start[mask] >= origin_ns) & (start[mask] < origin_ns + n * window_ns)
    per_window += np.bincount(_bin(start[mask][inside], origin_ns, window_ns, n), weights=pause_ms[inside],
                              minlength=n)
    attributes = events.column("attributes").to_numpy(zero_copy_only=False)[mask]
    by_worker: dict = {}
    for text, ms in zip(attributes, pause_ms):
        worker = _event_worker(text)
        pauses, total = by_worker.get(worker, (0, 0.0))
        by_worker[worker] = (pauses + 1, total + float(ms))
    return per_window, GeneratorGc(pauses=int(mask.sum()), total_ms=float(pause_ms.sum()),
                                   max_ms=float(pause_ms.max()) if len(pause_ms) else None), by_worker


def _event_worker(text) -> int | None:
    """The ``worker`` attribute of a generator event (JSON text), None when absent or unreadable."""
    try:
        worker = json.loads(text).get("worker") if text else None
    except (ValueError, AttributeError):
        return None
    return worker if isinstance(worker, int) else None


def generator_section(req: RequestArrays, run, period: tuple[int, int] | None, window_s: float) -> Generator:
    """The ``generator`` section of the analysis (see module docstring), before the lateness rule
    (:func:`~.lateness_rule.judged` adds it once the summary is known)."""
    manifest = run.manifest
    options = manifest.get("options") or {}
    model = load_model(manifest)
    base = Generator(load_model=model, in_flight_policy=options.get("in_flight_policy", "wait"),
                     max_in_flight=options.get("max_in_flight"),
                     dropped=int(np.sum(req.error_kind == "dropped")), windows=[], limited=False,
                     limited_windows=[], cpu=GeneratorCpu(mean_percent=None, max_percent=None),
                     gc=GeneratorGc(pauses=0, total_ms=0.0, max_ms=None), runqueue_wait_ms=None, processes=[])
    if period is None or req.n == 0:
        return base
    origin, end = period
    window_ns, n = _window_geometry(origin, end, window_s)
    table = _window_columns(req, origin, window_ns, n, window_ns / NS_PER_S)
    per_process = _gauge_means(run.signals, origin, window_ns, n)
    gauges = {name: _combined(per_process[name], how, n) for name, how in GAUGES.items()}
    gc_ms, gc_totals, gc_by_worker = _gc_per_window(run.events, origin, window_ns, n)
    table.update(cpu_percent=gauges["generator.cpu_percent"], runqueue_wait_ms=gauges["generator.runqueue_wait_ms"],
                 in_flight=gauges["generator.in_flight"], gc_pause_ms=gc_ms)
    late_share_all = float(np.mean(req.lateness_ms[req.has_sent] > LATE_THRESHOLD_MS)) if req.has_sent.any() else 0.0
    limited = table["late_share"] > LIMITED_SHARE
    cpu = gauges["generator.cpu_percent"]
    wait = gauges["generator.runqueue_wait_ms"]
    return replace(
        base,
        windows=_window_records(table, origin, window_ns),
        limited=late_share_all > LIMITED_SHARE,
        late_share=late_share_all,
        limited_windows=_intervals(limited, table, origin, window_ns, options.get("max_in_flight")),
        cpu=GeneratorCpu(mean_percent=_finite_stat(np.nanmean, cpu), max_percent=_finite_stat(np.nanmax, cpu)),
        gc=gc_totals,
        runqueue_wait_ms=_finite_stat(np.nansum, wait),
        processes=_process_records(per_process, gc_by_worker),
    )


def _finite_stat(function, values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(function(finite)) if len(finite) else None


def _window_columns(req: RequestArrays, origin: int, window_ns: int, n: int, window_s: float) -> dict:
    index = _bin(req.scheduled_ns, origin, window_ns, n)
    scheduled = np.bincount(index, minlength=n)
    sent_index = index[req.has_sent]
    sent = np.bincount(sent_index, minlength=n)
    lateness = req.lateness_ms[req.has_sent]
    late = np.bincount(sent_index[lateness > LATE_THRESHOLD_MS], minlength=n)
    # a request never sent (dropped) was late by definition: it counts against the window
    dropped = np.bincount(index[~req.has_sent], minlength=n)
    ok_end = req.end_ns[req.is_ok]
    inside = (ok_end >= origin) & (ok_end < origin + n * window_ns)
    achieved = np.bincount(_bin(ok_end[inside], origin, window_ns, n), minlength=n)
    order = group_sort(sent_index, lateness)
    starts = np.concatenate(([0], np.cumsum(sent)[:-1]))
    with np.errstate(invalid="ignore", divide="ignore"):
        late_share = np.where(scheduled > 0, (late + dropped) / np.maximum(scheduled, 1), 0.0)
    return {"scheduled": scheduled, "sent": sent, "late": late, "dropped": dropped,
            "offered_rps": scheduled / window_s, "sent_rps": sent / window_s, "achieved_rps": achieved / window_s,
            "late_share": late_share,
            "lateness_p99_ms": grouped_quantile(lateness[order], starts, sent, 0.99)}


def _number(value) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _window_records(table: dict, origin: int, window_ns: int) -> list[GeneratorWindow]:
    return [GeneratorWindow(
        start_ns=origin + i * window_ns, end_ns=origin + (i + 1) * window_ns,
        scheduled=int(table["scheduled"][i]), sent=int(table["sent"][i]), late=int(table["late"][i]),
        dropped=int(table["dropped"][i]),
        offered_rps=float(table["offered_rps"][i]), sent_rps=float(table["sent_rps"][i]),
        achieved_rps=float(table["achieved_rps"][i]), late_share=float(table["late_share"][i]),
        lateness_p99_ms=_number(table["lateness_p99_ms"][i]),
        cpu_percent=_number(table["cpu_percent"][i]), runqueue_wait_ms=_number(table["runqueue_wait_ms"][i]),
        in_flight=_number(table["in_flight"][i]), gc_pause_ms=float(table["gc_pause_ms"][i]),
    ) for i in range(len(table["scheduled"]))]


def _intervals(limited: np.ndarray, table: dict, origin: int, window_ns: int, max_in_flight) -> list[LimitedInterval]:
    """Runs of adjacent generator-limited windows, each with totals and a likely cause."""
    out = []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], limited.astype(np.int8), [0]))))
    for lo, hi in zip(edges[::2], edges[1::2]):
        part = slice(lo, hi)
        scheduled = int(table["scheduled"][part].sum())
        late = int(table["late"][part].sum() + table["dropped"][part].sum())
        out.append(LimitedInterval(
            start_ns=origin + int(lo) * window_ns, end_ns=origin + int(hi) * window_ns,
            windows=int(hi - lo), scheduled=scheduled, late=late,
            late_share=late / scheduled if scheduled else 0.0,
            cause=_cause(table, part, max_in_flight),
        ))
    return out[:MAX_INTERVALS]


def _cause(table: dict, part: slice, max_in_flight) -> LimitedCause:
    """The likeliest reason the generator fell behind in these windows."""
    wait = table["runqueue_wait_ms"][part]
    cpu = table["cpu_percent"][part]
    in_flight = table["in_flight"][part]
    if max_in_flight and np.any(np.nan_to_num(in_flight) >= 0.9 * max_in_flight) or table["dropped"][part].sum():
        return "in_flight_cap"
    if np.nanmax(np.nan_to_num(cpu, nan=0.0)) >= SATURATED_CPU_PERCENT:
        return "generator_cpu"
    if np.nanmax(np.nan_to_num(wait, nan=0.0)) >= CONTENTION_WAIT_MS:
        return "cpu_contention"
    if table["gc_pause_ms"][part].max() >= GC_CAUSE_MS:
        return "gc"
    return "unknown"
