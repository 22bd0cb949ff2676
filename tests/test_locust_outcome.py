"""The Locust path is the same harness: `locust -f … --headless --processes 2` against a plain
OpenTelemetry-SDK service (tests/plain_sdk_service.py) waits for the service's late spans as
`tailscope run` does (≥ 99% of the successful requests joined, the last second included), and
the `locust` process exits with the verdict's code: an SLO that fails → 1 (it exited 0 before,
with a report saying FAILED: Locust's own exit code counts only failed requests, and here none
fails; the service's P50 is several ms, its model alone busy for 2 ms)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from cli_helpers import free_port, load_analysis, only_run_dir
from test_plain_sdk_service import _joined_in_last_second, _start_service

from tailscope.cli.commands.common import EXIT_SLO_FAILED
from tailscope.rundir import read_json

SCENARIO = """\
name: locust-plain-sdk
duration: 8s
arrival: {process: poisson, rate: 40}
classes:
  - {name: predict, path: /predict, payload: {kind: fixed, body: "a b c d"}}
slo:
  - error_rate < 1%
  - p50 < 1ms
"""
LOCUSTFILE = """\
from tailscope.conductor.locust_plugin import OpenLoopUser

class PlainSdk(OpenLoopUser):
    scenario = "scenario.yaml"
"""


def test_locust_processes_wait_for_late_spans_and_exit_1_when_an_slo_fails(tmp_path):
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    (tmp_path / "locustfile.py").write_text(textwrap.dedent(LOCUSTFILE))
    receiver_port = free_port()
    service, port = _start_service(receiver_port, "--nodelay")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "locust", "-f", "locustfile.py", "--host", f"http://127.0.0.1:{port}",
             "--headless", "-t", "8s", "--processes", "2", "--only-summary",
             "--tailscope-out", str(tmp_path / "runs"), "--tailscope-receiver-port", str(receiver_port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=180)
    finally:
        service.terminate()
        service.wait(timeout=10)
    run_dir = only_run_dir(tmp_path / "runs")
    assert os.path.exists(os.path.join(run_dir, "analysis.json")), done.stderr[-4000:]
    analysis = load_analysis(run_dir)
    verdict = analysis["verdict"]
    assert verdict["outcome"] == "failed" and verdict["failed"] == ["p50 < 1ms"], verdict
    assert analysis["summary"]["errors"] == 0
    assert "tailscope: FAILED: failed: p50 < 1ms" in done.stderr
    assert done.returncode == EXIT_SLO_FAILED, done.stderr[-3000:]
    # the late spans were waited for, as `tailscope run` waits
    manifest = read_json(os.path.join(run_dir, "manifest.json"))
    assert manifest["locust"]["role"] == "master" and manifest["late_spans"]["ended"] == "complete"
    stages = analysis["stages"]
    last, joined_last = _joined_in_last_second(run_dir)
    print(f"joined {stages['joined_fraction']:.4f}; last second {joined_last} of {last}; "
          f"wait {manifest['late_spans']}")
    assert stages["joined_fraction"] >= 0.99 and last >= 10 and joined_last == last
