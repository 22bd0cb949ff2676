"""cpu_contention on a target pinned to some of the host's CPUs (detect_cpu_contention
``other_processes_cores``): only the busy time of the target's own CPUs counts as other processes'
CPU, and the generator's CPU only as far as the harness shares them. On the real vLLM CPU build
pinned to one of 2 cores, a fault's client on the other core (0.07 → 0.37 cores) was counted as a
neighbour taking the target's CPU and contention was named over KV-cache pressure."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from test_analyzers_detectors import _clean_context

from tailscope.analyzers.inputs.cpu_accounting import (
    host_cores,
    other_processes_cores,
    target_cores,
    target_cpu_list,
)
from tailscope.rundir import schema as fmt
from tailscope.testkit.synthetic import write_synthetic_run


def _pinned_run(path, target_cpus, harness_cpus=(0,), host_cpus=2):
    """A clean synthetic run, its manifest saying where the target and the harness may run, and
    per-CPU busy counters: CPU 0 (the harness's) busy 0.9 cores from 18 to 21 s, else 0.05; CPU 1 1.0."""
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=3)
    manifest_path = os.path.join(path, fmt.MANIFEST)
    with open(manifest_path) as fh:
        manifest = json.load(fh)
    manifest["host"] = {**(manifest.get("host") or {}), "cpus": host_cpus, "harness_cpus": list(harness_cpus)}
    manifest["target_process"] = {**(manifest.get("target_process") or {}), "cpus": list(target_cpus)}
    with open(manifest_path, "w") as fh:
        json.dump(manifest, fh)
    t = np.arange(truth["start_ns"], truth["end_ns"] + 1, 500_000_000, dtype=np.int64)
    seconds = (t - truth["start_ns"]) / 1e9
    cpu0_rate = np.where((seconds >= 18) & (seconds < 21), 0.9, 0.05)
    cpu0 = np.concatenate([[0.0], np.cumsum(cpu0_rate[1:] * 0.5)])
    cpu1 = seconds * 1.0
    table = pa.table({"t_ns": np.concatenate([t, t]),
                      "series": ["host.cpu0.busy_s"] * len(t) + ["host.cpu1.busy_s"] * len(t),
                      "value": np.concatenate([cpu0, cpu1])}, schema=fmt.SIGNALS_SCHEMA)
    with ipc.new_stream(os.path.join(path, fmt.writer_file(fmt.SIGNALS, "percpu")), fmt.SIGNALS_SCHEMA) as out:
        out.write_table(table)
    return _clean_context(path, 18.0, 3.0)


def test_a_pinned_target_counts_only_its_own_cpus(tmp_path):
    ctx = _pinned_run(tmp_path / "run", target_cpus=[1])
    assert target_cpu_list(ctx.inputs) == [1]
    others = other_processes_cores(ctx.inputs)
    # the harness is on CPU 0 only: the generator's CPU is not taken from CPU 1's busy time
    expected = ctx.inputs.binned("host.cpu1.busy_s") - target_cores(ctx.inputs)
    assert np.allclose(others, expected, equal_nan=True)
    # CPU 0's burst is not in it (it is in the host-wide count)
    assert not np.allclose(others, host_cores(ctx.inputs) - target_cores(ctx.inputs), equal_nan=True)


def test_a_target_free_to_use_every_cpu_is_judged_host_wide(tmp_path):
    ctx = _pinned_run(tmp_path / "run", target_cpus=[0, 1])
    assert target_cpu_list(ctx.inputs) is None
    generator = np.nan_to_num(ctx.inputs.binned("generator.cpu_percent")) / 100.0
    assert np.allclose(other_processes_cores(ctx.inputs), host_cores(ctx.inputs) - target_cores(ctx.inputs) - generator, equal_nan=True)


def test_a_harness_sharing_the_targets_cpu_has_its_share_taken_off(tmp_path):
    ctx = _pinned_run(tmp_path / "run", target_cpus=[1], harness_cpus=(0, 1))
    generator = np.nan_to_num(ctx.inputs.binned("generator.cpu_percent")) / 100.0
    expected = ctx.inputs.binned("host.cpu1.busy_s") - target_cores(ctx.inputs) - 0.5 * generator
    assert np.allclose(other_processes_cores(ctx.inputs), expected, equal_nan=True)
