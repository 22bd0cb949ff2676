"""The ``llm.prefix_cache`` section: the server's prefix-cache hit rate over a run, from its metrics.

A stage preset maps the server's prefix-cache metrics to roles (:mod:`..stages.presets`):
``prefix_cache_queries`` and ``prefix_cache_hits`` (cumulative counters of prompt tokens,
vLLM's ``vllm:prefix_cache_{queries,hits}_total``) or, where a server exposes only its own
ratio, ``prefix_cache_hit_rate`` (a 0..1 gauge, SGLang's ``sglang:cache_hit_rate``).

- **counters** (preferred): each label set's increase from its first to its last reading
  (a drop is a counter reset: the value after it is the increase), summed over label sets;
  ``hit_rate = hit_tokens / query_tokens``. The figure covers every prompt the server counted
  between the first and the last reading (``first_reading_ns``, ``last_reading_ns``) — the
  run's, and any other traffic's (``other_traffic`` says whether there was some).
  ``covers_load`` says whether those readings bracket the load period: a server too busy to
  answer its scrapes in time (``prom.up`` 0) leaves the start or the end of the load out.
- **gauge**: the mean of the readings inside the load period (``period``, epoch ns; None:
  every reading), the busiest label set's (``max``) per reading time.

None when the run's preset maps none of them or the run has no reading of them. Cost:
O(readings) of the mapped series.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.llm import CacheMetrics, PrefixCache, PrefixCacheCounters, PrefixCacheGauge
from tailscope.analyzers.inputs.signal_index import SignalIndex
from tailscope.analyzers.stages.server_metrics import ServerSeries, run_server_series


def counter_increase(values: np.ndarray) -> float:
    """A cumulative counter's increase over its readings (in order), a reset read as a restart from 0."""
    if len(values) < 2:
        return 0.0
    steps = np.diff(values)
    return float(np.where(steps >= 0, steps, values[1:]).sum())


def prefix_cache_section(servers: ServerSeries, signals: SignalIndex,
                         period: tuple[int, int] | None) -> PrefixCache | None:
    """``llm.prefix_cache`` (see the module docstring): a :class:`PrefixCacheCounters`
    (``covers_load`` None without a ``period``) or a :class:`PrefixCacheGauge`
    (analysis_model/llm.py); None when the server exposes neither."""
    if servers.has("prefix_cache_queries") and servers.has("prefix_cache_hits"):
        queries = sum(counter_increase(signals.readings(name)[1]) for name in servers.names("prefix_cache_queries"))
        hits = sum(counter_increase(signals.readings(name)[1]) for name in servers.names("prefix_cache_hits"))
        stamps = [signals.readings(name)[0] for name in servers.names("prefix_cache_queries")]
        first, last = min(int(t[0]) for t in stamps), max(int(t[-1]) for t in stamps)
        return PrefixCacheCounters(
            source="counters",
            hit_rate=hits / queries if queries > 0 else None,
            hit_tokens=int(round(hits)),
            query_tokens=int(round(queries)),
            metrics=CacheMetrics(queries=servers.metric["prefix_cache_queries"],
                                 hits=servers.metric["prefix_cache_hits"]),
            series=len(servers.names("prefix_cache_queries")),
            first_reading_ns=first, last_reading_ns=last,
            covers_load=None if period is None else bool(first <= period[0] and last >= period[1]),
        )
    if servers.has("prefix_cache_hit_rate"):
        start, end = period if period is not None else (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
        by_time: dict[int, float] = {}
        for name in servers.names("prefix_cache_hit_rate"):
            t, v = signals.readings(name)
            inside = (t >= start) & (t <= end)
            for stamp, value in zip(t[inside].tolist(), v[inside].tolist()):
                by_time[stamp] = max(by_time.get(stamp, value), value)
        if not by_time:
            return None
        return PrefixCacheGauge(source="gauge", hit_rate=float(np.mean(list(by_time.values()))),
                                metric=servers.metric["prefix_cache_hit_rate"], readings=len(by_time))
    return None


def run_prefix_cache(run) -> PrefixCache | None:
    """:func:`prefix_cache_section` of a run (``tailscope.rundir.Run``) from its own signals and preset, every
    reading counted (no load period): what ``compare`` pools over a side's runs."""
    signals = SignalIndex(run.signals, run.signals_meta)
    return prefix_cache_section(run_server_series(run, signals), signals, None)
