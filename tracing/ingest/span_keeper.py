"""Which received spans the receiver writes, under the harness's retention policy.

Without a ``retention.json`` in the run directory every span is written (the
default). Once the harness writes one (a scenario with a ``retention``
section; :mod:`tailscope.rundir.retention_policy`), a span is written at once when
its trace is in the sample (the same trace-id rule as the harness's records,
so kept requests join their spans) or when its start lies in a keep interval
around a spike. Other spans are held, as Arrow record batches, for the
state's ``hold_s`` plus ``HOLD_SLACK_S`` (spans arrive after their request
ends); a keep interval announced meanwhile releases the held spans inside it,
and the rest are dropped and counted (``spans_not_retained``).

The state file is polled every ``POLL_S``. Memory: the held batches, about
200 bytes × spans per second × (hold_s + slack); nothing grows with the run.
"""

from __future__ import annotations

import os
import time
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.rundir import RunDirError, schema
from tailscope.rundir.retention_policy import RetentionState, load_retention, trace_sampled

POLL_S = 1.0
HOLD_SLACK_S = 10.0


class SpanKeeper:
    """Decides, per received batch of span columns, what reaches ``spans.arrow``.

    ``store`` and ``tick`` return the number of spans appended to ``appender``.
    Call both from the receiver's single writer thread.
    """

    def __init__(self, appender, run_dir: str):
        self.appender = appender
        self.path = os.path.join(run_dir, schema.RETENTION)
        self.state: RetentionState | None = None
        self.not_retained = 0
        self._held: deque[tuple[int, pa.RecordBatch]] = deque()  # (latest start_ns, batch)
        self._mtime_ns = 0
        self._next_poll = 0.0

    def store(self, columns: dict[str, list]) -> int:
        """Write what the policy keeps of one request's spans, hold the rest."""
        self._poll()
        state = self.state
        if state is None:
            self.appender.append_columns(columns)
            return len(columns["trace_id"])
        keep = [trace_sampled(t, state.sample_rate) or state.keeps(s)
                for t, s in zip(columns["trace_id"], columns["start_ns"])]
        if all(keep):
            self.appender.append_columns(columns)
            return len(keep)
        mask = np.array(keep, dtype=bool)
        batch = pa.RecordBatch.from_pydict(columns, schema=schema.SPANS_SCHEMA)
        if mask.any():
            self.appender.append_columns(batch.filter(pa.array(mask)).to_pydict())
        held = batch.filter(pa.array(~mask))
        self._held.append((int(pc.max(held.column("start_ns")).as_py() or 0), held))
        return int(mask.sum())

    def tick(self) -> int:
        """Poll the state, release held spans inside new keep intervals, drop expired ones."""
        changed = self._poll()
        state = self.state
        if state is None or not self._held:
            return 0
        stored = self._release(state) if changed and state.keep else 0
        horizon = time.time_ns() - int((state.hold_s + HOLD_SLACK_S) * 1e9)
        while self._held and self._held[0][0] < horizon:
            self.not_retained += self._held.popleft()[1].num_rows
        return stored

    def _release(self, state: RetentionState) -> int:
        oldest = self._held[0][1].column("start_ns")
        recent = [(lo, hi) for lo, hi in state.keep if hi >= (pc.min(oldest).as_py() or 0)]
        stored, remaining = 0, deque()
        for latest, batch in self._held:
            start = batch.column("start_ns")
            inside = pa.array(np.zeros(batch.num_rows, dtype=bool))
            for lo, hi in recent:
                inside = pc.or_(inside, pc.and_(pc.greater_equal(start, lo), pc.less_equal(start, hi)))
            picked = batch.filter(inside)
            if picked.num_rows:
                self.appender.append_columns(picked.to_pydict())
                stored += picked.num_rows
            rest = batch.filter(pc.invert(inside))
            if rest.num_rows:
                remaining.append((latest, rest))
        self._held = remaining
        return stored

    def _poll(self) -> bool:
        """Re-read retention.json when it changed (at most every POLL_S); True if it did."""
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + POLL_S
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return False
        if mtime == self._mtime_ns:
            return False
        try:
            state = load_retention(os.path.dirname(self.path))
        except RunDirError:
            return False  # a state the harness is rewriting; read it on the next poll
        self._mtime_ns = mtime
        self.state = state
        return True
