"""The lab's CPU placement (lab/placement.py): the target's CPU and the harness's are disjoint and
cover the usable ones, and a child started with ``pin_before_exec`` runs on exactly those CPUs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tailscope.lab.placement import harness_cpus, pin_before_exec, target_cpus

USABLE = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(USABLE) < 2, reason="one usable CPU: the lab pins nothing")
def test_target_and_harness_split_the_usable_cpus():
    target, harness = target_cpus(), harness_cpus()
    assert target == str(USABLE[-1])
    assert sorted(int(cpu) for cpu in harness.split(",")) == USABLE[:-1]


@pytest.mark.parametrize("which", [target_cpus, harness_cpus])
def test_a_child_started_pinned_runs_only_on_those_cpus(which):
    cpus = which()
    if cpus is None:
        pytest.skip("one usable CPU: the lab pins nothing")
    code = "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0)))))"
    # the grandchild inherits the mask: vLLM's engine processes, the experiment's fault agent
    nested = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}], check=True)"
    for program in (code, nested):
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                              preexec_fn=pin_before_exec(cpus))
        assert done.stdout.strip() == cpus


def test_nothing_is_pinned_without_a_list():
    assert pin_before_exec(None) is None and pin_before_exec("") is None
