"""Waiting, after the load stops, for the spans a target has not exported yet.

A target instrumented with the standard OpenTelemetry SDK exports its spans in
batches: the default ``BatchSpanProcessor`` sends what has ended every 5 s
(``OTEL_BSP_SCHEDULE_DELAY``), so the spans of the run's last seconds are still
in the target's queue when the load stops. :func:`wait_for_late_spans` waits
for them, and returns as soon as they are in:

- **expected** — the trace ids of the successful requests sent for tracing
  (the head-sampling rule, ``trace_sample_rate``) that ended in the last
  ``wait_s`` seconds of the load (an older request whose span is still missing
  would not get it in the time the wait has anyway);
- **arrived** — a trace has its server span once a SERVER-kind span of it is
  stored (any span of it, while the run has no SERVER-kind span at all);
- once every expected trace has arrived, the wait goes on for the target's export interval
  after the last span of an expected trace came (``export_interval_s``, bounded by the cap):
  a target's spans of one trace leave in several batches, and from several exporters (PyTriton
  sends Triton's spans and, from another process, its own proxy spans, each every 5 s), so the
  server span being in does not mean the trace is; it then ends with ``complete``, and
  ``spans_after_complete`` counts the spans of expected traces that came in that time;
  ``quiet`` when no span has arrived for ``quiet_s`` (the export interval + 1 s)
  since the load stopped or the last span came — the target's last batch is in,
  and what is still missing was never recorded (sampling, a target that does not
  continue the trace); ``cap`` after ``wait_s``; ``nothing_expected`` when no
  request was sent for tracing and succeeded; ``no_spans`` when no span at all
  arrived during the load and at least ``quiet_s`` of it have passed — a target
  that exports would have sent its first batch by then (a shorter run waits until
  ``quiet_s`` after its start, or for its first span).

The expected ids and the arrived spans are read from the run directory
(``requests.arrow``, ``spans*.arrow``) with :class:`~tailscope.rundir.tail.TableTail`:
each poll reads only what was appended since the last one. Cost: one pass over the
request and span tables' message headers, a set of at most rate × ``wait_s`` ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.trace_join import sampled_mask
from tailscope.rundir import schema
from tailscope.rundir.tail import TableTail

#: The OTel SDK's default batch export interval (``OTEL_BSP_SCHEDULE_DELAY``), s.
SDK_EXPORT_INTERVAL_S = 5.0
#: The OTLP exporter's default timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``), s.
SDK_EXPORT_TIMEOUT_S = 10.0
#: Default longest wait: one export interval plus one export timeout.
DEFAULT_LATE_SPAN_WAIT_S = SDK_EXPORT_INTERVAL_S + SDK_EXPORT_TIMEOUT_S
#: Quiet beyond the export interval that says the target's last batch is in, s.
QUIET_MARGIN_S = 1.0
#: How often the run directory is looked at while waiting, s.
POLL_S = 0.25
#: Longest wait for the harness's own request rows to reach the disk, s.
REQUESTS_FLUSH_WAIT_S = 5.0
_SPAN_KIND_SERVER = 2


@dataclass(frozen=True)
class LateSpanPolicy:
    """How long to wait (``wait_s``, the cap) and the target's export interval (s)."""

    wait_s: float = DEFAULT_LATE_SPAN_WAIT_S
    export_interval_s: float = SDK_EXPORT_INTERVAL_S

    @property
    def quiet_s(self) -> float:
        """No new span for this long means the target's last batch is in."""
        return min(self.wait_s, self.export_interval_s + QUIET_MARGIN_S)


@dataclass
class LateSpanWait:
    """What the wait saw: seconds waited, why it ended, expected and still-missing traces."""

    waited_s: float
    ended: str  # complete | quiet | cap | nothing_expected | no_spans
    expected: int
    missing: int
    wait_s: float
    #: Spans of expected traces that arrived after every expected trace had its server span.
    spans_after_complete: int = 0

    def as_dict(self) -> dict:
        return {"waited_s": round(self.waited_s, 3), "ended": self.ended, "expected": self.expected,
                "missing": self.missing, "wait_s": self.wait_s, "spans_after_complete": self.spans_after_complete}


class _Arrivals:
    """The run's stored spans, followed: which traces have their server span."""

    def __init__(self, run_dir: str):
        self.tail = TableTail(run_dir, schema.SPANS)
        self.server: set[str] = set()
        self.any: set[str] = set()
        self.rows = 0
        self.server_kind_seen = False  # any SERVER-kind span in the run, of any trace
        self.interesting_rows = 0  # spans of the interesting traces read so far

    def poll(self, interesting: set[str]) -> bool:
        """Read new spans; True when any arrived. Only ``interesting`` trace ids are kept
        (``interesting_rows`` counts their spans)."""
        batches = self.tail.read(("trace_id", "kind"))
        rows = sum(b.num_rows for b in batches)
        self.rows += rows
        for batch in batches:
            self.server_kind_seen = self.server_kind_seen or bool(
                pc.any(pc.equal(batch.column(1), _SPAN_KIND_SERVER)).as_py())
        if not rows or not interesting:
            return rows > 0
        wanted = pa.array(sorted(interesting), pa.string())
        for batch in batches:
            hit = pc.fill_null(pc.is_in(batch.column(0), value_set=wanted), False)
            if not pc.any(hit).as_py():
                continue
            ids = batch.column(0).filter(hit).to_pylist()
            self.interesting_rows += len(ids)
            kinds = batch.column(1).filter(hit).to_numpy(zero_copy_only=False)
            self.any.update(ids)
            self.server.update(t for t, k in zip(ids, kinds) if k == _SPAN_KIND_SERVER)
        return True

    def missing(self, expected: set[str]) -> set[str]:
        return expected - (self.server if self.server_kind_seen else self.any)


def expected_traces(batches: list[pa.RecordBatch], since_ns: int, sample_rate: float) -> set[str]:
    """Trace ids of the successful requests sent for tracing that ended at or after ``since_ns``
    (``batches``: request rows with ``end_ns``, ``error_kind``, ``trace_id``)."""
    if not batches:
        return set()
    table = pa.Table.from_batches(batches)
    keep = pc.and_(pc.and_(pc.is_null(table.column("error_kind")), pc.is_valid(table.column("trace_id"))),
                   pc.fill_null(pc.greater_equal(table.column("end_ns"), since_ns), False))
    ids = table.column("trace_id").filter(keep)
    if len(ids) == 0:
        return set()
    sampled = sampled_mask(ids, sample_rate)
    return set(ids.filter(pa.array(sampled)).to_pylist()) if not sampled.all() else set(ids.to_pylist())


def _request_rows(run_dir: str, rows_written: Callable[[], int], clock, sleep) -> list[pa.RecordBatch]:
    """Every request row the harness wrote (``rows_written()``: the count it flushed)."""
    tail, batches, read = TableTail(run_dir, schema.REQUESTS), [], 0
    deadline = clock() + REQUESTS_FLUSH_WAIT_S
    while True:
        new = tail.read(("end_ns", "error_kind", "trace_id"))
        batches += new
        read += sum(b.num_rows for b in new)
        if read >= rows_written() or clock() >= deadline:
            return batches
        sleep(POLL_S / 5)


def wait_for_late_spans(run_dir: str, *, load_start_ns: int, sample_rate: float, policy: LateSpanPolicy,
                        rows_written: Callable[[], int], clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> LateSpanWait:
    """Wait until the stored spans cover every expected trace and one export interval has passed
    since the last of their spans came, or the target has gone quiet, or ``policy.wait_s`` has
    passed (see the module docstring); returns what was seen.

    ``rows_written()``: how many request rows the harness has written (it flushes them)."""
    began = clock()
    stop_ns = time.time_ns()
    since_ns = stop_ns - int(policy.wait_s * 1e9)
    expected = expected_traces(_request_rows(run_dir, rows_written, clock, sleep), since_ns, sample_rate)
    arrivals = _Arrivals(run_dir)
    arrivals.poll(expected)
    load_age_s = max(0.0, (stop_ns - load_start_ns) / 1e9)
    last_growth = began if arrivals.rows else began - load_age_s
    last_expected = began  # when a span of an expected trace last arrived (the load's end at first)
    complete_rows: int | None = None  # interesting_rows when every expected trace was in

    def done(ended: str) -> LateSpanWait:
        after = arrivals.interesting_rows - complete_rows if complete_rows is not None else 0
        return LateSpanWait(clock() - began, ended, len(expected), len(arrivals.missing(expected)), policy.wait_s,
                            after)

    if not expected:
        return done("nothing_expected")
    while True:
        now = clock()
        if complete_rows is None and not arrivals.missing(expected):
            complete_rows = arrivals.interesting_rows
        if complete_rows is not None:
            if now - last_expected >= policy.export_interval_s or now - began >= policy.wait_s:
                return done("complete")
        elif now - last_growth >= policy.quiet_s:
            return done("quiet" if arrivals.rows else "no_spans")
        elif now - began >= policy.wait_s:
            return done("cap")
        sleep(min(POLL_S, max(0.0, policy.wait_s - (now - began))))
        seen = arrivals.interesting_rows
        if arrivals.poll(expected):
            last_growth = clock()
        if arrivals.interesting_rows > seen:
            last_expected = clock()


def wait_after_load(run_dir: str, writer, *, load_start_ns: int, sample_rate: float, wait_s: float | None,
                    tracing: dict | None, sleep: Callable[[float], None] = time.sleep) -> dict | None:
    """The wait every run does once its load has stopped, ``tailscope run`` and the ``locust``
    command alike: flush the harness's request rows (``writer``: the run's RunWriter), then
    :func:`wait_for_late_spans` under :func:`policy_from` (``wait_s``: ``--late-span-wait``;
    ``tracing``: the scenario's parsed ``tracing`` section). Returns the wait's facts for the
    manifest's ``late_spans`` (:meth:`LateSpanWait.as_dict`), or None when a second Ctrl-C cut
    it short (the run is closed with what arrived). ``sleep``: how to pause between polls (the
    ``locust`` command passes the OS's own sleep, so that the wait blocks its process instead of
    yielding to the greenlet that would shut Locust down meanwhile)."""

    def rows_written() -> int:
        try:
            writer.requests.flush()  # the load has stopped: nothing else appends
        except OSError:
            pass  # a write error is the run guard's to report; wait for what is on disk
        return writer.requests.rows_written

    try:
        return wait_for_late_spans(run_dir, load_start_ns=load_start_ns, sample_rate=sample_rate,
                                   policy=policy_from(wait_s, tracing), rows_written=rows_written,
                                   sleep=sleep).as_dict()
    except KeyboardInterrupt:
        return None


def policy_from(wait_s: float | None, section: dict | None) -> LateSpanPolicy:
    """The policy of a run: ``--late-span-wait`` (``wait_s``) over the scenario's ``tracing``
    section (``{"late_span_wait_s", "export_interval_s"}``), else the SDK defaults."""
    section = section or {}
    export_interval = section.get("export_interval_s")
    cap = wait_s if wait_s is not None else section.get("late_span_wait_s")
    return LateSpanPolicy(wait_s=DEFAULT_LATE_SPAN_WAIT_S if cap is None else float(cap),
                          export_interval_s=SDK_EXPORT_INTERVAL_S if export_interval is None
                          else float(export_interval))


