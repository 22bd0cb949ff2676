"""Locust users that drive a :class:`~tailscope.loadgen.spec.LoadPlan`.

Imports Locust (which monkey-patches the process with gevent): import it only
in the process that generates load.

- :class:`OpenLoopUser` — one instance walks the arrival schedule. At each
  scheduled time (run origin + offset, slept to on the monotonic clock, so no
  drift) it takes a slot under the in-flight cap and switches straight into a
  sender greenlet (:class:`~.senders.SenderPool`) that sends one request,
  whether or not earlier requests have finished. When the
  cap is reached the scheduler waits for a slot; the waiting counts in the
  latency of every request that was due meanwhile (their ``scheduled_ns`` is
  the intended time). Requests still waiting when the run is halted are
  recorded as ``dropped``. With ``in_flight_policy: drop`` a request that
  finds the cap full is recorded as ``dropped`` at once and never sent. Each
  request is prepared (class, body, trace context, its bytes on the wire)
  *before* its scheduled time, so only the send itself happens at the deadline.
- :class:`ClosedLoopUser` — ``arrival.users`` instances, each sending its next
  request ``think_time_s`` after the previous reply (``scheduled_ns = sent_ns``).
  A distributed worker runs its share of the users as greenlets instead
  (:func:`run_closed_users`).

Both share one :class:`LoadSession` (bound with :func:`bind_user_class`),
through which the runner halts them and learns when they are done.

With ``arrival.sessions`` (:class:`~.spec.SessionSpec`) the unit each loop
starts is a multi-turn session (:func:`run_session`): the open loop starts one
at each scheduled offset (its greenlet holds an in-flight slot while the
session lasts), a closed-loop user runs one session after another. A session's
turn k+1 is scheduled at turn k's end plus a drawn think time, slept to like a
schedule offset, and carries the model's actual answers in its history.
"""

from __future__ import annotations

import gevent
import gevent.event
import gevent.lock
import gevent.pool
import numpy as np
from locust import FastHttpUser, task
from locust.exception import StopUser
from locust.user.wait_time import constant

from tailscope.loadgen.arrivals import schedule_offsets_ns
from tailscope.loadgen.clock import RunClock
from tailscope.loadgen.exchange import Exchanger
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.payloads import SizeSampler
from tailscope.loadgen.recorder import Recorder
from tailscope.loadgen.senders import SenderPool
from tailscope.loadgen.spec import LoadPlan
from tailscope.loadgen.stream_reader import StreamReader
from tailscope.rundir.request_record import RequestRecord

#: Extra time, beyond the client timeout, that in-flight requests get to end
#: after the schedule is over before they are abandoned.
DRAIN_GRACE_S = 1.0
#: How often a scheduler waiting for an in-flight slot checks for a halt, s.
SLOT_POLL_S = 0.05
#: The event loop's timers wake up to about 1 ms late (epoll's millisecond
#: timeout). The scheduler sleeps on a timer until this long before a deadline
#: and yields to the loop (which keeps serving I/O) for the rest, so requests
#: leave within tens of microseconds of their scheduled time. CPU cost: at most
#: this margin per scheduled request.
TIMER_MARGIN_S = 0.0015


class LoadSession:
    """State shared by the runner and the users of one run.

    Counters are touched only from the gevent loop's thread.
    """

    def __init__(self, plan: LoadPlan, recorder: Recorder, mix: RequestMix):
        self.plan = plan
        self.recorder = recorder
        self.mix = mix
        self.clock: RunClock | None = None  # set by begin(): the run origin
        #: Reads every streamed body of this session (set by begin(), on the run clock).
        self.stream_reader: StreamReader | None = None
        self.origin_ns: int | None = None  # epoch ns of offset 0; None: when begin() is first called
        self.started = gevent.event.Event()
        #: Set once every user has begun (the closed loop's ``users``; the open loop's one walker).
        self.all_begun = gevent.event.Event()
        self._users_begun = 0
        self.halted = gevent.event.Event()
        self.done = gevent.event.Event()
        self.halt_reason: str | None = None  # "duration" | "stopped"
        self.exhausted_reason: str | None = None  # the schedule ran out: "duration" | "max_requests"
        self.scheduling_ended_ns: int | None = None  # elapsed ns when no more requests were started
        self.failure: BaseException | None = None
        self.scheduled = 0  # requests taken from the schedule (open) or claimed (closed)
        #: Most requests this session's closed loop claims: the plan's, or a distributed worker's share of it.
        self.max_requests = plan.max_requests
        self.sent = 0
        self.in_flight = 0
        self.dropped_at_cap = 0  # requests dropped because the cap was full (drop policy)
        self.next_send_elapsed_ns: int | None = None  # offset of the next scheduled send
        self._closed_users_finished = 0
        #: Multi-turn sessions: turn counts and think times drawn for every session of this loop.
        self.session_draws = SessionDraws(plan) if plan.arrival.sessions is not None else None
        self.sessions_started = 0

    def begin(self) -> RunClock:
        """Fix the run origin (first call only) and return the run clock. Each user calls it once."""
        if self.clock is None:
            self.clock = RunClock(self.origin_ns)
            self.stream_reader = StreamReader(self.clock) if StreamReader.available() else None
            self.started.set()
        self._users_begun += 1
        if self._users_begun >= (self.plan.arrival.users if self.plan.arrival.process == "closed" else 1):
            self.all_begun.set()
        return self.clock

    def schedule(self):
        """Scheduled offsets (ns from the run origin) this session walks, one by one.

        The whole plan's schedule; a distributed worker's session takes its share."""
        return _iter_offsets(self.plan)

    def slack_s(self) -> float:
        """Seconds until the next scheduled send (inf when none is pending): how
        long housekeeping may block the event loop without delaying a send."""
        if self.clock is None or self.next_send_elapsed_ns is None:
            return float("inf")
        return self.clock.seconds_until(self.next_send_elapsed_ns)

    def halt(self, reason: str) -> None:
        """Ask the users to stop starting requests (first reason wins)."""
        if not self.halted.is_set():
            self.halt_reason = reason
            self.halted.set()

    def end_scheduling(self, exhausted_reason: str | None) -> None:
        """Note that no more requests will start; ``exhausted_reason`` when the plan ran out."""
        if self.scheduling_ended_ns is None:
            self.scheduling_ended_ns = self.clock.elapsed_ns()
            self.exhausted_reason = exhausted_reason

    @property
    def stop_reason(self) -> str:
        """Why the run ended: "duration" | "max_requests" | "stopped"."""
        return self.exhausted_reason or self.halt_reason or "duration"

    def closed_user_finished(self) -> None:
        self._closed_users_finished += 1
        if self._closed_users_finished >= self.plan.arrival.users:
            self.end_scheduling("max_requests" if self.scheduled >= self.max_requests else None)
            self.done.set()


class _PlanUser(FastHttpUser):
    """Common part: the bound session, connection settings, one-shot task."""

    abstract = True
    session: LoadSession
    wait_time = constant(0)
    max_retries = 0
    max_redirects = 0

    def _exchanger(self, clock: RunClock) -> Exchanger:
        session = self.session
        return Exchanger(self.client.client.clientpool, session.plan.target, clock,
                         session.plan.timeout_s, session.recorder,
                         self.environment.events.request, session.stream_reader)

    def _fail(self, exc: BaseException) -> None:
        self.session.failure = exc
        self.session.halt("stopped")
        self.session.done.set()


class OpenLoopUser(_PlanUser):
    """Walks the arrival schedule and sends each request at its scheduled time."""

    abstract = True

    @task
    def drive(self) -> None:
        session = self.session
        if session.clock is not None:
            raise StopUser()  # the schedule is walked once
        clock = session.begin()
        try:
            run_open_loop(session, self._exchanger(clock))
        except Exception as exc:
            self._fail(exc)
            raise
        session.done.set()
        raise StopUser()


class ClosedLoopUser(_PlanUser):
    """Sends a request, waits for its reply and the think time, and repeats."""

    abstract = True

    @task
    def drive(self) -> None:
        session = self.session
        clock = session.begin()
        try:
            run_closed_loop(session, self._exchanger(clock))
        except Exception as exc:
            self._fail(exc)
            raise
        finally:
            session.closed_user_finished()
        raise StopUser()


def bind_user_class(session: LoadSession) -> type[_PlanUser]:
    """A concrete Locust user class bound to ``session`` and its plan's settings."""
    plan = session.plan
    closed = plan.arrival.process == "closed"
    base = ClosedLoopUser if closed else OpenLoopUser
    return type(base.__name__, (base,), {
        "abstract": False,
        "session": session,
        "host": plan.target,
        "concurrency": 1 if closed else plan.max_in_flight,
        "network_timeout": plan.timeout_s,
        "connection_timeout": plan.timeout_s,
    })


def run_open_loop(session: LoadSession, exchanger: Exchanger) -> None:
    """Walk the schedule, then give in-flight requests until the timeout to end."""
    if session.session_draws is not None:
        run_open_sessions(session, exchanger)
        return
    plan, clock, mix = session.plan, session.clock, session.mix
    slots = gevent.lock.BoundedSemaphore(plan.max_in_flight)

    def send(request, scheduled_ns: int) -> None:
        try:
            exchanger.exchange(request, scheduled_ns)
        finally:
            session.in_flight -= 1
            slots.release()

    senders = SenderPool(send)
    offsets = session.schedule()
    drop_when_full = plan.in_flight_policy == "drop"
    exhausted_reason = None
    for offset in offsets:
        request = mix.prepare(mix.draw_class())  # before its time: off the send path
        request.wire = exchanger.encode(request)
        session.next_send_elapsed_ns = offset
        wait_s = clock.seconds_until(offset)
        if wait_s > 0 and not _sleep_until(clock, offset, wait_s, session.halted):
            break  # halted before this request was due
        if drop_when_full and not session.halted.is_set() and not slots.acquire(blocking=False):
            _record_dropped_at_cap(session, offset, request.cls.name)
            continue
        if session.halted.is_set() or (not drop_when_full and not _take_slot(slots, session)):
            _record_dropped(session, offset, offsets, request.cls.name)
            break
        session.scheduled += 1
        session.sent += 1
        session.in_flight += 1
        senders.start(request, clock.start_ns + offset)
    else:
        exhausted_reason = "max_requests" if session.scheduled >= plan.max_requests else "duration"
    session.next_send_elapsed_ns = None
    session.end_scheduling(exhausted_reason)
    senders.join(timeout=plan.timeout_s + DRAIN_GRACE_S)
    senders.kill(timeout=DRAIN_GRACE_S)


def _sleep_until(clock: RunClock, offset_ns: int, wait_s: float, halted: gevent.event.Event) -> bool:
    """Sleep until ``offset_ns`` after the run origin; False when halted first."""
    if wait_s > TIMER_MARGIN_S and halted.wait(wait_s - TIMER_MARGIN_S):
        return False
    while clock.seconds_until(offset_ns) > 0:
        gevent.sleep(0)
    return not halted.is_set()


def _iter_offsets(plan: LoadPlan):
    """Scheduled offsets (ns from the run origin) one by one, as Python ints."""
    for chunk in schedule_offsets_ns(plan.arrival, plan.duration_s, plan.max_requests, plan.seed):
        yield from chunk.tolist()


def _take_slot(slots: gevent.lock.BoundedSemaphore, session: LoadSession) -> bool:
    """Wait for an in-flight slot; False when the run is halted first."""
    while not slots.acquire(timeout=SLOT_POLL_S):
        if session.halted.is_set():
            return False
    return True


def _record_dropped_at_cap(session: LoadSession, offset: int, cls_name: str) -> None:
    """Record one request dropped because the in-flight cap was full (drop policy)."""
    clock = session.clock
    session.scheduled += 1
    session.dropped_at_cap += 1
    session.recorder.record(RequestRecord(
        scheduled_ns=clock.start_ns + offset, sent_ns=None, end_ns=clock.now_ns(), first_byte_ns=None, cls=cls_name,
        status=0, bytes_out=0, bytes_in=0, trace_id=None, error_kind="dropped",
        error=f"in-flight cap of {session.plan.max_in_flight} full (drop policy)", worker=session.recorder.worker))


def _record_dropped(session: LoadSession, first_offset: int, later_offsets, first_cls: str) -> None:
    """Record requests that were due by the halt but never sent (in-flight cap full)."""
    clock, mix, recorder = session.clock, session.mix, session.recorder
    halt_elapsed_ns = clock.elapsed_ns()
    message = (f"not sent before the run was halted ({session.halt_reason}): the in-flight cap "
               f"of {session.plan.max_in_flight} was full or the generator was behind schedule")
    offset, cls_name = first_offset, first_cls
    while offset is not None and offset <= halt_elapsed_ns:
        session.scheduled += 1
        recorder.record(RequestRecord(
            scheduled_ns=clock.start_ns + offset, sent_ns=None, end_ns=clock.start_ns + halt_elapsed_ns,
            first_byte_ns=None, cls=cls_name, status=0, bytes_out=0, bytes_in=0, trace_id=None,
            error_kind="dropped", error=message, worker=recorder.worker))
        offset = next(later_offsets, None)
        cls_name = mix.classes[mix.draw_class()].name


def run_closed_loop(session: LoadSession, exchanger: Exchanger) -> None:
    """One closed-loop user: request, reply, think, until halted or out of requests."""
    plan, mix = session.plan, session.mix
    if session.session_draws is not None:
        while not session.halted.is_set() and session.scheduled < session.max_requests:
            if run_session(session, exchanger, None) not in ("done", "failed"):
                break  # halted, out of requests, or its next turn was due after the run: this user is done
        return
    think_s = plan.arrival.think_time_s
    while not session.halted.is_set() and session.scheduled < session.max_requests:
        session.scheduled += 1
        session.sent += 1
        session.in_flight += 1
        try:
            request = mix.prepare(mix.draw_class())
            request.wire = exchanger.encode(request)  # built before the send: sent_ns is the send
            exchanger.exchange(request, None)
        finally:
            session.in_flight -= 1
        if think_s > 0 and session.halted.wait(think_s):
            break


def run_closed_users(session: LoadSession, exchanger: Exchanger) -> None:
    """The closed loop without Locust users: ``plan.arrival.users`` greenlets, each a user
    (:func:`run_closed_loop`), from the run origin (slept to: distributed workers share it)
    until ``plan.duration_s`` after it, a halt, or ``session.max_requests``; then in-flight
    requests get the client timeout (plus grace) to end. A user that fails halts the others
    and leaves its exception in ``session.failure``."""
    plan, clock = session.plan, session.clock
    wait_s = clock.seconds_until(0)
    if wait_s > 0 and session.halted.wait(wait_s):
        session.end_scheduling(None)
        return
    users = [gevent.spawn(_closed_user, session, exchanger) for _ in range(plan.arrival.users)]
    gevent.joinall(users, timeout=max(0.0, clock.seconds_until(int(plan.duration_s * 1e9))))
    session.halt("duration")  # the first reason wins: a halt from outside, or a failure, keeps its own
    session.end_scheduling("max_requests" if session.scheduled >= session.max_requests else None)
    gevent.joinall(users, timeout=plan.timeout_s + DRAIN_GRACE_S)
    gevent.killall(users, timeout=DRAIN_GRACE_S)


def _closed_user(session: LoadSession, exchanger: Exchanger) -> None:
    """One user of :func:`run_closed_users`; its failure halts the run."""
    try:
        run_closed_loop(session, exchanger)
    except Exception as exc:  # noqa: BLE001  (kept for the totals and the manifest)
        session.failure = exc
        session.halt("stopped")


class SessionDraws:
    """Per-session draws of a plan's :class:`~.spec.SessionSpec`: the turn count (None for a
    dataset class: its conversation's turns) and think times, seconds. Seeded from the plan's
    seed (a distributed worker's share draws its own sequence)."""

    def __init__(self, plan: LoadPlan):
        spec = plan.arrival.sessions
        rng = np.random.default_rng([plan.seed, 0x5E5510])
        self._turns = SizeSampler(spec.turns, rng) if spec.turns is not None else None
        self._think_ms = SizeSampler(spec.think_time_ms, rng)
        self._dataset = [c.llm is not None and c.llm.dataset is not None for c in plan.classes]

    def turns(self, index: int) -> int | None:
        """Turns of a new session of class ``index``; None: its dataset conversation's."""
        if self._dataset[index] or self._turns is None:
            return None
        return max(1, int(self._turns.draw()))

    def think_ns(self) -> int:
        """One think time, ns."""
        return int(self._think_ms.draw()) * 1_000_000


def run_session(session: LoadSession, exchanger: Exchanger, start_ns: int | None) -> str:
    """One multi-turn session: draw its class and turn count, then send its turns one after
    another, each with the history and the actual answers before it. ``start_ns``: turn 1's
    scheduled time (epoch ns; None: now, a closed loop). Turn k+1 is scheduled at turn k's
    end plus a think time. Stops at a failed turn (no answer to go on with), a halt, the
    session's ``max_requests``, or a turn due after the run's duration. Returns how it ended:
    "done" (every turn), "failed", "halted", "max_requests" or "run_end"."""
    plan, clock, mix, draws = session.plan, session.clock, session.mix, session.session_draws
    index = mix.draw_class()
    conversation = mix.start_session(index, draws.turns(index))
    session.sessions_started += 1
    end_of_run_ns = clock.start_ns + int(plan.duration_s * 1e9)
    scheduled_ns = start_ns
    while not conversation.finished:
        if session.halted.is_set():
            return "halted"
        if session.scheduled >= session.max_requests:
            return "max_requests"
        if scheduled_ns is not None and scheduled_ns >= end_of_run_ns:
            return "run_end"
        request = mix.prepare_turn(index, conversation)
        request.wire = exchanger.encode(request)  # built before its time: off the send path
        if scheduled_ns is not None:
            offset = scheduled_ns - clock.start_ns
            wait_s = clock.seconds_until(offset)
            if wait_s > 0 and not _sleep_until(clock, offset, wait_s, session.halted):
                return "halted"
            if session.scheduled >= session.max_requests:  # other sessions took the last ones meanwhile
                return "max_requests"
        session.scheduled += 1
        session.sent += 1
        session.in_flight += 1
        try:
            answer = exchanger.exchange(request, scheduled_ns)
        finally:
            session.in_flight -= 1
        if answer is None:
            return "failed"  # no answer: the conversation cannot go on
        conversation.answer(answer, request.llm.counter.count(answer))
        scheduled_ns = clock.now_ns() + draws.think_ns()
    return "done"


def run_open_sessions(session: LoadSession, exchanger: Exchanger) -> None:
    """The open loop over sessions: at each scheduled offset a session starts (:func:`run_session`,
    turn 1 scheduled at the offset) in its own greenlet, holding one of ``max_in_flight`` slots
    while it lasts; a start that finds every slot taken waits (the wait is turn 1's lateness) or,
    with the drop policy, is recorded as one ``dropped`` request. After the schedule, sessions
    go on until the run's duration; then in-flight turns get the client timeout (plus grace)."""
    plan, clock, mix = session.plan, session.clock, session.mix
    slots = gevent.lock.BoundedSemaphore(plan.max_in_flight)
    greenlets = gevent.pool.Group()

    def one(start_ns: int) -> None:
        try:
            run_session(session, exchanger, start_ns)
        except Exception as exc:  # noqa: BLE001  (kept for the totals and the manifest)
            session.failure = exc
            session.halt("stopped")
        finally:
            slots.release()

    offsets = session.schedule()
    drop_when_full = plan.in_flight_policy == "drop"
    exhausted_reason = None
    for offset in offsets:
        session.next_send_elapsed_ns = offset
        wait_s = clock.seconds_until(offset)
        if wait_s > 0 and not _sleep_until(clock, offset, wait_s, session.halted):
            break
        if session.scheduled >= session.max_requests:
            exhausted_reason = "max_requests"
            break
        if drop_when_full and not session.halted.is_set() and not slots.acquire(blocking=False):
            _record_dropped_at_cap(session, offset, mix.classes[mix.draw_class()].name)
            continue
        if session.halted.is_set() or (not drop_when_full and not _take_slot(slots, session)):
            break
        greenlets.spawn(one, clock.start_ns + offset)
    else:
        exhausted_reason = "duration"
    session.next_send_elapsed_ns = None
    greenlets.join(timeout=max(0.0, clock.seconds_until(int(plan.duration_s * 1e9))))
    if session.scheduled >= session.max_requests:
        exhausted_reason = "max_requests"
    session.end_scheduling(exhausted_reason)
    greenlets.join(timeout=plan.timeout_s + DRAIN_GRACE_S)
    greenlets.kill(timeout=DRAIN_GRACE_S)
