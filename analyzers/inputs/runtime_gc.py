"""GC seen through a target's runtime metrics (OpenTelemetry or Prometheus), per export interval.

A service that sends no GC pause events may still export its runtime's GC metrics. The
names, units and attributes are those of the OpenTelemetry semantic conventions for
runtime metrics (and the older instrumentations' names still in use); each is read from
the receiver's series (OTLP, histograms as ``<name>.count``/``<name>.sum``,
:mod:`tailscope.tracing.ingest.otlp_decode`) or from a Prometheus scrape (``prom.<name>``,
OpenTelemetry's Prometheus names):

=============================================  ======================  ===============================
metric (OTLP / Prometheus)                     what it gives           the old generation
=============================================  ======================  ===============================
``jvm.gc.duration`` histogram (s) /             GC time, collections    ``jvm.gc.action`` "end of
``jvm_gc_duration_seconds``                                            major GC"
``process.runtime.jvm.gc.duration`` (ms)        GC time, collections    ``action`` "end of major GC"
``v8js.gc.duration`` histogram (s) /            GC time, collections    ``v8js.gc.type`` "major"
``v8js_gc_duration_seconds``
``dotnet.gc.pause.time`` counter (s) /          pause time              —
``dotnet_gc_pause_time_seconds_total``
``dotnet.gc.collections`` counter /             collections             ``gc.heap.generation`` "gen2"
``dotnet_gc_collections_total``
``go.memory.gc.pause.duration`` histogram (s)   pause time, pauses      —
``process.runtime.go.gc.pause_ns``,             pause time (ns),        —
``runtime.go.gc.pause_ns`` histograms           pauses
``process.runtime.go.gc.pause_total_ns``,       pause time (ns)         —
``runtime.go.gc.pause_total_ns`` counters
``go_gc_duration_seconds`` summary (Prom.)      pause time, pauses      —
``cpython.gc.collections`` counter /            collections             ``cpython.gc.generation`` 2
``python_gc_collections_total``                                        (Prometheus ``generation``)
``process.runtime.cpython.gc_count``            gc.get_count() values:  attribute ``count`` "2"
                                                a drop = a collection
=============================================  ======================  ===============================

Each series becomes intervals (t0, t1] between consecutive points (epoch ns) with the GC time
(ms, when the metric gives time), the collections, and the old-generation ("major", gen-2)
collections in it: a cumulative series by differences (a decrease is a restart), a delta
series as sent. ``gc.get_count()`` counts reset when their generation is collected, so a
drop of generation g's count is one collection of generation g or older.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tailscope.analyzers.inputs.records import NS_PER_S
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.inputs.signal_series import TIME_UNIT_SECONDS, load_receiver_meta
from tailscope.rundir import Run

_LABEL = re.compile(r'([^=,{}]+)="((?:[^"\\]|\\.)*)"')


def _attr_is(keys: tuple[str, ...], test: Callable[[str], bool]) -> Callable[[dict], bool | None]:
    def major(attrs: dict) -> bool | None:
        for key in keys:
            if key in attrs:
                return test(str(attrs[key]).lower())
        return None
    return major


def _no_generation(attrs: dict) -> bool | None:
    return None


_JVM_MAJOR = _attr_is(("jvm.gc.action", "jvm_gc_action", "action"), lambda v: "major" in v)
_V8_MAJOR = _attr_is(("v8js.gc.type", "v8js_gc_type"), lambda v: v == "major")
_DOTNET_MAJOR = _attr_is(("gc.heap.generation", "gc_heap_generation"), lambda v: v == "gen2")
_PY_MAJOR = _attr_is(("cpython.gc.generation", "cpython_gc_generation", "generation", "gc.generation"),
                     lambda v: v == "2")
_PY_COUNT_MAJOR = _attr_is(("count",), lambda v: v == "2")


@dataclass(frozen=True)
class GcMetric:
    """One runtime GC metric: its series name as stored, what it gives and how to read it.

    ``shape``: ``histogram`` (``.count``/``.sum`` or Prometheus ``_count``/``_sum``: collections
    and GC time), ``time`` (a counter of GC time), ``collections`` (a counter of collections),
    ``get_count`` (CPython's ``gc.get_count()``, a drop is a collection). ``unit``: the time unit
    when the series' descriptor gives none. ``major``: whether a point's attributes name the
    old generation (None: the metric does not say)."""

    name: str
    runtime: str
    shape: str
    unit: str = "s"
    major: Callable[[dict], bool | None] = _no_generation
    where: str = "OTLP"


CATALOG: tuple[GcMetric, ...] = (
    GcMetric("jvm.gc.duration", "JVM", "histogram", "s", _JVM_MAJOR),
    GcMetric("process.runtime.jvm.gc.duration", "JVM", "histogram", "ms", _JVM_MAJOR),
    GcMetric("v8js.gc.duration", "V8", "histogram", "s", _V8_MAJOR),
    GcMetric("dotnet.gc.pause.time", ".NET", "time", "s"),
    GcMetric("dotnet.gc.collections", ".NET", "collections", "", _DOTNET_MAJOR),
    GcMetric("go.memory.gc.pause.duration", "Go", "histogram", "s"),
    GcMetric("process.runtime.go.gc.pause_ns", "Go", "histogram", "ns"),
    GcMetric("runtime.go.gc.pause_ns", "Go", "histogram", "ns"),
    GcMetric("process.runtime.go.gc.pause_total_ns", "Go", "time", "ns"),
    GcMetric("runtime.go.gc.pause_total_ns", "Go", "time", "ns"),
    GcMetric("cpython.gc.collections", "CPython", "collections", "", _PY_MAJOR),
    GcMetric("process.runtime.cpython.gc_count", "CPython", "get_count", "", _PY_COUNT_MAJOR),
    GcMetric("prom.jvm_gc_duration_seconds", "JVM", "histogram", "s", _JVM_MAJOR, "Prometheus"),
    GcMetric("prom.v8js_gc_duration_seconds", "V8", "histogram", "s", _V8_MAJOR, "Prometheus"),
    GcMetric("prom.dotnet_gc_pause_time_seconds_total", ".NET", "time", "s", where="Prometheus"),
    GcMetric("prom.dotnet_gc_collections_total", ".NET", "collections", "", _DOTNET_MAJOR, "Prometheus"),
    GcMetric("prom.go_gc_duration_seconds", "Go", "histogram", "s", where="Prometheus"),
    GcMetric("prom.python_gc_collections_total", "CPython", "collections", "", _PY_MAJOR, "Prometheus"),
)

#: Series-name prefixes that hold runtime GC metrics (a detector's ``needs``: any of them).
SERIES_PREFIXES = tuple(sorted({m.name for m in CATALOG}))


def metrics_in(series_names) -> list[str]:
    """``"<metric> (<where>)"`` of every catalogued GC metric among ``series_names``, sorted."""
    found = {_match(_split(name)[0]) for name in series_names}
    return sorted({f"{m.name} ({m.where})" for m, _ in (f for f in found if f is not None)})


def _split(series: str) -> tuple[str, dict]:
    base, _, rest = series.partition("{")
    return base, {k.strip(): v for k, v in _LABEL.findall(rest)} if rest else {}


def _match(base: str) -> tuple[GcMetric, str] | None:
    """(metric, part) of a series base name: part ``sum``, ``count`` or ``value``."""
    for metric in CATALOG:
        if metric.shape == "histogram":
            for part, suffixes in (("sum", (".sum", "_sum")), ("count", (".count", "_count"))):
                if any(base == metric.name + s for s in suffixes):
                    return metric, part
        elif base == metric.name:
            return metric, "value"
    return None


@dataclass
class RuntimeGc:
    """The run's runtime-GC intervals, one row per (series, interval): ``t0_ns``/``t1_ns`` (epoch
    ns, the interval (t0, t1]), ``gc_ms`` (GC time in it, NaN where the metric gives none),
    ``collections`` and ``major`` (old-generation collections: set on the series of the old
    generation only, NaN on the others and where the metric names no generation), ``metric``
    (its name), ``where`` ("OTLP" or "Prometheus")."""

    t0_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    t1_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gc_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    collections: np.ndarray = field(default_factory=lambda: np.zeros(0))
    major: np.ndarray = field(default_factory=lambda: np.zeros(0))
    metric: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    where: np.ndarray = field(default_factory=lambda: np.zeros(0, object))

    def __len__(self) -> int:
        return len(self.t0_ns)

    def overlapping(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Boolean mask of the intervals overlapping [start, end)."""
        return (self.t0_ns < end_ns) & (self.t1_ns > start_ns)

    def during(self, start_ns: int, end_ns: int) -> dict:
        """What the runtime metrics say of [start, end): ``gc_ms`` (GC time in the export intervals
        overlapping it; None where no metric gives time), ``major`` / ``collections`` (None where
        unknown), ``interval_s`` (the longest such interval), and how rare that is in the run:
        ``gc_ms_exceeded_share`` (share of the run's intervals of the same metric with at least
        the largest GC time among them) and ``major_share`` (share with an old-generation
        collection)."""
        hit = self.overlapping(start_ns, end_ns)
        out = {"intervals": int(hit.sum()), "gc_ms": None, "major": None, "collections": None,
               "interval_s": float(((self.t1_ns - self.t0_ns)[hit]).max() / NS_PER_S) if hit.any() else None,
               "gc_ms_exceeded_share": None, "major_share": None, "metrics": []}
        if not hit.any():
            return out
        timed = hit & np.isfinite(self.gc_ms)
        if timed.any():
            out["gc_ms"] = float(self.gc_ms[timed].sum())
            worst = int(np.flatnonzero(timed)[np.argmax(self.gc_ms[timed])])
            same = (self.metric == self.metric[worst]) & np.isfinite(self.gc_ms)
            out["gc_ms_exceeded_share"] = float(np.mean(self.gc_ms[same] >= self.gc_ms[worst]))
        known = hit & np.isfinite(self.major)
        if known.any():
            out["major"] = float(self.major[known].sum())
            with_major = known & (self.major > 0)
            name = self.metric[np.flatnonzero(with_major)[0] if with_major.any() else np.flatnonzero(known)[0]]
            same = (self.metric == name) & np.isfinite(self.major)
            out["major_share"] = float(np.mean(self.major[same] > 0))
        counted = hit & np.isfinite(self.collections)
        if counted.any():
            out["collections"] = float(self.collections[counted].sum())
        out["metrics"] = sorted({f"{m} ({w})" for m, w in zip(self.metric[hit], self.where[hit])})
        return out


def _steps(values: np.ndarray, cumulative: bool) -> np.ndarray:
    if not cumulative:
        return values[1:]
    steps = np.diff(values)
    return np.where(steps < 0, values[1:], steps)  # a restart counts from 0


def runtime_gc(run: Run, signals: SignalIndex | None = None) -> RuntimeGc:
    """The run's :class:`RuntimeGc` from every catalogued series it holds (empty without any)."""
    signals = signals if signals is not None else SignalIndex(run.signals, run.signals_meta)
    receiver_meta = (load_receiver_meta(run.path).get("metrics") or {}) if any(
        _match(_split(n)[0]) for n in signals.names()) else {}
    declared = (run.signals_meta or {}).get("series", {})
    groups: dict[tuple[str, str], dict] = {}
    for name in signals.names():
        base, attrs = _split(name)
        found = _match(base)
        if found is None:
            continue
        metric, part = found
        key = (metric.name, name[len(base):])
        entry = groups.setdefault(key, {"metric": metric, "attrs": attrs})
        meta = declared.get(name) or receiver_meta.get(base) or {}
        entry[part] = (name, meta)
    rows = []
    for entry in groups.values():
        rows.extend(_intervals(entry, signals))
    if not rows:
        return RuntimeGc()
    cols = list(zip(*rows))
    return RuntimeGc(np.array(cols[0], np.int64), np.array(cols[1], np.int64), np.array(cols[2], float),
                     np.array(cols[3], float), np.array(cols[4], float), np.array(cols[5], object),
                     np.array(cols[6], object))


def _intervals(entry: dict, signals: SignalIndex) -> list[tuple]:
    metric: GcMetric = entry["metric"]
    major_flag = metric.major(entry["attrs"])
    parts = {}
    for part in ("sum", "count", "value"):
        if part not in entry:
            continue
        name, meta = entry[part]
        t, v = signals.readings(name)
        if len(t) < 2:
            continue
        cumulative = meta.get("kind") == "counter" or meta.get("temporality") == "cumulative" or (
            metric.where == "Prometheus")
        if metric.shape == "get_count":
            steps = (np.diff(v) < 0).astype(float)  # the generation's count was reset: collected
        else:
            steps = _steps(v, cumulative)
        parts[part] = (t, steps, meta)
    if not parts:
        return []
    t = next(iter(parts.values()))[0]
    n = len(t) - 1
    gc_ms = np.full(n, np.nan)
    collections = np.full(n, np.nan)
    time_part = "sum" if metric.shape == "histogram" else "value" if metric.shape == "time" else None
    if time_part in parts and len(parts[time_part][0]) == len(t):
        unit = parts[time_part][2].get("unit") or metric.unit
        gc_ms = parts[time_part][1] * TIME_UNIT_SECONDS.get(unit, TIME_UNIT_SECONDS.get(metric.unit, 1.0)) * 1e3
    count_part = "count" if metric.shape == "histogram" else "value" if metric.shape in (
        "collections", "get_count") else None
    if count_part in parts and len(parts[count_part][0]) == len(t):
        collections = parts[count_part][1]
    # the old generation's own series counts its collections; another series says nothing of them
    major = collections if major_flag else np.full(n, np.nan)
    return [(int(t[i]), int(t[i + 1]), float(gc_ms[i]), float(collections[i]), float(major[i]),
             metric.name, metric.where) for i in range(n)]


#: GC time in a stall's export intervals that backs the stall: at least this share of the stall.
BACKING_TIME_SHARE = 0.5


def stall_backing(runtime: RuntimeGc, stall: dict) -> dict:
    """Whether the runtime metrics put GC in the export intervals around ``stall`` (``{start_ns,
    end_ns, duration_ms}``): :meth:`RuntimeGc.during` of the stall, plus ``backs`` ("time": GC
    time there ≥ :data:`BACKING_TIME_SHARE` of the stall; "major": an old-generation collection
    there; None) and ``specificity`` in [0, 1]: 1 for GC time, else 1 − the share of the run's
    intervals with an old-generation collection (a collection that happens in every interval
    says nothing of this stall), 0 when nothing backs it."""
    seen = runtime.during(stall["start_ns"], stall["end_ns"])
    if seen["gc_ms"] is not None and seen["gc_ms"] >= BACKING_TIME_SHARE * stall["duration_ms"]:
        return {**seen, "backs": "time", "specificity": 1.0}
    if seen["major"]:
        return {**seen, "backs": "major", "specificity": 1.0 - float(seen["major_share"] or 0.0)}
    return {**seen, "backs": None, "specificity": 0.0}


def backing_words(seen: dict) -> str:
    """The runtime metrics' figures for an interval in words: metric (where), GC time, collections."""
    figures = []
    if seen.get("gc_ms") is not None:
        figures.append(f"{seen['gc_ms']:.0f} ms of GC")
    if seen.get("major"):
        figures.append(f"{seen['major']:.0f} old-generation (gen-2/major) collection"
                       + ("s" if seen["major"] != 1 else ""))
    elif seen.get("collections") is not None:
        figures.append(f"{seen['collections']:.0f} collections, none of the old generation")
    interval = f" in the {seen['interval_s']:.1f}-s export interval" if seen.get("interval_s") else ""
    return f"{', '.join(seen.get('metrics') or ['runtime metrics'])}: {' and '.join(figures) or 'no GC'}{interval}"
