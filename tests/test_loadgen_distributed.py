"""Distributed runs and Locust-native use: schedule shares, the record merge, and
the real `locust` command (one process, and master + 2 workers) and
`tailscope run --workers 2` against an HTTP server on 127.0.0.1."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from tailscope.analyzers.records import request_arrays
from tailscope.analyzers.summary import summarize
from tailscope.loadgen.arrivals import schedule_offsets_ns
from tailscope.loadgen.distributed import (
    REQUEST_COLUMNS,
    ColumnBuffer,
    MergedRecords,
    ProtocolError,
    ScheduleShare,
    WorkerTotals,
    merged_load_summary,
    records_message,
    share_seed,
    take_share,
)
from tailscope.loadgen.spec import ArrivalSpec
from tailscope.rundir import Appender, load_run, read_stream, schema

from cli_helpers import run_tailscope
from test_loadgen_runner import serve  # noqa: F401  (fixture: a recording HTTP server on 127.0.0.1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_LOCUSTFILE = os.path.join(REPO, "scenarios", "locustfile_example.py")


def _offsets(spec: ArrivalSpec, duration_s=5.0, max_requests=100_000, seed=3) -> list[int]:
    return [int(x) for chunk in schedule_offsets_ns(spec, duration_s, max_requests, seed) for x in chunk]


@pytest.mark.parametrize("spec", [ArrivalSpec("poisson", rate=300.0), ArrivalSpec("gamma", rate=300.0, burstiness=0.3),
                                  ArrivalSpec("constant", rate=250.0)])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_shares_interleave_into_exactly_the_single_process_schedule(spec, count):
    whole = _offsets(spec)
    shares = [list(take_share(iter(whole), index, count)) for index in range(count)]
    assert sorted(x for share in shares for x in share) == whole
    assert all(abs(len(share) - len(whole) / count) <= 1 for share in shares)
    # each worker regenerates the same seeded schedule independently
    assert list(take_share(iter(_offsets(spec)), count - 1, count)) == shares[-1]


def test_share_messages_are_validated():
    share = ScheduleShare(1, 2, 1_700_000_000_000_000_000, "runs/x", 30.0)
    assert ScheduleShare.from_message(share.to_message()) == share
    with pytest.raises(ProtocolError):
        ScheduleShare(2, 2, 0, "r")
    with pytest.raises(ProtocolError):
        ScheduleShare.from_message({"index": 0, "count": 1})
    with pytest.raises(ProtocolError):
        MergedRecords(ColumnBuffer()).add_batch({"worker": 0, "seq": 0, "columns": {"sent_ns": [1]}})


def test_worker_mix_seeds_differ_but_one_process_keeps_the_plan_seed():
    assert share_seed(7, 0, 1) == 7
    seeds = {share_seed(7, index, 3) for index in range(3)}
    assert len(seeds) == 3 and share_seed(7, 1, 3) == share_seed(7, 1, 3)


def _worker_rows(rng, worker: int, n: int, origin_ns: int) -> list[tuple]:
    rows = []
    for i in range(n):
        scheduled = origin_ns + int(rng.integers(0, 5_000_000_000))
        sent = scheduled + int(rng.integers(0, 2_000_000))
        end = sent + int(rng.lognormal(np.log(20e6), 0.6 + 0.3 * worker))
        error = "http" if rng.random() < 0.02 else None
        rows.append((scheduled, sent, end, sent + 1000, f"c{i % 3}", 500 if error else 200, 10, 20,
                     f"{worker:02d}{i:030x}", error, "HTTP 500" if error else None, 0, None, worker))
    return rows


def test_merged_percentiles_equal_those_over_the_concatenated_records(tmp_path):
    """Batches of two workers, merged through messages, give the same table and the
    same percentiles as the workers' rows concatenated."""
    rng = np.random.default_rng(5)
    origin = 1_800_000_000_000_000_000
    rows = {worker: _worker_rows(rng, worker, n, origin) for worker, n in ((0, 1500), (1, 1100))}
    appender = Appender(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA)
    merged = MergedRecords(appender)
    for worker, worker_rows in rows.items():
        buffer, seq = ColumnBuffer(), 0
        for start in range(0, len(worker_rows), 400):  # one message per "batch interval"
            for row in worker_rows[start:start + 400]:
                buffer.append(*row)
            merged.add_batch(records_message(worker, seq, buffer.take(), in_flight=3))
            seq += 1
        merged.finish(WorkerTotals(worker, len(worker_rows), len(worker_rows), len(worker_rows),
                                   len(worker_rows), 0, "duration").to_message())
    appender.close()
    assert merged.problems([0, 1]) == [] and merged.rows == 2600 and merged.in_flight == 0
    table = read_stream(tmp_path / schema.REQUESTS, schema.REQUESTS_SCHEMA).table
    assert Counter(table.column("worker").to_pylist()) == {0: 1500, 1: 1100}
    concatenated = rows[0] + rows[1]
    direct = pa.table({name: [r[i] for r in concatenated] for i, name in enumerate(REQUEST_COLUMNS)},
                      schema=schema.REQUESTS_SCHEMA)
    expected = summarize(request_arrays(direct))
    got = summarize(request_arrays(table))
    assert got["requests"] == expected["requests"] == 2600
    for key in ("p50", "p90", "p99", "p999"):
        assert got["latency_ms"][key] == expected["latency_ms"][key]
    ok = np.array([(r[2] - r[0]) / 1e6 for r in concatenated if r[9] is None])
    assert got["latency_ms"]["p50"]["value_ms"] == pytest.approx(float(np.quantile(ok, 0.5)), rel=0.02)


def test_merge_reports_lost_rows_missing_workers_and_reordered_batches():
    merged = MergedRecords(ColumnBuffer())
    buffer = ColumnBuffer()
    for row in _worker_rows(np.random.default_rng(1), 0, 5, 0):
        buffer.append(*row)
    merged.add_batch(records_message(0, 1, buffer.take()))
    merged.finish(WorkerTotals(0, 7, 7, 7, 7, 0, "duration").to_message())
    problems = merged.problems([0, 1])
    assert any("batch 1 arrived, expected 0" in p for p in problems)
    assert any("reported 7 rows, 5 reached" in p for p in problems)
    assert any("worker 1: no final report" in p for p in problems)


def test_merged_load_summary_sums_workers():
    totals = [WorkerTotals(0, 10, 10, 10, 9, 1, "duration"), WorkerTotals(1, 11, 11, 11, 11, 0, "duration")]
    summary = merged_load_summary(totals, 0, 2_000_000_000, duration_s=2.0, max_requests=1000)
    assert summary["scheduled"] == 21 and summary["completed"] == 20 and summary["errors"] == 1
    assert summary["offered_rps"] == pytest.approx(10.5) and summary["stop_reason"] == "duration"
    assert merged_load_summary(totals, 0, 1, 2.0, max_requests=21)["stop_reason"] == "max_requests"


def test_column_buffer_hands_over_rows_once():
    buffer = ColumnBuffer()
    assert buffer.take() is None
    buffer.append(*range(len(REQUEST_COLUMNS)))
    columns = buffer.take()
    assert columns["scheduled_ns"] == [0] and columns["worker"] == [len(REQUEST_COLUMNS) - 1]
    assert buffer.take() is None and buffer.appended == 1


# -- the real `locust` command ---------------------------------------------------


def _run_locust(args, cwd, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "locust", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _only_run(parent) -> str:
    runs = glob.glob(os.path.join(parent, "*"))
    assert len(runs) == 1, runs
    return runs[0]


def test_plain_locustfile_headless_writes_a_run_directory(tmp_path, serve):
    server = serve(service_s=0.002)
    proc = _run_locust(["-f", EXAMPLE_LOCUSTFILE, "--host", server.url, "--headless", "-t", "3s",
                        "--tailscope-out", str(tmp_path / "runs"), "--tailscope-rate", "40",
                        "--tailscope-no-report", "--only-summary"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = load_run(_only_run(tmp_path / "runs"))
    assert run.manifest["status"] == "complete" and run.manifest["locust"]["role"] == "local"
    assert run.manifest["scenario"]["arrival"]["rate"] == 40 and run.manifest["target"] == server.url
    rows = run.requests.num_rows
    assert 60 <= rows <= 160, rows  # ~40 req/s for ~3 s
    assert rows == len(server.traceparents) == run.manifest["load"]["scheduled"]
    assert set(run.requests.column("cls").to_pylist()) <= {"short_text", "long_text"}
    assert set(run.requests.column("worker").to_pylist()) == {0}
    # Locust's own statistics saw the same requests
    assert f"Aggregated" in proc.stderr + proc.stdout


def test_inline_locustfile_with_processes_merges_two_workers(tmp_path, serve):
    """`locust --processes 2`: a master and two forked workers; every worker's rows
    reach one run directory, and the merged count equals the sum of the workers' sends."""
    server = serve(service_s=0.002)
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(textwrap.dedent("""
        from tailscope.loadgen.locust_native import OpenLoopUser
        from tailscope.loadgen.spec import ArrivalSpec, RequestClass

        class Inline(OpenLoopUser):
            arrival = ArrivalSpec("constant", rate=60.0)
            request_classes = (RequestClass("ping", "/ping", method="GET"),)
            slo = ("p99 < 1s",)
            timeout_s = 2.0
    """))
    proc = _run_locust(["-f", str(locustfile), "--host", server.url, "--headless", "-t", "3s",
                        "--processes", "2", "--tailscope-out", str(tmp_path / "runs"),
                        "--tailscope-no-report"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = load_run(_only_run(tmp_path / "runs"))
    load = run.manifest["load"]
    assert run.manifest["locust"] == {**run.manifest["locust"], "role": "master", "workers": 2}
    assert run.manifest["merge_problems"] == []
    workers = Counter(run.requests.column("worker").to_pylist())
    reported = {t["worker"]: t for t in load["worker_totals"]}
    assert set(workers) == set(reported) == {0, 1}
    assert run.requests.num_rows == sum(t["sent"] for t in reported.values()) == load["records_merged"]
    assert all(workers[w] == reported[w]["records"] for w in workers)
    assert run.requests.num_rows == len(server.traceparents)
    # the two shares interleave into one constant-rate schedule: gaps of 1/60 s
    scheduled = np.sort(np.array(run.requests.column("scheduled_ns").to_pylist()))
    gaps_ms = np.diff(scheduled) / 1e6
    assert np.allclose(gaps_ms, 1000 / 60, atol=0.01), gaps_ms[:10]
    assert abs(workers[0] - workers[1]) <= 1


def test_tailscope_run_with_workers_merges_into_one_run(tmp_path, serve):
    server = serve(service_s=0.002)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(textwrap.dedent(f"""
        name: dist
        target: {server.url}
        duration: 3s
        seed: 4
        timeout: 2s
        arrival: {{process: poisson, rate: 50}}
        classes: [{{name: ping, path: /ping, method: GET}}]
        slo: ["error_rate < 5%"]
    """))
    proc = run_tailscope("run", str(scenario), "--workers", "2", "--receiver-port", "0",
                         "--out", str(tmp_path / "runs"), timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_dir = _only_run(tmp_path / "runs")
    run = load_run(run_dir)
    assert Counter(run.requests.column("worker").to_pylist()).keys() == {0, 1}
    assert run.requests.num_rows == run.manifest["load"]["scheduled"] == len(server.traceparents)
    assert os.path.exists(os.path.join(run_dir, "worker-1.log"))
    with open(os.path.join(run_dir, "analysis.json"), encoding="utf-8") as fh:
        assert json.load(fh)["summary"]["requests"] == run.requests.num_rows


def test_workers_refuse_a_closed_loop_scenario(tmp_path):
    scenario = tmp_path / "closed.yaml"
    scenario.write_text("target: http://127.0.0.1:9\nduration: 1s\narrival: {process: closed, users: 2}\n"
                        "classes: [{name: a, path: /a}]\n")
    proc = run_tailscope("run", str(scenario), "--workers", "2", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 2 and "open-loop" in proc.stderr
