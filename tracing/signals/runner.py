"""The sampling loop: probe the samplers, then read them on a fixed schedule.

Ticks are at absolute deadlines ``start + k / rate_hz`` (monotonic clock), so
the schedule does not drift; a tick that overruns the next deadline skips the
missed ticks instead of bunching them. Rows ``(t_ns, series, value)`` go to
``signals.arrow`` (flushed every 0.5 s); ``signals.json`` describes every
series and every source. A sampler that fails mid-run (e.g. the target
exited) is disabled, and ``signals.json`` is rewritten with the reason.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass

from tailscope.rundir import Appender, PeriodicFlusher, schema, write_json_atomic

from .base import Sampler
from .cgroup import CgroupSampler
from .gpu import GpuSampler
from .host import HostCpuSampler, LoadAvgSampler, MemorySampler, VmstatSampler
from .process import ConnectionsSampler, ProcessSampler
from .psi import PressureSampler

DEFAULT_RATE_HZ = 10.0


def default_samplers(pid: int | None) -> list[Sampler]:
    """Every sampler tailscope ships; the per-process ones watch ``pid`` (None: none)."""
    return [
        HostCpuSampler(),
        LoadAvgSampler(),
        MemorySampler(),
        VmstatSampler(),
        PressureSampler(),
        ProcessSampler(pid),
        ConnectionsSampler(pid),
        CgroupSampler(pid),
        GpuSampler(),
    ]


def probe_samplers(samplers: list[Sampler]) -> dict[str, dict]:
    """``{name: {"available": bool, "reason": str | None}}`` after probing each sampler."""
    sources = {}
    for sampler in samplers:
        try:
            reason = sampler.probe()
        except Exception as exc:  # a probe must never stop the others
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
    """How a sampling run went: ticks taken and ticks skipped because a tick overran."""

    ticks: int = 0
    missed_ticks: int = 0
    rows: int = 0


def run_sampling(
    run_dir: str,
    pid: int | None,
    rate_hz: float,
    stop_event: threading.Event,
    samplers: list[Sampler] | None = None,
) -> SamplingSummary:
    """Sample until ``stop_event`` is set, then flush and close ``signals.arrow``.

    Raises the flusher's error (e.g. :class:`tailscope.rundir.DiskFullError`)
    if writing fails, after closing what can be closed.
    """
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    samplers = default_samplers(pid) if samplers is None else samplers
    sources = probe_samplers(samplers)
    meta_path = os.path.join(run_dir, schema.SIGNALS_META)
    metadata = signals_metadata(rate_hz, pid, samplers, sources)
    write_json_atomic(meta_path, metadata)
    active = [s for s in samplers if sources[s.name]["available"]]
    appender = Appender(os.path.join(run_dir, schema.SIGNALS), schema.SIGNALS_SCHEMA)
    flusher = PeriodicFlusher([appender]).start()
    summary = SamplingSummary()
    period = 1.0 / rate_hz
    start = time.monotonic()
    tick = 0
    try:
        while not stop_event.is_set() and flusher.error is None:
            failed = _sample_once(active, appender, summary)
            if failed:
                for sampler, exc in failed:
                    active.remove(sampler)
                    sources[sampler.name] = {"available": False, "reason": f"stopped: {type(exc).__name__}: {exc}"}
                write_json_atomic(meta_path, {**metadata, "sources": sources})
            summary.ticks += 1
            tick += 1
            now = time.monotonic()
            behind = int((now - start) / period) - tick
            if behind >= 0:  # overran at least the next deadline: skip to the one ahead
                summary.missed_ticks += behind + 1
                tick += behind + 1
            stop_event.wait(max(0.0, start + tick * period - now))
    finally:
        flusher.stop()
    if flusher.error is not None:
        raise flusher.error
    return summary


def _sample_once(samplers: list[Sampler], appender: Appender, summary: SamplingSummary) -> list:
    """Read every sampler once, appending rows; return [(sampler, exception)] of failures."""
    failed = []
    for sampler in samplers:
        t_ns = time.time_ns()
        try:
            rows = list(sampler.read(t_ns))
        except Exception as exc:  # one broken source must not stop the others
            failed.append((sampler, exc))
            continue
        for series, value in rows:
            appender.append(t_ns, series, value)
        summary.rows += len(rows)
    return failed
