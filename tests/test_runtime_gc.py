"""GC from a target's runtime metrics (issue 28): OTLP histograms and sums decoded into the run's
series, the GC detector naming ``gc`` from them where no GC events exist, and the words that say
what was checked.

The payloads follow the OpenTelemetry semantic conventions for runtime metrics (names, units,
attributes): ``jvm.gc.duration`` (histogram, s, ``jvm.gc.action``), ``v8js.gc.duration``
(histogram, s, ``v8js.gc.type``; sent with delta temporality, as the Node.js SDK may),
``dotnet.gc.pause.time`` (counter, s) with ``dotnet.gc.collections`` (``gc.heap.generation``),
Go's ``process.runtime.go.gc.pause_ns`` (histogram, ns) and ``go.memory.gc.pause.duration``
(exponential histogram, s), ``cpython.gc.collections`` (counter, ``cpython.gc.generation``) and
the older ``process.runtime.cpython.gc_count`` (``gc.get_count()`` per ``count``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from receiver_helpers import kv, post, running_receiver
from reliability_helpers import OwnedProcess, write_scenario

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.runtime_gc import _match, _split
from tailscope.rundir import schema
from tailscope.signals.prometheus import parse_exposition
from tailscope.signals.prometheus import series_name as prom_series_name
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.tracing.ingest.otlp_decode import decode_metrics_json, decode_metrics_protobuf

CUMULATIVE = m.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = m.AGGREGATION_TEMPORALITY_DELTA
NS = 1_000_000_000


def _request(metrics: list[m.Metric]) -> ExportMetricsServiceRequest:
    resource = m.ResourceMetrics(scope_metrics=[m.ScopeMetrics(metrics=metrics)])
    resource.resource.attributes.extend([kv("service.name", "svc")])
    return ExportMetricsServiceRequest(resource_metrics=[resource])


def _histogram(name, unit, temporality, points, exponential=False):
    """points: (t_ns, attrs, count, sum)."""
    if exponential:
        data = m.ExponentialHistogram(aggregation_temporality=temporality, data_points=[
            m.ExponentialHistogramDataPoint(time_unix_nano=t, attributes=[kv(k, v) for k, v in attrs.items()],
                                            count=count, sum=total, scale=3) for t, attrs, count, total in points])
        return m.Metric(name=name, unit=unit, exponential_histogram=data)
    data = m.Histogram(aggregation_temporality=temporality, data_points=[
        m.HistogramDataPoint(time_unix_nano=t, attributes=[kv(k, v) for k, v in attrs.items()], count=count, sum=total,
                             explicit_bounds=[0.01, 0.1, 1, 10], bucket_counts=[count, 0, 0, 0, 0])
        for t, attrs, count, total in points])
    return m.Metric(name=name, unit=unit, histogram=data)


def _counter(name, unit, points, monotonic=True):
    """points: (t_ns, attrs, value)."""
    data = m.Sum(aggregation_temporality=CUMULATIVE, is_monotonic=monotonic, data_points=[
        m.NumberDataPoint(time_unix_nano=t, attributes=[kv(k, v) for k, v in attrs.items()],
                          **({"as_int": v} if isinstance(v, int) else {"as_double": v})) for t, attrs, v in points])
    return m.Metric(name=name, unit=unit, sum=data)


def runtime_payload(runtime: str, start_ns: int, seconds: int, gc_from_ns: int, gc_to_ns: int) -> ExportMetricsServiceRequest:
    """One export request holding ``seconds`` 1-s export points of ``runtime``'s GC metrics: a little
    young-generation GC in every interval, and in the intervals ending inside [gc_from, gc_to] 450 ms
    of GC time a second and four old-generation collections."""
    times = [start_ns + i * NS for i in range(seconds + 1)]
    hot = [gc_from_ns < t <= gc_to_ns + NS for t in times]
    minor_n = [3 * i for i in range(len(times))]
    minor_s = [0.002 * i for i in range(len(times))]
    major_n, major_s = [], []
    n = s = 0
    for h in hot:
        n, s = n + (4 if h else 0), s + (0.45 if h else 0.0)
        major_n.append(n)
        major_s.append(s)
    if runtime == "jvm":
        minor, major = {"jvm.gc.action": "end of minor GC", "jvm.gc.name": "G1 Young Generation"}, \
            {"jvm.gc.action": "end of major GC", "jvm.gc.name": "G1 Old Generation"}
        points = [(t, minor, minor_n[i], minor_s[i]) for i, t in enumerate(times)] + \
                 [(t, major, major_n[i], major_s[i]) for i, t in enumerate(times)]
        return _request([_histogram("jvm.gc.duration", "s", CUMULATIVE, points)])
    if runtime == "v8js":  # delta: each point is its own interval's
        points = [(t, {"v8js.gc.type": "minor"}, 3, 0.002) for t in times] + \
                 [(t, {"v8js.gc.type": "major"}, 4 if h else 0, 0.45 if h else 0.0) for t, h in zip(times, hot)]
        return _request([_histogram("v8js.gc.duration", "s", DELTA, points)])
    if runtime == "dotnet":
        pause = [(t, {}, minor_s[i] + major_s[i]) for i, t in enumerate(times)]
        collections = [(t, {"gc.heap.generation": "gen0"}, minor_n[i]) for i, t in enumerate(times)] + \
                      [(t, {"gc.heap.generation": "gen2"}, major_n[i]) for i, t in enumerate(times)]
        return _request([_counter("dotnet.gc.pause.time", "s", pause),
                         _counter("dotnet.gc.collections", "{collection}", collections)])
    if runtime == "go":
        ns_points = [(t, {}, minor_n[i] + major_n[i], (minor_s[i] + major_s[i]) * 1e9) for i, t in enumerate(times)]
        s_points = [(t, {}, minor_n[i] + major_n[i], minor_s[i] + major_s[i]) for i, t in enumerate(times)]
        return _request([_histogram("process.runtime.go.gc.pause_ns", "ns", CUMULATIVE, ns_points),
                         _histogram("go.memory.gc.pause.duration", "s", CUMULATIVE, s_points, exponential=True)])
    if runtime == "cpython":
        points = [(t, {"cpython.gc.generation": 0}, minor_n[i]) for i, t in enumerate(times)] + \
                 [(t, {"cpython.gc.generation": 2}, major_n[i]) for i, t in enumerate(times)]
        return _request([_counter("cpython.gc.collections", "{collection}", points)])
    if runtime == "cpython-old":  # gc.get_count(): generation 2's count restarts from 0 when it is collected,
        values, v = [], 9             # so a collection shows as a lower count than the last export's
        for h in hot:
            v = max(v - 2, 0) if h else min(v + 1, 9)
            values.append(v)
        points = [(t, {"count": "2"}, v) for t, v in zip(times, values)]
        return _request([_counter("process.runtime.cpython.gc_count", "{count}", points)])
    raise ValueError(runtime)


RUNTIMES = ("jvm", "v8js", "dotnet", "go", "cpython", "cpython-old")
EXPECTED_SERIES = {
    "jvm": ('jvm.gc.duration.sum{jvm.gc.action="end of major GC",jvm.gc.name="G1 Old Generation"}',
            'jvm.gc.duration.count{jvm.gc.action="end of minor GC",jvm.gc.name="G1 Young Generation"}'),
    "v8js": ('v8js.gc.duration.sum{v8js.gc.type="major"}', 'v8js.gc.duration.count{v8js.gc.type="minor"}'),
    "dotnet": ("dotnet.gc.pause.time", 'dotnet.gc.collections{gc.heap.generation="gen2"}'),
    "go": ("process.runtime.go.gc.pause_ns.sum", "go.memory.gc.pause.duration.count"),
    "cpython": ('cpython.gc.collections{cpython.gc.generation="2"}',),
    "cpython-old": ('process.runtime.cpython.gc_count{count="2"}',),
}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_runtime_gc_payloads_decode_the_same_from_protobuf_and_json(runtime):
    request = runtime_payload(runtime, 1_700_000_000 * NS, 6, 1_700_000_002 * NS, 1_700_000_003 * NS)
    from_pb = decode_metrics_protobuf(request.SerializeToString())
    from_json = decode_metrics_json(json_format.MessageToJson(request).encode())
    assert (from_pb.t_ns, from_pb.series, from_pb.value) == (from_json.t_ns, from_json.series, from_json.value)
    assert from_pb.descriptors == from_json.descriptors
    for series in EXPECTED_SERIES[runtime]:
        assert series in from_pb.series, sorted(set(from_pb.series))
        base, _ = _split(series)
        assert _match(base) is not None  # the GC catalogue reads it
    if runtime == "jvm":
        assert from_pb.descriptors["jvm.gc.duration.sum"] == {"unit": "s", "kind": "counter", "temporality": "cumulative",
                                                               "description": "sum of jvm.gc.duration"}
        rows = [v for s, v in zip(from_pb.series, from_pb.value) if s == EXPECTED_SERIES["jvm"][0]]
        assert rows == pytest.approx([0, 0, 0, 0.45, 0.9, 0.9, 0.9])  # s of major GC, cumulative
    if runtime == "v8js":
        assert from_pb.descriptors["v8js.gc.duration.count"]["kind"] == "gauge"  # delta: increments as sent
        assert from_pb.descriptors["v8js.gc.duration.count"]["temporality"] == "delta"


def test_prometheus_names_of_runtime_gc_metrics_are_in_the_catalogue():
    page = ("# TYPE jvm_gc_duration_seconds histogram\n"
            'jvm_gc_duration_seconds_bucket{jvm_gc_action="end of major GC",le="+Inf"} 2\n'
            'jvm_gc_duration_seconds_sum{jvm_gc_action="end of major GC"} 0.4\n'
            'jvm_gc_duration_seconds_count{jvm_gc_action="end of major GC"} 2\n'
            "# TYPE python_gc_collections_total counter\n"
            'python_gc_collections_total{generation="2"} 7\n'
            "# TYPE go_gc_duration_seconds summary\n"
            'go_gc_duration_seconds{quantile="0.5"} 0.0001\ngo_gc_duration_seconds_sum 0.02\ngo_gc_duration_seconds_count 9\n')
    names = [prom_series_name(sample, None) for sample in parse_exposition(page)]
    matched = {name: _match(_split(name)[0]) for name in names}
    assert matched['prom.jvm_gc_duration_seconds_sum{jvm_gc_action="end of major GC"}'][1] == "sum"
    assert matched['prom.python_gc_collections_total{generation="2"}'][1] == "value"
    assert matched["prom.go_gc_duration_seconds_count"][1] == "count"
    assert matched['prom.go_gc_duration_seconds{quantile="0.5"}'] is None  # a quantile is no interval's GC


def _run_with_runtime_metrics(tmp_path, runtime: str | None, kind: str = "stall", body: str = "protobuf") -> dict:
    """A synthetic run of a target that sends no GC events (a 4-s spike of ``kind`` at 20 s), with
    ``runtime``'s GC metrics posted to a receiver writing into it (GC over the spike)."""
    truth = write_synthetic_run(tmp_path / "run", duration_s=40, rate=200, seed=3, gc_events=False,
                                spikes=[{"kind": kind, "at_s": 20, "duration_s": 4, "extra_ms": 120}])
    if runtime is not None:
        (spike,) = truth["spikes"]
        gc_from, gc_to = (spike["start_ns"], spike["end_ns"]) if kind == "stall" else (0, 0)
        request = runtime_payload(runtime, truth["start_ns"] - NS, 42, gc_from, gc_to)
        payload, content_type = ((request.SerializeToString(), "application/x-protobuf") if body == "protobuf"
                                 else (json_format.MessageToJson(request).encode(), "application/json"))
        received = tmp_path / "received"  # the receiver owns spans.arrow: it writes a run folder of its own
        received.mkdir()
        with running_receiver(received, port=0, grpc_port=None) as rx:
            status, _, _ = post(rx.port, "/v1/metrics", payload, content_type)
            assert status == 200
        for name in (schema.SIGNALS_RECEIVER_META, "signals.receiver.arrow"):
            shutil.copy(received / name, os.path.join(truth["path"], name))
    return truth


@pytest.mark.parametrize("runtime, body", [(r, "protobuf") for r in RUNTIMES] + [("cpython", "json")])
def test_a_stall_over_runtime_gc_metrics_is_named_gc_with_their_figures(tmp_path, runtime, body):
    truth = _run_with_runtime_metrics(tmp_path, runtime, body=body)
    analysis = analyze_run(truth["path"])
    assert analysis["events"]["gc_pauses"]["count"] == 0
    (spike,) = [s for s in analysis["spikes"] if s["end_ns"] > truth["spikes"][0]["start_ns"]]
    top = spike["causes"][0]
    assert top["kind"] == "gc", [(c["kind"], c["confidence"], c["evidence"].get("summary")) for c in spike["causes"]]
    evidence = top["evidence"]
    assert evidence["checked_with"].startswith("its runtime GC metrics: ")
    assert "(OTLP)" in evidence["summary"] and "stall" in evidence["summary"]
    figures = evidence["runtime_metrics"]
    assert figures["major"] or figures["gc_ms"] >= 100, figures
    assert evidence["factors"]["runtime_backing"] > 0.5
    stall = [c for c in spike["causes"] if c["kind"] == "process_stall"]
    assert not stall or stall[0]["confidence"] < top["confidence"]


def test_gc_checked_from_runtime_metrics_is_said_so_and_without_them_it_is_not_checked(tmp_path):
    with_metrics = analyze_run(_run_with_runtime_metrics(tmp_path / "a", "cpython", kind="postprocess")["path"])
    (spike,) = with_metrics["spikes"]
    cause = spike["causes"][0]
    assert cause["kind"] == "unexplained"
    assert "gc" in cause["evidence"]["detectors_consulted"]
    assert ("GC pauses of the target (from its runtime GC metrics: cpython.gc.collections (OTLP))"
            in cause["evidence"]["summary"])
    without = analyze_run(_run_with_runtime_metrics(tmp_path / "b", None, kind="postprocess")["path"])
    (spike,) = without["spikes"]
    cause = spike["causes"][0]
    assert "gc" in cause["evidence"]["detectors_without_inputs"]
    checked = cause["evidence"]["summary"].split("Checked: ", 1)[1].split(";", 1)[0]
    assert "GC pauses" not in checked
    assert "exported no runtime GC metrics" in cause["evidence"]["summary"]
    assert json.dumps(without).count("runtime GC metrics:") == 0
    events = write_synthetic_run(tmp_path / "c", duration_s=40, rate=200, seed=3, gc_events=True,
                                 spikes=[{"kind": "postprocess", "at_s": 20, "duration_s": 4, "extra_ms": 120}])
    (spike,) = analyze_run(events["path"])["spikes"]
    assert "Checked: GC pauses of the target (from its GC pause events)" in spike["causes"][0]["evidence"]["summary"]


def test_a_collection_counted_in_one_interval_does_not_explain_seconds_of_queueing(tmp_path):
    """Counts say a collection ended in an export interval, not how long it paused: at most that
    interval and the one before. On the real vLLM overloaded (requests waiting 10 s), two gen-2
    collections of its API server in one 0.3-s interval were ranked above the queue, because the
    slow requests, running for seconds, overlapped everything. Here a queue spike (6 s extra) holds
    four gen-2 collections in one 1-s interval: a pause of at most 2 s is not named."""
    truth = write_synthetic_run(tmp_path / "run", duration_s=40, rate=20, seed=3, gc_events=False,
                                spikes=[{"kind": "queue", "at_s": 20, "duration_s": 6, "extra_ms": 6000}])
    (spike,) = truth["spikes"]
    collected = spike["start_ns"] + 2 * NS
    request = runtime_payload("cpython", truth["start_ns"] - NS, 42, collected, collected)
    received = tmp_path / "received"
    received.mkdir()
    with running_receiver(received, port=0, grpc_port=None) as rx:
        assert post(rx.port, "/v1/metrics", request.SerializeToString(), "application/x-protobuf")[0] == 200
    for name in (schema.SIGNALS_RECEIVER_META, "signals.receiver.arrow"):
        shutil.copy(received / name, os.path.join(truth["path"], name))
    analysis = analyze_run(truth["path"])
    (found,) = [s for s in analysis["spikes"] if s["end_ns"] > spike["start_ns"]]
    assert [c["kind"] for c in found["causes"] if c["kind"] == "gc" and c["confidence"] >= 0.1] == [], found["causes"]
    assert "cpython.gc.collections (OTLP)" in found["causes"][0]["evidence"]["summary"]  # checked, not the cause
    from tailscope.analyzers.causes.detect_gc import _pause_bound_ms
    t0 = np.array([10, 11, 30]) * NS  # [10, 11), [11, 12), [30, 31) s, each with the one before: 9-12 and 29-31 s
    assert _pause_bound_ms(t0, t0 + NS) == 3_000 + 2_000


STALLING_SERVICE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stalling_otel_service.py")


def test_a_plain_fastapi_service_exporting_cpython_gc_metrics_has_its_stalls_named_gc(tmp_path):
    """tests/stalling_otel_service.py --gc-metrics: FastAPI + OpenTelemetry's instrumentation and the
    SDK's MeterProvider exporting ``cpython.gc.collections`` every second over OTLP/HTTP, no GC
    events; four full collections (gen-2, holding the GIL) 0.4 s apart, 8 s into a 20-s run at
    30 req/s. A spike over them is named ``gc`` from the runtime metric (quoted), never the generator."""
    pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install fastapi)")
    pytest.importorskip("opentelemetry.instrumentation.fastapi",
                        reason="opentelemetry-instrumentation-fastapi is not installed")
    receiver_port = free_port()
    service = OwnedProcess([sys.executable, STALLING_SERVICE, "--start-s", "8", "--every-s", "0.4", "--count", "4",
                            "--heap", "1500000", "--gc-metrics", "--metrics-interval-ms", "1000"],
                           stdout=subprocess.PIPE,
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
                                "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        line = service.proc.stdout.readline().decode()
        assert line.startswith("LISTENING "), "".join(service.stderr_lines)[-2000:]
        scenario = write_scenario(tmp_path / "stalls.yaml", f"http://127.0.0.1:{line.split()[1]}",
                                  duration="20s", rate=30, request_path="/predict")
        result = run_tailscope("run", scenario, "--out", str(tmp_path / "runs"), "--receiver-port",
                               str(receiver_port), "--receiver-grpc-port", "-1", timeout=240)
    finally:
        service.stop()
    pauses = [int(text.split()[1]) for text in service.proc.stdout.read().decode().splitlines()
              if text.startswith("PAUSE ")]
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    assert len(pauses) == 4
    analysis = load_analysis(only_run_dir(tmp_path / "runs"))
    assert analysis["events"]["gc_pauses"]["count"] == 0
    over = [s for s in analysis["spikes"] if any(s["start_ns"] - 2 * 10**9 <= p < s["end_ns"] for p in pauses)]
    assert over, [(s["start_ns"], s["end_ns"]) for s in analysis["spikes"]]
    named = [c for s in over for c in s["causes"][:1] if c["kind"] == "gc"]
    assert named, [[(c["kind"], c["confidence"], c["evidence"].get("summary")) for c in s["causes"]] for s in over]
    assert "cpython.gc.collections (OTLP)" in named[0]["evidence"]["summary"]
    assert "gen-2" in named[0]["evidence"]["summary"]
    assert all("generator" not in [c["kind"] for c in s["causes"]] for s in over)


def test_runtime_gc_metrics_made_by_the_opentelemetry_sdk_decode_into_the_gc_series():
    """The shapes as the OpenTelemetry SDK makes and encodes them (MeterProvider, an in-memory reader,
    the OTLP exporter's encoder): a Histogram (explicit buckets, and exponential through a View), a
    Counter with a delta reader, an ObservableCounter with an int attribute; protobuf and JSON."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

    delta = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA,
                                                        Histogram: AggregationTemporality.DELTA})
    cumulative = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[delta, cumulative], views=[
        View(instrument_name="go.memory.gc.pause.duration", aggregation=ExponentialBucketHistogramAggregation()),
        View(instrument_name="*")])
    meter = provider.get_meter("runtime")
    meter.create_histogram("jvm.gc.duration", unit="s").record(0.18, {"jvm.gc.action": "end of major GC",
                                                                        "jvm.gc.name": "G1 Old Generation"})
    meter.create_histogram("v8js.gc.duration", unit="s").record(0.2, {"v8js.gc.type": "major"})
    meter.create_counter("dotnet.gc.pause.time", unit="s").add(0.25)
    meter.create_histogram("go.memory.gc.pause.duration", unit="s").record(0.0004)
    meter.create_observable_counter("cpython.gc.collections", unit="{collection}", callbacks=[
        lambda options: [Observation(3, {"cpython.gc.generation": 2})]])
    for reader, temporality in ((cumulative, "cumulative"), (delta, "delta")):
        request = encode_metrics(reader.get_metrics_data())
        from_pb = decode_metrics_protobuf(request.SerializeToString())
        from_json = decode_metrics_json(json_format.MessageToJson(request).encode())
        assert (from_pb.series, from_pb.value) == (from_json.series, from_json.value)
        values = dict(zip(from_pb.series, from_pb.value))
        assert values['jvm.gc.duration.sum{jvm.gc.action="end of major GC",jvm.gc.name="G1 Old Generation"}'] \
            == pytest.approx(0.18)
        assert values['v8js.gc.duration.count{v8js.gc.type="major"}'] == 1
        assert values["dotnet.gc.pause.time"] == pytest.approx(0.25)
        assert values["go.memory.gc.pause.duration.sum"] == pytest.approx(0.0004)
        assert values['cpython.gc.collections{cpython.gc.generation="2"}'] == 3
        assert from_pb.descriptors["jvm.gc.duration.sum"]["temporality"] == temporality
        assert from_pb.descriptors["dotnet.gc.pause.time"]["kind"] == ("counter" if temporality == "cumulative"
                                                                         else "gauge")
        assert all(_match(_split(name)[0]) for name in values)
    provider.shutdown()
