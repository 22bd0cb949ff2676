"""Usage and setup errors exit 2 with a clear message and send no load."""

import os
import re
import socket

from cli_helpers import run_tailscope


def test_bad_scenario_exits_2_naming_file_line_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: http://127.0.0.1:9\nduration: 5s\narrival: {process: poisson, rate: 0}\n"
                   "classes: [{name: a, path: /x}]\n")
    proc = run_tailscope("run", str(bad), "--out", str(tmp_path / "runs"), timeout=60)
    assert proc.returncode == 2
    assert f"{bad}:3: arrival.rate:" in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_remote_target_refused_without_flag(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text("target: http://10.1.2.3:80\nduration: 5s\narrival: {rate: 5}\n"
                    "classes: [{name: a, path: /x}]\n")
    proc = run_tailscope("run", str(scen), "--out", str(tmp_path / "runs"), "--receiver-port", "0",
                         timeout=60)
    assert proc.returncode == 2
    assert "not a loopback address" in proc.stderr
    assert not any((tmp_path / "runs").iterdir())


def test_a_child_that_cannot_start_is_explained_by_its_own_last_lines(tmp_path):
    """The receiver's port is taken: the error quotes what the receiver said (its run directory,
    log included, is removed because nothing was recorded) and names no log that is gone."""
    scen = tmp_path / "s.yaml"
    scen.write_text("target: http://127.0.0.1:9\nduration: 2s\narrival: {rate: 5}\n"
                    "classes: [{name: a, path: /x}]\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_tailscope("run", str(scen), "--out", str(tmp_path / "runs"), "--receiver-port", str(port),
                             "--receiver-grpc-port", "-1", timeout=60)
    assert proc.returncode == 2
    assert "OTLP receiver exited with code 2; its last output:" in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert all(os.path.exists(log) for log in re.findall(r"\S+\.log\b", proc.stderr)), proc.stderr
    assert not any((tmp_path / "runs").iterdir())


def test_report_on_missing_dir_exits_2(tmp_path):
    proc = run_tailscope("report", str(tmp_path / "nope"), timeout=60)
    assert proc.returncode == 2 and "no such run directory" in proc.stderr
