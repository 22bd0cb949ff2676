"""Nothing lost when anything dies: kill -9 of a real `tailscope run`, SIGINT and SIGTERM,
the reference target killed, restarted and stalled mid-run, a full disk. Every process is
started here and stopped by PID; every mount is unmounted in ``finally``."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from cli_helpers import free_port, load_analysis
from reliability_helpers import children_of, manifest, pid_alive, run_dir_of, start_run, start_target, wait_for_file, write_scenario

from tailscope.cli.commands.common import EXIT_INCONCLUSIVE
from tailscope.rundir import load_run


def _wait_gone(pids, timeout_s=15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


@pytest.fixture
def traced_target():
    """The reference target exporting spans to a receiver port the run will use."""
    port, receiver_port = free_port(), free_port()
    target = start_target(port, receiver_port)
    yield f"http://127.0.0.1:{port}", receiver_port, target
    target.stop(grace_s=1)


def test_kill_9_at_random_points_leaves_a_run_that_reports_up_to_the_last_flush(tmp_path, capsys):
    rng = random.Random(9)
    for attempt, delay_s in enumerate((0.2, rng.uniform(2.5, 4.0))):
        # A fresh target per run: an exporter whose receiver died backs off before retrying.
        port, receiver_port = free_port(), free_port()
        target = start_target(port, receiver_port)
        out = tmp_path / f"k{attempt}"
        scenario = write_scenario(tmp_path / f"k{attempt}.yaml", f"http://127.0.0.1:{port}", duration="30s", rate=50)
        run = start_run(scenario, out, "--receiver-port", str(receiver_port))
        try:
            run_dir = run_dir_of(str(out))
            if delay_s > 1:  # kill mid-load: once spans flow (a cold machine starts slowly)
                _wait_for_stored_spans(run_dir, timeout_s=60)
            time.sleep(delay_s)
            children = children_of(run.pid)
            kill_ns = time.time_ns()
            run.signal(signal.SIGKILL)
            run.wait(timeout=10)
        finally:
            run.stop()
            target.stop(grace_s=1)
        assert children and not _wait_gone(children), "receiver and sampler die with the harness"
        from tailscope.cli.main import main  # the report command never imports Locust

        assert main(["report", run_dir]) == EXIT_INCONCLUSIVE, capsys.readouterr().err  # INCOMPLETE
        analysis = load_analysis(run_dir)
        assert analysis["verdict"]["outcome"] == "incomplete"
        assert analysis["run"]["incomplete"] and analysis["warnings"][0]["code"] == "incomplete"
        assert analysis["warnings"][0]["message"].startswith("incomplete: harness stopped at ")
        run_data = load_run(run_dir)
        if delay_s > 1:
            last_end = max(run_data.requests.column("end_ns").to_pylist())
            lost_s = (kill_ns - last_end) / 1e9
            print(f"kill at {delay_s:.1f} s: {len(run_data.requests)} requests recovered, last "
                  f"{lost_s:.2f} s before the kill lost")
            assert lost_s <= 1.0, "at most the last flush interval is lost"
            assert len(run_data.spans) > 0 and not run_data.truncated["spans.arrow"], \
                "the receiver flushed and closed its spans on the harness's death"
        assert not [f for f in os.listdir(run_dir) if f.startswith(".reserve")], \
            "`tailscope report` gives back the reserve a killed harness left"


def test_a_run_killed_at_two_thirds_is_incomplete_with_its_covered_span_and_exit_3(tmp_path, capsys):
    """A run killed with SIGKILL at 8 s of its 12 s said PASSED and exited 0; it is INCOMPLETE
    ("covered 0–8 s of 12 s planned") and `tailscope report` exits 3."""
    port = free_port()
    target = start_target(port, None)
    scenario = write_scenario(tmp_path / "k.yaml", f"http://127.0.0.1:{port}", duration="12s", rate=20,
                              extra="slo: [error_rate < 5%]")
    run = start_run(scenario, tmp_path / "runs")
    try:
        run_dir = run_dir_of(str(tmp_path / "runs"))
        wait_for_file(os.path.join(run_dir, "requests.arrow"))  # the load starts as its streams open
        time.sleep(8.0)
        run.signal(signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        run.stop()
        target.stop(grace_s=1)
    from tailscope.cli.main import main

    assert main(["report", run_dir]) == EXIT_INCONCLUSIVE, capsys.readouterr().err
    out = capsys.readouterr().out
    verdict = load_analysis(run_dir)["verdict"]
    assert verdict["outcome"] == "incomplete" and verdict["slos"][0]["status"] == "pass"
    short = verdict["incomplete"]
    assert short["planned_s"] == 12.0 and 5.0 <= short["covered_s"] <= 10.0, short
    assert f"covered 0–{short['covered_s']:.0f} s of 12 s planned" in out and "INCOMPLETE: killed" in out
    html = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    assert '<span class="label">INCOMPLETE</span>' in html and short["span"] in html


def _wait_for_stored_spans(run_dir: str, timeout_s: float) -> None:
    """Block until the run's receiver reports stored spans (its receiver.json)."""
    path = os.path.join(run_dir, "receiver.json")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as fh:
                if json.load(fh).get("spans_stored", 0) > 0:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no spans reached the receiver within {timeout_s:.0f} s")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_stop_promptly_flush_report_and_clean_up(tmp_path, traced_target, signum):
    url, receiver_port, _ = traced_target
    scenario = write_scenario(tmp_path / "s.yaml", url, duration="60s", rate=50)
    run = start_run(scenario, tmp_path / "runs", "--receiver-port", str(receiver_port))
    try:
        run_dir = run_dir_of(str(tmp_path / "runs"))
        time.sleep(2.0)
        children = children_of(run.pid)
        sent_ns = time.time_ns()
        run.signal(signum)
        code = run.wait(timeout=90)
    finally:
        run.stop()
    assert code == EXIT_INCONCLUSIVE, "".join(run.stderr_lines)[-3000:]  # an interrupted run is INCOMPLETE
    assert not _wait_gone(children, 5)
    facts = manifest(run_dir)
    assert facts["status"] == "interrupted" and facts["load"]["stop_reason"] == "stopped"
    assert load_analysis(run_dir)["verdict"]["incomplete"]["reason"] == "interrupted (Ctrl-C or SIGTERM)"
    assert (facts["load"]["end_ns"] - sent_ns) / 1e9 < 5.0, "the load stops promptly"
    analysis = load_analysis(run_dir)
    assert analysis["summary"]["requests"] > 50 and os.path.exists(os.path.join(run_dir, "report.html"))
    assert not [f for f in os.listdir(run_dir) if f.startswith(".reserve")]


COMPANION_RUN = r"""
import os, subprocess, sys
from tailscope.conductor.companion import Companion
from tailscope.conductor.session import RunOptions, execute_run
from tailscope.scenario_model.scenario import load_scenario

class Leftovers(Companion):
    name = "leftovers"
    def __init__(self, cgroup):
        self.cgroup = cgroup
    def start(self, ctx):
        os.makedirs(self.cgroup)
        self.child = subprocess.Popen(["sleep", "300"])
        print("STARTED", self.child.pid, flush=True)
    def stop(self):
        self.child.terminate(); self.child.wait()
        os.rmdir(self.cgroup)

scenario = load_scenario(sys.argv[1])
outcome = execute_run(scenario, RunOptions(out_dir=sys.argv[2], receiver_port=0, receiver_grpc_port=-1,
                                           companions=[Leftovers(sys.argv[3])]))
print("STATUS", outcome.status, flush=True)
"""


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/cpu", os.W_OK), reason="no writable cgroup v1 cpu hierarchy")
def test_sigterm_runs_the_companions_cleanup_of_cgroups_and_processes(tmp_path, traced_target):
    url, _, _ = traced_target
    cgroup = f"/sys/fs/cgroup/cpu/tailscope-test-{os.getpid()}-{time.time_ns()}"
    scenario = write_scenario(tmp_path / "c.yaml", url, duration="60s", rate=20)
    proc = subprocess.Popen([sys.executable, "-c", COMPANION_RUN, scenario, str(tmp_path / "runs"), cgroup],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sleeper = None
    try:
        line = proc.stdout.readline()
        assert line.startswith("STARTED"), proc.stderr.read()[-2000:] if proc.poll() is not None else line
        sleeper = int(line.split()[1])
        assert os.path.isdir(cgroup) and pid_alive(sleeper)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert "STATUS interrupted" in out
        assert not os.path.exists(cgroup) and not pid_alive(sleeper)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sleeper and pid_alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
        if os.path.isdir(cgroup):
            os.rmdir(cgroup)


def test_target_killed_restarted_and_stalled_mid_run_shows_outages_and_the_run_continues(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    target = start_target(port, None)
    scenario = write_scenario(tmp_path / "t.yaml", url, duration="16s", rate=50, timeout="5s")
    run = start_run(scenario, tmp_path / "runs", "--timeout", "500ms")
    try:
        run_dir = run_dir_of(str(tmp_path / "runs"))
        time.sleep(3.0)
        target.signal(signal.SIGKILL)
        target.wait(timeout=10)
        time.sleep(2.0)
        target = start_target(port, None)
        time.sleep(3.0)
        target.signal(signal.SIGSTOP)
        time.sleep(2.0)
        target.signal(signal.SIGCONT)
        code = run.wait(timeout=120)
    finally:
        target.signal(signal.SIGCONT)
        run.stop()
        target.stop()
    assert code == 0, "".join(run.stderr_lines)[-3000:]
    assert manifest(run_dir)["status"] == "complete" and manifest(run_dir)["options"]["timeout_s"] == 0.5
    analysis = load_analysis(run_dir)
    outages = analysis["outages"]["outages"]
    kinds = [o["kind"] for o in outages]
    assert "down" in kinds and "stalled" in kinds, outages
    down = next(o for o in outages if o["kind"] == "down")
    stalled = next(o for o in outages if o["kind"] == "stalled")
    assert 1.0 < down["duration_ms"] / 1e3 < 15.0 and down["recovered"] and down["errors_by_kind"].get("refused")
    assert 1.0 < stalled["duration_ms"] / 1e3 < 4.0 and stalled["start_ns"] > down["end_ns"]
    assert any(w["code"] == "outage" for w in analysis["warnings"])
    requests = load_run(run_dir).requests.to_pylist()
    timeouts = [r for r in requests if r["error_kind"] == "timeout"]
    assert timeouts and all(r["end_ns"] - r["sent_ns"] == 500_000_000 for r in timeouts), \
        "a timed-out request is recorded with its timeout"
    assert all("within 0.5 s" in r["error"] for r in timeouts)
    after = [r for r in requests if r["scheduled_ns"] > stalled["end_ns"] + 10**9]
    assert after and sum(r["error_kind"] is None for r in after) >= 0.9 * len(after), "the run continued"
    report = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    assert 'id="outages"' in report


@pytest.fixture
def small_tmpfs():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tempfile.mkdtemp(prefix="tailscope-tmpfs-")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mount], capture_output=True)
    if result.returncode != 0:
        os.rmdir(mount)
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", mount], check=False)
        os.rmdir(mount)


def _fill(path: str) -> None:
    """Write zeros until the device is full."""
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError:
            pass
        small = b"\0" * 4096
        try:
            while True:
                fh.write(small)
        except OSError:
            pass


def test_a_full_disk_stops_the_run_as_failed_and_reports_what_was_written(small_tmpfs, traced_target):
    url, receiver_port, _ = traced_target
    scenario = write_scenario(os.path.join(small_tmpfs, "s.yaml"), url, duration="60s", rate=50)
    out = os.path.join(small_tmpfs, "runs")
    run = start_run(scenario, out, "--receiver-port", str(receiver_port))
    try:
        run_dir = run_dir_of(out)
        wait_for_file(os.path.join(run_dir, "windows.arrow"))
        time.sleep(2.0)
        children = children_of(run.pid)
        _fill(os.path.join(small_tmpfs, "ballast"))
        filled_ns = time.time_ns()
        code = run.wait(timeout=120)
        stdout = run.proc.stdout.read().decode(errors="replace")
    finally:
        run.stop()
    stderr = "".join(run.stderr_lines)
    assert code == 2, stderr[-3000:]
    assert "Traceback" not in stderr and "tailscope: error: run failed: disk full" in stderr
    assert not _wait_gone(children, 5), "receiver and sampler exited"
    facts = manifest(run_dir)
    assert facts["status"] == "failed" and facts["failure"].startswith("disk full")
    assert (facts["end_ns"] - filled_ns) / 1e9 < 30, "the run stopped promptly"
    data = load_run(run_dir)
    assert len(data.requests) > 50, "what was written before the disk filled is readable"
    analysis_path = os.path.join(run_dir, "analysis.json")
    if os.path.exists(analysis_path):
        with open(analysis_path, encoding="utf-8") as fh:
            assert json.load(fh)["warnings"][0]["code"] in ("run_failed", "truncated")
    else:
        assert "could not write the report" in stderr and "disk full" in stderr
    assert "run failed" in stdout
