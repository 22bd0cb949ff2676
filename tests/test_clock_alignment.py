"""Clock alignment: an injected client→server offset is recovered within 1 ms and corrected;
where each side takes its timestamps is not taken for an offset (a real same-host FastAPI
service instrumented by OpenTelemetry, through a real `tailscope run`, gets no clock warning)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope
from reliability_helpers import OwnedProcess, write_scenario
from run_builders import TRITON_FIXTURE, triton_requests, write_requests_run

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.clock_alignment import (
    align_clocks,
    feasible_interval,
    offset_demonstrated,
    placement_tolerance,
    starts_fit,
)
from tailscope.rundir import load_run, schema
from tailscope.testkit.synthetic import write_synthetic_run
from tailscope.tracing.ingest.importers import import_spans

SKEW_NS = 37_000_000  # the target's clock runs 37 ms ahead of the generator's


def shift_stream(path: str, table_schema: pa.Schema, offset_ns: int, kind: str | None = None) -> None:
    """Rewrite one stream file with start_ns/end_ns + offset (rows of ``kind`` only, when given)."""
    with open(path, "rb") as fh:  # read into memory: the file is rewritten below
        table = pa.ipc.open_stream(pa.py_buffer(fh.read())).read_all()
    mask = None if kind is None else pc.equal(table.column("kind"), kind)
    for name in ("start_ns", "end_ns"):
        shifted = pc.add(table.column(name), offset_ns)
        if mask is not None:
            shifted = pc.if_else(mask, shifted, table.column(name))
        table = table.set_column(table.schema.get_field_index(name), name, shifted)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table_schema) as writer:
        writer.write_table(table)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same synthetic run twice: as recorded, and with the target's clock 37 ms ahead."""
    base = tmp_path_factory.mktemp("clock")
    paths = {}
    for name, skew in (("aligned", 0), ("skewed", SKEW_NS)):
        paths[name] = str(base / name)
        write_synthetic_run(paths[name], duration_s=20, rate=50, seed=11,
                            spikes=[{"kind": "gc", "at_s": 8, "duration_s": 4, "extra_ms": 60}])
        if skew:
            shift_stream(os.path.join(paths[name], schema.SPANS), schema.SPANS_SCHEMA, skew)
            for f in schema.table_files(paths[name], schema.EVENTS):
                shift_stream(f, schema.EVENTS_SCHEMA, skew, kind="gc_pause")
    return paths


def test_injected_offset_is_recovered_within_1_ms_and_applied(runs):
    clock = analyze_run(runs["skewed"])["stages"]["clock_alignment"]
    assert clock["applied"] and clock["mode"] == "auto" and clock["consistent"]
    assert abs(clock["offset_ms"] - (-SKEW_NS / 1e6)) < 1.0
    assert clock["bound_ms"] < 1.0
    assert clock["feasible_ms"][0] <= -SKEW_NS / 1e6 <= clock["feasible_ms"][1]
    assert clock["violating_share_before"] > 0.99 and clock["violating_share_after"] < 0.02


def test_corrected_analysis_matches_the_unskewed_one(runs):
    aligned, skewed = analyze_run(runs["aligned"]), analyze_run(runs["skewed"])
    assert not aligned["stages"]["clock_alignment"]["applied"]
    assert abs(aligned["stages"]["clock_alignment"]["offset_ms"]) < 1.0
    assert skewed["stages"]["by_stage"] == aligned["stages"]["by_stage"]
    assert [s["start_ns"] for s in skewed["spikes"]] == [s["start_ns"] for s in aligned["spikes"]]
    assert [c["kind"] for s in skewed["spikes"] for c in s["causes"]] == \
        [c["kind"] for s in aligned["spikes"] for c in s["causes"]]
    longest = lambda a: [(p["start_ns"], p["end_ns"]) for p in a["events"]["gc_pauses"]["longest"]]  # noqa: E731
    # The target's GC pauses moved back with its spans (to within the estimate's error).
    moved = np.array(longest(skewed)) - np.array(longest(aligned))
    assert moved.shape[0] > 0 and np.abs(moved).max() < 1_000_000
    codes = [w["code"] for w in skewed["warnings"]]
    assert "clock_offset_corrected" in codes and "clock_offset_corrected" not in [w["code"] for w in aligned["warnings"]]


def test_off_mode_reports_but_does_not_correct(runs):
    run = load_run(runs["skewed"])
    req = request_arrays(run.requests)
    off = align_clocks(req, run.spans, mode="off")
    assert not off.applied and abs(off.offset_ns + SKEW_NS) < 1_000_000
    assert off.apply(run) is run
    on = align_clocks(req, run.spans, mode="on")
    shifted = on.apply(run)
    assert pc.min(shifted.spans.column("start_ns")).as_py() == pc.min(run.spans.column("start_ns")).as_py() + on.offset_ns
    assert len(shifted.events) == len(run.events)


def test_a_few_violators_do_not_move_the_estimate():
    rng = np.random.default_rng(5)
    n = 2000
    sent = np.cumsum(rng.integers(1_000_000, 3_000_000, n)).astype(np.int64)
    net_in, net_out = rng.integers(80_000, 200_000, n), rng.integers(80_000, 200_000, n)
    server = rng.integers(1_000_000, 20_000_000, n)
    true_offset = -12_345_678  # add to server times to get client times
    span_start = sent + net_in - true_offset
    span_end = span_start + server
    end = sent + net_in + server + net_out
    span_start[:10] += 50_000_000  # 0.5%: spans joined to the wrong request
    lower, upper = feasible_interval(sent, end, span_start, span_end)
    assert lower <= true_offset <= upper
    assert abs((lower + upper) // 2 - true_offset) < 100_000  # well within 1 ms


def test_triton_import_with_a_skewed_server_clock(tmp_path):
    """Spans from another host (imported), 250 ms ahead: the stages still come out right."""
    requests = triton_requests()
    run_dir = write_requests_run(tmp_path / "run", [
        {**r, "sent_ns": r["sent_ns"] - 250_000_000, "end_ns": r["end_ns"] - 250_000_000} for r in requests
    ], scenario={"stages": {"preset": "triton"}})
    import_spans(run_dir, [TRITON_FIXTURE])
    stages = analyze_run(run_dir)["stages"]
    clock = stages["clock_alignment"]
    assert clock["applied"] and abs(clock["offset_ms"] + 250.0) < 1.0 and clock["requests"] == 60
    assert stages["by_stage"]["outside_server"]["p50_ms"] == pytest.approx(0.386)  # with Triton's HTTP receive


def test_too_few_requests_gives_no_estimate(tmp_path):
    requests = triton_requests()[:5]
    run_dir = write_requests_run(tmp_path / "run", requests, scenario={"stages": {"preset": "triton"}})
    import_spans(run_dir, [TRITON_FIXTURE])
    clock = analyze_run(run_dir)["stages"]["clock_alignment"]
    assert clock["requests"] == 5 and clock["offset_ms"] is None and not clock["applied"]


def _same_host_timings(rng, n: int = 3000, offset_ns: int = 0):
    """Client and server stamps of one host as a busy server takes them: the span starts after the
    server's framework read the request and ends after the reply left — on 15% of requests the
    server is descheduled before its end stamp, by up to 8 ms (so the span ends after the client's end)."""
    sent = np.cumsum(rng.integers(1_000_000, 3_000_000, n)).astype(np.int64)
    start = sent + rng.integers(300_000, 2_500_000, n)  # client send + loopback + framework
    work = rng.integers(2_000_000, 6_000_000, n)
    reply_leaves = start + work
    end = reply_leaves + rng.integers(100_000, 600_000, n)  # loopback + client receive
    lag = rng.integers(50_000, 400_000, n)  # the span ends after the last write
    late = rng.random(n) < 0.15
    lag[late] += rng.integers(0, 8_000_000, late.sum())
    return sent, end, start - offset_ns, reply_leaves + lag - offset_ns


def test_late_end_stamps_are_not_an_offset_but_a_real_offset_is():
    rng = np.random.default_rng(3)
    sent, end, start, stop = _same_host_timings(rng)
    lower, upper = feasible_interval(sent, end, start, stop)
    assert lower > upper, "the 1% bounds cross: the old rule warned on this same-host data"
    tolerance = placement_tolerance(sent, end, start, stop)
    assert 0 < tolerance < 3_000_000
    assert not offset_demonstrated(sent, end, start, stop, tolerance)
    assert starts_fit(sent, end, start, tolerance)
    for skew in (-5_000_000, 5_000_000, 37_000_000):  # the server clock ahead / behind by that much
        sent, end, start, stop = _same_host_timings(np.random.default_rng(3), offset_ns=-skew)
        assert offset_demonstrated(sent, end, start, stop, placement_tolerance(sent, end, start, stop)), skew


FASTAPI_SERVICE = os.path.join(os.path.dirname(__file__), "fastapi_otel_service.py")


def test_same_host_fastapi_service_with_standard_instrumentation_gets_no_clock_warning(tmp_path):
    """OpenTelemetry's FastAPI instrumentation under uvicorn on this host: its server spans end
    after the reply was written (often after the client has it), and that is no clock offset."""
    pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install fastapi)")
    pytest.importorskip("opentelemetry.instrumentation.fastapi",
                        reason="opentelemetry-instrumentation-fastapi is not installed")
    receiver_port = free_port()
    service = OwnedProcess([sys.executable, FASTAPI_SERVICE], stdout=subprocess.PIPE,
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
                                "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        line = service.proc.stdout.readline().decode()
        assert line.startswith("LISTENING "), "".join(service.stderr_lines)[-2000:]
        scenario = write_scenario(tmp_path / "fastapi.yaml", f"http://127.0.0.1:{line.split()[1]}",
                                  duration="10s", rate=50, request_path="/predict")
        result = run_tailscope("run", scenario, "--out", str(tmp_path / "runs"), "--receiver-port",
                               str(receiver_port), "--receiver-grpc-port", "-1", timeout=240)
    finally:
        service.stop()
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]  # a verdict: passed, failed, inconclusive or incomplete
    analysis = load_analysis(only_run_dir(tmp_path / "runs"))
    clock = analysis["stages"]["clock_alignment"]
    print(f"same-host FastAPI: {clock['violating_share_before']:.1%} of spans outside their request, "
          f"feasible {clock['feasible_ms']} ms, tolerance {clock['tolerance_ms']:.3f} ms")
    assert clock["requests"] >= 200 and clock["consistent"] and not clock["applied"]
    codes = [w["code"] for w in analysis["warnings"]]
    assert "clock_offset_corrected" not in codes and "clock_inconsistent" not in codes
