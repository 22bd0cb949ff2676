"""Retention decisions shared by the harness and the receiver (``retention.json``).

Under a scenario ``retention`` policy the harness keeps full per-request
records only around P99 spikes and a sample elsewhere; the receiver keeps the
spans of the same requests. Both follow one rule, so kept records join their
spans:

* **sampled**: a trace is sampled at rate ``r`` when the low 64 bits of its
  trace id, as an unsigned integer, are below ``r·2^64`` — the rule of
  OpenTelemetry's ``TraceIdRatioBased`` sampler. Lowering ``r`` keeps a subset.
* **kept in full**: everything whose time (a request's scheduled time, a
  span's start) falls in one of the ``keep`` intervals.

The harness rewrites ``retention.json`` atomically whenever the effective
sample rate or the keep intervals change; the receiver polls it. It also
tells a reader of the run which parts hold every record::

    {"sample_rate": 0.01, "configured_sample_rate": 0.01,
     "keep": [[start_ns, end_ns], ...], "full_records_around_spikes_s": 30,
     "hold_s": 43, "disk_budget_bytes": 2000000000, "updated_ns": 1767225600000000000}

``hold_s`` is how long after its time a record may still become kept (a spike
is known only once its window has settled): writers hold unsampled data that
long before dropping it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tailscope.rundir import schema as fmt
from tailscope.rundir.manifest import write_json_atomic
from tailscope.rundir.reader import read_json

_LOW64 = (1 << 64) - 1


def sample_threshold(rate: float) -> int:
    """The bound below which a trace id's low 64 bits are in the ``rate`` sample (see module doc)."""
    return int(rate * (_LOW64 + 1))


def trace_sampled(trace_id: str | None, rate: float) -> bool:
    """True when ``trace_id`` (32 hex digits) is in the ``rate`` sample (see module doc)."""
    if rate >= 1.0:
        return True
    if not trace_id or rate <= 0.0:
        return False
    try:
        low = int(trace_id[-16:], 16)
    except ValueError:
        return False
    return low < sample_threshold(rate)


@dataclass
class RetentionState:
    """What ``retention.json`` says: the current sample rate and keep intervals (epoch ns)."""

    sample_rate: float = 1.0
    configured_sample_rate: float = 1.0
    keep: list[tuple[int, int]] = field(default_factory=list)
    full_records_around_spikes_s: float | None = None
    hold_s: float = 0.0
    disk_budget_bytes: int | None = None
    updated_ns: int = 0

    def keeps(self, t_ns: int) -> bool:
        """True when ``t_ns`` lies in a keep interval. Intervals are sorted and disjoint,
        so the search walks back from the latest: O(1) for recent times."""
        for lo, hi in reversed(self.keep):
            if t_ns > hi:
                return False
            if t_ns >= lo:
                return True
        return False

    def to_json(self) -> dict:
        return {"sample_rate": self.sample_rate, "configured_sample_rate": self.configured_sample_rate,
                "keep": [[int(lo), int(hi)] for lo, hi in self.keep],
                "full_records_around_spikes_s": self.full_records_around_spikes_s,
                "hold_s": self.hold_s, "disk_budget_bytes": self.disk_budget_bytes, "updated_ns": self.updated_ns}


def save_retention(run_dir: str, state: RetentionState) -> None:
    """Replace ``run_dir/retention.json`` atomically."""
    write_json_atomic(os.path.join(run_dir, fmt.RETENTION), state.to_json())


def load_retention(run_dir: str) -> RetentionState | None:
    """The run's retention state; None when the run kept every record.

    A malformed file reads as None only when absent; otherwise values that do
    not have the documented types raise :class:`tailscope.rundir.RunDirError`."""
    from tailscope.rundir.reader import RunDirError

    path = os.path.join(run_dir, fmt.RETENTION)
    data = read_json(path)
    if data is None:
        return None
    try:
        keep = [(int(lo), int(hi)) for lo, hi in data.get("keep", [])]
        rate = float(data["sample_rate"])
        return RetentionState(
            sample_rate=rate,
            configured_sample_rate=float(data.get("configured_sample_rate", rate)),
            keep=keep,
            full_records_around_spikes_s=data.get("full_records_around_spikes_s"),
            hold_s=float(data.get("hold_s") or 0.0),
            disk_budget_bytes=data.get("disk_budget_bytes"),
            updated_ns=int(data.get("updated_ns") or 0),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RunDirError(f"{path}: not a retention state ({type(exc).__name__}: {exc})") from exc
