"""``io_stall``: the target's threads waited for storage I/O (fsync, synchronous reads and writes).

*Blocked* signals (rates per second or means per second, contrasted with the
baseline, detector_kit): ``proc.threads_blocked`` (the target's threads seen
in uninterruptible sleep, state D, at each sampler tick: the mean number
blocked; material 0.1), its cgroup's I/O pressure ``cgroup.psi.io.some_us``
(material 100 ms/s), the host's ``psi.io.some_us`` (material 100 ms/s,
weight 0.8: another process's I/O counts there too) and ``host.cpu.iowait_s``
(idle CPU time while a task waited for I/O; material 0.1 s/s, weight 0.6). The
two host-wide signals count half as much when the target's threads were
watched (``proc.threads_blocked`` present) and never seen blocked: other
processes' I/O raises them as well.

*Volume* signals say the storage was doing the work: the target's own
storage bytes ``proc.io.write_bytes`` + ``proc.io.read_bytes`` (material
4 MB/s), the disks' busy time ``host.disk.busy_s`` (material 0.1 s/s, weight
0.8) and flushes ``host.disk.flushes`` (fsync and journal commits; material
10/s, weight 0.8). A stall on a network file system moves no local disk, so
volume only firms a finding up.

A process whose pages were swapped out also blocks in state D and raises
I/O pressure while the pages are read back, and that is ``swap``, not an I/O
stall: the memory-paging evidence (the swap detector's signals) discounts
this finding, as throttling discounts contention.

confidence = blocked × (0.6 + 0.4 × volume) × (1 − paging) × server-side factor

blocked and volume are each the best weighted signal × (0.75 + 0.25 × the
second best).
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.protocol import Finding, SpikeContext
from tailscope.analyzers.causes.detect_swap import paging_confidence
from tailscope.analyzers.causes.kit import latency_split, server_side_factor, signal_evidence, strongest

BLOCKED_THREADS_MATERIAL = 0.1
PSI_IO_US_MATERIAL = 100e3
IOWAIT_S_MATERIAL = 0.1
TARGET_IO_BYTES_MATERIAL = 4e6
DISK_BUSY_S_MATERIAL = 0.1
DISK_FLUSHES_MATERIAL = 10.0
BLOCKED_WEIGHTS = {"psi.io.some_us": 0.8, "host.cpu.iowait_s": 0.6}
VOLUME_WEIGHTS = {"host.disk.busy_s": 0.8, "host.disk.flushes": 0.8}
TARGET_IO = ("proc.io.read_bytes", "proc.io.write_bytes")


def target_io_bytes(ctx: SpikeContext) -> np.ndarray | None:
    """Per-bin storage bytes per second of the target (reads + writes); None without the series."""
    inputs = ctx.inputs
    present = [name for name in TARGET_IO if inputs.signals.has(name)]
    if not present:
        return None
    return sum(np.nan_to_num(inputs.binned(name)) for name in present)


def blocked_on_io_confidence(ctx: SpikeContext) -> tuple[float, list[dict]]:
    """(confidence, evidence) that the target's threads were blocked on I/O during the spike,
    ignoring latency (the cpu_contention detector discounts its finding by it: the kernel
    threads that write a process's data back take CPU beside it).

    The host-wide signals (``psi.io``, iowait) count half when the target's own threads
    were watched and never seen blocked: other processes' I/O (the harness writing its run
    directory under a burst, a backup) raises them too."""
    threads = signal_evidence(ctx, "proc.threads_blocked", BLOCKED_THREADS_MATERIAL, floor=0.02)
    host_share = 1.0 if threads is None else 0.5 + 0.5 * threads.confidence
    weights = {name: weight * host_share for name, weight in BLOCKED_WEIGHTS.items()}
    return strongest([
        threads,
        signal_evidence(ctx, "cgroup.psi.io.some_us", PSI_IO_US_MATERIAL, floor=1e3),
        signal_evidence(ctx, "psi.io.some_us", PSI_IO_US_MATERIAL, floor=1e3),
        signal_evidence(ctx, "host.cpu.iowait_s", IOWAIT_S_MATERIAL, floor=0.01),
    ], weights)


class IoStallDetector:
    name = "io_stall"
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        blocked, blocked_evidence = blocked_on_io_confidence(ctx)
        if not blocked_evidence:
            return None
        own_bytes = target_io_bytes(ctx)
        volume, volume_evidence = strongest([
            (signal_evidence(ctx, "proc.io.bytes", TARGET_IO_BYTES_MATERIAL, floor=1e5, values=own_bytes)
             if own_bytes is not None else None),
            signal_evidence(ctx, "host.disk.busy_s", DISK_BUSY_S_MATERIAL, floor=0.005),
            signal_evidence(ctx, "host.disk.flushes", DISK_FLUSHES_MATERIAL, floor=0.5),
        ], VOLUME_WEIGHTS)
        paging, _ = paging_confidence(ctx)
        split = latency_split(ctx)
        factors = {"blocked_on_io": blocked, "io_volume": volume, "not_paging": 1.0 - paging,
                   "server_side": server_side_factor(split)}
        confidence = (factors["blocked_on_io"] * (0.6 + 0.4 * factors["io_volume"]) * factors["not_paging"]
                      * factors["server_side"])
        return Finding(self.name, round(float(confidence), 4), {
            "summary": _summary(blocked_evidence + volume_evidence, paging),
            "signals": blocked_evidence + volume_evidence, "latency_split": split.as_dict(), "factors": factors})


#: How each series reads in the summary: (label, scale of the spike and baseline values, format).
_SUMMARY_PARTS = (
    ("proc.threads_blocked", "target threads blocked on I/O (state D), mean", 1.0, "{:.2f}"),
    ("cgroup.psi.io.some_us", "the target cgroup's I/O pressure", 1e-4, "{:.1f}%"),
    ("psi.io.some_us", "host I/O pressure", 1e-4, "{:.1f}%"),
    ("proc.io.bytes", "target storage I/O, MB/s", 1e-6, "{:.1f}"),
    ("host.disk.flushes", "disk flushes/s", 1.0, "{:.0f}"),
    ("host.disk.busy_s", "disks busy", 100.0, "{:.0f}%"),
)


def _summary(evidence: list[dict], paging: float) -> str:
    named = {e["series"]: e for e in evidence}
    parts = []
    for series, label, scale, fmt in _SUMMARY_PARTS:
        entry = named.get(series)
        if entry and entry["spike"] is not None and entry["baseline"] is not None:
            parts.append(f"{label} {fmt.format(entry['spike'] * scale)} vs {fmt.format(entry['baseline'] * scale)}")
    summary = "storage I/O stall: " + ("; ".join(parts) if parts else "no I/O signal moved")
    if paging >= 0.5:
        summary += " (but pages were read back from swap: see swap)"
    return summary
