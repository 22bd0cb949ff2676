"""tailscope's part in a Locust run, by runner type.

Imports Locust (gevent monkey-patching): use it only in load-generating processes.

- :class:`LocalRole` (``LocalRunner``): walks the whole schedule and writes the
  run directory.
- :class:`WorkerRole` (``WorkerRunner``): walks its share of the schedule (sent
  by the master) and streams its rows — requests, streamed chunks, and its
  self-check's gauges and GC events — to the master every
  :data:`~.distributed.BATCH_INTERVAL_S` over Locust's message channel.
- :class:`MasterRole` (``MasterRunner``): at test start, gives each connected
  worker its share and one shared origin; merges every row into the run
  directory; when the test stops, tells the workers to halt and waits for
  their final reports before the run is closed. A malformed message from a
  worker is logged and listed in the run's merge problems, never raised.

:func:`attach_role` picks the role from ``environment.runner``. Roles hook
Locust's ``test_start``, ``test_stopping`` and ``test_stop`` events, so they
follow the ``locust`` command (headless, web UI, ``--run-time``) and a
runner driven from Python alike. The run directory is opened and closed by
the caller's ``open_run`` (:class:`RunHandle`).
"""

from __future__ import annotations

from tailscope.loadgen.process_load import ProcessLoad  # noqa: I001  (imports Locust: gevent first)

# isort: split

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

import gevent
import gevent.event
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from tailscope.loadgen.distributed import (
    BATCH_INTERVAL_S,
    MESSAGE_DONE,
    MESSAGE_RECORDS,
    MESSAGE_SHARE,
    ORIGIN_LEAD_S,
    MergedRecords,
    ProtocolError,
    ScheduleShare,
    WorkerOutbox,
    WorkerTotals,
    merged_load_summary,
)
from tailscope.loadgen.spec import LoadPlan
from tailscope.loadgen.users import DRAIN_GRACE_S

#: Master → workers: stop starting requests, drain, send your final report.
MESSAGE_HALT = "tailscope_halt"
#: Extra wait, beyond the client timeout and drain grace, for workers' final reports, s.
REPORT_GRACE_S = 5.0

logger = logging.getLogger("tailscope.loadgen")


class RunHandle(Protocol):
    """An open run directory, as the roles use it. It may also have ``chunks``,
    ``events`` and ``signals`` sinks (CHUNKS_SCHEMA, EVENTS_SCHEMA and the
    generator's SIGNALS_SCHEMA rows; absent or None: not recorded)."""

    path: str
    sink: object  # append_record(RequestRecord) (rundir.Appender, loadgen.record_keeper.RecordKeeper)

    def close(self, load: dict | None, problems: list[str]) -> None: ...


#: Builds the load plan for a test (called at each test start).
PlanFactory = Callable[[object], LoadPlan]
#: Opens a run directory: (plan, {"role", "workers"}) → RunHandle.
RunOpener = Callable[[LoadPlan, dict], RunHandle]
#: Called (in its own greenlet) when the whole schedule has been walked.
FinishedCallback = Callable[[object], None]


def run_sinks(run) -> dict:
    """The optional ``chunks`` / ``events`` / ``signals`` sinks of a run handle (None where absent)."""
    return {key: getattr(run, key, None) for key in ("chunks", "events", "signals")}


def attach_role(environment, make_plan: PlanFactory, open_run: RunOpener | None,
                on_finished: FinishedCallback | None = None):
    """Hook the role that fits ``environment.runner`` into its events; return it.

    ``open_run`` is unused on a worker (records go to the master)."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        return WorkerRole(environment, make_plan)
    if isinstance(runner, MasterRunner):
        return MasterRole(environment, make_plan, open_run, on_finished)
    if isinstance(runner, LocalRunner):
        return LocalRole(environment, make_plan, open_run, on_finished)
    raise TypeError(f"unsupported Locust runner {type(runner).__name__}")


def _hook(environment, role) -> None:
    events = environment.events
    events.test_start.add_listener(role.on_test_start)
    events.test_stopping.add_listener(role.on_test_stopping)
    events.test_stop.add_listener(role.on_test_stop)


class LocalRole:
    """One process: the whole schedule, the run directory."""

    def __init__(self, environment, make_plan: PlanFactory, open_run: RunOpener,
                 on_finished: FinishedCallback | None = None):
        self.environment = environment
        self.make_plan = make_plan
        self.open_run = open_run
        self.on_finished = on_finished
        self.run: RunHandle | None = None
        self.load: ProcessLoad | None = None
        _hook(environment, self)

    def on_test_start(self, environment, **_) -> None:
        plan = self.make_plan(environment)
        self.run = self.open_run(plan, {"role": "local", "workers": 1})
        self.load = ProcessLoad(plan, self.run.sink, environment.events.request, **run_sinks(self.run))
        self.load.start()
        gevent.spawn(self._notify_finished, self.load)

    def _notify_finished(self, load: ProcessLoad) -> None:
        load.done.wait()
        if self.on_finished is not None and self.load is load:
            self.on_finished(self.environment)

    def on_test_stopping(self, **_) -> None:
        if self.load is not None:
            self.load.halt("stopped")
            self.load.drain()

    def on_test_stop(self, **_) -> None:
        load, run = self.load, self.run
        self.load = self.run = None
        if run is None:
            return
        totals = load.totals()
        clock = load.session.clock
        end_ns = time.time_ns()
        summary = merged_load_summary([totals], clock.start_ns if clock else end_ns, end_ns,
                                      load.plan.duration_s, load.plan.max_requests)
        run.close(summary, [f"load failed: {totals.failure}"] if totals.failure else [])


class _RecordStream:
    """A worker's rows on their way to the master: every batch interval, the
    outbox's messages (more than one when a buffer holds more than a message's worth)."""

    def __init__(self, runner, outbox: WorkerOutbox, load: ProcessLoad):
        self.runner = runner
        self.outbox = outbox
        self.load = load
        self.finished = gevent.event.Event()
        self._loop = gevent.spawn(self._send_periodically)

    def _send_periodically(self) -> None:
        while True:
            gevent.sleep(BATCH_INTERVAL_S)
            self.send_pending()

    def send_pending(self) -> None:
        for message in self.outbox.messages(self.load.session.in_flight):
            self.runner.send_message(MESSAGE_RECORDS, message)

    def finish(self, totals: WorkerTotals) -> None:
        """Send the last rows and the final report, with the rows of each kind counted (once)."""
        if self.finished.is_set():
            return
        self._loop.kill(block=True)
        self.send_pending()
        self.runner.send_message(MESSAGE_DONE, self.outbox.counted(totals).to_message())
        self.finished.set()


class WorkerRole:
    """A worker: its share of the schedule; rows streamed to the master."""

    def __init__(self, environment, make_plan: PlanFactory):
        self.environment = environment
        self.make_plan = make_plan
        self.share: ScheduleShare | None = None
        self.load: ProcessLoad | None = None
        self.stream: _RecordStream | None = None
        environment.runner.register_message(MESSAGE_SHARE, self._on_share)
        environment.runner.register_message(MESSAGE_HALT, self._on_halt, concurrent=True)
        _hook(environment, self)

    def _on_share(self, environment, msg, **_) -> None:
        self.share = ScheduleShare.from_message(msg.data)

    def on_test_start(self, environment, **_) -> None:
        share, self.share = self.share, None
        if share is None:
            logger.error("tailscope: no schedule share came from the master (is the master's locustfile "
                         "a tailscope one?); this worker sends nothing")
            return
        plan = self.make_plan(environment)
        if share.duration_s:
            plan = dataclasses.replace(plan, duration_s=share.duration_s)
        outbox = WorkerOutbox(share.index)
        self.load = ProcessLoad(plan, outbox.requests, environment.events.request, share, **outbox.parts)
        self.stream = _RecordStream(environment.runner, outbox, self.load)
        self.load.start()
        gevent.spawn(self._finish_when_done, self.load, self.stream)

    def _finish_when_done(self, load: ProcessLoad, stream: _RecordStream) -> None:
        load.done.wait()
        stream.finish(load.totals())

    def _on_halt(self, **_) -> None:
        self._halt_and_finish()

    def _halt_and_finish(self) -> None:
        load, stream = self.load, self.stream
        if load is None:
            return
        load.halt("stopped")
        load.drain()
        stream.finish(load.totals())

    def on_test_stopping(self, **_) -> None:
        self._halt_and_finish()

    def on_test_stop(self, **_) -> None:
        self.load = self.stream = None


class MasterRole:
    """The master: shares out the schedule, merges the rows into the run directory."""

    def __init__(self, environment, make_plan: PlanFactory, open_run: RunOpener,
                 on_finished: FinishedCallback | None = None, lead_s: float = ORIGIN_LEAD_S):
        self.environment = environment
        self.make_plan = make_plan
        self.open_run = open_run
        self.on_finished = on_finished
        self.lead_s = lead_s
        self.plan: LoadPlan | None = None
        self.run: RunHandle | None = None
        self.merged: MergedRecords | None = None
        self.workers: list[int] = []
        self.origin_ns: int | None = None
        self.last_report_ns: int | None = None
        self.all_reported = gevent.event.Event()
        environment.runner.register_message(MESSAGE_RECORDS, self._on_records)
        environment.runner.register_message(MESSAGE_DONE, self._on_done)
        _hook(environment, self)

    def on_test_start(self, environment, **_) -> None:
        runner = environment.runner
        clients = runner.clients.ready + runner.clients.spawning + runner.clients.running
        clients.sort(key=lambda client: runner.get_worker_index(client.id))
        self.plan = self.make_plan(environment)
        self.workers = list(range(len(clients)))
        self.all_reported.clear()
        self.run = self.open_run(self.plan, {"role": "master", "workers": len(clients)})
        self.merged = MergedRecords(self.run.sink, **run_sinks(self.run))
        self.origin_ns = time.time_ns() + int(self.lead_s * 1e9)
        self.last_report_ns = None
        run_id = self.run.path
        for index, client in enumerate(clients):
            share = ScheduleShare(index, len(clients), self.origin_ns, run_id, self.plan.duration_s)
            runner.send_message(MESSAGE_SHARE, share.to_message(), client_id=client.id)

    def _on_records(self, msg, **_) -> None:
        if self.merged is None:
            logger.warning("tailscope: records from %s arrived outside a run; ignored", msg.node_id)
            return
        try:
            self.merged.add_batch(msg.data)
        except ProtocolError as exc:
            self._reject(msg, exc)

    def _reject(self, msg, exc: ProtocolError) -> None:
        """Note a malformed message (kept out of the run) in the merge problems."""
        logger.error("tailscope: malformed message from %s ignored: %s", msg.node_id, exc)
        self.merged.rejected.append(f"malformed {msg.type} message from {msg.node_id}: {exc}")

    def _on_done(self, msg, **_) -> None:
        if self.merged is None:
            return
        try:
            self.merged.finish(msg.data)
        except ProtocolError as exc:
            self._reject(msg, exc)
            return
        self.last_report_ns = time.time_ns()
        if self.merged.all_done(self.workers) and not self.all_reported.is_set():
            self.all_reported.set()
            if self.on_finished is not None:
                gevent.spawn(self.on_finished, self.environment)

    def on_test_stopping(self, environment, **_) -> None:
        if self.merged is None or self.all_reported.is_set():
            return
        environment.runner.send_message(MESSAGE_HALT, None)
        wait_s = self.plan.timeout_s + 2 * DRAIN_GRACE_S + REPORT_GRACE_S
        if not self.all_reported.wait(timeout=wait_s):
            logger.error("tailscope: not every worker sent its final report within %.0f s", wait_s)

    def on_test_stop(self, **_) -> None:
        run, merged, plan = self.run, self.merged, self.plan
        self.run = self.merged = None
        if run is None:
            return
        totals = [merged.totals[w] for w in self.workers if w in merged.totals]
        end_ns = self.last_report_ns or time.time_ns()
        summary = merged_load_summary(totals, self.origin_ns, end_ns, plan.duration_s, plan.max_requests)
        summary["records_merged"] = merged.rows
        summary["worker_totals"] = [dataclasses.asdict(t) for t in totals]
        run.close(summary, merged.problems(self.workers))
