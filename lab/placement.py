"""Where the lab's processes run: the target on the last CPU we may use, the harness on the others.

Like a server in a container with a cpuset beside a load generator on other cores: the target's CPU
is where ``cpu_contention`` burns, and the harness (generator, receiver, samplers, fault agent and
the faults' own traffic) does not take CPU time from the target, nor wait behind it. With fewer than
two CPUs nothing is pinned (every function returns None).

The reference targets are pinned by the experiment (:mod:`tailscope.lab.experiment`, the harness
left free); the real vLLM's API server and engine processes by the lab that starts them
(:mod:`tailscope.lab.suite`), and then its experiments' harness processes too: at 8 requests/s an
unpinned harness waited for a CPU behind vLLM's engine, its sends went out late, and control runs
named the generator (docs/lab.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tailscope.faults.processes import parse_cpu_list


def _usable() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def target_cpus() -> str | None:
    """The target's CPU list (``"1"``): the last CPU this process may use; None with fewer than two."""
    cpus = _usable()
    return str(cpus[-1]) if len(cpus) >= 2 else None


def harness_cpus() -> str | None:
    """The harness's CPU list (``"0"``, ``"0,1,2"``): every usable CPU but :func:`target_cpus`;
    None with fewer than two."""
    cpus = _usable()
    return ",".join(str(cpu) for cpu in cpus[:-1]) if len(cpus) >= 2 else None


def pin_before_exec(cpus: str | None) -> Callable[[], None] | None:
    """A ``subprocess.Popen`` ``preexec_fn`` that pins the child (and so everything it starts) to
    ``cpus`` before it runs a line of its own; None for None."""
    if not cpus:
        return None
    allowed = set(parse_cpu_list(cpus))
    return lambda: os.sched_setaffinity(0, allowed)
