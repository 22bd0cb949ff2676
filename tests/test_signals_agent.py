"""The remote agent: the real ``tailscope agent`` command sends its samplers' series
as OTLP metrics (OpenTelemetry SDK exporter) into a real receiver on loopback, with
units, kinds, a host label and a measured clock offset; the analyzers align them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from signals_helpers import start_burner, stop_process

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.inputs.signal_series import load_receiver_meta, signal_series
from tailscope.rundir import read_stream, schema
from tailscope.signals.remote_agent import build_metrics_data, estimate_clock_offset, split_series
from tailscope.tracing.ingest.receiver import OtlpReceiver

HOST = "gpu-box-7"


@pytest.fixture
def receiver(tmp_path):
    rx = OtlpReceiver(str(tmp_path), host="127.0.0.1", port=0)
    port = rx.start()
    try:
        yield rx, port
    finally:
        rx.stop()


def _stored(run_dir) -> dict[str, list[tuple[int, float]]]:
    read = read_stream(os.path.join(run_dir, schema.writer_file(schema.SIGNALS, "receiver")), schema.SIGNALS_SCHEMA)
    out: dict[str, list] = {}
    for row in read.table.to_pylist():
        out.setdefault(row["series"], []).append((row["t_ns"], row["value"]))
    return out


def test_agent_command_sends_host_and_process_series_with_units_and_clock(tmp_path, receiver):
    rx, port = receiver
    target = start_burner()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tailscope.cli.main", "agent", "--harness", f"http://127.0.0.1:{port}",
             "--target-pid", str(target.pid), "--host-label", HOST, "--rate", "10", "--duration", "2s",
             "--export-interval", "0.5s"],
            capture_output=True, text=True, timeout=60)
    finally:
        stop_process(target)
    assert done.returncode == 0, done.stderr
    assert "points sent" in done.stdout and " 0 dropped" in done.stdout
    rx.stop()
    stored = _stored(str(tmp_path))
    label = f'{{host="{HOST}"}}'
    cpu = [v for _, v in sorted(stored[f"proc.cpu.user_s{label}"])]
    assert len(cpu) >= 5 and cpu[-1] > cpu[0]  # the burner's CPU seconds, cumulative
    assert cpu == sorted(cpu)
    assert len(stored[f"host.cpu.user_s{label}"]) == len(cpu)  # one point per tick per series
    assert f"psi.cpu.some_us{label}" in stored or f"host.load.1m{label}" in stored
    offsets = stored[f"agent.clock_offset_ns{label}"]
    rtts = stored[f"agent.clock_rtt_ns{label}"]
    assert abs(offsets[0][1]) <= rtts[0][1] / 2 + 1e6  # same clock here: offset within the RTT bound
    metrics = load_receiver_meta(str(tmp_path))["metrics"]
    assert metrics["host.cpu.user_s"] == {"unit": "s", "kind": "counter", "temporality": "cumulative",
                                          "description": "CPU time in user mode, all CPUs (/proc/stat)"}
    assert metrics["proc.rss_bytes"]["kind"] == "gauge" and metrics["proc.rss_bytes"]["unit"] == "bytes"


def test_agent_without_a_reachable_harness_exits_2():
    done = subprocess.run([sys.executable, "-m", "tailscope.cli.main", "agent", "--harness", "http://127.0.0.1:9",
                           "--duration", "1s"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "does not answer /v1/time" in done.stderr


def test_clock_echo_estimate_is_bounded_by_half_the_round_trip(receiver):
    _, port = receiver
    estimate = estimate_clock_offset(f"http://127.0.0.1:{port}", probes=8)
    assert 0 < estimate.rtt_ns < 1e9
    assert abs(estimate.offset_ns) <= estimate.rtt_ns / 2 + 1_000


def test_prometheus_labels_become_attributes_beside_the_host():
    assert split_series('prom.vllm:num_requests_waiting{model_name="m \\"x\\"",zone="a"}') == (
        "prom.vllm:num_requests_waiting", {"model_name": 'm "x"', "zone": "a"})
    assert split_series("host.cpu.user_s") == ("host.cpu.user_s", {})
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    data = build_metrics_data([(5, 'prom.q{model="m"}', 3.0), (5, "proc.cpu.user_s", 1.5)],
                              {"proc.cpu.user_s": {"unit": "s", "kind": "counter", "description": "cpu"}},
                              HOST, 1, Resource.create({}), InstrumentationScope("t"))
    metrics = {m.name: m for m in data.resource_metrics[0].scope_metrics[0].metrics}
    assert dict(metrics["prom.q"].data.data_points[0].attributes) == {"model": "m", "host": HOST}
    assert metrics["proc.cpu.user_s"].data.is_monotonic and metrics["proc.cpu.user_s"].unit == "s"


def test_remote_series_are_shifted_onto_the_harness_clock():
    label = f'{{host="{HOST}"}}'
    t = np.arange(10, dtype=np.int64) * 100_000_000 + 10**18
    offset_ns = 250_000_000  # the agent's clock is 250 ms behind the harness's
    table = pa.table({
        "t_ns": pa.array(list(t) + list(t) + [int(t[0]), int(t[-1])], pa.int64()),
        "series": [f"proc.rss_bytes{label}"] * 10 + ["proc.rss_bytes"] * 10 + [f"agent.clock_offset_ns{label}"] * 2,
        "value": [1.0] * 20 + [float(offset_ns)] * 2,
    })
    receiver_meta = {"metrics": {"proc.rss_bytes": {"unit": "bytes", "kind": "gauge", "description": "rss"}}}
    series = {s["name"]: s for s in encode(signal_series(table, {}, receiver_meta=receiver_meta))}
    remote, local = series[f"proc.rss_bytes{label}"], series["proc.rss_bytes"]
    assert remote["t_ns"] == [int(v) + offset_ns for v in t]
    assert local["t_ns"] == [int(v) for v in t]  # the harness's own series stay as read
    assert remote["unit"] == "bytes" and remote["source"] == f"otlp:{HOST}"
