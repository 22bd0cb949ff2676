"""Finding the target by name, cgroup and container id; sampling a process tree;
cgroup files new in this issue (pressure, swap limit, failcnt) on fixtures and for real."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time

import pytest
from signals_helpers import stop_process

from tailscope.signals.cgroup import (
    CgroupSampler,
    is_cgroup2_root,
    parse_cgroup_pressure,
    parse_memory_v1,
    parse_memory_v2,
    read_cgroup_values,
)
from tailscope.signals.discovery import TargetNotFound, find_cgroup_target, find_container_target, find_process_target
from tailscope.signals.launch import TargetChoice, find_target, prometheus_urls, sampler_arguments
from tailscope.signals.process import ConnectionsSampler, ProcessSampler
from tailscope.support.cgroups import CgroupLocation, find_container_cgroup, locate_cgroup_path
from tailscope.support.procfs import read_text

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
V1, V2 = os.path.join(FIXTURES, "cgroup_v1"), os.path.join(FIXTURES, "cgroup_v2")
CGROUP_ROOT = "/sys/fs/cgroup"


def fixture(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as fh:
        return fh.read()


# ----------------------------------------------------------------- fixtures


def test_v2_pressure_and_swap_limit_and_v1_failcnt():
    assert parse_cgroup_pressure({"cpu": fixture(V2, "cpu.pressure"), "memory": fixture(V2, "memory.pressure"),
                                  "io": None}) == {
        "cgroup.psi.cpu.some_us": 4500000.0, "cgroup.psi.cpu.full_us": 1200000.0,
        "cgroup.psi.memory.some_us": 77.0, "cgroup.psi.memory.full_us": 33.0}
    v2 = parse_memory_v2(None, None, None, None, fixture(V2, "memory.swap.max"))
    assert v2 == {"cgroup.mem.swap_max_bytes": 52428800.0}
    assert parse_memory_v2(None, None, None, None, fixture(V2, "memory.swap.max.unlimited")) == {}
    v1 = parse_memory_v1(fixture(V1, "memory.usage_in_bytes"), fixture(V1, "memory.limit_in_bytes"),
                         fixture(V1, "memory.memsw.usage_in_bytes"), fixture(V1, "memory.failcnt"),
                         fixture(V1, "memory.memsw.limit_in_bytes"))
    assert v1["cgroup.mem.failcnt"] == 42.0
    assert v1["cgroup.mem.swap_max_bytes"] == 536870912.0 - 268435456.0
    unlimited = parse_memory_v1(None, fixture(V1, "memory.limit_in_bytes.unlimited"), None, None,
                                fixture(V1, "memory.memsw.limit_in_bytes"))
    assert "cgroup.mem.swap_max_bytes" not in unlimited


def test_v2_directory_reads_pressure_from_the_unified_dir():
    location = CgroupLocation(dirs={"cpu": V2, "memory": V2}, versions={"cpu": 2, "memory": 2}, unified_dir=V2)
    values = read_cgroup_values(location)
    assert values["cgroup.psi.cpu.some_us"] == 4500000.0
    assert values["cgroup.mem.swap_max_bytes"] == 52428800.0
    assert "cgroup.psi.io.some_us" not in values  # io.pressure missing from the fixture: absent


def test_the_cgroup2_root_pressure_is_not_read_as_the_cgroups(tmp_path):
    # a process in no cgroup of its own (cgroup path "/"): the hierarchy root's pressure files hold
    # the whole host's stalls (psi.*), not a cgroup's, so cgroup.psi.* stays absent
    root = tmp_path / "unified"
    child = root / "svc"
    child.mkdir(parents=True)
    for directory in (root, child):
        (directory / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=4500000\n")
    (child / "cgroup.type").write_text("domain\n")
    assert is_cgroup2_root(str(root)) and not is_cgroup2_root(str(child))
    at_root = CgroupLocation(dirs={"cpu": str(root)}, versions={"cpu": 2}, unified_dir=str(root), unified_is_root=True)
    assert not any(k.startswith("cgroup.psi.") for k in read_cgroup_values(at_root))
    below = CgroupLocation(dirs={"cpu": str(child)}, versions={"cpu": 2}, unified_dir=str(child))
    assert read_cgroup_values(below)["cgroup.psi.cpu.some_us"] == 4500000.0


def test_locate_cgroup_path_in_every_hierarchy_from_a_path_or_a_directory():
    mountinfo = fixture(V1, "mountinfo")
    existing = {"/sys/fs/cgroup/cpu,cpuacct/docker/abc", "/sys/fs/cgroup/memory/abc", "/sys/fs/cgroup/unified/docker/abc"}
    by_path = locate_cgroup_path("/docker/abc", mountinfo, isdir=existing.__contains__)
    assert by_path.dirs == {"cpu": "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
                            "cpuacct": "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
                            "memory": "/sys/fs/cgroup/memory/abc"}  # the memory mount's root is /docker
    assert by_path.unified_dir == "/sys/fs/cgroup/unified/docker/abc"
    by_dir = locate_cgroup_path("/sys/fs/cgroup/memory/abc", mountinfo, isdir=existing.__contains__)
    assert by_dir.dirs == by_path.dirs
    with pytest.raises(FileNotFoundError, match="no cgroup hierarchy"):
        locate_cgroup_path("/docker/none", mountinfo, isdir=existing.__contains__)


def test_sampler_arguments_and_prometheus_paths_relative_to_the_target():
    assert prometheus_urls(["/metrics", "http://127.0.0.1:8002/metrics"], "http://127.0.0.1:8000/") == [
        "http://127.0.0.1:8000/metrics", "http://127.0.0.1:8002/metrics"]
    args = sampler_arguments({"pid": 42, "cgroup_path": "/docker/abc"}, 10.0, ["http://127.0.0.1:8000/metrics"], False)
    assert args == ["--rate", "10.0", "--pid", "42", "--cgroup", "/docker/abc",
                    "--prometheus", "http://127.0.0.1:8000/metrics", "--no-children"]


# ----------------------------------------------------------------- process tree and name


TREE_SCRIPT = textwrap.dedent("""
    import os, sys, time
    child = os.fork()
    if child == 0:
        time.sleep(60); os._exit(0)
    print(child, flush=True)
    sys.stdin.read()
    os.kill(child, 9); os.waitpid(child, 0)
""")


@pytest.fixture
def process_tree(tmp_path):
    """A parent (script named uniquely) that forked one worker with the same command line."""
    script = tmp_path / f"tailscope-test-server-{os.getpid()}.py"
    script.write_text(TREE_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        yield script.name, parent.pid, worker
    finally:
        parent.stdin.close()
        try:
            parent.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_process(parent)


def test_find_by_name_picks_the_root_of_a_forked_server(process_tree):
    name, parent, worker = process_tree
    found = find_process_target(name)
    assert found["pid"] == parent and found["found_by"] == f"--target-process {name}"
    with pytest.raises(TargetNotFound, match="no process named"):
        find_process_target(f"tailscope-no-such-process-{os.getpid()}")
    assert find_target(TargetChoice(process_name=name), None, True)["pid"] == parent


def test_find_by_name_matches_the_module_of_a_safe_path_python_child(tmp_path):
    """tailscope starts its children as ``python -P -m MODULE``: the module is still the name."""
    from tailscope.support.python_child import python_module

    module = f"tailscope_test_module_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text("import sys\nprint('up', flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen(python_module(module), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    try:
        assert child.stdout.readline().strip() == "up"
        assert find_process_target(module)["pid"] == child.pid
    finally:
        child.stdin.close()
        child.wait(timeout=10)


def test_process_sampler_sums_the_tree_or_watches_the_root_alone(process_tree):
    _, parent, worker = process_tree
    tree = ProcessSampler(parent)
    alone = ProcessSampler(parent, include_children=False)
    assert tree.probe() is None and alone.probe() is None
    tree_values, alone_values = dict(tree.read(0)), dict(alone.read(0))
    assert tree_values["proc.processes"] == 2.0 and alone_values["proc.processes"] == 1.0
    assert tree_values["proc.threads"] >= alone_values["proc.threads"] + 1
    assert tree_values["proc.rss_bytes"] > alone_values["proc.rss_bytes"]
    os.kill(worker, 9)  # a child that exits keeps its counters: sums never go back
    time.sleep(0.2)
    tree._tree._next_refresh = 0.0
    after = dict(tree.read(0))
    assert after["proc.processes"] == 1.0
    for counter in ("proc.cpu.user_s", "proc.ctxt.voluntary", "proc.runqueue_wait_ns"):
        assert after[counter] >= tree_values[counter]


def test_connections_count_the_socket_descriptors_of_the_process():
    import socket

    sampler = ConnectionsSampler(os.getpid(), min_interval_s=0.0, include_children=False)
    assert sampler.probe() is None
    (before,) = sampler.read(0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        (after,) = sampler.read(0)
    finally:
        for s in (server, client, listener):
            s.close()
    assert after[1] - before[1] == 3  # the listener and both ends of the connection


# ----------------------------------------------------------------- real cgroups named like a container


def _rmdir(path: str, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while os.path.isdir(path):
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


ALLOCATE_THEN_SLEEP = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "block = bytearray(16 * 2**20)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "print('allocated', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def container_cgroup():
    """A sleeping process in ``<hierarchy>/tailscope-test-<pid>/<64-hex id>`` of the cpu,
    memory and (where mounted) unified hierarchies, like docker's cgroupfs layout."""
    container_id = f"{os.getpid():08x}" + "ab" * 28
    parent_name = f"tailscope-test-{os.getpid()}"
    made: list[str] = []
    sleeper = None
    try:
        for hierarchy in ("cpu", "memory", "unified"):
            base = os.path.join(CGROUP_ROOT, hierarchy)
            if not os.path.isdir(base):
                continue
            for path in (os.path.join(base, parent_name), os.path.join(base, parent_name, container_id)):
                try:
                    os.mkdir(path)
                except OSError as exc:
                    reason = f"cannot create a cgroup under {base}: {exc.strerror or exc}"
                    print(reason)
                    pytest.skip(reason)
                made.append(path)
        sleeper = subprocess.Popen([sys.executable, "-c", ALLOCATE_THEN_SLEEP], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        for path in made:
            if path.endswith(container_id):
                with open(os.path.join(path, "cgroup.procs"), "w") as fh:
                    fh.write(str(sleeper.pid))
        sleeper.stdin.write("go\n")
        sleeper.stdin.flush()
        assert sleeper.stdout.readline().strip() == "allocated"  # charged to the new memory cgroup
        yield container_id, parent_name, sleeper.pid
    finally:
        if sleeper is not None:
            stop_process(sleeper)
        for path in reversed(made):
            _rmdir(path)


@pytest.mark.root
def test_container_found_by_short_id_with_its_oldest_process(container_cgroup):
    container_id, parent_name, pid = container_cgroup
    mountinfo = read_text("/proc/self/mountinfo")
    assert find_container_cgroup(container_id[:12], mountinfo) == f"/{parent_name}/{container_id}"
    found = find_container_target(container_id[:12])
    assert found["pid"] == pid and found["found_by"] == f"--target-container {container_id[:12]}"
    assert found["cgroup_dirs"]["cpu"] == f"{CGROUP_ROOT}/cpu/{parent_name}/{container_id}"
    assert found["cgroup_dirs"]["memory"] == f"{CGROUP_ROOT}/memory/{parent_name}/{container_id}"
    with pytest.raises(TargetNotFound, match="no cgroup of container"):
        find_container_target("f00dfeedf00d")
    with pytest.raises(TargetNotFound, match="too short"):
        find_container_target("ab")


@pytest.mark.root
def test_cgroup_sampled_without_a_pid(container_cgroup):
    container_id, parent_name, _ = container_cgroup
    target = find_cgroup_target(f"{CGROUP_ROOT}/memory/{parent_name}/{container_id}")
    assert target["pid"] is None and target["processes_in_cgroup"] == 1
    assert target["cgroup_path"] == f"/{parent_name}/{container_id}"
    location = locate_cgroup_path(target["cgroup_path"], read_text("/proc/self/mountinfo"))
    sampler = CgroupSampler(None, location=location)
    assert sampler.probe() is None
    values = dict(sampler.read(0))
    assert values["cgroup.mem.current_bytes"] >= 16 * 2**20
    assert "cgroup.cpu.nr_periods" in values and "cgroup.mem.failcnt" in values
    if location.unified_dir is not None and os.path.exists(os.path.join(location.unified_dir, "cpu.pressure")):
        assert "cgroup.psi.cpu.some_us" in values  # per-cgroup pressure from the cgroup2 directory
    else:
        print("no per-cgroup pressure files on this host: cgroup.psi.* not checked")


# ----------------------------------------------------------------- the run command's options


def test_run_with_an_absent_named_target_is_a_setup_error(tmp_path):
    from cli_helpers import run_tailscope

    scenario = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios", "demo.yaml")
    done = run_tailscope("run", scenario, "--target", "http://127.0.0.1:9", "--duration", "1s",
                         "--receiver-port", "0", "--receiver-grpc-port", "-1", "--out", str(tmp_path),
                         "--target-process", f"tailscope-no-such-process-{os.getpid()}", timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"no process named 'tailscope-no-such-process-{os.getpid()}'" in done.stderr
    assert os.listdir(tmp_path) == []  # nothing recorded: no run directory left behind
