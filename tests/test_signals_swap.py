"""Swap, for real (short): a swap file, a memory-cgroup (v1) limit below what a child
process touches, and the sampler must see pswpout/pswpin and the child's major faults
rise. The swap file, the cgroup and the child are removed afterwards, also on failure.

Needs root, swapon on /var/tmp and a writable /sys/fs/cgroup/memory; skips with the
reason otherwise.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time

import pytest
from signals_helpers import read_series, read_signals_meta, stop_process

from tailscope.signals.cgroup import CgroupSampler
from tailscope.signals.host import MemorySampler, VmstatSampler
from tailscope.signals.process import ProcessSampler
from tailscope.signals.sampling_loop import run_sampling

SWAP_MB = 256
LIMIT_BYTES = 64 * 2**20
TOUCH_MB = 150
MEMORY_HIERARCHY = "/sys/fs/cgroup/memory"
#: How far v1's usage_in_bytes may read above the limit: the kernel charges memory to a
#: cgroup in per-CPU batches of up to 64 pages (MEMCG_CHARGE_BATCH), so the counter can
#: briefly overshoot by up to one batch per CPU before reclaim brings it back.
CHARGE_SLACK_BYTES = 64 * 4096 * (os.cpu_count() or 1)

TOUCHER = f"""
import sys, time
buf = bytearray({TOUCH_MB} * 2**20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("filled", flush=True)
end = time.time() + 1.5
while time.time() < end:  # re-read every page: evicted ones come back from swap
    total = 0
    for i in range(0, len(buf), 4096):
        total += buf[i]
print("done", flush=True)
sys.stdin.read()
"""


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)


@pytest.fixture
def swap_file():
    path = f"/var/tmp/tailscope-test-swap-{os.getpid()}"
    enabled = False
    try:
        try:
            _run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={SWAP_MB}", "status=none"])
            os.chmod(path, 0o600)
            _run(["mkswap", path])
            _run(["swapon", path])
            enabled = True
        except (OSError, subprocess.CalledProcessError) as exc:
            reason = f"cannot enable a swap file at {path}: {getattr(exc, 'stderr', None) or exc}"
            print(reason)
            pytest.skip(reason)
        yield path
    finally:
        if enabled:
            subprocess.run(["swapoff", path], capture_output=True, timeout=120)
        if os.path.exists(path):
            os.remove(path)


@pytest.fixture
def memory_cgroup():
    path = os.path.join(MEMORY_HIERARCHY, f"tailscope-test-swap-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as exc:
        reason = f"memory cgroup v1 hierarchy not writable at {MEMORY_HIERARCHY}: {exc.strerror or exc}"
        print(reason)
        pytest.skip(reason)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as fh:
            fh.write(str(LIMIT_BYTES))
        yield path
    finally:
        deadline = time.monotonic() + 5
        while os.path.isdir(path):
            try:
                os.rmdir(path)
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.root
def test_memory_limit_with_swap_shows_swap_traffic_and_major_faults(tmp_path, swap_file, memory_cgroup):
    procs = os.path.join(memory_cgroup, "cgroup.procs")

    def join_cgroup() -> None:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))

    child = subprocess.Popen([sys.executable, "-c", TOUCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, preexec_fn=join_cgroup)
    stop = threading.Event()
    try:
        samplers = [VmstatSampler(), MemorySampler(), ProcessSampler(child.pid), CgroupSampler(child.pid)]
        sampling = threading.Thread(target=run_sampling, args=(str(tmp_path), child.pid, 20.0, stop),
                                    kwargs={"samplers": samplers})
        sampling.start()
        try:
            assert child.stdout.readline().strip() == "filled"
            assert child.stdout.readline().strip() == "done"
            time.sleep(0.2)
        finally:
            stop.set()
            sampling.join(timeout=10)
    finally:
        stop_process(child)
    meta = read_signals_meta(str(tmp_path))
    assert meta["sources"]["cgroup"]["available"], meta["sources"]["cgroup"]
    series = read_series(str(tmp_path))

    def rise(name: str) -> float:
        values = [v for _, v in series[name]]
        return values[-1] - values[0]

    swapped_out_mb = rise("host.vm.pswpout") * 4096 / 2**20
    swapped_in_mb = rise("host.vm.pswpin") * 4096 / 2**20
    print(f"swapped out {swapped_out_mb:.0f} MB, in {swapped_in_mb:.0f} MB, "
          f"child major faults +{rise('proc.major_faults'):.0f}")
    assert swapped_out_mb > (TOUCH_MB * 2**20 - LIMIT_BYTES) / 2**20 * 0.5
    assert swapped_in_mb > 10
    assert rise("proc.major_faults") > 1000
    assert max(v for _, v in series["host.swap.used_bytes"]) > 40 * 2**20
    assert max(v for _, v in series["cgroup.mem.current_bytes"]) <= LIMIT_BYTES + CHARGE_SLACK_BYTES
    assert series["cgroup.mem.max_bytes"][-1][1] == LIMIT_BYTES
    assert rise("cgroup.mem.failcnt") > 0
