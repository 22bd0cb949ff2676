"""Who used the host's CPU, per 1-s grid bin of a run (cores): the target, the whole host, and
everything else — the "other processes" that can take the target's CPU.

Read by ``cpu_contention`` (analyzers/causes/detect_cpu_contention.py) inside and around a spike,
and by ``compare`` over whole runs (analyzers/comparison/host_load.py: were both sides measured on
an equally quiet host?). The series are the samplers' counters (docs/signals.md): the target's
``proc.cpu.{user,system}_s``, the host's ``host.cpu.{user,system}_s`` or, for a target pinned to
some CPUs, ``host.cpu<N>.busy_s`` of those, and the generator's ``generator.cpu_percent``.
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.inputs.run_inputs import RunInputs

#: Other processes' CPU (cores) that counts: a neighbour this busy can take a core's worth of time
#: slices from the target (``cpu_contention``), and a comparison whose sides' hosts differ by this
#: much was not measured on equal hosts (``compare``).
OTHERS_CORES_MATERIAL = 0.3
TARGET_CPU = ("proc.cpu.user_s", "proc.cpu.system_s")
HOST_CPU = ("host.cpu.user_s", "host.cpu.system_s")


def target_cores(inputs: RunInputs) -> np.ndarray | None:
    """Per-bin CPU cores the target's processes used (user + system); None without the series."""
    if not all(inputs.signals.has(n) for n in TARGET_CPU):
        return None
    return sum(inputs.binned(n) for n in TARGET_CPU)


def host_cores(inputs: RunInputs) -> np.ndarray | None:
    """Per-bin busy CPU cores of the whole host (user + system); None without the series."""
    if not all(inputs.signals.has(n) for n in HOST_CPU):
        return None
    return sum(inputs.binned(n) for n in HOST_CPU)


def _manifest(inputs: RunInputs) -> dict:
    return getattr(inputs.run, "manifest", None) or {}


def target_cpu_list(inputs: RunInputs) -> list[int] | None:
    """The CPUs the target may run on (its affinity, ``manifest.target_process.cpus``) when they
    are fewer than the host's and each has its own series (``host.cpu<N>.busy_s``); else None."""
    manifest = _manifest(inputs)
    cpus = (manifest.get("target_process") or {}).get("cpus")
    host_cpus = (manifest.get("host") or {}).get("cpus")
    if not cpus or not host_cpus or len(cpus) >= host_cpus:
        return None
    if not all(inputs.signals.has(f"host.cpu{cpu}.busy_s") for cpu in cpus):
        return None
    return [int(cpu) for cpu in cpus]


def generator_share_on(inputs: RunInputs, cpus: list[int]) -> float:
    """The part of the generator's CPU time that can have been spent on ``cpus``: the share of the
    harness's CPUs (``manifest.host.harness_cpus``) among them — 1 where that is not recorded."""
    harness = (_manifest(inputs).get("host") or {}).get("harness_cpus")
    if not harness:
        return 1.0
    return len(set(harness) & set(cpus)) / len(harness)


def other_processes_cores(inputs: RunInputs) -> np.ndarray | None:
    """Per-bin CPU cores used by everything but the target and the generator; None without the series.

    Where the target may run on only some of the host's CPUs (a cpuset, a pinned server:
    :func:`target_cpu_list`), only those CPUs count: work elsewhere cannot take the target's CPU
    (measured on the real vLLM CPU build pinned to one of 2 cores: a fault's client on the other
    core went from 0.07 to 0.37 cores while the target's own core stayed full of the target's work,
    and the host-wide count named contention)."""
    own = target_cores(inputs)
    if own is None:
        return None
    cpus = target_cpu_list(inputs)
    if cpus is not None:
        busy = sum(inputs.binned(f"host.cpu{cpu}.busy_s") for cpu in cpus)
        generator_share = generator_share_on(inputs, cpus)
    else:
        busy = host_cores(inputs)
        generator_share = 1.0
    if busy is None:
        return None
    others = busy - own
    if inputs.signals.has("generator.cpu_percent") and generator_share > 0:
        others = others - generator_share * np.nan_to_num(inputs.binned("generator.cpu_percent")) / 100.0
    return others


def mean_other_processes_cores(inputs: RunInputs) -> float | None:
    """Other processes' CPU (cores, :func:`other_processes_cores`) averaged over the bins that have
    a reading — over a whole run when ``inputs`` spans its load; None without the series."""
    others = other_processes_cores(inputs)
    if others is None:
        return None
    read = others[np.isfinite(others)]
    return float(max(np.mean(read), 0.0)) if len(read) else None
