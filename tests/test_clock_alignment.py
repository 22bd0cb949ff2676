"""Clock alignment: an injected client→server offset is recovered within 1 ms and corrected."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from run_builders import TRITON_FIXTURE, triton_requests, write_requests_run
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.stages.clock_alignment import align_clocks, feasible_interval
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.rundir import load_run, schema
from tailscope.testing.synthetic import write_synthetic_run
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
    assert stages["by_stage"]["client_network"]["p50_ms"] == pytest.approx(0.3)


def test_too_few_requests_gives_no_estimate(tmp_path):
    requests = triton_requests()[:5]
    run_dir = write_requests_run(tmp_path / "run", requests, scenario={"stages": {"preset": "triton"}})
    import_spans(run_dir, [TRITON_FIXTURE])
    clock = analyze_run(run_dir)["stages"]["clock_alignment"]
    assert clock["requests"] == 5 and clock["offset_ms"] is None and not clock["applied"]
