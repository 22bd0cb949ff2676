"""The sampling loop: probe the samplers, then read them on a fixed schedule.

Ticks are at absolute deadlines ``start + k / rate_hz`` (monotonic clock), so
the schedule does not drift; a tick that overruns the next deadline skips the
missed ticks instead of bunching them. Each tick's rows go to a
:class:`SignalSink`: :class:`ArrowSink` writes ``signals.arrow`` (flushed
every 0.5 s) and ``signals.json`` (every series and every source); the remote
agent's sink sends OTLP metrics instead (:mod:`.agent`). A sampler that fails
mid-run (e.g. the target exited) is disabled and the metadata is rewritten
with the reason; so it is when a sampler discovers new series. Rows are
written at the tick's time, except a sampler's :class:`~.sampler.Batch`
items, written at their own (a Prometheus scrape's answer time). Every
sampler is closed at the end (:func:`~.sampler.close_sampler`).

At the end the loop records how it kept its schedule and what it cost: tick
lateness (how long after its deadline each tick started; P50/P99/max over the
last :data:`MAX_LATENESS_SAMPLES` ticks) and the CPU time of the sampling
process, in ``signals.json`` ``sampling``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

from tailscope.rundir import Appender, PeriodicFlusher, schema, write_json_atomic
from tailscope.signals.config import SamplerConfig
from tailscope.signals.registry import SAMPLERS
from tailscope.signals.sampler import DEFAULT_RATE_HZ, Batch, Sampler, close_sampler

#: Tick lateness values kept for the end-of-run percentiles (≈ 2.8 h at 10 Hz; 800 kB).
MAX_LATENESS_SAMPLES = 100_000


def default_samplers(pid: int | None, config: SamplerConfig | None = None,
                     rate_hz: float = DEFAULT_RATE_HZ) -> list[Sampler]:
    """A new instance of every sampler tailscope ships (:data:`~.registry.SAMPLERS`, in its order);
    the per-process ones watch ``pid`` (None: none); ``rate_hz`` is the run's ticks per second
    (the Prometheus scrapes keep that rate on their own threads)."""
    config = config or SamplerConfig(pid=pid)
    return [build(pid, config, rate_hz) for build in SAMPLERS.values()]


def probe_samplers(samplers: list[Sampler]) -> dict[str, dict]:
    """``{name: {"available": bool, "reason": str | None}}`` after probing each sampler."""
    sources = {}
    for sampler in samplers:
        try:
            reason = sampler.probe()
        except Exception as exc:  # noqa: BLE001 — a probe must never stop the others
            reason = f"probe failed: {type(exc).__name__}: {exc}"
        sources[sampler.name] = {"available": reason is None, "reason": reason}
    return sources


def signals_metadata(rate_hz: float, pid: int | None, samplers: list[Sampler], sources: dict) -> dict:
    """The ``signals.json`` content: rate, series meanings (of available samplers), sources."""
    series = {}
    for sampler in samplers:
        if sources[sampler.name]["available"]:
            for name, meta in sampler.series().items():
                series[name] = {**asdict(meta), "source": sampler.name}
    return {"rate_hz": rate_hz, "pid": pid, "series": series, "sources": sources}


@dataclass
class SamplingSummary:
    """How a sampling run went: ticks taken, ticks skipped because a tick
    overran, rows written, tick lateness (ms after the deadline) and the
    sampling process's CPU time over the loop's wall time."""

    ticks: int = 0
    missed_ticks: int = 0
    rows: int = 0
    lateness_ms: dict = field(default_factory=dict)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    def as_dict(self) -> dict:
        share = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        return {**asdict(self), "cpu_share_of_core": share}


class SignalSink(Protocol):
    """Where tick rows go."""

    def write(self, t_ns: int, rows: list[tuple[str, float]]) -> None:
        """Rows read at ``t_ns`` (epoch ns)."""

    def describe(self, metadata: dict) -> None:
        """The current signals metadata (as :func:`signals_metadata`, plus ``sampling`` at the end)."""

    def failure(self) -> BaseException | None:
        """An error that must stop sampling (e.g. the disk is full), else None."""


class ArrowSink:
    """``signals.arrow`` + ``signals.json`` in a run directory."""

    def __init__(self, run_dir: str):
        self.meta_path = os.path.join(run_dir, schema.SIGNALS_META)
        self.appender = Appender(os.path.join(run_dir, schema.SIGNALS), schema.SIGNALS_SCHEMA)
        self.flusher = PeriodicFlusher([self.appender]).start()

    def write(self, t_ns: int, rows: list[tuple[str, float]]) -> None:
        if rows:
            names, values = zip(*rows)
            self.appender.append_columns({"t_ns": [t_ns] * len(rows), "series": names, "value": values})

    def describe(self, metadata: dict) -> None:
        write_json_atomic(self.meta_path, metadata)

    def failure(self) -> BaseException | None:
        return self.flusher.error

    def close(self) -> None:
        self.flusher.stop()


def run_sampling(
    run_dir: str,
    pid: int | None,
    rate_hz: float,
    stop_event: threading.Event,
    samplers: list[Sampler] | None = None,
    config: SamplerConfig | None = None,
) -> SamplingSummary:
    """Sample until ``stop_event`` is set, then flush and close ``signals.arrow``.

    Raises the flusher's error (e.g. :class:`tailscope.rundir.DiskFullError`)
    if writing fails, after closing what can be closed.
    """
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    samplers = default_samplers(pid, config, rate_hz) if samplers is None else samplers
    sink = ArrowSink(run_dir)
    try:
        summary = sample_loop(samplers, rate_hz, stop_event, sink, pid)
    finally:
        sink.close()
    if sink.failure() is not None:
        raise sink.failure()
    return summary


def sample_loop(samplers: list[Sampler], rate_hz: float, stop_event: threading.Event,
                sink: SignalSink, pid: int | None = None) -> SamplingSummary:
    """Probe ``samplers``, then read them every ``1 / rate_hz`` s into ``sink`` until
    ``stop_event`` is set or the sink fails; describe the sources and series to
    the sink at start, on every change, and with the summary at the end. Every
    sampler is closed on the way out (its threads joined), whatever happened."""
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    try:
        return _loop(samplers, rate_hz, stop_event, sink, pid)
    finally:
        for sampler in samplers:
            close_sampler(sampler)


def _loop(samplers: list[Sampler], rate_hz: float, stop_event: threading.Event,
          sink: SignalSink, pid: int | None) -> SamplingSummary:
    sources = probe_samplers(samplers)
    active = [s for s in samplers if sources[s.name]["available"]]
    sink.describe(signals_metadata(rate_hz, pid, samplers, sources))
    versions = _series_versions(active)
    summary = SamplingSummary()
    lateness_ns: collections.deque = collections.deque(maxlen=MAX_LATENESS_SAMPLES)
    period_ns = int(1e9 / rate_hz)
    cpu_start = time.process_time()
    start = time.monotonic_ns()
    tick = 0
    while not stop_event.is_set() and sink.failure() is None:
        lateness_ns.append(time.monotonic_ns() - (start + tick * period_ns))
        failed = _sample_once(active, sink, summary)
        for sampler, exc in failed:
            active.remove(sampler)
            sources[sampler.name] = {"available": False, "reason": f"stopped: {type(exc).__name__}: {exc}"}
        current = _series_versions(active)
        if failed or current != versions:
            versions = current
            sink.describe(signals_metadata(rate_hz, pid, samplers, sources))
        summary.ticks += 1
        tick += 1
        now = time.monotonic_ns()
        behind = (now - start) // period_ns - tick
        if behind >= 0:  # overran at least the next deadline: skip to the one ahead
            summary.missed_ticks += behind + 1
            tick += behind + 1
        stop_event.wait(max(0.0, (start + tick * period_ns - now) / 1e9))
    summary.cpu_s = time.process_time() - cpu_start
    summary.wall_s = (time.monotonic_ns() - start) / 1e9
    summary.lateness_ms = lateness_percentiles_ms(lateness_ns)
    sink.describe({**signals_metadata(rate_hz, pid, samplers, sources), "sampling": summary.as_dict()})
    return summary


def lateness_percentiles_ms(lateness_ns) -> dict:
    """``{"p50", "p99", "max"}`` of tick lateness in ms (None when there were no ticks)."""
    values = sorted(lateness_ns)
    if not values:
        return {"p50": None, "p99": None, "max": None}

    def rank(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] / 1e6

    return {"p50": rank(0.5), "p99": rank(0.99), "max": values[-1] / 1e6}


def _series_versions(samplers: list[Sampler]) -> tuple:
    return tuple(getattr(s, "series_version", 0) for s in samplers)


def _sample_once(samplers: list[Sampler], sink: SignalSink, summary: SamplingSummary) -> list:
    """Read every sampler once into the sink (rows at the read's time, a :class:`Batch` at its own);
    return [(sampler, exception)] of failures."""
    failed = []
    for sampler in samplers:
        t_ns = time.time_ns()
        try:
            rows = list(sampler.read(t_ns))
        except Exception as exc:  # noqa: BLE001 — one broken source must not stop the others
            failed.append((sampler, exc))
            continue
        if rows and isinstance(rows[0], Batch):
            for batch in rows:
                sink.write(batch.t_ns, batch.rows)
                summary.rows += len(batch.rows)
        else:
            sink.write(t_ns, rows)
            summary.rows += len(rows)
    return failed
