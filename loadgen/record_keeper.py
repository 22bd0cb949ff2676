"""The generator's request sink: every request counted, its record kept by policy.

No Locust or gevent import. :class:`RecordKeeper` takes
:class:`~tailscope.rundir.request_record.RequestRecord` records through the
``append_record`` of an Appender, so the :class:`~.recorder.Recorder` writes
through it unchanged. For each request it

1. counts it in ``windows.arrow`` (:class:`~.window_stats.WindowAggregator`,
   increments emitted every ``EMIT_INTERVAL_S``) and, when it failed, in
   ``error_samples.json`` (:class:`~.error_samples.ErrorSamples`, saved as often);
2. without a retention policy, writes its record to ``requests.arrow``;
3. with a :class:`~.retention.RetentionPolicy`, writes the record at once when
   it is an error (``keep_errors``), when its trace is in the sample
   (:func:`tailscope.rundir.retention_policy.trace_sampled`) or when its scheduled time
   is inside a keep interval; otherwise holds it in a ring for
   ``hold_s = full_records_around_spikes + client timeout + 2 windows``.
   When a window settles as a spike (:class:`~.window_stats.SpikeWatch`), the
   interval ``[spike − around, spike + around]`` becomes a keep interval: the
   ring's records inside it are written, and so is every later record inside it.
   Records leaving the ring unkept are dropped (they are in the histograms).
   ``retention.json`` is rewritten on each change so the receiver keeps the
   same traces' spans.

Memory: the ring (about 0.5 kB × request rate × hold_s: ~20 MB at 1,000
requests/s with 30 s around spikes) plus the aggregator's open cells; neither
grows with the run's length. A ``kill -9`` loses the ring (records not yet
chosen) but not the histograms beyond the last emit.
"""

from __future__ import annotations

import time
from collections import deque

from tailscope.loadgen.disk_budget import DiskBudget
from tailscope.loadgen.error_samples import ErrorSamples
from tailscope.loadgen.retention_section import RetentionPolicy
from tailscope.loadgen.window_stats import SpikeWatch, WindowAggregator
from tailscope.rundir.request_record import RequestRecord, latency_ns
from tailscope.rundir.retention_policy import RetentionState, save_retention, trace_sampled

#: How often window increments are appended (seconds of request end time).
EMIT_INTERVAL_S = 1.0
#: How often the disk budget is measured, seconds.
BUDGET_CHECK_S = 1.0


class RecordKeeper:
    """Sink for the Recorder (see module docstring). Not thread-safe: one thread appends."""

    def __init__(self, requests, windows, run_dir: str, *, policy: RetentionPolicy | None = None,
                 timeout_s: float = 10.0, end_ns: int | None = None, window_s: float | None = None):
        self.requests = requests
        self.run_dir = run_dir
        self.policy = policy
        window_s = window_s or (policy.window_s if policy else 1.0)
        self.windows = WindowAggregator(windows, window_s)
        self._emit_ns = int(EMIT_INTERVAL_S * 1e9)
        self._next_emit_ns = 0
        self.kept = 0
        self.held_dropped = 0
        self.spikes = 0
        self.budget: DiskBudget | None = None
        #: Set when the run must stop (disk budget used up); the conductor polls it.
        self.failure: str | None = None
        #: Distinct errors per class (error_samples.json, saved with the window increments).
        self.errors = ErrorSamples()
        if policy is None:
            return
        self._around_ns = int(policy.full_records_around_spikes_s * 1e9)
        self._hold_ns = self._around_ns + int((timeout_s + 2 * window_s + 1) * 1e9)
        self.watch = SpikeWatch(window_s, settle_s=timeout_s + 1.0, factor=policy.spike_factor,
                                baseline_windows=policy.baseline_windows)
        self._ring: deque = deque()  # (end_ns, RequestRecord), in append order
        self.state = RetentionState(sample_rate=policy.sample_rate,
                                    configured_sample_rate=policy.sample_rate,
                                    full_records_around_spikes_s=policy.full_records_around_spikes_s,
                                    hold_s=self._hold_ns / 1e9,
                                    disk_budget_bytes=policy.disk_budget_bytes, updated_ns=time.time_ns())
        if policy.disk_budget_bytes:
            self.budget = DiskBudget(run_dir, policy.disk_budget_bytes,
                                     end_ns or time.time_ns() + 86400 * 10**9, policy.sample_rate)
        self._next_check_ns = 0
        save_retention(run_dir, self.state)

    # -- the sink interface ------------------------------------------------------
    def append_record(self, record: RequestRecord) -> None:
        """One request's record. Once the disk budget is used up, records are no
        longer written (histograms still are) and :attr:`failure` says why the run
        must stop."""
        scheduled, end = record.scheduled_ns, record.end_ns
        now = end if end is not None else scheduled
        if self.policy is None:
            self.requests.append_record(record)
            self.kept += 1
            kept = True
        else:
            kept = self._keep_or_hold(record, now)
            self._watch(record)
        self.windows.add(scheduled, record.sent_ns, end, record.cls, record.error_kind, kept)
        if record.error_kind is not None:
            self.errors.add_record(record)
        if now >= self._next_emit_ns:
            self.windows.emit()
            self._save_errors()
            self._next_emit_ns = now + self._emit_ns
        if self.policy is not None and now >= self._next_check_ns:
            self._next_check_ns = now + int(BUDGET_CHECK_S * 1e9)
            self._settle(now)
            self._check_budget(now)

    def close(self) -> None:
        """Settle every window (a spike at the very end still keeps its ring), emit the
        last increments and write the final ``retention.json``."""
        if self.policy is not None:
            for window in self.watch.settle_all():
                if window.spike:
                    self._keep_interval(window.start_ns, window.end_ns)
            self._ring.clear()
            self.state.updated_ns = time.time_ns()
            save_retention(self.run_dir, self.state)
        self.windows.emit()
        self._save_errors()

    def _save_errors(self) -> None:
        """Rewrite error_samples.json when errors arrived; a write error is left to the
        streams' own checks (the run guard), never raised into the load."""
        try:
            self.errors.save(self.run_dir)
        except OSError:
            pass

    # -- retention -----------------------------------------------------------------
    def _keep_or_hold(self, record: RequestRecord, now: int) -> bool:
        state = self.state
        is_error = record.error_kind is not None
        if self.failure is not None:
            return False
        if ((is_error and self.policy.keep_errors and state.sample_rate > 0)
                or trace_sampled(record.trace_id, state.sample_rate)
                or state.keeps(record.scheduled_ns)):
            self.requests.append_record(record)
            self.kept += 1
            return True
        self._ring.append((now, record))
        ring, horizon = self._ring, now - self._hold_ns
        while ring and ring[0][0] < horizon:
            ring.popleft()
            self.held_dropped += 1
        return False

    def _watch(self, record: RequestRecord) -> None:
        end = record.end_ns
        ok = record.error_kind is None and end is not None and record.sent_ns is not None
        self.watch.add(record.scheduled_ns, latency_ns(record.scheduled_ns, end) if ok else None)

    def _settle(self, now: int) -> None:
        for window in self.watch.settle(now):
            if window.spike and not (self.budget is not None and self.budget.tight):
                self._keep_interval(window.start_ns, window.end_ns)

    def _keep_interval(self, start_ns: int, end_ns: int) -> None:
        """Keep every record scheduled within ``around`` of a spike window."""
        self.spikes += 1
        lo, hi = start_ns - self._around_ns, end_ns + self._around_ns
        keep = self.state.keep
        if keep and lo <= keep[-1][1]:
            keep[-1] = (min(keep[-1][0], lo), max(keep[-1][1], hi))
        else:
            keep.append((lo, hi))
        held = []
        for entry in self._ring:
            record = entry[1]
            if lo <= record.scheduled_ns <= hi:
                self.requests.append_record(record)
                self.windows.add_kept(record.scheduled_ns, record.cls)
                self.kept += 1
            else:
                held.append(entry)
        self._ring = deque(held)
        self.state.updated_ns = time.time_ns()
        save_retention(self.run_dir, self.state)

    def _check_budget(self, now: int) -> None:
        budget = self.budget
        if budget is None:
            return
        if budget.check(now):
            self.state.sample_rate = budget.rate
            self.state.updated_ns = time.time_ns()
            save_retention(self.run_dir, self.state)
        if budget.exhausted and self.failure is None:
            self.failure = (
                f"disk budget exhausted: the run directory holds {budget.used_bytes / 1e6:,.1f} MB "
                f"of its {budget.budget_bytes / 1e6:,.0f} MB budget")
            self._ring.clear()
