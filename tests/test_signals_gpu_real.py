"""The GPU sampler against the real NVML: runs where a GPU and driver exist, else
skips with NVML's reason (the sampler's own degradation is tested on a fake in
test_signals_parsers.py). benchmarks/gpu_check.py is the longer manual check."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tailscope.signals.gpu import GpuSampler

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_real_nvml_sampler_reads_every_device():
    sampler = GpuSampler()
    reason = sampler.probe()
    if reason is not None:
        print(f"no GPU here: {reason}")
        pytest.skip(reason)
    series = sampler.series()
    first = dict(sampler.read(0))
    second = dict(sampler.read(0))
    assert set(first) <= set(series) and first.keys() == second.keys()
    assert "gpu0.sm_clock_mhz" in first and first["gpu0.sm_clock_mhz"] > 0
    assert 0 <= first.get("gpu0.util_pct", 0) <= 100
    for name, value in second.items():
        if series[name].kind == "counter":
            assert value >= first[name], name  # violation times are cumulative


def test_gpu_check_script_runs_from_the_checkout_and_says_what_it_found():
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "gpu_check.py"), "--seconds", "0.5"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    if done.returncode == 1:
        assert done.stdout.startswith("GPU sampler unavailable: ")
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "clocks-event reasons per read" in done.stdout
