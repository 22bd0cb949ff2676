"""Honest edges of a run, with real parts: a dead target is a setup error within seconds; the
progress line never shows a negative time; the stage tables list only stages that occurred; a
damaged data file is called damaged (file and batch) and never costs the run its good report;
a manifest's JSON error reads plainly."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope
from reliability_helpers import OwnedProcess, write_scenario

from tailscope.conductor.target_probe import TargetUnreachable, wait_until_accepting
from tailscope.conductor.terminal import _plain_line
from tailscope.rundir import read_stream, schema
from tailscope.testkit.synthetic import write_synthetic_run

PLAIN_SDK_SERVICE = os.path.join(os.path.dirname(__file__), "plain_sdk_service.py")


# -- a dead target


def test_a_dead_target_is_a_setup_error_within_seconds(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    result = run_tailscope("run", write_scenario(tmp_path / "s.yaml", url, duration="60s"), "--out", str(tmp_path / "runs"),
                           "--receiver-port", "0", timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tailscope: error: target ")
    assert url in result.stderr and "accepts no connections" in result.stderr
    assert took < 45, f"a 60 s run against a dead target took {took:.0f} s to give up"
    assert not os.listdir(tmp_path / "runs"), "no run directory is left behind"


def test_the_probe_waits_for_a_target_that_starts_listening_and_gives_up_on_one_that_never_does():
    with socket.socket() as held:  # bound, not listening: connections are refused meanwhile
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        timer = threading.Timer(0.6, held.listen)
        timer.start()
        try:
            waited = wait_until_accepting(url, window_s=5.0)
        finally:
            timer.cancel()
        assert 0.5 <= waited < 5.0
    dead = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(TargetUnreachable, match=re.escape(dead)):
        wait_until_accepting(dead, window_s=1.0)
    assert time.monotonic() - started < 3.0


# -- progress and stage tables in a real run


def test_progress_never_shows_a_negative_time():
    # the fields of tailscope.loadgen.local_runner.Progress (not imported: it would import Locust's gevent here)
    draining = SimpleNamespace(elapsed_s=61.2, remaining_s=-1.4, scheduled=10, completed=9, errors=0, rps=9.0,
                               p50_ms=1.0, p99_ms=2.0, in_flight=1, late_share=0.0)
    line = _plain_line(draining)
    assert line.startswith("[61 s elapsed, 0 s left]") and "-" not in line.split("]")[0]


@pytest.fixture(scope="module")
def plain_service_run(tmp_path_factory):
    """A real `tailscope run` (plain progress lines: not a terminal) against the suite's plain
    OpenTelemetry-SDK service, which has none of the reference preset's stages."""
    tmp = tmp_path_factory.mktemp("edges")
    receiver_port = free_port()
    service = OwnedProcess([sys.executable, PLAIN_SDK_SERVICE, "--nodelay"], stdout=subprocess.PIPE,
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
                                "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        line = service.proc.stdout.readline().decode()
        assert line.startswith("LISTENING "), "".join(service.stderr_lines)[-2000:]
        result = run_tailscope("run", write_scenario(tmp / "s.yaml", f"http://127.0.0.1:{line.split()[1]}",
                                                     duration="11s", rate=40, request_path="/predict"),
                               "--out", str(tmp / "runs"), "--receiver-port", str(receiver_port),
                               "--receiver-grpc-port", "-1", timeout=240)
    finally:
        service.stop()
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]  # a verdict: passed, failed, inconclusive or incomplete
    return result, only_run_dir(tmp / "runs")


def test_a_real_runs_progress_lines_count_down_to_zero(plain_service_run):
    result, _ = plain_service_run
    shown = re.findall(r"^\[(-?\d+) s elapsed, (-?\d+) s left\]", result.stdout, flags=re.MULTILINE)
    assert shown, result.stdout[-2000:]
    assert all(int(elapsed) >= 0 and int(left) >= 0 for elapsed, left in shown)
    assert " / -" not in result.stdout


def test_stage_tables_list_only_stages_that_occurred(plain_service_run):
    result, run_dir = plain_service_run
    by_stage = load_analysis(run_dir)["stages"]["by_stage"]
    absent = [name for name, s in by_stage.items() if not s["count"]]
    present = [name for name, s in by_stage.items() if s["count"]]
    assert absent and "preprocess" in absent, "the reference preset's stages did not occur on this service"
    assert "server" in present and "outside_server" in present
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    stages_section = html[html.index('<section id="stages">'):]
    stages_section = stages_section[:stages_section.index("</section>")]
    charts = json.loads(re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', html,
                                  re.DOTALL).group(1))
    for name in absent:
        assert f"<tr><td>{name}</td>" not in stages_section
    for name in present:
        assert f"<tr><td>{name}</td>" in stages_section
    assert set(charts["stages"]["names"]) == set(present)
    terminal_rows = set(re.findall(r"^│ (\S+)\s+│", result.stdout, flags=re.MULTILINE))
    assert set(present) <= terminal_rows and not set(absent) & terminal_rows


# -- damaged data, good reports


def _rewrite_in_batches(path: str, rows_per_batch: int) -> list[int]:
    """Rewrite an Arrow stream file in batches of ``rows_per_batch``; return each batch's byte offset."""
    with open(path, "rb") as fh:
        table = pa.ipc.open_stream(fh.read()).read_all()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=rows_per_batch)
    with open(path, "rb") as fh:
        source = pa.BufferReader(fh.read())
    reader = pa.ipc.open_stream(source)
    offsets = []
    while True:
        offsets.append(source.tell())
        try:
            reader.read_next_batch()
        except StopIteration:
            return offsets[:-1]


@pytest.fixture
def reported_run(tmp_path):
    run_dir = str(tmp_path / "run")
    write_synthetic_run(run_dir, duration_s=8, rate=40, seed=2)
    first = run_tailscope("report", run_dir, timeout=120)
    assert first.returncode in (0, 1, 3), first.stderr  # a verdict: passed, failed, inconclusive or incomplete
    with open(os.path.join(run_dir, "report.html"), "rb") as fh:
        return run_dir, fh.read()


def test_random_bytes_in_requests_arrow_are_damage_and_the_good_report_survives(reported_run):
    run_dir, good = reported_run
    requests = os.path.join(run_dir, "requests.arrow")
    with open(requests, "wb") as fh:
        fh.write(os.urandom(20_000))
    result = run_tailscope("report", run_dir, timeout=120)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("tailscope: error: requests.arrow is damaged")
    assert "header" in line and "writer killed" not in line + result.stdout
    assert "report.failed.html" in line and "earlier report.html was kept" in line
    with open(os.path.join(run_dir, "report.html"), "rb") as fh:
        assert fh.read() == good, "the good report was replaced"
    with open(os.path.join(run_dir, "analysis.failed.json"), encoding="utf-8") as fh:
        failed = json.load(fh)
    [damage] = failed["run"]["damaged_files"]
    assert damage["file"] == "requests.arrow" and damage["batch"] is None and damage["message"] in line
    assert [w["code"] for w in failed["warnings"]][0] == "damaged"
    assert os.path.exists(os.path.join(run_dir, "report.failed.html"))
    again = run_tailscope("report", run_dir, timeout=120)  # still damaged: still beside, still kept
    assert again.returncode == 2
    with open(os.path.join(run_dir, "report.html"), "rb") as fh:
        assert fh.read() == good


def test_a_damaged_batch_is_named_and_the_batches_before_it_are_read(reported_run):
    run_dir, _ = reported_run
    requests = os.path.join(run_dir, "requests.arrow")
    offsets = _rewrite_in_batches(requests, 50)
    assert len(offsets) >= 5
    with open(requests, "r+b") as fh:
        fh.seek(offsets[3])
        fh.write(b"\x00\x13garbage over batch three\x00")
    read = read_stream(requests, schema.REQUESTS_SCHEMA)
    assert read.table.num_rows == 150 and not read.truncated
    assert read.damaged is not None and read.damaged.batch == 3
    result = run_tailscope("report", run_dir, timeout=120)
    assert result.returncode == 2 and "requests.arrow is damaged at batch 3" in result.stderr
    assert "the 3 batches before it were read" in result.stderr


def test_a_file_cut_inside_a_batch_is_still_a_killed_writer(reported_run):
    run_dir, _ = reported_run
    requests = os.path.join(run_dir, "requests.arrow")
    offsets = _rewrite_in_batches(requests, 50)
    with open(requests, "r+b") as fh:
        fh.truncate(offsets[2] + 40)
    read = read_stream(requests, schema.REQUESTS_SCHEMA)
    assert read.truncated and read.damaged is None and read.table.num_rows == 100
    result = run_tailscope("report", run_dir, timeout=120)
    assert result.returncode in (0, 1, 3), result.stderr  # a verdict: passed, failed, inconclusive or incomplete
    analysis = load_analysis(run_dir)
    assert "truncated" in [w["code"] for w in analysis["warnings"]] and not analysis["run"]["damaged_files"]


def test_a_damaged_run_without_an_earlier_report_gets_the_usual_names(tmp_path):
    run_dir = str(tmp_path / "run")
    write_synthetic_run(run_dir, duration_s=5, rate=20, seed=6)
    with open(os.path.join(run_dir, "spans.arrow"), "wb") as fh:
        fh.write(b"not an arrow stream at all" * 100)
    result = run_tailscope("report", run_dir, timeout=120)
    assert result.returncode == 2 and "spans.arrow is damaged" in result.stderr
    assert "cover what could be read" in result.stderr
    assert os.path.exists(os.path.join(run_dir, "report.html"))
    assert not os.path.exists(os.path.join(run_dir, "report.failed.html"))


def test_a_manifest_json_error_reads_plainly(tmp_path):
    run_dir = str(tmp_path / "run")
    write_synthetic_run(run_dir, duration_s=3, rate=10, seed=1)
    with open(os.path.join(run_dir, "manifest.json"), "w", encoding="utf-8") as fh:
        fh.write('{"status": "comp\nlete"}')
    result = run_tailscope("report", run_dir, timeout=60)
    assert result.returncode == 2
    assert "at at" not in result.stderr
    assert "Invalid control character at line 1, column 17" in result.stderr


def test_the_progress_line_names_each_figure_and_its_unit():
    progress = SimpleNamespace(elapsed_s=3.0, remaining_s=57.0, scheduled=900, completed=3, errors=0, rps=3.0,
                               p50_ms=850.0, p99_ms=900.0, in_flight=897, late_share=1 / 300)
    line = _plain_line(progress)
    assert "3.0 req/s" in line and "latency P50 850.0 ms" in line and "latency P99 900.0 ms" in line
    assert "late >1 ms 0.3%" in line
