"""One Locust process's part of a load: walk the schedule (or this worker's share).

Imports Locust (gevent monkey-patching): use it only in a process that
generates load. Used by the Locust roles (:mod:`.locust_roles`) under the
``locust`` command (local runner or worker) and by ``tailscope run --workers``.

The schedule is walked by one greenlet per process, not by a Locust user:
the offered load is the plan's arrival process, independent of how many
users Locust spawns (open loop). A closed loop (concurrency mode included)
runs its users as greenlets of the same process, a worker its share of them.
:class:`ScheduleHolder` is the Locust user that stands for the load in
Locust's user count; it sends nothing.
"""

from __future__ import annotations

from tailscope.loadgen.users import DRAIN_GRACE_S, LoadSession, run_closed_users, run_open_loop  # noqa: I001  (imports Locust: gevent first)

# isort: split

import dataclasses

import gevent
import gevent.event
from locust import User, constant, task
from locust.contrib.fasthttp import FastHttpSession

from tailscope.loadgen.distributed import ScheduleShare, WorkerTotals, cap_share, share_seed, take_share
from tailscope.loadgen.exchange import Exchanger
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.recorder import Recorder
from tailscope.loadgen.selfcheck import GeneratorMonitor
from tailscope.loadgen.spec import LoadPlan

#: How often the generator's self-check is polled (GC events drained, gauges once a second), s.
MONITOR_TICK_S = 0.1


class ScheduleHolder(User):
    """A Locust user that sends nothing: the schedule greenlet (or the closed loop's
    greenlets) send the requests.

    Subclass it (``abstract = False``) to give Locust a user class to count;
    one per process is enough, more are idle."""

    abstract = True
    wait_time = constant(1.0)

    @task
    def idle(self) -> None:
        """Nothing: requests follow the arrival schedule, not the user count."""


class SharedLoadSession(LoadSession):
    """A :class:`LoadSession` that walks one share of the schedule from a shared origin."""

    def __init__(self, plan: LoadPlan, recorder: Recorder, mix: RequestMix, share: ScheduleShare | None):
        super().__init__(plan, recorder, mix)
        self.share = share
        if share is not None:
            self.origin_ns = share.origin_ns

    def schedule(self):
        offsets = super().schedule()
        if self.share is None:
            return offsets
        return take_share(offsets, self.share.index, self.share.count)


def _closed_share(plan: LoadPlan, index: int, count: int) -> LoadPlan:
    """``plan`` with worker ``index`` of ``count``'s part of its closed loop's users
    (:func:`~.distributed.cap_share`); ValueError when that part is empty."""
    users = cap_share(plan.arrival.users, index, count)
    if users < 1:
        raise ValueError(f"a closed loop of {plan.arrival.users} users (arrival.concurrency or arrival.users) "
                         f"cannot be split over {count} workers: give at least one user per worker")
    return dataclasses.replace(plan, arrival=dataclasses.replace(plan.arrival, users=users))


def _poll_forever(monitor: GeneratorMonitor) -> None:
    while True:
        gevent.sleep(MONITOR_TICK_S)
        monitor.poll()


class ProcessLoad:
    """Walks ``plan``'s schedule (or ``share`` of it) in one greenlet, writing a
    record per request to ``sink`` (``append_record`` of a ``RequestRecord``)
    and firing Locust's ``request`` event for each.

    Optional sinks, as for :func:`~.local_runner.run_load`: ``chunks`` (CHUNKS_SCHEMA
    rows of streamed responses), ``events`` and ``signals`` (the generator's
    self-check, :class:`~.selfcheck.GeneratorMonitor`, polled every
    :data:`MONITOR_TICK_S`; with a ``share`` its series and events are labelled
    with the worker index). The monitor's last gauges are written before
    :attr:`done` is set.

    A closed loop (``arrival.process == "closed"``: ``users`` users, concurrency
    mode when they do not think) runs as greenlets from the origin until the
    duration (:func:`~.users.run_closed_users`). With a ``share``, this worker
    runs its part of the users and of ``max_requests``, and an
    ``arrival.max_concurrency`` cap is its part of that cap (all split by
    :func:`~.distributed.cap_share`).
    """

    def __init__(self, plan: LoadPlan, sink, request_event, share: ScheduleShare | None = None, *,
                 chunks=None, events=None, signals=None):
        index, count = (share.index, share.count) if share is not None else (0, 1)
        closed = plan.arrival.process == "closed"
        if closed:
            plan = _closed_share(plan, index, count)
        elif count > 1 and plan.arrival.max_concurrency is not None:
            cap = cap_share(plan.arrival.max_concurrency, index, count)
            if cap < 1:
                raise ValueError(f"max_concurrency {plan.arrival.max_concurrency} cannot be split over "
                                 f"{count} workers: give at least one request per worker")
            plan = dataclasses.replace(plan, max_in_flight=cap)
        self.plan = plan
        self.worker = index
        self.recorder = Recorder(sink, worker=index, chunk_sink=chunks)
        self._monitor_sinks = (events, signals)
        self._monitor_label = share.index if share is not None else None
        mix = RequestMix(plan.classes, share_seed(plan.seed, index, count),
                         trace_sample_rate=plan.trace_sample_rate, share=(index, count))
        self.session = SharedLoadSession(plan, self.recorder, mix, share)
        if closed:
            self.session.max_requests = cap_share(plan.max_requests, index, count)
        self._request_event = request_event
        # a closed loop's users each hold one request: one connection each, as Locust's users have
        connections = plan.arrival.users if closed else plan.max_in_flight
        self._http = FastHttpSession(plan.target, request_event, None, concurrency=connections,
                                     network_timeout=plan.timeout_s, connection_timeout=plan.timeout_s,
                                     max_retries=0, max_redirects=0)
        self._greenlet: gevent.Greenlet | None = None

    @property
    def done(self) -> gevent.event.Event:
        """Set once the schedule is walked and in-flight requests have ended."""
        return self.session.done

    def start(self) -> None:
        """Start walking the schedule (returns at once)."""
        self._greenlet = gevent.spawn(self._drive)

    def _drive(self) -> None:
        session, plan = self.session, self.plan
        clock = session.begin()
        exchanger = Exchanger(self._http.client.clientpool, plan.target, clock, plan.timeout_s,
                              self.recorder, self._request_event, session.stream_reader)
        monitor, poller = self._start_monitor(clock)
        try:
            if plan.arrival.process == "closed":
                run_closed_users(session, exchanger)
            else:
                run_open_loop(session, exchanger)
        except Exception as exc:  # noqa: BLE001  (reported in the totals and the manifest)
            session.failure = exc
            session.halt("stopped")
        finally:
            if monitor is not None:
                poller.kill(block=True)
                monitor.stop()
            session.done.set()

    def _start_monitor(self, clock) -> tuple[GeneratorMonitor | None, gevent.Greenlet | None]:
        """The self-check and the greenlet polling it; (None, None) without its sinks."""
        events, signals = self._monitor_sinks
        if events is None and signals is None:
            return None, None
        monitor = GeneratorMonitor(events, signals, clock.now_ns, lambda: self.session.in_flight,
                                   worker=self._monitor_label)
        monitor.start()
        return monitor, gevent.spawn(_poll_forever, monitor)

    def halt(self, reason: str = "stopped") -> None:
        """Stop starting requests; in-flight ones may still end (see :meth:`drain`)."""
        self.session.halt(reason)

    def drain(self) -> bool:
        """Wait until in-flight requests end (at most the client timeout plus
        grace); True when the load ended by itself, False when it was killed."""
        limit_s = self.plan.timeout_s + 2 * DRAIN_GRACE_S
        if self._greenlet is None or self.session.done.wait(timeout=limit_s):
            return True
        self._greenlet.kill(block=True, timeout=DRAIN_GRACE_S)
        self.session.done.set()
        return False

    def totals(self) -> WorkerTotals:
        session, recorder = self.session, self.recorder
        return WorkerTotals(
            worker=self.worker, records=recorder.recorded, scheduled=session.scheduled,
            sent=session.sent, completed=recorder.completed, errors=recorder.errors,
            stop_reason=session.stop_reason,
            failure=None if session.failure is None else repr(session.failure),
        )
