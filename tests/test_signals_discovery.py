"""Finding the target by its listening port, and describing it."""

from __future__ import annotations

import os
import subprocess
import sys

from signals_helpers import stop_process

from tailscope.tracing.signals.discovery import describe_process, find_listening_pid

SERVER_CODE = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "sys.stdin.read()\n"
)


def test_find_listening_pid_of_a_child_server():
    child = subprocess.Popen([sys.executable, "-c", SERVER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        assert find_listening_pid(port) == child.pid
        assert find_listening_pid(port, host="127.0.0.1") == child.pid
        assert find_listening_pid(port, host="10.255.255.1") is None  # bound elsewhere
    finally:
        stop_process(child)
    assert find_listening_pid(port) is None  # nobody listens any more


def test_describe_process_reports_cgroups():
    info = describe_process(os.getpid())
    assert info["pid"] == os.getpid()
    assert info["name"].startswith("python")
    assert info["cmdline"] and isinstance(info["cmdline"], list)
    assert info["cgroup_version"] in ("v1", "v2", "hybrid", "none")
    with open(f"/proc/{os.getpid()}/cgroup") as fh:
        own_paths = {line.split(":", 2)[2].strip() for line in fh if line.strip()}
    assert set(info["cgroups"].values()) <= own_paths
    for directory in info["cgroup_dirs"].values():
        assert os.path.isdir(directory)
