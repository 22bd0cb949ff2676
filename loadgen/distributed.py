"""Splitting one schedule across Locust workers and merging their records.

No Locust or gevent import: the pieces here are plain values and buffers,
used by the Locust glue (:mod:`.locust_roles`) and tested on their own.

**Split.** Worker *i* of *k* walks offsets *i*, *i + k*, *i + 2k*, … of the
*same* seeded schedule, and every worker uses the *same* origin (an epoch ns
chosen by the master a little in the future). The union of the shares is
therefore exactly the schedule one process would walk — for every arrival
process. (Giving each worker rate/k with its own seed would be right only for
Poisson arrivals: k superposed constant or gamma processes are neither
constant nor gamma.) Each worker generates the whole schedule and keeps 1/k
of it; generation is vectorised numpy, a few ns per offset.

**Merge.** A worker's recorder writes rows into a :class:`ColumnBuffer`; every
:data:`BATCH_INTERVAL_S` the buffer's columns travel to the master in one
Locust message, and the master appends them unchanged to ``requests.arrow``
(:class:`MergedRecords`). A worker ends with a report of its totals (rows,
scheduled, sent, completed, errors); the master checks that it received every
row each worker reported. The merged table holds exactly the concatenation of
the workers' rows, so percentiles over it are percentiles over all requests.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator

import numpy as np

from tailscope.rundir.schema import REQUESTS_SCHEMA

from .recorder import LATE_THRESHOLD_NS, LIVE_WINDOW_S, LiveStats, WindowedStats

#: Master → worker: this worker's share of the schedule (:class:`ScheduleShare`).
MESSAGE_SHARE = "tailscope_share"
#: Worker → master: a batch of request rows, column-wise.
MESSAGE_RECORDS = "tailscope_records"
#: Worker → master: the worker's totals once its load has ended (:class:`WorkerTotals`).
MESSAGE_DONE = "tailscope_done"
#: How often a worker sends its buffered rows to the master, s.
BATCH_INTERVAL_S = 0.5
#: How far in the future the master puts the shared origin, s: time for the
#: share message and Locust's spawn message to reach every worker.
ORIGIN_LEAD_S = 0.5

REQUEST_COLUMNS = tuple(REQUESTS_SCHEMA.names)


class ProtocolError(ValueError):
    """A message between master and workers that does not have the expected shape."""


@dataclass(frozen=True)
class ScheduleShare:
    """Which part of the schedule one worker walks, and from which origin.

    ``index`` in ``[0, count)``; ``origin_ns`` is the epoch ns of offset 0,
    the same for every worker of a run; ``run_id`` names the master's run;
    ``duration_s`` is the master's schedule length (workers may not know the
    master's ``--run-time``).
    """

    index: int
    count: int
    origin_ns: int
    run_id: str
    duration_s: float | None = None

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 1):
            raise ProtocolError(f"share count must be an integer >= 1, got {self.count!r}")
        if not (isinstance(self.index, int) and 0 <= self.index < self.count):
            raise ProtocolError(f"share index must be in [0, {self.count}), got {self.index!r}")
        if not isinstance(self.origin_ns, int):
            raise ProtocolError(f"origin_ns must be an integer (epoch ns), got {self.origin_ns!r}")

    def to_message(self) -> dict:
        return asdict(self)

    @classmethod
    def from_message(cls, data) -> "ScheduleShare":
        if not isinstance(data, dict):
            raise ProtocolError(f"share message: expected a mapping, got {type(data).__name__}")
        try:
            return cls(index=data["index"], count=data["count"], origin_ns=data["origin_ns"],
                       run_id=str(data["run_id"]), duration_s=data.get("duration_s"))
        except KeyError as exc:
            raise ProtocolError(f"share message: missing {exc.args[0]!r}") from None


def take_share(offsets: Iterable[int], index: int, count: int) -> Iterator[int]:
    """Offsets ``index``, ``index + count``, ``index + 2·count``, … of ``offsets``."""
    return itertools.islice(offsets, index, None, count)


def share_seed(seed: int, index: int, count: int) -> int:
    """Seed of worker ``index``'s request mix (class draws, bodies).

    One process keeps the plan's seed; with several, each worker gets its own
    stream derived from (seed, index, count), so workers do not draw the same
    class sequence in lockstep. Reproducible for the same split."""
    if count == 1:
        return seed
    return int(np.random.SeedSequence([seed, index, count]).generate_state(1)[0])


class ColumnBuffer:
    """A request sink (``append(*values)`` in REQUESTS_SCHEMA order) that keeps
    rows column-wise until :meth:`take` hands them over. Memory: the rows
    appended since the last take (one batch interval's worth)."""

    def __init__(self):
        self._columns: list[list] = [[] for _ in REQUEST_COLUMNS]
        self.appended = 0

    def append(self, *values) -> None:
        for column, value in zip(self._columns, values):
            column.append(value)
        self.appended += 1

    def pending(self) -> int:
        return len(self._columns[0])

    def take(self) -> dict[str, list] | None:
        """The buffered rows as ``{column: values}``, emptying the buffer; None when empty."""
        if not self._columns[0]:
            return None
        columns, self._columns = self._columns, [[] for _ in REQUEST_COLUMNS]
        return dict(zip(REQUEST_COLUMNS, columns))


def records_message(worker: int, seq: int, columns: dict[str, list], in_flight: int = 0) -> dict:
    """The payload of a :data:`MESSAGE_RECORDS` message (``in_flight``: the
    worker's requests in flight when it was sent)."""
    return {"worker": worker, "seq": seq, "columns": columns, "in_flight": in_flight}


@dataclass
class WorkerTotals:
    """What one worker did, as it reports at the end (:data:`MESSAGE_DONE`)."""

    worker: int
    records: int  # rows it produced (sent in record batches)
    scheduled: int  # requests whose scheduled time came (sent or dropped)
    sent: int
    completed: int
    errors: int
    stop_reason: str
    failure: str | None = None  # the worker's load failed (message), None when it ran

    def to_message(self) -> dict:
        return asdict(self)

    @classmethod
    def from_message(cls, data) -> "WorkerTotals":
        if not isinstance(data, dict):
            raise ProtocolError(f"done message: expected a mapping, got {type(data).__name__}")
        try:
            return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name != "failure"},
                       failure=data.get("failure"))
        except KeyError as exc:
            raise ProtocolError(f"done message: missing {exc.args[0]!r}") from None


class MergedRecords:
    """The master's side of the merge: every worker's rows into one sink.

    ``sink`` has ``append(*values)`` in REQUESTS_SCHEMA order (a
    :class:`tailscope.rundir.Appender` or the conductor's record keeper). Live statistics (for progress) are
    kept over the merged rows like a single process's recorder keeps them.
    Call from one thread (the master's event loop).
    """

    def __init__(self, sink, window_s: int = LIVE_WINDOW_S):
        self.sink = sink
        self.live = WindowedStats(window_s)
        self.received: dict[int, int] = {}  # worker → rows received
        self.totals: dict[int, WorkerTotals] = {}  # worker → its final report
        self.completed = 0
        self.errors = 0
        self._next_seq: dict[int, int] = {}
        self._in_flight: dict[int, int] = {}
        self.out_of_order: list[str] = []

    @property
    def rows(self) -> int:
        return sum(self.received.values())

    @property
    def in_flight(self) -> int:
        """Requests in flight over all workers, as of each one's latest batch."""
        return sum(self._in_flight.values())

    def add_batch(self, data) -> int:
        """Append one :data:`MESSAGE_RECORDS` payload; return its row count."""
        worker, seq, columns = _batch_parts(data)
        expected = self._next_seq.get(worker, 0)
        if seq != expected:
            self.out_of_order.append(f"worker {worker}: batch {seq} arrived, expected {expected}")
        self._next_seq[worker] = seq + 1
        in_flight = data.get("in_flight", 0)
        self._in_flight[worker] = in_flight if isinstance(in_flight, int) else 0
        n = len(columns["scheduled_ns"])
        for row in zip(*(columns[name] for name in REQUEST_COLUMNS)):
            self.sink.append(*row)
        self.received[worker] = self.received.get(worker, 0) + n
        self._count(columns)
        return n

    def _count(self, columns: dict[str, list]) -> None:
        for scheduled, sent, end, kind in zip(columns["scheduled_ns"], columns["sent_ns"],
                                              columns["end_ns"], columns["error_kind"]):
            is_error = kind is not None
            self.errors += is_error
            if sent is None:
                self.live.add(end, None, True, is_error)
                continue
            self.completed += 1
            self.live.add(end, end - scheduled, sent - scheduled > LATE_THRESHOLD_NS, is_error)

    def finish(self, data) -> WorkerTotals:
        """Record one worker's :data:`MESSAGE_DONE` report."""
        totals = WorkerTotals.from_message(data)
        self.totals[totals.worker] = totals
        self._in_flight[totals.worker] = 0
        return totals

    def all_done(self, workers: Iterable[int]) -> bool:
        return all(w in self.totals for w in workers)

    def problems(self, workers: Iterable[int]) -> list[str]:
        """Why the merge is not exact: missing reports, rows lost, failed workers."""
        problems = list(self.out_of_order)
        for worker in workers:
            totals = self.totals.get(worker)
            received = self.received.get(worker, 0)
            if totals is None:
                problems.append(f"worker {worker}: no final report ({received} rows received)")
                continue
            if totals.records != received:
                problems.append(f"worker {worker}: reported {totals.records} rows, "
                                f"{received} reached the master")
            if totals.failure:
                problems.append(f"worker {worker}: load failed: {totals.failure}")
        return problems

    def snapshot(self, now_ns: int) -> LiveStats:
        return self.live.snapshot(now_ns)


def _batch_parts(data) -> tuple[int, int, dict[str, list]]:
    """(worker, seq, columns) of a records payload, validated."""
    if not isinstance(data, dict):
        raise ProtocolError(f"records message: expected a mapping, got {type(data).__name__}")
    worker, seq, columns = data.get("worker"), data.get("seq"), data.get("columns")
    if not isinstance(worker, int) or not isinstance(seq, int) or not isinstance(columns, dict):
        raise ProtocolError("records message: needs integer 'worker' and 'seq' and a 'columns' mapping")
    missing = [name for name in REQUEST_COLUMNS if name not in columns]
    if missing:
        raise ProtocolError(f"records message: missing columns {missing}")
    lengths = {len(columns[name]) for name in REQUEST_COLUMNS}
    if len(lengths) != 1:
        raise ProtocolError(f"records message: columns of unequal length {sorted(lengths)}")
    return worker, seq, {name: columns[name] for name in REQUEST_COLUMNS}


def merged_load_summary(totals: Iterable[WorkerTotals], start_ns: int, end_ns: int,
                        duration_s: float, max_requests: int) -> dict:
    """The manifest's ``load`` entry for a run made of several workers' totals.

    ``start_ns`` is the shared origin, ``end_ns`` when the last worker ended
    (epoch ns); offered rate = scheduled ÷ the scheduling period (at most
    ``duration_s``), achieved rate = completed ÷ the whole run."""
    totals = list(totals)
    scheduled = sum(t.scheduled for t in totals)
    completed = sum(t.completed for t in totals)
    run_s = max(0.0, (end_ns - start_ns) / 1e9)
    scheduling_s = min(run_s, duration_s) if run_s > 0 else 0.0
    reasons = {t.stop_reason for t in totals}
    if scheduled >= max_requests:
        stop_reason = "max_requests"
    elif "stopped" in reasons:
        stop_reason = "stopped"
    else:
        stop_reason = "duration"
    return {
        "start_ns": start_ns, "end_ns": end_ns, "scheduled": scheduled,
        "sent": sum(t.sent for t in totals), "completed": completed,
        "errors": sum(t.errors for t in totals),
        "offered_rps": scheduled / scheduling_s if scheduling_s > 0 else 0.0,
        "achieved_rps": completed / run_s if run_s > 0 else 0.0,
        "stop_reason": stop_reason, "workers": len(totals),
    }
