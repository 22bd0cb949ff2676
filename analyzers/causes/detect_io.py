"""``io_stall``: the target's threads waited for storage I/O (fsync, synchronous reads and writes).

*Blocked* signals (rates per second or means per second, contrasted with the
baseline; detector kit: ``kit.blocked_on_io_confidence``): ``proc.threads_blocked`` (the target's threads seen
in uninterruptible sleep, state D, at each sampler tick: the mean number
blocked; material 0.1), its cgroup's I/O pressure ``cgroup.psi.io.some_us``
(material 100 ms/s), the host's ``psi.io.some_us`` (material 100 ms/s,
weight 0.8: another process's I/O counts there too) and ``host.cpu.iowait_s``
(idle CPU time while a task waited for I/O; material 0.1 s/s, weight 0.6).
The first two are the target's own; when either was recorded, each of the two
host-wide ones counts at most 0.45 + 0.55 × the target's own best
(``kit.owned_strongest``): other processes' I/O — a neighbour paging, a backup
— raises them as well, and alone (the target's own flat) they reach at most
0.45 × (0.75 + 0.25 × 0.45) ≈ 0.39, below the 0.5 of a cause.

*Volume* signals say the storage was doing the work: the target's own
storage bytes ``proc.io.write_bytes`` + ``proc.io.read_bytes`` (material
4 MB/s), the disks' busy time ``host.disk.busy_s`` (material 0.1 s/s, weight
0.8) and flushes ``host.disk.flushes`` (fsync and journal commits; material
10/s, weight 0.8). A stall on a network file system moves no local disk, so
volume only firms a finding up.

A process whose pages were swapped out also blocks in state D and raises
I/O pressure while the pages are read back, and that is ``swap``, not an I/O
stall: the memory-paging evidence (the swap detector's signals, ``kit.paging_confidence``) discounts
this finding, as throttling discounts contention — the part of it the target's own major faults
and memory cgroup vouch for (``owned``): another process's paging does not discount the target's
own I/O stall.

confidence = blocked × (0.6 + 0.4 × volume) × (1 − paging owned by the target) × server-side factor

blocked and volume are each the best counted signal × (0.75 + 0.25 × the
second best).
"""

from __future__ import annotations

import numpy as np

from tailscope.analyzers.causes.kit import (
    blocked_on_io_confidence,
    latency_split,
    level_words,
    paging_confidence,
    server_side_factor,
    signal_evidence,
    strongest,
)
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext

TARGET_IO_BYTES_MATERIAL = 4e6
DISK_BUSY_S_MATERIAL = 0.1
DISK_FLUSHES_MATERIAL = 10.0
VOLUME_WEIGHTS = {"host.disk.busy_s": 0.8, "host.disk.flushes": 0.8}
TARGET_IO = ("proc.io.read_bytes", "proc.io.write_bytes")


def target_io_bytes(ctx: SpikeContext) -> np.ndarray | None:
    """Per-bin storage bytes per second of the target (reads + writes); None without the series."""
    inputs = ctx.inputs
    present = [name for name in TARGET_IO if inputs.signals.has(name)]
    if not present:
        return None
    return sum(np.nan_to_num(inputs.binned(name)) for name in present)


class IoStallDetector(CauseDetector):
    kind = "io_stall"
    answers = ("io_stall",)
    reads = ("proc.threads_blocked", "cgroup.psi.io", "psi.io", "host.cpu.iowait", "proc.io.", "host.disk",
             "host.procs_blocked")
    aliases = ("io", "disk_io", "io_wait", "fsync", "io_pressure")
    needs = ("signals",)

    def score(self, ctx: SpikeContext) -> Finding | None:
        blocked_io = blocked_on_io_confidence(ctx)
        blocked, blocked_evidence = blocked_io.confidence, blocked_io.evidence
        if not blocked_evidence:
            return None
        own_bytes = target_io_bytes(ctx)
        volume, volume_evidence = strongest([
            (signal_evidence(ctx, "proc.io.bytes", TARGET_IO_BYTES_MATERIAL, floor=1e5, values=own_bytes)
             if own_bytes is not None else None),
            signal_evidence(ctx, "host.disk.busy_s", DISK_BUSY_S_MATERIAL, floor=0.005),
            signal_evidence(ctx, "host.disk.flushes", DISK_FLUSHES_MATERIAL, floor=0.5),
        ], VOLUME_WEIGHTS)
        paging = paging_confidence(ctx).owned
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
            parts.append(f"{label} {level_words(entry, lambda v, s=scale, f=fmt: f.format(v * s))} "
                         f"vs {fmt.format(entry['baseline'] * scale)}")
    summary = "storage I/O stall: " + ("; ".join(parts) if parts else "no I/O signal moved")
    if paging >= 0.5:
        summary += " (but pages were read back from swap: see swap)"
    return summary
