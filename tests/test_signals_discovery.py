"""Finding the target by its listening port, and describing it."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
from signals_helpers import stop_process

from tailscope.signals.discovery import describe_process, find_listening_pid, service_root
from tailscope.signals.launch import TargetChoice, find_target

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


PARENT_CODE = (  # a job of its own (as a shell starts one) whose child listens, like PyTriton's tritonserver
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.PIPE, stdout=sys.stdout)\n"
    "sys.stdin.read(); child.stdin.close(); child.wait()\n"
)


def test_the_service_root_is_the_top_of_the_listeners_process_group_and_never_our_own_ancestor():
    parent = subprocess.Popen([sys.executable, "-c", PARENT_CODE, SERVER_CODE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    alone = subprocess.Popen([sys.executable, "-c", SERVER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)  # in the test runner's group: the runner is our ancestor
    try:
        port, own_port = int(parent.stdout.readline()), int(alone.stdout.readline())
        listener = find_listening_pid(port)
        assert listener != parent.pid and psutil.Process(listener).ppid() == parent.pid
        assert service_root(listener) == parent.pid
        found = find_target(TargetChoice(), port, loopback=True)
        assert found["pid"] == parent.pid and found["listener"]["pid"] == listener
        assert found["found_by"] == (f"listening port {port} ({psutil.Process(listener).name()}, pid {listener}), "
                                     "the top of its process group")
        assert service_root(alone.pid) == alone.pid
        assert find_target(TargetChoice(), own_port, loopback=True) == {**describe_process(alone.pid), "found_by": f"listening port {own_port}"}
    finally:
        stop_process(alone)
        parent.stdin.close()
        parent.wait(timeout=10)
