"""CPU contention, for real: CPU burners pinned to the target's core. The target's
run-queue wait (schedstat) and the host's PSI cpu stall total must rise in the
recorded series when the burners start, and the (CPU-bound) target's context
switches must be involuntary ones.

Other processes may share the core too (a busy CI machine): the assertions
compare the two phases, and three burners keep the step large even then."""

from __future__ import annotations

import os
import threading
import time

import pytest
from signals_helpers import read_series, start_burner, stop_process

from tailscope.signals.process import ProcessSampler
from tailscope.signals.psi import PressureSampler
from tailscope.signals.sampling_loop import run_sampling

PHASE_S = 1.2
CORE = 0
BURNERS = 3


def _pin_to_core() -> None:
    os.sched_setaffinity(0, {CORE})


def _rate(points: list[tuple[int, float]], t0: int, t1: int) -> float:
    """Δvalue / Δt (per second) of a cumulative series between the reads nearest t0 and t1."""
    inside = [(t, v) for t, v in points if t0 <= t <= t1]
    (ta, va), (tb, vb) = inside[0], inside[-1]
    return (vb - va) / ((tb - ta) / 1e9)


@pytest.fixture
def pinned_target():
    if CORE not in os.sched_getaffinity(0):
        pytest.skip(f"CPU {CORE} is not available to this process")
    target = start_burner(preexec_fn=_pin_to_core)
    try:
        yield target
    finally:
        stop_process(target)


def test_burner_on_the_targets_core_shows_in_runqueue_wait_ctxt_and_psi(tmp_path, pinned_target):
    samplers = [ProcessSampler(pinned_target.pid), PressureSampler()]
    psi_reason = PressureSampler().probe()
    stop = threading.Event()
    marks = {}

    def compete():
        time.sleep(PHASE_S)
        marks["burner_start"] = time.time_ns()
        burners = []
        try:
            for _ in range(BURNERS):
                burners.append(start_burner(preexec_fn=_pin_to_core))
            stop.wait(PHASE_S)
        finally:
            for burner in burners:
                stop_process(burner)
        marks["burner_end"] = time.time_ns()

    competitor = threading.Thread(target=compete)
    start = time.time_ns()
    competitor.start()
    timer = threading.Timer(2 * PHASE_S + 0.1, stop.set)
    timer.start()
    try:
        run_sampling(str(tmp_path), pinned_target.pid, 20.0, stop, samplers=samplers)
    finally:
        timer.cancel()
        stop.set()
        competitor.join()
    series = read_series(str(tmp_path))
    alone = (start + int(0.2e9), marks["burner_start"])
    shared = (marks["burner_start"] + int(0.2e9), marks["burner_end"])

    wait_alone = _rate(series["proc.runqueue_wait_ns"], *alone) / 1e9
    wait_shared = _rate(series["proc.runqueue_wait_ns"], *shared) / 1e9
    print(f"run-queue wait: alone {wait_alone:.3f} s/s, sharing its core {wait_shared:.3f} s/s")
    # alone on its core the target waits ~0 s/s; with three burners ~3/4 of the time
    assert wait_shared > 0.25 and wait_shared > wait_alone + 0.1

    preempt_alone = _rate(series["proc.ctxt.nonvoluntary"], *alone)
    preempt_shared = _rate(series["proc.ctxt.nonvoluntary"], *shared)
    print(f"involuntary context switches: alone {preempt_alone:.0f}/s, sharing {preempt_shared:.0f}/s")
    # A CPU-bound target sharing its core is preempted, it never blocks. (The count is not
    # monotonic in contention: more competitors mean fewer, longer waits.)
    blocked_shared = _rate(series["proc.ctxt.voluntary"], *shared)
    assert preempt_shared > 5 and preempt_shared > blocked_shared
    counts = [v for _, v in series["proc.ctxt.nonvoluntary"]]
    assert counts == sorted(counts)

    if psi_reason is not None:
        print(f"PSI not checked: {psi_reason}")
        return
    psi_alone = _rate(series["psi.cpu.some_us"], *alone) / 1e6
    psi_shared = _rate(series["psi.cpu.some_us"], *shared) / 1e6
    print(f"PSI cpu some: alone {psi_alone:.3f} s/s, sharing {psi_shared:.3f} s/s")
    assert psi_shared > 0.2
    if psi_alone < 0.7:
        assert psi_shared > psi_alone + 0.1
    else:
        print("the host's CPU pressure was already saturated before the burners: no step to see")
