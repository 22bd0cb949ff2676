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
of it; generation is vectorised numpy, a few ns per offset. An
``arrival.max_concurrency`` cap is split the same way (:func:`cap_share`),
so the workers together hold at most that many requests in flight. A closed
loop (concurrency mode: N requests kept in flight) has no schedule: its N
users are split by :func:`cap_share` (parts differ by at most one, add up to
N), each worker running its part from the shared origin for the duration;
so is ``max_requests``.

**Merge.** A worker's recorder writes its
:class:`~tailscope.rundir.request_record.RequestRecord` records into a
:class:`ColumnBuffer` (``append_record``: straight into columns), and
so do its streamed-chunk timer and its self-check (:class:`WorkerOutbox`:
request rows, ``chunks.arrow`` rows, generator gauges for
``signals.generator.arrow`` and ``generator_gc`` events). Every
:data:`BATCH_INTERVAL_S` the buffers' columns travel to the master in Locust
messages of at most :data:`MAX_MESSAGE_ROWS` rows per kind, and the master
appends them unchanged to the run directory's streams (:class:`MergedRecords`):
column-wise into a sink that takes columns (an Appender), else as one
``RequestRecord`` per row (the record keeper, which counts each request).
A worker ends with a report of its totals (rows of each kind, scheduled, sent,
completed, errors); the master checks that it received every row each worker
reported. The merged table holds exactly the concatenation of the workers'
rows, so percentiles over it are percentiles over all requests.

A records message is ``{"worker", "seq", "columns", "in_flight"}`` plus,
optionally, ``"chunks"``, ``"signals"`` and ``"events"`` (each
``{column: values}`` in its schema's columns). Unknown keys are ignored and
absent parts mean none (an older worker); a part or column that does not fit
its schema raises :class:`ProtocolError` and nothing of that message is kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace

import numpy as np
import pyarrow as pa

from tailscope.loadgen.recorder import LIVE_WINDOW_S, LiveStats, WindowedStats
from tailscope.rundir.request_record import RequestRecord, latency_ns, lateness_ns
from tailscope.rundir.schema import CHUNKS_SCHEMA, EVENTS_SCHEMA, REQUESTS_SCHEMA, SIGNALS_SCHEMA
from tailscope.support.units import LATE_THRESHOLD_NS

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

#: Most rows of one kind in one records message; a fuller buffer goes in several messages.
MAX_MESSAGE_ROWS = 20_000

REQUEST_COLUMNS = RequestRecord._fields
#: The companion rows a records message may carry, by message key: the schema of their rows
#: (the run directory's ``chunks.arrow``, ``signals.generator.arrow`` and ``events.arrow``).
PART_SCHEMAS = {"chunks": CHUNKS_SCHEMA, "signals": SIGNALS_SCHEMA, "events": EVENTS_SCHEMA}


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
    def from_message(cls, data) -> ScheduleShare:
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


def cap_share(cap: int, index: int, count: int) -> int:
    """Worker ``index`` of ``count``'s part of an in-flight cap of ``cap`` requests
    (``arrival.max_concurrency``): the parts differ by at most one and add up to ``cap``."""
    return cap // count + (1 if index < cap % count else 0)


def split_description(arrival, workers: int) -> dict:
    """How a run's ``arrival`` (a :class:`~.spec.ArrivalSpec`) is split over ``workers``
    processes, for the manifest's ``arrival``: ``workers``, and each worker's part of a closed
    loop's users (``users_per_worker``; concurrency mode: requests kept in flight) or of a
    ``max_concurrency`` cap (``max_concurrency_per_worker``)."""
    out: dict = {"workers": workers}
    if arrival.process == "closed":
        out["users_per_worker"] = [cap_share(arrival.users, i, workers) for i in range(workers)]
    elif arrival.max_concurrency is not None:
        out["max_concurrency_per_worker"] = [cap_share(arrival.max_concurrency, i, workers) for i in range(workers)]
    return out


def share_seed(seed: int, index: int, count: int) -> int:
    """Seed of worker ``index``'s request mix (class draws, bodies).

    One process keeps the plan's seed; with several, each worker gets its own
    stream derived from (seed, index, count), so workers do not draw the same
    class sequence in lockstep. Reproducible for the same split."""
    if count == 1:
        return seed
    return int(np.random.SeedSequence([seed, index, count]).generate_state(1)[0])


class ColumnBuffer:
    """A sink of rows in ``names`` order (by default a RequestRecord's fields: ``append_record``;
    ``append(*values)`` for the companion rows) that keeps them column-wise until :meth:`take` hands them over. Memory: the
    rows appended since the last take (one batch interval's worth)."""

    def __init__(self, names: tuple[str, ...] = REQUEST_COLUMNS):
        self.names = tuple(names)
        self._columns: list[list] = [[] for _ in self.names]
        self.appended = 0

    def append(self, *values) -> None:
        """One row in ``names`` order; trailing columns left out are null."""
        for column, value in zip(self._columns, values):
            column.append(value)
        if len(values) < len(self._columns):
            for column in self._columns[len(values):]:
                column.append(None)
        self.appended += 1

    def append_record(self, record: tuple) -> None:
        """One row given as a tuple of every column in ``names`` order (a
        :class:`~tailscope.rundir.request_record.RequestRecord` for the request buffer)."""
        for column, value in zip(self._columns, record):
            column.append(value)
        self.appended += 1

    def append_columns(self, columns: dict) -> None:
        """Many rows given column-wise (``{name: values}``, all of one length; a
        column left out is null), as :meth:`tailscope.rundir.Appender.append_columns`."""
        lengths = {len(values) for values in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of unequal length: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        for name, column in zip(self.names, self._columns):
            values = columns.get(name)
            column.extend(values if values is not None else [None] * n)
        self.appended += n

    def pending(self) -> int:
        return len(self._columns[0])

    def take(self, limit: int | None = None) -> dict[str, list] | None:
        """The oldest buffered rows (at most ``limit``) as ``{column: values}``,
        removed from the buffer; None when it is empty."""
        if not self._columns[0]:
            return None
        if limit is None or limit >= len(self._columns[0]):
            columns, self._columns = self._columns, [[] for _ in self.names]
        else:
            columns = [column[:limit] for column in self._columns]
            self._columns = [column[limit:] for column in self._columns]
        return dict(zip(self.names, columns))


def records_message(worker: int, seq: int, columns: dict[str, list] | None, in_flight: int = 0,
                    parts: dict[str, dict[str, list]] | None = None) -> dict:
    """The payload of a :data:`MESSAGE_RECORDS` message (``in_flight``: the
    worker's requests in flight when it was sent). ``columns`` None: no request
    rows; ``parts``: companion rows by :data:`PART_SCHEMAS` key (empty ones left out)."""
    if columns is None:
        columns = {name: [] for name in REQUEST_COLUMNS}
    message = {"worker": worker, "seq": seq, "columns": columns, "in_flight": in_flight}
    message.update({key: part for key, part in (parts or {}).items() if part})
    return message


class WorkerOutbox:
    """One worker's outgoing rows: ``requests`` (the recorder's sink) and ``parts``
    (a :class:`ColumnBuffer` per :data:`PART_SCHEMAS` key: the chunk, generator
    signal and generator event sinks), handed over as records messages.
    Call from one thread (the worker's event loop)."""

    def __init__(self, worker: int, max_rows: int = MAX_MESSAGE_ROWS):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows!r}")
        self.worker = worker
        self.max_rows = max_rows
        self.requests = ColumnBuffer()
        self.parts = {key: ColumnBuffer(tuple(schema.names)) for key, schema in PART_SCHEMAS.items()}
        self.seq = 0

    def messages(self, in_flight: int = 0) -> Iterator[dict]:
        """Records messages until every buffer is empty, each with at most
        ``max_rows`` rows of each kind; numbered on from the last one."""
        while True:
            columns = self.requests.take(self.max_rows)
            parts = {key: buffer.take(self.max_rows) for key, buffer in self.parts.items()}
            if columns is None and not any(parts.values()):
                return
            message = records_message(self.worker, self.seq, columns, in_flight, parts)
            self.seq += 1
            yield message

    def counted(self, totals: WorkerTotals) -> WorkerTotals:
        """``totals`` with the companion row counts filled in (rows appended so far)."""
        return replace(totals, **{key: buffer.appended for key, buffer in self.parts.items()})


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
    chunks: int = 0  # streamed-chunk rows it produced (PART_SCHEMAS keys: rows sent in record batches)
    signals: int = 0  # generator signal rows
    events: int = 0  # generator event rows

    def to_message(self) -> dict:
        return asdict(self)

    @classmethod
    def from_message(cls, data) -> WorkerTotals:
        """The totals of a :data:`MESSAGE_DONE` payload; the companion row counts
        default to 0 (a worker that sent none)."""
        if not isinstance(data, dict):
            raise ProtocolError(f"done message: expected a mapping, got {type(data).__name__}")
        try:
            required = {name: data[name] for name in _TOTALS_COUNTS}
            stop_reason = data["stop_reason"]
        except KeyError as exc:
            raise ProtocolError(f"done message: missing {exc.args[0]!r}") from None
        optional = {key: data.get(key, 0) for key in PART_SCHEMAS}
        counts = {**required, **optional}
        bad = sorted(name for name, value in counts.items() if not isinstance(value, int) or value < 0)
        failure = data.get("failure")
        if bad or not isinstance(stop_reason, str) or not (failure is None or isinstance(failure, str)):
            raise ProtocolError(f"done message: counts {bad} must be integers >= 0, "
                                "stop_reason a string and failure a string or null")
        return cls(**counts, stop_reason=stop_reason, failure=failure)


_TOTALS_COUNTS = ("worker", "records", "scheduled", "sent", "completed", "errors")


class MergedRecords:
    """The master's side of the merge: every worker's rows into the run's sinks.

    ``sink`` takes :class:`~tailscope.rundir.request_record.RequestRecord` records
    (``append_record``: the conductor's record keeper) or, cheaper, columns
    (``append_columns``: a :class:`tailscope.rundir.Appender`);
    ``chunks``, ``signals`` and ``events`` (optional, :class:`~tailscope.rundir.Appender`
    or anything with ``append(*values)``) take the companion rows of the same
    names (:data:`PART_SCHEMAS`); a part without a sink is dropped and not
    checked. Live statistics (for progress) are kept over the merged rows like
    a single process's recorder keeps them. Call from one thread (the master's
    event loop).
    """

    def __init__(self, sink, window_s: int = LIVE_WINDOW_S, *, chunks=None, signals=None, events=None):
        self.sink = sink
        self.part_sinks = {key: part for key, part in
                           (("chunks", chunks), ("signals", signals), ("events", events)) if part is not None}
        self.live = WindowedStats(window_s)
        self.received: dict[int, int] = {}  # worker → rows received
        self.parts_received: dict[str, dict[int, int]] = {key: {} for key in PART_SCHEMAS}
        self.totals: dict[int, WorkerTotals] = {}  # worker → its final report
        self.completed = 0
        self.errors = 0
        self._next_seq: dict[int, int] = {}
        self._in_flight: dict[int, int] = {}
        self.out_of_order: list[str] = []
        self.rejected: list[str] = []  # malformed messages, as the master's role noted them

    @property
    def rows(self) -> int:
        return sum(self.received.values())

    @property
    def in_flight(self) -> int:
        """Requests in flight over all workers, as of each one's latest batch."""
        return sum(self._in_flight.values())

    def add_batch(self, data) -> int:
        """Append one :data:`MESSAGE_RECORDS` payload (all of it, or nothing when it
        is malformed: :class:`ProtocolError`); return its request row count."""
        worker, seq, columns, parts = _batch_parts(data)
        expected = self._next_seq.get(worker, 0)
        if seq != expected:
            self.out_of_order.append(f"worker {worker}: batch {seq} arrived, expected {expected}")
        self._next_seq[worker] = seq + 1
        in_flight = data.get("in_flight", 0)
        self._in_flight[worker] = in_flight if isinstance(in_flight, int) else 0
        n = len(columns["scheduled_ns"])
        append_columns = getattr(self.sink, "append_columns", None)
        if append_columns is not None:
            append_columns(columns)
        else:
            append_record = self.sink.append_record
            for record in map(RequestRecord._make, zip(*(columns[name] for name in REQUEST_COLUMNS))):
                append_record(record)
        self.received[worker] = self.received.get(worker, 0) + n
        self._count(columns)
        for key, part in parts.items():
            target = self.part_sinks.get(key)
            if target is None:
                continue
            _append_columns(target, PART_SCHEMAS[key].names, part)
            received = self.parts_received[key]
            received[worker] = received.get(worker, 0) + len(part[PART_SCHEMAS[key].names[0]])
        return n

    def _count(self, columns: dict[str, list]) -> None:
        for scheduled, sent, end, kind in zip(columns["scheduled_ns"], columns["sent_ns"],
                                              columns["end_ns"], columns["error_kind"]):
            is_error = kind is not None
            self.errors += is_error
            if sent is None:
                self.live.add_due(scheduled, True)
                self.live.add(end, None, is_error)
                continue
            self.completed += 1
            # The master learns of a send only from its row (when the request ended):
            # counted under its due second, while that second is still in the window.
            self.live.add_due(scheduled, lateness_ns(scheduled, sent) > LATE_THRESHOLD_NS)
            self.live.add(end, latency_ns(scheduled, end), is_error)

    def finish(self, data) -> WorkerTotals:
        """Record one worker's :data:`MESSAGE_DONE` report (:class:`ProtocolError` when malformed)."""
        totals = WorkerTotals.from_message(data)
        self.totals[totals.worker] = totals
        self._in_flight[totals.worker] = 0
        return totals

    def all_done(self, workers: Iterable[int]) -> bool:
        return all(w in self.totals for w in workers)

    def problems(self, workers: Iterable[int]) -> list[str]:
        """Why the merge is not exact: malformed or reordered messages, missing
        reports, rows of any kind lost, failed workers."""
        problems = list(self.rejected) + list(self.out_of_order)
        for worker in workers:
            totals = self.totals.get(worker)
            received = self.received.get(worker, 0)
            if totals is None:
                problems.append(f"worker {worker}: no final report ({received} rows received)")
                continue
            if totals.records != received:
                problems.append(f"worker {worker}: reported {totals.records} rows, "
                                f"{received} reached the master")
            for key in self.part_sinks:
                got = self.parts_received[key].get(worker, 0)
                if getattr(totals, key) != got:
                    problems.append(f"worker {worker}: reported {getattr(totals, key)} {key} rows, "
                                    f"{got} reached the master")
            if totals.failure:
                problems.append(f"worker {worker}: load failed: {totals.failure}")
        return problems

    def snapshot(self, now_ns: int) -> LiveStats:
        return self.live.snapshot(now_ns)


def _append_columns(sink, names, columns: dict[str, list]) -> None:
    """Rows given column-wise into a sink: in one call where it takes columns, else row by row."""
    if hasattr(sink, "append_columns"):
        sink.append_columns(columns)
        return
    for row in zip(*(columns[name] for name in names)):
        sink.append(*row)


def _batch_parts(data) -> tuple[int, int, dict[str, list], dict[str, dict[str, list]]]:
    """(worker, seq, request columns, companion parts) of a records payload, validated."""
    if not isinstance(data, dict):
        raise ProtocolError(f"records message: expected a mapping, got {type(data).__name__}")
    worker, seq, columns = data.get("worker"), data.get("seq"), data.get("columns")
    if not isinstance(worker, int) or not isinstance(seq, int) or not isinstance(columns, dict):
        raise ProtocolError("records message: needs integer 'worker' and 'seq' and a 'columns' mapping")
    requests = _checked_columns(columns, REQUESTS_SCHEMA, "records message")
    parts = {key: _checked_columns(data[key], schema, f"records message {key!r}")
             for key, schema in PART_SCHEMAS.items() if data.get(key) is not None}
    return worker, seq, requests, parts


def _checked_columns(columns, schema: pa.Schema, what: str) -> dict[str, list]:
    """``{column: list}`` for every column of ``schema``: present, lists of one
    length, each value of the column's type (checked by converting to Arrow)."""
    if not isinstance(columns, dict):
        raise ProtocolError(f"{what}: expected a mapping of columns, got {type(columns).__name__}")
    missing = [name for name in schema.names if name not in columns]
    if missing:
        raise ProtocolError(f"{what}: missing columns {missing}")
    picked = {name: columns[name] for name in schema.names}
    if not all(isinstance(values, list) for values in picked.values()):
        raise ProtocolError(f"{what}: every column must be a list")
    lengths = {len(values) for values in picked.values()}
    if len(lengths) != 1:
        raise ProtocolError(f"{what}: columns of unequal length {sorted(lengths)}")
    for field in schema:
        try:
            pa.array(picked[field.name], type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"{what}: column {field.name!r} is not {field.type}: {exc}") from None
    return picked


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
