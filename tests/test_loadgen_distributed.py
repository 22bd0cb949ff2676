"""Distributed runs and Locust-native use: schedule shares, the record merge, and
the real `locust` command (one process, and master + 2 workers) and
`tailscope run --workers 2` against an HTTP server on 127.0.0.1."""

from __future__ import annotations

import gc
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
from cli_helpers import run_tailscope
from test_loadgen_runner import serve  # noqa: F401  (fixture: a recording HTTP server on 127.0.0.1)
from test_loadgen_streaming import TOKENS, stream_server  # noqa: F401  (fixture: an SSE server on 127.0.0.1)

from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stats.summary import summarize
from tailscope.loadgen.arrivals import schedule_offsets_ns
from tailscope.loadgen.distributed import (
    PART_SCHEMAS,
    REQUEST_COLUMNS,
    ColumnBuffer,
    MergedRecords,
    ProtocolError,
    ScheduleShare,
    WorkerOutbox,
    WorkerTotals,
    merged_load_summary,
    records_message,
    share_seed,
    take_share,
)
from tailscope.loadgen.selfcheck import GeneratorMonitor
from tailscope.loadgen.spec import ArrivalSpec
from tailscope.rundir import Appender, load_run, read_stream, schema

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
    direct = pa.table({name: [r[i] if i < len(r) else None for r in concatenated] for i, name in enumerate(REQUEST_COLUMNS)},
                      schema=schema.REQUESTS_SCHEMA)
    expected = summarize(request_arrays(direct))
    got = summarize(request_arrays(table))
    assert got.requests == expected.requests == 2600
    for key in ("p50", "p90", "p99", "p999"):
        assert getattr(got.latency_ms, key) == getattr(expected.latency_ms, key)
    ok = np.array([(r[2] - r[0]) / 1e6 for r in concatenated if r[9] is None])
    assert got.latency_ms.p50.value_ms == pytest.approx(float(np.quantile(ok, 0.5)), rel=0.02)


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
    assert columns["scheduled_ns"] == [0] and columns["worker"] == [REQUEST_COLUMNS.index("worker")]
    assert buffer.take() is None and buffer.appended == 1


def _outbox_with_rows(worker: int, requests: int, chunks_per_request: int, max_rows: int) -> WorkerOutbox:
    """An outbox filled the way a worker fills it: request rows, their chunk rows,
    and a real self-check's gauges and GC events (labelled with the worker)."""
    outbox = WorkerOutbox(worker, max_rows=max_rows)
    rows = _worker_rows(np.random.default_rng(worker), worker, requests, 1_800_000_000_000_000_000)
    for row in rows:
        outbox.requests.append(*row[:11], chunks_per_request, 1000, worker)
        for index in range(chunks_per_request):
            outbox.parts["chunks"].append(row[8], index, row[1] + 1000 * (index + 1))
    clock = iter(range(1_800_000_000_000_000_000, 1_900_000_000_000_000_000, 400_000_000))
    monitor = GeneratorMonitor(outbox.parts["events"], outbox.parts["signals"], lambda: next(clock), lambda: 3,
                               worker=worker)
    with monitor:
        for _ in range(6):
            gc.collect()  # a real collection: the monitor's GC callback times it
            monitor.poll()
    return outbox


def test_worker_outbox_messages_are_bounded_and_the_master_merges_every_kind(tmp_path):
    """Requests, chunks, generator signals and events of two workers travel in messages of at
    most max_rows rows per kind (through msgpack, as Locust sends them) and all reach the run's
    streams; the final reports count every kind and the master finds nothing lost."""
    import msgpack

    sinks = {name: Appender(tmp_path / f"{name}.arrow", schema_) for name, schema_ in
             (("requests", schema.REQUESTS_SCHEMA), *PART_SCHEMAS.items())}
    merged = MergedRecords(sinks["requests"], chunks=sinks["chunks"], signals=sinks["signals"],
                           events=sinks["events"])
    expected = {name: 0 for name in sinks}
    for worker, requests in ((0, 130), (1, 75)):
        outbox = _outbox_with_rows(worker, requests, chunks_per_request=TOKENS, max_rows=50)
        assert outbox.parts["events"].appended >= 6 and outbox.parts["signals"].appended >= 3
        expected["requests"] += requests
        for key in PART_SCHEMAS:
            expected[key] += outbox.parts[key].appended
        messages = list(outbox.messages(in_flight=2))
        assert [m["seq"] for m in messages] == list(range(len(messages)))
        assert len(messages) == -(-requests * TOKENS // 50)  # the chunks need the most messages
        for message in messages:
            assert all(len(part[next(iter(part))]) <= 50 for key in ("columns", *PART_SCHEMAS)
                       if (part := message.get(key)))
            merged.add_batch(msgpack.unpackb(msgpack.packb(message, use_bin_type=True), raw=False))
        assert list(outbox.messages()) == []
        totals = outbox.counted(WorkerTotals(worker, requests, requests, requests, requests, 0, "duration"))
        assert totals.chunks == requests * TOKENS
        merged.finish(msgpack.unpackb(msgpack.packb(totals.to_message()), raw=False))
    assert merged.problems([0, 1]) == []
    for sink in sinks.values():
        sink.close()
    tables = {name: read_stream(tmp_path / f"{name}.arrow", sinks[name].schema).table for name in sinks}
    assert {name: len(table) for name, table in tables.items()} == expected
    assert sum(tables["requests"].column("chunks").to_pylist()) == len(tables["chunks"])
    series = set(tables["signals"].column("series").to_pylist())
    assert {'generator.cpu_percent{worker="0"}', 'generator.cpu_percent{worker="1"}'} <= series
    workers = {json.loads(a)["worker"] for a in tables["events"].column("attributes").to_pylist()}
    assert workers == {0, 1} and set(tables["events"].column("kind").to_pylist()) == {"generator_gc"}


def test_master_reports_lost_companion_rows():
    chunks = ColumnBuffer(tuple(schema.CHUNKS_SCHEMA.names))
    merged = MergedRecords(ColumnBuffer(), chunks=chunks, signals=ColumnBuffer(tuple(schema.SIGNALS_SCHEMA.names)))
    outbox = _outbox_with_rows(0, 10, chunks_per_request=3, max_rows=12)
    messages = list(outbox.messages())
    for message in messages[:-1]:  # the last message is lost on the way
        merged.add_batch(message)
    merged.finish(outbox.counted(WorkerTotals(0, 10, 10, 10, 10, 0, "duration")).to_message())
    lost = len(messages[-1].get("chunks", {}).get("t_ns", []))
    assert lost > 0 and chunks.pending() == 30 - lost
    problems = merged.problems([0])
    assert f"worker 0: reported 30 chunks rows, {30 - lost} reached the master" in problems
    # events have no sink on this master: neither kept nor checked
    assert not any("events" in p for p in problems)


def test_companion_parts_are_validated_whole_and_old_messages_still_merge():
    chunk_sink = ColumnBuffer(tuple(schema.CHUNKS_SCHEMA.names))
    merged = MergedRecords(ColumnBuffer(), chunks=chunk_sink)
    outbox = WorkerOutbox(0)
    outbox.requests.append(*_worker_rows(np.random.default_rng(2), 0, 1, 0)[0])
    outbox.parts["chunks"].append("ab" * 16, 0, 5)
    good = next(outbox.messages())
    bad_parts = [
        {"chunks": {"trace_id": ["x"], "index": [0]}},  # a missing column
        {"chunks": {"trace_id": ["x"], "index": [0, 1], "t_ns": [1]}},  # unequal lengths
        {"chunks": {"trace_id": ["x"], "index": [0], "t_ns": ["soon"]}},  # not int64
        {"chunks": [1, 2, 3]},  # not a mapping
        {"signals": {"t_ns": [1], "series": [2], "value": [0.5]}},  # series is not a string
        {"events": {"kind": ["generator_gc"], "start_ns": [1], "end_ns": [2], "source": ["generator"],
                    "attributes": "{}"}},  # a column that is not a list
    ]
    for extra in bad_parts:
        with pytest.raises(ProtocolError):
            merged.add_batch({**good, **extra})
    with pytest.raises(ProtocolError):  # a request column of the wrong type
        merged.add_batch({**good, "columns": {**good["columns"], "status": ["OK"]}})
    assert merged.rows == 0 and chunk_sink.pending() == 0  # nothing of a rejected message was kept
    old = {key: good[key] for key in ("worker", "seq", "columns", "in_flight")}
    assert merged.add_batch({**old, "future_part": {"x": [1]}}) == 1  # older/newer workers: tolerated
    old_totals = {k: v for k, v in WorkerTotals(0, 1, 1, 1, 1, 0, "duration").to_message().items()
                  if k not in PART_SCHEMAS}
    assert merged.finish(old_totals).chunks == 0 and merged.problems([0]) == []
    for bad in ({**old_totals, "records": -1}, {**old_totals, "chunks": "many"}, {**old_totals, "stop_reason": 3}):
        with pytest.raises(ProtocolError):
            WorkerTotals.from_message(bad)


def test_records_message_without_request_rows_carries_the_parts():
    message = records_message(1, 4, None, 0, {"signals": {"t_ns": [1], "series": ["s"], "value": [1.0]},
                                              "chunks": None})
    assert message["columns"] == {name: [] for name in REQUEST_COLUMNS} and "chunks" not in message
    merged = MergedRecords(ColumnBuffer(), signals=ColumnBuffer(("t_ns", "series", "value")))
    assert merged.add_batch({**message, "seq": 0}) == 0 and merged.parts_received["signals"] == {1: 1}


def test_column_buffer_take_with_a_limit_keeps_the_rest_in_order():
    buffer = ColumnBuffer(("a", "b"))
    for i in range(5):
        buffer.append(i, -i)
    assert buffer.take(2) == {"a": [0, 1], "b": [0, -1]}
    assert buffer.take(10) == {"a": [2, 3, 4], "b": [-2, -3, -4]} and buffer.take(1) is None


def _generator_run(signal_rows: list[tuple], gc_events: list[tuple], origin: int, late_window: int):
    """(request arrays, run) of a 4-s run at 10 req/s whose sends in ``late_window`` left 5 ms late."""
    from types import SimpleNamespace

    rows = []
    for i in range(40):
        scheduled = origin + i * 100_000_000
        sent = scheduled + (5_000_000 if i // 10 == late_window else 100_000)
        rows.append((scheduled, sent, sent + 10_000_000, None, "a", 200, 1, 1, f"{i:032x}", None, None, 0, None,
                     i % 2))
    requests = pa.table({name: [r[i] if i < len(r) else None for r in rows] for i, name in enumerate(REQUEST_COLUMNS)},
                        schema=schema.REQUESTS_SCHEMA)
    signals = pa.table({"t_ns": [r[0] for r in signal_rows], "series": [r[1] for r in signal_rows],
                        "value": [r[2] for r in signal_rows]}, schema=schema.SIGNALS_SCHEMA)
    events = pa.table({"kind": ["generator_gc"] * len(gc_events), "start_ns": [e[0] for e in gc_events],
                       "end_ns": [e[1] for e in gc_events], "source": ["generator"] * len(gc_events),
                       "attributes": [json.dumps(e[2]) for e in gc_events]}, schema=schema.EVENTS_SCHEMA)
    run = SimpleNamespace(manifest={"options": {"max_in_flight": 100}}, signals=signals, events=events)
    return request_arrays(requests), run


def test_generator_analysis_keeps_worker_processes_apart():
    """Two workers' labelled gauges: per window the busiest process's CPU and run-queue wait,
    the sum of in-flight requests; each process's own totals in ``processes``."""
    from tailscope.analysis_model.codec import encode
    from tailscope.analyzers.health.generator_health import generator_section

    origin = 1_800_000_000_000_000_000
    cpu = {0: (20.0, 20.0, 95.0, 20.0), 1: (30.0, 30.0, 30.0, 30.0)}
    signal_rows = [(origin + (i + 1) * 1_000_000_000, f'generator.{name}{{worker="{w}"}}', value)
                   for w in (0, 1) for i in range(4)
                   for name, value in (("cpu_percent", cpu[w][i]), ("in_flight", 2.0 + w),
                                       ("runqueue_wait_ms", 1.0 + 6 * w))]
    gc_events = [(origin + 300_000_000, origin + 302_000_000, {"worker": 0}),
                 (origin + 1_300_000_000, origin + 1_302_000_000, {"worker": 0}),
                 (origin + 1_500_000_000, origin + 1_503_000_000, {"worker": 1})]
    req, run = _generator_run(signal_rows, gc_events, origin, late_window=2)
    section = encode(generator_section(req, run, (origin, origin + 4_000_000_000), 1.0))
    windows = section["windows"]
    assert [w["cpu_percent"] for w in windows] == [30.0, 30.0, 95.0, 30.0]
    assert [w["in_flight"] for w in windows] == [5.0] * 4
    assert [w["runqueue_wait_ms"] for w in windows] == [7.0] * 4
    assert [w["gc_pause_ms"] for w in windows] == pytest.approx([2.0, 5.0, 0.0, 0.0])
    assert [(i["start_ns"] - origin, i["cause"]) for i in section["limited_windows"]] == [
        (2_000_000_000, "generator_cpu")]
    assert section["cpu"] == {"mean_percent": pytest.approx(46.25), "max_percent": 95.0}
    assert section["processes"] == [
        {"worker": 0, "cpu_mean_percent": 38.75, "cpu_max_percent": 95.0, "runqueue_wait_ms": 4.0,
         "gc_pauses": 2, "gc_total_ms": pytest.approx(4.0)},
        {"worker": 1, "cpu_mean_percent": 30.0, "cpu_max_percent": 30.0, "runqueue_wait_ms": 28.0,
         "gc_pauses": 1, "gc_total_ms": pytest.approx(3.0)}]
    # one process (unlabelled series, events without a worker) reads as before
    single = [(t, name.split("{")[0], v) for t, name, v in signal_rows if 'worker="0"' in name]
    req, run = _generator_run(single, [(origin, origin + 1_000_000, {"pid": 1})], origin, late_window=2)
    section = encode(generator_section(req, run, (origin, origin + 4_000_000_000), 1.0))
    assert [w["cpu_percent"] for w in section["windows"]] == list(cpu[0])
    assert [p["worker"] for p in section["processes"]] == [None] and section["processes"][0]["gc_pauses"] == 1


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
    assert "Aggregated" in proc.stderr + proc.stdout


def test_inline_locustfile_with_processes_merges_two_workers(tmp_path, serve):
    """`locust --processes 2`: a master and two forked workers; every worker's rows
    reach one run directory, and the merged count equals the sum of the workers' sends."""
    server = serve(service_s=0.002)
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(textwrap.dedent("""
        from tailscope.conductor.locust_plugin import OpenLoopUser
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
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + _worker_logs(tmp_path / "runs")
    run_dir = _only_run(tmp_path / "runs")
    run = load_run(run_dir)
    assert Counter(run.requests.column("worker").to_pylist()).keys() == {0, 1}
    assert run.requests.num_rows == run.manifest["load"]["scheduled"] == len(server.traceparents)
    assert os.path.exists(os.path.join(run_dir, "worker-1.log"))
    with open(os.path.join(run_dir, "analysis.json"), encoding="utf-8") as fh:
        assert json.load(fh)["summary"]["requests"] == run.requests.num_rows


def _worker_logs(runs) -> str:
    """The tail of every worker's log under ``runs``, to explain a failed distributed run."""
    tails = []
    for log in sorted(glob.glob(os.path.join(runs, "*", "worker-*.log"))):
        with open(log, encoding="utf-8", errors="replace") as fh:
            tails.append(f"\n--- {log} ---\n{fh.read()[-2000:]}")
    return "".join(tails)


def test_workers_refuse_a_closed_loop_with_fewer_users_than_workers(tmp_path):
    scenario = tmp_path / "closed.yaml"
    scenario.write_text("target: http://127.0.0.1:9\nduration: 1s\narrival: {process: closed, users: 2}\n"
                        "classes: [{name: a, path: /a}]\n")
    proc = run_tailscope("run", str(scenario), "--workers", "3", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 2 and "arrival.users (2) is split over the workers" in proc.stderr
    assert "--workers (3)" in proc.stderr


def _assert_workers_carried_chunks_and_self_check(run_dir: str) -> tuple:
    """Every streamed chunk of every request, and both workers' self-check, in one run directory."""
    run = load_run(run_dir)
    requests = run.requests
    assert Counter(requests.column("worker").to_pylist()).keys() == {0, 1}
    assert not any(requests.column("error_kind").to_pylist())
    counts = requests.column("chunks").to_pylist()
    assert set(counts) == {TOKENS}
    chunks = read_stream(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA).table
    assert len(chunks) == sum(counts)
    per_trace = Counter(chunks.column("trace_id").to_pylist())
    assert per_trace == dict(zip(requests.column("trace_id").to_pylist(), counts))
    signals = read_stream(os.path.join(run_dir, schema.writer_file(schema.SIGNALS, schema.GENERATOR_WRITER)),
                          schema.SIGNALS_SCHEMA).table
    series = Counter(signals.column("series").to_pylist())
    for worker in (0, 1):
        assert series[f'generator.cpu_percent{{worker="{worker}"}}'] >= 2, series
        assert series[f'generator.in_flight{{worker="{worker}"}}'] >= 2, series
    assert "generator.cpu_percent" not in series  # the master generates no load
    events = run.events.filter(pa.compute.equal(run.events.column("kind"), "generator_gc"))
    assert {json.loads(a)["worker"] for a in events.column("attributes").to_pylist()} <= {0, 1}
    return run, len(chunks)


def test_tailscope_run_with_workers_carries_streamed_chunks_and_self_check(tmp_path, stream_server):  # noqa: F811
    scenario = tmp_path / "stream.yaml"
    scenario.write_text(textwrap.dedent(f"""
        name: dist-stream
        target: {stream_server}
        duration: 3s
        seed: 6
        timeout: 3s
        arrival: {{process: constant, rate: 12}}
        classes: [{{name: chat, path: /sse, stream: true}}]
    """))
    proc = run_tailscope("run", str(scenario), "--workers", "2", "--receiver-port", "0",
                         "--out", str(tmp_path / "runs"), timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + _worker_logs(tmp_path / "runs")
    run_dir = _only_run(tmp_path / "runs")
    run, chunk_rows = _assert_workers_carried_chunks_and_self_check(run_dir)
    assert run.requests.num_rows == run.manifest["load"]["scheduled"] == 36
    with open(os.path.join(run_dir, "analysis.json"), encoding="utf-8") as fh:
        analysis = json.load(fh)
    assert analysis["streaming"]["requests"] == 36 and analysis["streaming"]["chunks"] == chunk_rows
    assert analysis["streaming"]["itl_ms"]["p50"]["n"] == 36 * (TOKENS - 1)
    processes = analysis["generator"]["processes"]
    assert [p["worker"] for p in processes] == [0, 1]
    assert all(p["cpu_mean_percent"] is not None and p["cpu_mean_percent"] > 0 for p in processes)
    assert analysis["generator"]["cpu"]["max_percent"] == pytest.approx(
        max(p["cpu_max_percent"] for p in processes), rel=1e-9)


def test_locust_processes_carry_streamed_chunks_and_self_check(tmp_path, stream_server):  # noqa: F811
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(textwrap.dedent("""
        from tailscope.conductor.locust_plugin import OpenLoopUser
        from tailscope.loadgen.spec import ArrivalSpec, RequestClass

        class Chat(OpenLoopUser):
            arrival = ArrivalSpec("constant", rate=12.0)
            request_classes = (RequestClass("chat", "/sse", stream=True),)
            timeout_s = 3.0
    """))
    proc = _run_locust(["-f", str(locustfile), "--host", stream_server, "--headless", "-t", "3s",
                        "--processes", "2", "--tailscope-out", str(tmp_path / "runs"),
                        "--tailscope-no-report"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = _only_run(tmp_path / "runs")
    run, chunk_rows = _assert_workers_carried_chunks_and_self_check(run_dir)
    load = run.manifest["load"]
    assert run.manifest["merge_problems"] == []
    totals = {t["worker"]: t for t in load["worker_totals"]}
    assert sum(t["chunks"] for t in totals.values()) == chunk_rows
    signal_rows = len(read_stream(os.path.join(run_dir, "signals.generator.arrow"), schema.SIGNALS_SCHEMA).table)
    assert sum(t["signals"] for t in totals.values()) == signal_rows
    assert all(t["signals"] > 0 for t in totals.values())
