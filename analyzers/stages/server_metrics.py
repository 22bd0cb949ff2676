"""Which of a run's signal series mean what on its server: a preset's metric map, resolved.

A stage preset (:mod:`.presets`) declares, for each *role* (``waiting``, ``running``,
``kv_usage``, ``preemptions``, ``prompt_tokens``, ``generation_tokens``, ``queue_time``,
``compute_time``, ``finished``; :data:`~.presets.ROLES`), the Prometheus metric names that
play it, newest first. :func:`server_series` finds them among a run's signals:

* a signal ``prom.<metric>`` or ``prom.<metric>{labels}`` (the Prometheus sampler's names,
  signals/prometheus.py) — or ``<metric>{labels}`` as an OTLP metric received by the
  harness — belongs to ``<metric>``;
* a candidate name with a label selector (``metric{source="local_compute"}``) keeps only the
  label sets that carry those labels;
* per role, the first candidate name with any series is used, with **all** its label sets
  (several models, engines or scraped instances); older names are then not read, so a server
  that exposes an old and a new name for one gauge (vLLM's ``gpu_cache_usage_perc`` beside
  ``kv_cache_usage_perc``) is not counted twice.

For the detectors::

    servers = run_server_series(run)              # the run's preset, from its scenario
    if servers.has("kv_usage"):
        kv = servers.binned("kv_usage", inputs.signals, inputs.edges)   # one value per bin
    waiting_names = servers.names("waiting")      # the series themselves, e.g. for evidence

:meth:`ServerSeries.binned` reads each series on the grid (``SignalIndex.binned``: gauges
averaged per bin, counters as rates per second), scales it to the role's unit and combines
the label sets as the role says (``sum``, or ``max`` for ``kv_usage``); a bin none of them
covers is NaN. Cost: one pass over the run's series names; ``binned`` O(readings + bins) per
series.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tailscope.analysis_model.server import ServerLoad, ServerLoadRole
from tailscope.analysis_model.stages import ServerMetricRole, ServerMetrics
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.stages.presets import ROLES, STAGE_PRESETS, StagePreset, split_selector
from tailscope.analyzers.stages.rules import rules_for_scenario

PROMETHEUS_PREFIX = "prom."


def metric_of(series: str) -> str:
    """The metric name of a signal series: ``prom.vllm:x{a="b"}`` → ``vllm:x``."""
    name = series[len(PROMETHEUS_PREFIX):] if series.startswith(PROMETHEUS_PREFIX) else series
    return name.split("{", 1)[0]


@dataclass(frozen=True)
class ServerSeries:
    """A preset's metric map resolved against one run's signals.

    ``metric[role]``: the metric name used; ``series[role]``: its signal series (every label
    set), sorted; ``scale[role]``: the factor to the role's unit. Roles without a series in
    the run are absent (``missing`` lists the roles the preset maps but the run lacks)."""

    preset: str | None
    metric: Mapping[str, str] = field(default_factory=dict)
    series: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scale: Mapping[str, float] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def has(self, role: str) -> bool:
        return bool(self.series.get(role))

    def names(self, role: str) -> tuple[str, ...]:
        """The signal series that play ``role`` (empty when the run has none)."""
        return self.series.get(role, ())

    def binned(self, role: str, signals: SignalIndex, edges_ns: np.ndarray) -> np.ndarray:
        """``role`` on the grid ``edges_ns``, in the role's unit (:data:`~.presets.ROLES`): every label
        set read with ``signals.binned``, scaled, then summed (or the max taken, per the role);
        NaN where no series covers a bin, all NaN when the run has none."""
        bins = max(len(edges_ns) - 1, 0)
        names = self.names(role)
        if not names:
            return np.full(bins, np.nan)
        values = np.vstack([signals.binned(name, edges_ns) for name in names]) * self.scale.get(role, 1.0)
        covered = ~np.isnan(values).all(axis=0)
        combined = np.nanmax(values, axis=0, initial=-np.inf) if ROLES[role].combine == "max" else np.nansum(values, axis=0)
        return np.where(covered, combined, np.nan)

    def describe(self) -> ServerMetrics:
        """The ``stages.server_metrics`` section: each role found (its metric, series, kind and
        unit) and the roles missing."""
        return ServerMetrics(
            self.preset,
            {role: ServerMetricRole(self.metric[role], list(self.series[role]), ROLES[role].kind, ROLES[role].unit)
             for role in self.series},
            list(self.missing),
        )


def server_series(series_names: Iterable[str], preset: str | StagePreset | None) -> ServerSeries:
    """Resolve ``preset``'s metric map (a preset or its name; None or a preset without metrics:
    nothing) against the signal ``series_names`` of a run (see the module docstring)."""
    if preset is None:
        return ServerSeries(None)
    preset = STAGE_PRESETS[preset] if isinstance(preset, str) else preset
    by_metric: dict[str, list[str]] = {}
    for name in series_names:
        by_metric.setdefault(metric_of(name), []).append(name)
    metric, series, scale, missing = {}, {}, {}, []
    for role in preset.metrics.roles():
        source = preset.metrics.get(role)
        found = next(((name, chosen) for name in source.names if (chosen := _selected(by_metric, name))), None)
        if found is None:
            missing.append(role)
            continue
        metric[role], series[role], scale[role] = found[0], tuple(sorted(found[1])), source.scale
    return ServerSeries(preset.name, metric, series, scale, tuple(missing))


def _selected(by_metric: dict[str, list[str]], name: str) -> list[str]:
    """The series of ``name`` (a metric, or a metric with a label selector: only the label sets
    that carry every selected label with its value)."""
    base, wanted = split_selector(name)
    candidates = by_metric.get(base) or []
    if not wanted:
        return candidates
    return [series for series in candidates
            if set(wanted) <= set(split_selector(series[len(PROMETHEUS_PREFIX):] if series.startswith(PROMETHEUS_PREFIX)
                                                 else series)[1])]


def run_server_series(run, signals: SignalIndex | None = None) -> ServerSeries:
    """:func:`server_series` of a run (``tailscope.rundir.Run``): its scenario's preset (the one its
    stage rules use, :func:`~.rules.rules_for_scenario`) against its signals (``signals``: the
    run's :class:`SignalIndex` when the caller has it, else the series names in ``run.signals``)."""
    preset = rules_for_scenario(run.manifest.get("scenario") or {}).rules.preset
    if preset is None or preset not in STAGE_PRESETS:
        return ServerSeries(None)
    if signals is not None:
        names: Iterable[str] = signals.names()
    elif len(run.signals):
        names = [n for n in run.signals.column("series").unique().to_pylist() if n is not None]
    else:
        names = ()
    return server_series(names, preset)


#: The most bins :func:`server_load_section` gives each role (a longer run gets wider bins).
SERVER_LOAD_MAX_POINTS = 2000


def _reading_step_ns(servers: ServerSeries, signals: SignalIndex) -> int:
    """The median gap between readings of the mapped series (the scrape interval), ns; 0 when unknown."""
    gaps = [np.diff(signals.readings(name)[0]) for role in servers.series for name in servers.names(role)]
    gaps = [g for g in gaps if len(g)]
    return int(np.median(np.concatenate(gaps))) if gaps else 0


def server_load_section(servers: ServerSeries, signals: SignalIndex, period: tuple[int, int] | None,
                        max_points: int = SERVER_LOAD_MAX_POINTS) -> ServerLoad | None:
    """The analysis's ``server_load``: each mapped role of the preset on one grid over the load
    period (docs/analysis-schema.md "server_load"); None when the run's preset maps no series it has.

    Bins are as wide as the scrape interval (the median gap between readings), widened so there
    are at most ``max_points``; each role is :meth:`ServerSeries.binned` (gauges averaged, counters
    as rates per second, label sets summed or the max taken). ``t_ns`` are the bins' middles;
    ``values`` are null where no reading covers a bin."""
    if servers.preset is None or not servers.series or not period or period[1] <= period[0]:
        return None
    start, end = period
    step = max(_reading_step_ns(servers, signals), -(-(end - start) // max_points), 1)
    bins = int(-(-(end - start) // step))
    edges = start + np.arange(bins + 1, dtype=np.int64) * step
    roles = {}
    for role in (r for r in ROLES if servers.has(r)):
        values = servers.binned(role, signals, edges)
        roles[role] = ServerLoadRole(servers.metric[role], list(servers.names(role)), ROLES[role].kind,
                                     ROLES[role].unit, ROLES[role].combine,
                                     [None if np.isnan(v) else float(v) for v in values])
    return ServerLoad(servers.preset, step / 1e9, [int(v) for v in (edges[:-1] + step // 2)], roles)
