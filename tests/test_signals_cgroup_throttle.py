"""A real CFS quota on a real cgroup v1 cpu hierarchy: the sampler must see the throttling.

Needs root and a writable /sys/fs/cgroup/cpu (cgroup v1); skips with the reason otherwise.
"""

from __future__ import annotations

import errno
import os
import time

import pytest
from signals_helpers import read_series, read_signals_meta, run_sampler_process, start_burner, stop_process

CPU_HIERARCHY = "/sys/fs/cgroup/cpu"
QUOTA_US = 20_000
PERIOD_US = 100_000


def _write(path: str, value) -> None:
    with open(path, "w") as fh:
        fh.write(f"{value}\n")


@pytest.fixture
def throttled_cgroup():
    """A fresh cpu cgroup limited to 0.2 CPU, removed afterwards."""
    path = os.path.join(CPU_HIERARCHY, f"tailscope-test-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as exc:
        reason = f"cgroup v1 cpu hierarchy not writable at {CPU_HIERARCHY}: {exc.strerror or exc}"
        print(reason)
        pytest.skip(reason)
    try:
        _write(os.path.join(path, "cpu.cfs_period_us"), PERIOD_US)
        _write(os.path.join(path, "cpu.cfs_quota_us"), QUOTA_US)
        yield path
    finally:
        _remove_cgroup(path)


def _remove_cgroup(path: str, timeout_s: float = 2.0) -> None:
    """rmdir the cgroup, retrying while the kernel still counts an exiting task (EBUSY)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.root
def test_sampler_records_cfs_throttling(tmp_path, throttled_cgroup):
    burner = start_burner()
    try:
        _write(os.path.join(throttled_cgroup, "cgroup.procs"), burner.pid)
        rc = run_sampler_process(str(tmp_path), burner.pid, rate_hz=10, duration_s=1.5)
    finally:
        stop_process(burner)
    assert rc == 0
    meta = read_signals_meta(str(tmp_path))
    assert meta["sources"]["cgroup"]["available"], meta["sources"]["cgroup"]
    series = read_series(str(tmp_path))
    throttled = [v for _, v in series["cgroup.cpu.nr_throttled"]]
    throttled_ns = [v for _, v in series["cgroup.cpu.throttled_ns"]]
    periods = [v for _, v in series["cgroup.cpu.nr_periods"]]
    assert throttled[-1] > throttled[0]
    assert throttled_ns[-1] > throttled_ns[0]
    assert periods[-1] > periods[0]
    assert series["cgroup.cpu.limit_cores"][-1][1] == pytest.approx(QUOTA_US / PERIOD_US)
    # The burner wants a whole core but gets about 0.2 of one.
    cpu = series["proc.cpu.user_s"]
    elapsed_s = (cpu[-1][0] - cpu[0][0]) / 1e9
    used_s = cpu[-1][1] - cpu[0][1] + series["proc.cpu.system_s"][-1][1] - series["proc.cpu.system_s"][0][1]
    assert used_s / elapsed_s < 0.4
