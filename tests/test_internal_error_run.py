"""`tailscope run` whose analysis raises: exit 4 with the bug message and the traceback (it was
exit 1, the SLO-failed code), the run directory kept whole (records, manifest) so that
`tailscope report` retries it, and no `.reserve-*` file left behind."""

from __future__ import annotations

import os
import subprocess
import sys

from cli_helpers import free_port, only_run_dir
from reliability_helpers import start_target, write_scenario

from tailscope.cli.commands.common import EXIT_INTERNAL, EXIT_OK
from tailscope.cli.main import INTERNAL_ERROR
from tailscope.rundir import load_run

#: `tailscope run` with the conductor's analysis replaced by one that raises, as the retained-run
#: crash of issue 26 did (an IndexError deep in the spike detection).
BROKEN_RUN = """\
import sys
import tailscope.conductor.session  # Locust (gevent) first, as the CLI imports it
from tailscope.conductor import reporting

def broken(*args, **kwargs):
    raise IndexError("index -1 is out of bounds for axis 0 with size 0")

reporting.analyse_and_write = broken
from tailscope.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_whose_analysis_raises_exits_4_keeps_its_run_and_leaves_no_reserve(tmp_path):
    port = free_port()
    target = start_target(port, None)
    try:
        scenario = write_scenario(tmp_path / "s.yaml", f"http://127.0.0.1:{port}", duration="3s", rate=20)
        done = subprocess.run(
            [sys.executable, "-c", BROKEN_RUN, "run", scenario, "--out", str(tmp_path / "runs"),
             "--receiver-port", "0", "--receiver-grpc-port", "-1"],
            capture_output=True, text=True, timeout=120)
    finally:
        target.stop(grace_s=1)
    assert done.returncode == EXIT_INTERNAL, done.stdout[-2000:] + done.stderr[-3000:]
    assert INTERNAL_ERROR in done.stderr and "Traceback (most recent call last)" in done.stderr
    assert "IndexError: index -1 is out of bounds" in done.stderr
    run_dir = only_run_dir(tmp_path / "runs")
    assert "retry with tailscope report" in done.stdout
    assert not [f for f in os.listdir(run_dir) if f.startswith(".reserve")]
    run = load_run(run_dir)
    assert run.manifest["status"] == "complete" and run.requests.num_rows >= 30
    # the retry works: the run was kept whole
    retry = subprocess.run([sys.executable, "-m", "tailscope.cli.main", "report", run_dir],
                           capture_output=True, text=True, timeout=120)
    assert retry.returncode == EXIT_OK, retry.stdout[-2000:] + retry.stderr[-2000:]
    assert os.path.exists(os.path.join(run_dir, "report.html"))
