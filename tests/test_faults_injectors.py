"""Each fault injector for real: its mechanism acts during the window only, and cleanup leaves nothing.

Real parts: the reference target as a process (in a cgroup of its own, as the
lab runs it), real cgroup v1/v2 files, a real swap file with swapon, real
burner processes, real HTTP over loopback. Tests that need root or writable
cgroups skip with the printed reason.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest
from fault_helpers import LabTarget, cgroups_or_skip, close_all, timed_requests

from tailscope.faults.cgroupfs import target_cgroup
from tailscope.faults.cpu_throttle import cpu_stat, read_limit
from tailscope.faults.injector import FaultSetupError, TargetInfo
from tailscope.faults.registry import build_spec, make_injector
from tailscope.faults.swapfile import active_swap_files


def _cpu_busy_share(cpu: int, seconds: float) -> float:
    """Share of ``seconds`` that ``cpu`` was busy (not idle or iowait), from /proc/stat."""
    def read():
        with open("/proc/stat", encoding="ascii") as fh:
            fields = next(line for line in fh if line.startswith(f"cpu{cpu} ")).split()[1:]
        values = [int(v) for v in fields]
        return sum(values), values[3] + values[4]
    total0, idle0 = read()
    time.sleep(seconds)
    total1, idle1 = read()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def _injector(kind: str, target: LabTarget, work_dir: str, duration_s: float = 2.0, **params):
    spec = build_spec(kind, 0.0, duration_s, params)
    return make_injector(spec, TargetInfo(pid=target.pid, url=target.url, run_id="pytest", work_dir=work_dir))


@pytest.fixture
def own_target(tmp_path):
    """A reference target alone in its own cpu and memory cgroups, on the last CPU (skips without root)."""
    cgroups = cgroups_or_skip(f"tailscope-pytest-{os.getpid()}")
    target = None
    try:
        target = LabTarget(["--resident-mb", "96", "--resident-touch-kb", "4096"], cgroups,
                           cpus=str(max(os.sched_getaffinity(0))))
        yield target
    finally:
        close_all(target, cgroups)
    assert not any(os.path.exists(c.path) for c in cgroups)


def test_cpu_throttle_in_place_throttles_only_inside_the_window_and_restores_the_limit(own_target, tmp_path):
    injector = _injector("cpu_throttle", own_target, str(tmp_path), cpus=0.05, period_ms=50)
    injector.check()
    cgroup = target_cgroup(own_target.pid, "cpu")
    before_limit = read_limit(cgroup)
    timed_requests(own_target, 0.5)
    quiet = cpu_stat(cgroup)
    facts = injector.apply()
    try:
        assert facts["mode"] == "in_place" and facts["quota_us"] == 2500 and facts["period_us"] == 50000
        assert read_limit(cgroup) == (2500, 50000)
        timed_requests(own_target, 1.5)
    finally:
        observed = injector.revert()
        injector.cleanup()
    assert observed["nr_throttled"] > 0 and observed["throttled_ns"] > 0
    after_window = cpu_stat(cgroup)
    timed_requests(own_target, 1.0)
    assert read_limit(cgroup) == before_limit
    assert cpu_stat(cgroup)["throttled_ns"] == after_window["throttled_ns"] > quiet["throttled_ns"]


def test_cpu_throttle_child_mode_moves_the_target_and_back_and_removes_its_cgroup(tmp_path):
    cgroups_or_skip_probe = target_cgroup(os.getpid(), "cpu")
    if os.geteuid() != 0:
        pytest.skip("needs root")
    target = LabTarget([])  # in our own (shared) cgroup: child mode
    try:
        injector = _injector("cpu_throttle", target, str(tmp_path), cpus=0.05)
        injector.check()
        home = target_cgroup(target.pid, "cpu")
        facts = injector.apply()
        assert facts["mode"] == "child"
        assert target_cgroup(target.pid, "cpu").path == facts["cgroup"] != home.path
        timed_requests(target, 1.0)
        observed = injector.revert()
        assert observed["nr_throttled"] > 0
        assert target_cgroup(target.pid, "cpu").path == home.path
        assert not os.path.exists(facts["cgroup"])
        assert cgroups_or_skip_probe.path  # our own cgroup was never touched
    finally:
        target.close()


def test_cpu_contention_pins_burners_to_the_targets_cpus_and_kills_them(own_target, tmp_path):
    injector = _injector("cpu_contention", own_target, str(tmp_path), processes=4)
    injector.check()
    target_process = psutil.Process(own_target.pid)
    assert os.sched_getaffinity(own_target.pid) == {max(os.sched_getaffinity(0))}
    cpu = max(os.sched_getaffinity(0))
    facts = injector.apply()
    try:
        burners = [psutil.Process(pid) for pid in facts["pids"]]
        assert len(burners) == 4
        for burner in burners:
            assert sorted(burner.cpu_affinity()) == sorted(os.sched_getaffinity(own_target.pid))
        busy_during = _cpu_busy_share(cpu, 1.0)
    finally:
        observed = injector.revert()
        injector.cleanup()
    assert observed["burner_cpu_s"] > 0.1
    assert busy_during > 0.95, f"cpu{cpu} busy {busy_during:.0%} while 4 burners ran on it"
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in facts["pids"])
    assert target_process.is_running()


def test_cpu_contention_weight_runs_the_burners_in_a_weighted_cgroup_then_removes_it(own_target, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    injector = _injector("cpu_contention", own_target, str(tmp_path), processes=2, weight=8192)
    injector.check()
    facts = injector.apply()
    try:
        group = facts["cgroup"]
        assert group and os.path.basename(group) == f"tailscope-burners-{os.getpid()}"
        version = target_cgroup(facts["pids"][0], "cpu").version
        assert target_cgroup(facts["pids"][0], "cpu").path == group
        if version == 1:
            assert open(os.path.join(group, "cpu.shares")).read().strip() == "8192"
        else:
            assert open(os.path.join(group, "cpu.weight")).read().strip() == "800"
        assert target_cgroup(own_target.pid, "cpu").path != group  # the target stays where it was
        time.sleep(0.5)  # let them burn
    finally:
        observed = injector.revert()
        injector.cleanup()
    assert observed["burner_cpu_s"] > 0.1
    assert not os.path.exists(group)


def _cpu_usage_s(pid: int) -> tuple[float, float]:
    """(CPU s of ``pid``'s cpuacct — or cpu on v2 — cgroup, CPU s of the process itself)."""
    try:
        group = target_cgroup(pid, "cpuacct")
        cgroup_s = int(group.read("cpuacct.usage")) / 1e9
    except (FaultSetupError, OSError):
        group = target_cgroup(pid, "cpu")
        stat = dict(line.split() for line in group.read("cpu.stat").splitlines())
        cgroup_s = int(stat["usage_usec"]) / 1e6
    times = psutil.Process(pid).cpu_times()
    return cgroup_s, times.user + times.system


def test_cpu_contention_placement_target_runs_cotenants_inside_the_targets_cgroup(own_target, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with pytest.raises(FaultSetupError, match="set weight 0"):
        _injector("cpu_contention", own_target, str(tmp_path), placement="target", weight=2048).check()
    injector = _injector("cpu_contention", own_target, str(tmp_path), processes=2, placement="target")
    injector.check()
    cpu = target_cgroup(own_target.pid, "cpu")
    cgroup_before, own_before = _cpu_usage_s(own_target.pid)
    facts = injector.apply()
    try:
        assert facts["placement"] == "target" and cpu.path in facts["cgroups"]
        for pid in facts["pids"]:
            assert target_cgroup(pid, "cpu").path == cpu.path  # co-tenants of the target's own cgroup
            assert sorted(psutil.Process(pid).cpu_affinity()) == sorted(os.sched_getaffinity(own_target.pid))
        time.sleep(1.0)
        cgroup_after, own_after = _cpu_usage_s(own_target.pid)
    finally:
        observed = injector.revert()
        injector.cleanup()
    # the cgroup's CPU use rose well above the target's own: the burners' time is charged to it
    assert (cgroup_after - cgroup_before) - (own_after - own_before) > 0.5
    assert observed["burner_cpu_s"] > 0.5
    assert set(cpu.processes()) <= {own_target.pid, *(c.pid for c in psutil.Process(own_target.pid).children(True))}


def test_memory_swap_on_a_neighbour_pages_another_process_and_leaves_the_target_alone(own_target, tmp_path):
    try:
        type(_injector("memory_swap", own_target, str(tmp_path))).check_host()
    except FaultSetupError as exc:
        print(f"skipping: {exc}")
        pytest.skip(str(exc))
    injector = _injector("memory_swap", own_target, str(tmp_path), victim="neighbour", neighbour_mb=96,
                         neighbour_mb_s=32.0, fraction=0.3)
    injector.check()
    injector.prepare()
    target_memory = target_cgroup(own_target.pid, "memory")
    limit_file = "memory.limit_in_bytes" if target_memory.version == 1 else "memory.max"
    target_limit = target_memory.read(limit_file)
    facts = injector.apply()
    try:
        neighbour = facts["neighbour_pid"]
        assert facts["victim"] == "neighbour" and facts["swap_file"] in active_swap_files()
        assert os.path.basename(facts["cgroup"]) == f"tailscope-neighbour-{os.getpid()}"
        assert target_cgroup(neighbour, "memory").path == facts["cgroup"] != target_memory.path
        assert facts["limit_bytes"] < facts["usage_bytes"] and target_memory.read(limit_file) == target_limit
        answers = timed_requests(own_target, 1.5)  # the target works (its resident set is read) meanwhile
        assert {status for *_, status in answers} == {200}
    finally:
        observed = injector.revert()
        injector.cleanup()
    print(f"neighbour paging observed: {observed}")
    assert observed["pswpin_delta"] > 1000 and observed["neighbour_major_faults_delta"] > 200
    assert observed["major_faults_delta"] <= 0.01 * observed["neighbour_major_faults_delta"]  # not the target's
    assert not psutil.pid_exists(neighbour) or psutil.Process(neighbour).status() == psutil.STATUS_ZOMBIE
    assert not os.path.exists(facts["cgroup"]) and facts["swap_file"] not in active_swap_files()
    assert not os.path.exists(facts["swap_file"])


def test_memory_swap_swaps_the_target_out_then_removes_swap_and_limit(own_target, tmp_path):
    try:
        type(_injector("memory_swap", own_target, str(tmp_path))).check_host()
    except FaultSetupError as exc:
        print(f"skipping: {exc}")
        pytest.skip(str(exc))
    # 0.6 of its usage: at 0.4 the target was OOM-killed once on this VM's slow swap device (memcg OOM
    # while its requests allocated faster than reclaim could swap), and at the injector's default 0.5 in
    # two full-suite CI runs of 2026-12-07 (dmesg: "Memory cgroup out of memory: Killed process …
    # python3", the request then RemoteDisconnected). A 40 % cut still swaps it out and faults it back.
    injector = _injector("memory_swap", own_target, str(tmp_path), fraction=0.6)
    injector.check()
    injector.prepare()
    cgroup = target_cgroup(own_target.pid, "memory")
    limit_file = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"
    limit_before = cgroup.read(limit_file)
    facts = injector.apply()
    try:
        assert facts["swap_file"] in active_swap_files()
        assert int(cgroup.read(limit_file)) == facts["limit_bytes"] < facts["usage_bytes"]
        slow = timed_requests(own_target, 1.5)
        assert {status for *_, status in slow} == {200}
    finally:
        observed = injector.revert()
        injector.cleanup()
    assert observed["pswpout_delta"] > 0 and observed["major_faults_delta"] > 0
    assert cgroup.read(limit_file) == limit_before
    assert facts["swap_file"] not in active_swap_files()
    assert not os.path.exists(facts["swap_file"])


def test_memory_swap_refuses_a_target_that_shares_its_memory_cgroup(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    target = LabTarget([])
    try:
        with pytest.raises(FaultSetupError, match="alone in a cgroup"):
            _injector("memory_swap", target, str(tmp_path)).check()
    finally:
        target.close()
    assert not [name for name in os.listdir(tmp_path) if name.startswith("tailscope-swap")]


def test_gc_pressure_causes_long_gen2_pauses_only_while_on(tmp_path):
    target = LabTarget(["--gc-min-pause-ms", "0"])
    try:
        injector = _injector("gc_pressure", target, str(tmp_path), mb_per_s=60, retained_mb=96)
        injector.check()
        facts = injector.apply()
        assert facts["state"]["enabled"] and facts["state"]["retained_objects"] > 500_000
        during = timed_requests(target, 2.5)
        observed = injector.revert()
        after = timed_requests(target, 1.5)
        injector.cleanup()
        assert observed["allocated_mb_total"] > 30
        assert max(e - s for s, e, _ in during) > 3 * max(e - s for s, e, _ in after)
        status, body = target.get("/admin/state")
        assert status == 200 and b'"enabled":false' in body
    finally:
        target.close()


def test_io_stall_adds_fsyncd_writes_to_requests_while_on(tmp_path):
    target = LabTarget(["--io-dir", str(tmp_path)])
    try:
        injector = _injector("io_stall", target, str(tmp_path), kb=256)
        injector.check()
        facts = injector.apply()
        assert os.path.dirname(facts["file"]) == str(tmp_path) and os.path.exists(facts["file"])
        timed_requests(target, 0.5)
        observed = injector.revert()
        assert observed["fsynced_writes"] > 0
        assert not os.path.exists(facts["file"])
    finally:
        target.close()


def test_overload_saturates_the_queue_with_429s_and_retries(tmp_path):
    target = LabTarget(["--max-queue-size", "8", "--model-extra-delay-ms", "20"])
    try:
        injector = _injector("overload", target, str(tmp_path), duration_s=2.0, rate=400, retries=1,
                             text_chars=500)
        injector.check()
        facts = injector.apply()
        generator = psutil.Process(facts["generator_pid"])
        time.sleep(2.5)
        observed = injector.revert()
        injector.cleanup()
        assert observed["replies_429"] > 0 and observed["retries"] > 0 and observed["ok"] > 0
        assert not generator.is_running() or generator.status() == psutil.STATUS_ZOMBIE
        assert not [n for n in os.listdir(tmp_path) if n.startswith("overload-")]
    finally:
        target.close()


def test_admin_faults_refuse_a_non_loopback_url(tmp_path):
    spec = build_spec("gc_pressure", 0, 1, {})
    injector = make_injector(spec, TargetInfo(pid=None, url="http://10.1.2.3:8000", run_id="x", work_dir=str(tmp_path)))
    with pytest.raises(FaultSetupError, match="loopback"):
        injector.check()


def _start_agent(run_dir, target, specs):
    import json
    import subprocess
    import sys

    agent = subprocess.Popen(
        [sys.executable, "-m", "tailscope.faults.fault_agent", "--run-dir", str(run_dir), "--run-id", "pytest",
         "--faults", json.dumps([spec.as_dict() for spec in specs]), "--target-pid", str(target.pid),
         "--target-url", target.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert agent.stdout.readline() == b"READY\n"
    agent.stdin.write(f"GO {time.time_ns()}\n".encode())
    agent.stdin.flush()
    return agent


def _fault_events(run_dir):
    import json

    import pyarrow as pa

    table = pa.ipc.open_stream(run_dir / "events.faults.arrow").read_all()
    return {json.loads(a)["fault"]: json.loads(a) for a in table.column("attributes").to_pylist()}


def test_sigint_mid_window_reverts_every_fault_and_leaves_nothing_behind(own_target, tmp_path):
    import signal

    if os.geteuid() != 0:
        pytest.skip("needs root")
    specs = [build_spec("cpu_throttle", 0.2, 60, {"cpus": 0.5}),
             build_spec("cpu_contention", 0.2, 60, {"processes": 2}),
             build_spec("memory_swap", 0.2, 60, {"fraction": 0.5})]
    cpu = target_cgroup(own_target.pid, "cpu")
    memory = target_cgroup(own_target.pid, "memory")
    limits_before = read_limit(cpu), memory.read("memory.limit_in_bytes" if memory.version == 1 else "memory.max")
    agent = _start_agent(tmp_path, own_target, specs)
    try:
        deadline = time.monotonic() + 30
        while read_limit(cpu)[0] < 0 or not [p for p in active_swap_files() if str(tmp_path) in p]:
            assert time.monotonic() < deadline, "the faults never took effect"
            time.sleep(0.1)
        time.sleep(1.0)
        burners = [p for p in psutil.Process(agent.pid).children() if "burner" in " ".join(p.cmdline())]
        assert len(burners) == 2
        agent.send_signal(signal.SIGINT)
        assert agent.wait(timeout=120) == 0, agent.stderr.read().decode()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    events = _fault_events(tmp_path)
    assert set(events) == {"cpu_throttle", "cpu_contention", "memory_swap"}
    assert all(e["cut_short"] and e["error"] is None for e in events.values())
    assert (read_limit(cpu), memory.read("memory.limit_in_bytes" if memory.version == 1 else "memory.max")) \
        == limits_before
    assert not [p for p in active_swap_files() if str(tmp_path) in p]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tailscope-swap")]
    assert not any(b.is_running() and b.status() != psutil.STATUS_ZOMBIE for b in burners)


def test_a_fault_failing_mid_run_is_recorded_and_what_it_created_is_removed(own_target, tmp_path):
    if not os.path.isdir("/dev/shm") or os.geteuid() != 0:
        pytest.skip("needs root and a tmpfs at /dev/shm (swapon refuses tmpfs files)")
    specs = [build_spec("memory_swap", 0.1, 5, {"swap_dir": "/dev/shm", "swap_mb": 16})]
    agent = _start_agent(tmp_path, own_target, specs)
    try:
        time.sleep(1.5)
        agent.terminate()
        assert agent.wait(timeout=60) == 0
        stderr = agent.stderr.read().decode()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    event = _fault_events(tmp_path)["memory_swap"]
    assert event["error"].startswith("apply failed: swapon") and "FAULT-ERROR memory_swap: apply" in stderr
    assert not [n for n in os.listdir("/dev/shm") if n.startswith("tailscope-swap-pytest")]
    memory = target_cgroup(own_target.pid, "memory")
    if memory.version == 1:
        assert int(memory.read("memory.limit_in_bytes")) >= 1 << 62


def test_an_agent_killed_with_sigkill_has_its_leftovers_put_back_by_the_companion(own_target, tmp_path):
    import signal
    from types import SimpleNamespace

    from tailscope.conductor.fault_companion import FaultInjection
    from tailscope.faults.injector import FaultCleanupError
    from tailscope.faults.undo_journal import JOURNAL_NAME

    if os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        type(_injector("memory_swap", own_target, str(tmp_path))).check_host()
    except FaultSetupError as exc:
        print(f"skipping: {exc}")
        pytest.skip(str(exc))
    specs = [build_spec("cpu_throttle", 0.0, 60, {"cpus": 0.5}),
             build_spec("cpu_contention", 0.0, 60, {"processes": 1, "weight": 256}),
             build_spec("memory_swap", 0.0, 60, {"fraction": 0.5})]
    cpu = target_cgroup(own_target.pid, "cpu")
    memory = target_cgroup(own_target.pid, "memory")
    limit_file = "memory.limit_in_bytes" if memory.version == 1 else "memory.max"
    before = read_limit(cpu), memory.read(limit_file)
    companion = FaultInjection(specs)
    ctx = SimpleNamespace(run_dir=str(tmp_path), plan=SimpleNamespace(target=own_target.url),
                          target_process={"pid": own_target.pid})
    companion.start(ctx)
    agent_pid = companion._process.pid
    burners_cgroup = os.path.join(target_cgroup(os.getpid(), "cpu").path, f"tailscope-burners-{agent_pid}")
    try:
        deadline = time.monotonic() + 30
        while read_limit(cpu)[0] < 0 or memory.read(limit_file) == before[1] or not os.path.isdir(burners_cgroup):
            assert time.monotonic() < deadline, "the faults never took effect"
            time.sleep(0.1)
        os.kill(agent_pid, signal.SIGKILL)  # no cleanup of its own: the throttle, limit, swap and cgroup stay
        time.sleep(0.5)
        assert read_limit(cpu)[0] > 0 and [p for p in active_swap_files() if str(tmp_path) in p]
        assert os.path.exists(tmp_path / JOURNAL_NAME)
    finally:
        with pytest.raises(FaultCleanupError) as raised:
            companion.stop()
    message = str(raised.value)
    print(message)
    assert "killed by signal 9" in message and "put back from its undo journal" in message
    assert "left behind" not in message
    assert (read_limit(cpu), memory.read(limit_file)) == before
    assert not [p for p in active_swap_files() if str(tmp_path) in p]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tailscope-swap")]
    assert not os.path.exists(burners_cgroup) and not os.path.exists(tmp_path / JOURNAL_NAME)
