"""Run a load plan in this process with a Locust local runner.

Importing this module imports Locust, which monkey-patches the process with
gevent: import it first, and only in the process that generates load.

:func:`run_load` builds the request mix (payload pools), binds a Locust user
class to the plan (:mod:`.users`), freezes the garbage collector's view of
everything built so far (``gc.freeze``: later collections skip it), starts a
Locust ``LocalRunner`` and watches the run: it halts the users at
``duration_s`` or when ``stop`` is set, reports :class:`Progress` every
``progress_interval_s``, and returns a :class:`LoadResult` once in-flight
requests have ended (each is bounded by the client timeout).
"""

from __future__ import annotations

from .users import LoadSession, bind_user_class  # noqa: I001  (imports Locust: gevent first)

import gc
from dataclasses import dataclass
from typing import Callable, Protocol

from locust.env import Environment

from .mix import RequestMix
from .recorder import Recorder
from .spec import LoadPlan
from .users import DRAIN_GRACE_S

#: Longest wait for Locust to start the first user, s.
START_TIMEOUT_S = 10.0
#: How often the watcher checks the stop flag and the duration, s.
WATCH_TICK_S = 0.05


class StopFlag(Protocol):
    """Anything with ``is_set()``, e.g. ``threading.Event``."""

    def is_set(self) -> bool: ...


@dataclass
class Progress:
    """A live view of a running load, about once a second."""

    elapsed_s: float
    remaining_s: float  # until duration_s; the run may end earlier (max_requests, stop)
    scheduled: int  # requests whose scheduled time has come (sent or dropped)
    completed: int  # sent requests that ended (reply, error or timeout)
    errors: int  # since the start, dropped requests included
    rps: float  # requests completed per second over the last interval
    p50_ms: float | None  # latency from scheduled send, last LIVE_WINDOW_S seconds
    p99_ms: float | None
    in_flight: int
    late_share: float  # share of recent requests sent more than 1 ms after their scheduled time


@dataclass
class LoadResult:
    """What a finished load did. Times are epoch ns."""

    start_ns: int  # the run origin: schedule offset 0
    end_ns: int  # when the last in-flight request ended (or was abandoned)
    scheduled: int
    sent: int
    completed: int
    errors: int
    offered_rps: float  # scheduled / the time requests were being started
    achieved_rps: float  # completed / (end - start)
    stop_reason: str  # "duration" | "max_requests" | "stopped"


class LoadError(RuntimeError):
    """The load could not run (the users failed); raised by :func:`run_load`."""


def run_load(
    plan: LoadPlan,
    sink,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    progress_interval_s: float = 1.0,
    stop: StopFlag | None = None,
) -> LoadResult:
    """Generate the load ``plan`` describes, writing one record per request to ``sink``.

    ``sink`` has ``append(*values)`` in ``REQUESTS_SCHEMA`` order (a
    :class:`tailscope.rundir.Appender`); the caller flushes and closes it.
    Request failures are recorded, not raised. Raises :class:`LoadError` when
    the users themselves fail or do not start.
    """
    if not progress_interval_s > 0:
        raise ValueError(f"progress_interval_s must be > 0, got {progress_interval_s!r}")
    recorder = Recorder(sink)
    session = LoadSession(plan, recorder, RequestMix(plan.classes, plan.seed))
    environment = Environment(user_classes=[bind_user_class(session)], host=plan.target)
    runner = environment.create_local_runner()
    users = plan.arrival.users if plan.arrival.process == "closed" else 1
    gc.collect()
    gc.freeze()
    try:
        runner.start(users, spawn_rate=users)
        if not session.started.wait(timeout=START_TIMEOUT_S):
            raise LoadError(f"Locust did not start the load within {START_TIMEOUT_S:g} s")
        _watch(session, on_progress, progress_interval_s, stop)
    finally:
        runner.quit()
        gc.unfreeze()
    if session.failure is not None:
        raise LoadError(f"the load generator failed: {session.failure!r}") from session.failure
    return _result(session)


def _watch(session: LoadSession, on_progress, progress_interval_s: float, stop) -> None:
    """Halt the users at the duration or on ``stop``; report progress; wait until done."""
    plan, clock = session.plan, session.clock
    drain_limit_s = plan.timeout_s + 2 * DRAIN_GRACE_S
    halted_at_s: float | None = None
    meter = _ProgressMeter(session)
    next_progress_s = progress_interval_s
    while not session.done.wait(timeout=WATCH_TICK_S):
        elapsed_s = clock.elapsed_ns() / 1e9
        if stop is not None and stop.is_set():
            session.halt("stopped")
        elif elapsed_s >= plan.duration_s:
            session.halt("duration")
        if session.halted.is_set():
            halted_at_s = elapsed_s if halted_at_s is None else halted_at_s
            if elapsed_s - halted_at_s > drain_limit_s:
                break  # the users did not wind down in time; the runner kills them
        if on_progress is not None and elapsed_s >= next_progress_s:
            on_progress(meter.progress())
            next_progress_s = elapsed_s + progress_interval_s
    if on_progress is not None:
        on_progress(meter.progress())


class _ProgressMeter:
    """Builds :class:`Progress` snapshots; remembers the last one for the rate."""

    def __init__(self, session: LoadSession):
        self.session = session
        self._last_elapsed_s = 0.0
        self._last_completed = 0

    def progress(self) -> Progress:
        session, recorder, clock = self.session, self.session.recorder, self.session.clock
        elapsed_s = clock.elapsed_ns() / 1e9
        live = recorder.snapshot(clock.now_ns())
        interval_s = elapsed_s - self._last_elapsed_s
        rps = (recorder.completed - self._last_completed) / interval_s if interval_s > 0 else 0.0
        self._last_elapsed_s, self._last_completed = elapsed_s, recorder.completed
        return Progress(
            elapsed_s=elapsed_s,
            remaining_s=max(0.0, session.plan.duration_s - elapsed_s),
            scheduled=session.scheduled,
            completed=recorder.completed,
            errors=recorder.errors,
            rps=rps,
            p50_ms=live.p50_ms,
            p99_ms=live.p99_ms,
            in_flight=session.in_flight,
            late_share=live.late_share,
        )


def _result(session: LoadSession) -> LoadResult:
    clock, recorder = session.clock, session.recorder
    end_ns = clock.now_ns()
    scheduling_ns = session.scheduling_ended_ns or (end_ns - clock.start_ns)
    if session.stop_reason == "duration":
        scheduling_ns = max(scheduling_ns, int(session.plan.duration_s * 1e9))
    run_s = (end_ns - clock.start_ns) / 1e9
    return LoadResult(
        start_ns=clock.start_ns,
        end_ns=end_ns,
        scheduled=session.scheduled,
        sent=session.sent,
        completed=recorder.completed,
        errors=recorder.errors,
        offered_rps=session.scheduled / (scheduling_ns / 1e9) if scheduling_ns > 0 else 0.0,
        achieved_rps=recorder.completed / run_s if run_s > 0 else 0.0,
        stop_reason=session.stop_reason,
    )
