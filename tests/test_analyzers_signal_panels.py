"""Signal panels (the report's grouping) and the series the analysis derives (GC pauses,
queue depth, throttled periods, generator lateness), and a real sampler run analysed end to end."""

from __future__ import annotations

import json
import threading

import numpy as np
import pyarrow as pa

from tailscope.analysis_model.codec import decode, encode
from tailscope.analysis_model.signals import Signals, SignalSeries
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.derived_series import gc_pause_series, lateness_series, throttled_period_share
from tailscope.analyzers.inputs.queues import queue_depth_series, queue_points
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.reports.signal_panels import PANELS, build_panels
from tailscope.rundir import RunWriter, schema
from tailscope.signals.sampling_loop import run_sampling

T0 = 1_767_225_600_000_000_000
MS = 1_000_000


def _series(name: str, unit: str = "", values=(1.0,)) -> SignalSeries:
    return SignalSeries(name=name, unit=unit, kind="gauge", t_ns=[T0] * len(values), values=list(values))


def test_panels_group_by_metric_name_in_page_order_and_skip_empty_ones():
    series = [_series(n) for n in (
        "psi.cpu.some_us", "host.cpu.user_s", 'host.cpu.user_s{host="gpu-7"}', "proc.runqueue_wait_ns",
        "cgroup.cpu.throttled_ns", 'gc.pause_ms{generation="2"}', "queue.depth", "queue.capacity",
        'prom.vllm:num_requests_waiting{model_name="m"}', "prom.vllm:gpu_cache_usage_perc", "prom.up",
        "gpu0.sm_clock_mhz", "gpu0.violation.power_ns", "host.vm.pswpout", "generator.lateness_p99_ms")]
    series.append(_series("gpu0.clocks_event.hw_slowdown", "bool", (0.0, 0.0)))  # never fired: left out
    series.append(_series("gpu0.clocks_event.sw_power_cap", "bool", (0.0, 1.0)))
    panels = {p["id"]: p for p in build_panels(series)}
    assert list(panels) == [p.id for p in PANELS if p.id in panels]  # page order
    assert panels["cpu"]["series"] == ["host.cpu.user_s", 'host.cpu.user_s{host="gpu-7"}']
    assert panels["runqueue_psi"]["series"] == ["proc.runqueue_wait_ns", "psi.cpu.some_us"]
    assert panels["queue"]["series"] == ["queue.capacity", "queue.depth", 'prom.vllm:num_requests_waiting{model_name="m"}']
    assert panels["prometheus"]["series"] == ["prom.vllm:gpu_cache_usage_perc"]  # prom.up is bookkeeping
    assert panels["gpu_throttle"]["series"] == ["gpu0.clocks_event.sw_power_cap", "gpu0.violation.power_ns"]
    assert panels["gc"]["unit"] == "ms" and panels["throttling"]["series"] == ["cgroup.cpu.throttled_ns"]
    assert "gpu_power" not in panels
    named = [name for p in panels.values() for name in p["series"]]
    assert len(named) == len(set(named))  # each series in one panel


def test_gc_pauses_become_points_per_generation():
    events = pa.table({
        "kind": ["gc_pause", "fault", "gc_pause", "gc_pause"],
        "start_ns": pa.array([T0 + 3 * MS, T0, T0 + 1 * MS, T0 + 9 * MS], pa.int64()),
        "end_ns": pa.array([T0 + 183 * MS, T0 + 5 * MS, T0 + 2 * MS, T0 + 11 * MS], pa.int64()),
        "source": ["target"] * 4,
        "attributes": [json.dumps({"gc.generation": 2}), "{}", json.dumps({"gc.generation": 0}),
                       json.dumps({"gc.generation": 0})],
    }, schema=schema.EVENTS_SCHEMA)
    series = {s["name"]: s for s in encode(gc_pause_series(events, 2000))}  # as analysis.json states them
    assert series['gc.pause_ms{generation="2"}']["values"] == [180.0]
    assert series['gc.pause_ms{generation="0"}']["t_ns"] == [T0 + MS, T0 + 9 * MS]
    assert series['gc.pause_ms{generation="0"}']["values"] == [1.0, 2.0]


def test_queue_depth_from_queue_wait_spans():
    n = 5
    spans = pa.table({
        "trace_id": ["a" * 32] * n, "span_id": ["b" * 16] * n, "parent_span_id": [None] * n,
        "name": ["queue_wait", "inference", "queue_wait", "queue_wait", "queue_wait"],
        "service": ["svc"] * n, "kind": pa.array([1] * n, pa.int8()),
        "start_ns": pa.array([T0 + i * MS for i in (4, 0, 1, 2, 3)], pa.int64()),
        "end_ns": pa.array([T0 + 10 * MS] * n, pa.int64()), "status_code": pa.array([0] * n, pa.int8()),
        "attributes": [json.dumps({"queue.depth": 9, "queue.capacity": 64}), "{}",
                       json.dumps({"queue.depth": 1, "queue.capacity": 64}), "not json",
                       json.dumps({"queue.depth": 5})],
        "links": [None] * n, "pid": pa.array([1] * n, pa.int64()),
    })
    series = {s["name"]: s for s in encode(queue_depth_series(queue_points(spans), 2000))}
    assert series["queue.depth"]["t_ns"] == [T0 + MS, T0 + 3 * MS, T0 + 4 * MS]
    assert series["queue.depth"]["values"] == [1.0, 5.0, 9.0]
    assert series["queue.capacity"]["values"] == [64.0, 64.0]


def test_throttled_period_share_from_counters_read_together():
    t = [T0 + i * 100 * MS for i in range(4)]
    table = pa.table({
        "t_ns": pa.array(t + t, pa.int64()),
        "series": ["cgroup.cpu.nr_periods"] * 4 + ["cgroup.cpu.nr_throttled"] * 4,
        "value": [0.0, 1.0, 2.0, 3.0] + [0.0, 1.0, 1.0, 2.0],
    })
    (share,) = encode(throttled_period_share(table, 2000))
    assert share["name"] == "cgroup.cpu.throttled_period_share"
    assert share["values"] == [1.0, 0.0, 1.0] and share["t_ns"] == t[1:]


def test_generator_lateness_per_window():
    n = 200
    scheduled = T0 + np.arange(n, dtype=np.int64) * 10 * MS  # 100 requests/s for 2 s
    late_ms = np.where(np.arange(n) >= 100, 30.0, 0.5)  # the second second is 30 ms late
    columns = {"scheduled_ns": scheduled, "sent_ns": scheduled + (late_ms * MS).astype(np.int64),
               "end_ns": scheduled + 50 * MS, "status": [200] * n, "cls": ["a"] * n}
    requests = pa.table({field.name: pa.array(columns.get(field.name, [None] * n), field.type)
                         for field in schema.REQUESTS_SCHEMA})
    req = request_arrays(requests)
    p99, peak = encode(lateness_series(req, (T0, T0 + 2_000 * MS), 1.0))
    assert p99["name"] == "generator.lateness_p99_ms" and len(p99["values"]) == 2
    assert p99["values"][0] < 1.0 and p99["values"][1] == 30.0 and peak["values"][1] == 30.0


def test_real_sampler_run_analyses_into_panels_with_sampling_health(tmp_path):
    writer = RunWriter(str(tmp_path), {"name": "signals-only"})
    stop = threading.Event()
    timer = threading.Timer(0.6, stop.set)
    timer.start()
    try:
        run_sampling(str(tmp_path), None, 20.0, stop)
    finally:
        timer.cancel()
        writer.close(status="complete")
    analysis = analyze_run(str(tmp_path))
    signals = analysis["signals"]
    panels = {p["id"]: p for p in build_panels(decode(Signals, signals, "signals").series)}
    assert {"cpu", "memory", "ctxt"} <= set(panels)
    names = {s["name"] for s in signals["series"]}
    assert all(name in names for p in panels.values() for name in p["series"])
    cpu = next(s for s in signals["series"] if s["name"] == "host.cpu.user_s")
    assert cpu["unit"] == "s/s" and all(0 <= v <= 64 for v in cpu["values"])  # cores in use
    assert signals["sampling"]["ticks"] >= 5 and signals["sampling"]["lateness_ms"]["p99"] is not None
