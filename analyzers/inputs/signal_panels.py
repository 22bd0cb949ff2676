"""Signal panels for the report: which series are drawn together, under which
title and unit, aligned with latency on the shared time axis; plus the series
derived here from other tables.

Derived series (added to ``signals.series``, ``source`` = what they come from):

* ``gc.pause_ms{generation="G"}`` — one point per GC pause of the target (kit
  ``gc_pause`` events): at its start, value = its duration in ms;
* ``queue.depth`` / ``queue.capacity`` — from ``queue_wait`` spans
  (:mod:`.queues`);
* ``cgroup.cpu.throttled_period_share`` — Δ``nr_throttled`` / Δ``nr_periods``
  between consecutive reads: the share of CFS periods in which the cgroup ran
  out of quota (0–1);
* ``generator.lateness_p99_ms`` / ``generator.lateness_max_ms`` — per window,
  how late the generator sent requests after their scheduled time.

A panel is ``{"id", "title", "unit", "series": [names]}`` (names of
``signals.series`` entries, in drawing order); a panel is emitted only when at
least one of its series exists. Series are matched by their metric name (the
part before ``{``), so a remote agent's ``host.cpu.user_s{host="H"}`` lands in
the same panel as the harness's own. 0/1 flag series that never became 1
(GPU clocks-event reasons that never fired) are left out of their panel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.queues import QueuePoints, queue_depth_series, queue_points
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column
from tailscope.analyzers.inputs.signal_series import MAX_POINTS, downsample_minmax, load_receiver_meta, signal_series, signal_sources


@dataclass(frozen=True)
class PanelSpec:
    """One panel: id, title, unit, and the metric-name patterns (regexes, full match) it draws."""

    id: str
    title: str
    unit: str
    patterns: tuple[str, ...]


#: The report's signal panels, in page order (docs/signals.md "Report panels").
PANELS = (
    PanelSpec("generator", "Generator lateness & its own GC pauses", "ms", (
        r"generator\.lateness_(p99|max)_ms", r"generator\.gc_pause_ms")),
    PanelSpec("generator_cpu", "Generator CPU", "% of one core", (r"generator\.cpu_percent",)),
    PanelSpec("cpu", "CPU in use", "cores", (
        r"host\.cpu\.(user|system|iowait|steal)_s", r"proc\.cpu\.(user|system)_s", r"cgroup\.cpu\.usage_ns",
        r"cgroup\.cpu\.limit_cores")),
    PanelSpec("cpu_per_core", "CPU busy per core", "cores", (r"host\.cpu\d+\.busy_s",)),
    PanelSpec("throttling", "CPU throttling (CFS quota)", "share of time / of periods", (
        r"cgroup\.cpu\.throttled_ns", r"cgroup\.cpu\.throttled_period_share")),
    PanelSpec("runqueue_psi", "Run-queue wait & pressure stall (PSI)", "s/s", (
        r"proc\.runqueue_wait_ns", r"psi\.(cpu|memory|io)\.(some|full)_us", r"cgroup\.psi\.(cpu|memory|io)\.(some|full)_us")),
    PanelSpec("load", "Runnable and blocked tasks", "tasks", (
        r"host\.procs_(running|blocked)", r"host\.load\.1m", r"proc\.threads_blocked")),
    PanelSpec("ctxt", "Context switches", "/s", (r"proc\.ctxt\.(voluntary|nonvoluntary)", r"host\.ctxt")),
    PanelSpec("memory", "Memory & swap in use", "bytes", (
        r"host\.mem\.used_bytes", r"host\.swap\.used_bytes", r"proc\.rss_bytes",
        r"cgroup\.mem\.(current|max|swap_current|swap_max)_bytes")),
    PanelSpec("paging", "Swap I/O, major faults & memory-limit events", "/s", (
        r"host\.vm\.(pswpin|pswpout|pgmajfault|oom_kill)", r"proc\.major_faults", r"cgroup\.mem\.failcnt",
        r"cgroup\.mem\.events\.\w+")),
    PanelSpec("disk_bytes", "Disk & target storage I/O", "bytes/s", (
        r"host\.disk\.(read|write)_bytes", r"proc\.io\.(read|write)_bytes")),
    PanelSpec("disk_requests", "Disk requests & cache flushes", "/s", (r"host\.disk\.(reads|writes|flushes)",)),
    PanelSpec("disk_time", "Disk busy time & queue", "s/s", (r"host\.disk\.(busy|queue)_s",)),
    PanelSpec("gc", "GC pauses of the target", "ms", (r"gc\.pause_ms",)),
    PanelSpec("queue", "Queue depth", "requests", (
        r"queue\.(depth|capacity)", r"prom\..*(queue|pending|waiting|num_requests).*")),
    PanelSpec("gpu_util", "GPU utilisation", "%", (r"gpu\d+\.util_pct",)),
    PanelSpec("gpu_clocks", "GPU clocks", "MHz", (r"gpu\d+\.(sm|mem)_clock_mhz",)),
    PanelSpec("gpu_throttle", "GPU throttle reasons & violation time", "flag / share of time", (
        r"gpu\d+\.clocks_event\.\w+", r"gpu\d+\.violation\.\w+_ns")),
    PanelSpec("gpu_power", "GPU power", "W", (r"gpu\d+\.power_w",)),
    PanelSpec("gpu_temperature", "GPU temperature", "degC", (r"gpu\d+\.temp_c",)),
    PanelSpec("gpu_memory", "GPU memory", "bytes", (r"gpu\d+\.mem_(used|total)_bytes",)),
    PanelSpec("prometheus", "Target metrics (Prometheus)", "as labelled", (r"prom\..*",)),
    PanelSpec("agent_clock", "Remote agent clock offset (harness − agent)", "ns", (r"agent\.clock_offset_ns",)),
)
#: Series never drawn: bookkeeping of the scrape itself.
HIDDEN = re.compile(r"prom\.(up|scrape_duration_s)")


def metric_name(series: str) -> str:
    """The series name without its ``{labels}``."""
    return series.split("{", 1)[0]


def _is_silent_flag(series: dict) -> bool:
    return series.get("unit") == "bool" and not any(v for v in series.get("values") or [])


def build_panels(series: list[dict], specs: tuple[PanelSpec, ...] = PANELS) -> list[dict]:
    """Group ``series`` (dicts with at least ``name``) into panels; each series in
    at most one panel (the first that matches), panels in ``specs`` order."""
    compiled = [(spec, [re.compile(p) for p in spec.patterns]) for spec in specs]
    members: dict[str, list[tuple[int, str]]] = {spec.id: [] for spec in specs}
    for entry in series:
        name = entry["name"]
        base = metric_name(name)
        if HIDDEN.fullmatch(base) or _is_silent_flag(entry):
            continue
        for spec, patterns in compiled:
            hit = next((i for i, p in enumerate(patterns) if p.fullmatch(base)), None)
            if hit is not None:
                members[spec.id].append((hit, name))
                break
    return [{"id": spec.id, "title": spec.title, "unit": spec.unit,
             "series": [name for _, name in sorted(members[spec.id])]}
            for spec in specs if members[spec.id]]


# --------------------------------------------------------------------------- derived series


def gc_pause_series(events: pa.Table, max_points: int) -> list[dict]:
    """``gc.pause_ms{generation="G"}``: one point per gc_pause event (start, duration ms)."""
    pauses = events.filter(pc.equal(events.column("kind"), "gc_pause"))
    if len(pauses) == 0:
        return []
    start, _ = int_column(pauses, "start_ns")
    end, _ = int_column(pauses, "end_ns")
    generations = []
    for text in pauses.column("attributes").to_pylist():
        try:
            attrs = json.loads(text) if text else {}
        except ValueError:
            attrs = {}
        generation = attrs.get("gc.generation", attrs.get("generation")) if isinstance(attrs, dict) else None
        generations.append("?" if generation is None else str(generation))
    generations = np.asarray(generations, dtype=object)
    out = []
    for generation in sorted(set(generations)):
        mask = generations == generation
        order = np.argsort(start[mask], kind="stable")
        t = start[mask][order]
        ms = ((end[mask] - start[mask]) / NS_PER_MS)[order]
        t, ms = downsample_minmax(t, ms, max_points)
        out.append({"name": f'gc.pause_ms{{generation="{generation}"}}', "unit": "ms", "kind": "event",
                    "source": "events", "description": f"duration of each generation-{generation} GC pause, at its start",
                    "t_ns": t.tolist(), "values": ms.tolist()})
    return out


def throttled_period_share(signals: pa.Table, max_points: int) -> list[dict]:
    """``cgroup.cpu.throttled_period_share`` (and per remote host) from raw
    ``nr_throttled``/``nr_periods`` counters read at the same times."""
    if len(signals) == 0:
        return []
    names = signals.column("series")
    out = []
    throttled_names = sorted({n for n in pc.unique(names).to_pylist()
                              if n and metric_name(n) == "cgroup.cpu.nr_throttled"})
    for throttled_name in throttled_names:
        labels = throttled_name[len("cgroup.cpu.nr_throttled"):]
        t_thr, v_thr = _series_arrays(signals, throttled_name)
        t_per, v_per = _series_arrays(signals, "cgroup.cpu.nr_periods" + labels)
        common, i_thr, i_per = np.intersect1d(t_thr, t_per, return_indices=True)
        if len(common) < 2:
            continue
        d_thr, d_per = np.diff(v_thr[i_thr]), np.diff(v_per[i_per])
        keep = (d_per > 0) & (d_thr >= 0)
        t, share = common[1:][keep], np.minimum(d_thr[keep] / d_per[keep], 1.0)
        t, share = downsample_minmax(t, share, max_points)
        out.append({"name": "cgroup.cpu.throttled_period_share" + labels, "unit": "share", "kind": "gauge",
                    "source": "signals", "description": "share of CFS periods in which the cgroup was throttled",
                    "t_ns": t.tolist(), "values": share.tolist()})
    return out


def _series_arrays(signals: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    rows = signals.filter(pc.equal(signals.column("series"), name))
    t, _ = int_column(rows, "t_ns")
    v = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def lateness_series(req: RequestArrays, period: tuple[int, int] | None, window_s: float) -> list[dict]:
    """``generator.lateness_p99_ms`` and ``_max_ms`` per window of scheduled time (sent requests only)."""
    sent = req.has_sent & np.isfinite(req.lateness_ms)
    if period is None or not sent.any() or window_s <= 0:
        return []
    width = int(window_s * 1e9)
    scheduled = req.scheduled_ns[sent]
    lateness = req.lateness_ms[sent]
    bucket = (scheduled - period[0]) // width
    order = np.argsort(bucket, kind="stable")
    bucket, lateness = bucket[order], lateness[order]
    edges = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1], True])
    t, p99, peak = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        values = lateness[lo:hi]
        t.append(int(period[0] + bucket[lo] * width + width // 2))
        p99.append(float(np.percentile(values, 99)))
        peak.append(float(values.max()))
    t = np.asarray(t, dtype=np.int64)
    return [{"name": name, "unit": "ms", "kind": "gauge", "source": "requests", "description": description,
             "t_ns": ts.tolist(), "values": vs.tolist()}
            for name, values, description in (
                ("generator.lateness_p99_ms", p99, f"P99 of send time − scheduled time per {window_s:g} s window"),
                ("generator.lateness_max_ms", peak, f"largest send time − scheduled time per {window_s:g} s window"))
            for ts, vs in [downsample_minmax(t, np.asarray(values), MAX_POINTS)]]


def signals_section(run, req: RequestArrays, period: tuple[int, int] | None, window_s: float,
                    max_points: int = MAX_POINTS, queue: QueuePoints | None = None) -> dict:
    """The analysis's ``signals``: sampled and derived series, panels, sources, and
    how the sampler kept its schedule (``sampling``, from signals.json; None if absent).
    ``queue``: the run's :func:`~.queues.queue_points` when already read."""
    series = signal_series(run.signals, run.signals_meta, max_points, load_receiver_meta(run.path))
    series += throttled_period_share(run.signals, max_points)
    series += gc_pause_series(run.events, max_points)
    series += queue_depth_series(queue if queue is not None else queue_points(run.spans), max_points)
    series += lateness_series(req, period, window_s)
    return {"series": series, "panels": build_panels(series), "sources": signal_sources(run.signals_meta),
            "sampling": (run.signals_meta or {}).get("sampling")}
