"""Run a load plan in this process with a Locust local runner.

Importing this module imports Locust, which monkey-patches the process with
gevent: import it first, and only in the process that generates load.

:func:`run_load` builds the request mix (payload pools), binds a Locust user
class to the plan (:mod:`.users`), freezes the garbage collector's view of
everything built so far (``gc.freeze``: later collections skip it; for a
closed loop again once every user has begun, so that thousands of users and
their sessions do not lengthen every full collection), starts a
Locust ``LocalRunner`` and watches the run: it halts the users at
``duration_s`` or when ``stop`` is set, reports :class:`Progress` every
``progress_interval_s``, and returns a :class:`LoadResult` once in-flight
requests have ended (each is bounded by the client timeout).

Housekeeping never competes with a send: progress callbacks (display, abort
monitor) and the flushes of the run's Arrow streams (``flush``) run in the
watcher only when the next scheduled send is at least ``HOUSEKEEPING_SLACK_S``
away (or after waiting ``HOUSEKEEPING_MAX_DEFER_S`` for such a gap), since
they block the event loop for up to a few ms. The generator's own CPU use and
GC pauses are recorded by :class:`~.selfcheck.GeneratorMonitor`.
"""

from __future__ import annotations

from tailscope.loadgen.users import LoadSession, bind_user_class  # noqa: I001  (imports Locust: gevent first)

# isort: split

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from locust.env import Environment

from tailscope.loadgen.locust_stats_trim import trimming
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.recorder import LIVE_WINDOW_S, LiveStats, Recorder
from tailscope.loadgen.selfcheck import GeneratorMonitor
from tailscope.loadgen.spec import LoadPlan
from tailscope.loadgen.users import DRAIN_GRACE_S

#: Longest wait for Locust to start the first user, s.
START_TIMEOUT_S = 10.0
#: How often the watcher checks the stop flag and the duration, s.
WATCH_TICK_S = 0.05
#: Housekeeping (progress callbacks, stream flushes) waits for a gap at least
#: this long before the next scheduled send, s ...
HOUSEKEEPING_SLACK_S = 0.005
#: ... but never longer than this, s (at high rates there is no such gap).
HOUSEKEEPING_MAX_DEFER_S = 0.5
#: How often the watcher flushes the ``flush`` streams, s (the run directory's
#: periodic flusher is the fallback; it then finds little to write).
FLUSH_INTERVAL_S = 0.25


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
    #: Share of the requests due in the last LIVE_WINDOW_S s (sent or dropped) that
    #: left more than 1 ms after their scheduled time or never left (LiveStats.late_share).
    late_share: float
    dropped: int = 0  # requests recorded as dropped (never sent), since the start
    #: Live statistics over the windows asked for (``stat_windows_s``), by window length in s.
    windows: dict[int, LiveStats] = field(default_factory=dict)


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
    dropped: int = 0  # recorded as dropped: never sent (cap full under the drop policy, or halted)
    generator_gc_pauses: int = 0  # garbage collections in the generator during the load
    generator_gc_ms: float = 0.0  # their total pause, ms


class LoadError(RuntimeError):
    """The load could not run (the users failed); raised by :func:`run_load`."""


def run_load(
    plan: LoadPlan,
    sink,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    progress_interval_s: float = 1.0,
    stop: StopFlag | None = None,
    chunks=None,
    events=None,
    signals=None,
    flush: tuple = (),
    stat_windows_s: tuple[int, ...] = (),
) -> LoadResult:
    """Generate the load ``plan`` describes, writing one record per request to ``sink``.

    ``sink`` has ``append_record(record)`` taking a
    :class:`~tailscope.rundir.request_record.RequestRecord` (a
    :class:`tailscope.rundir.Appender`); the caller flushes and closes it.
    Optional sinks: ``chunks`` (``CHUNKS_SCHEMA`` rows of streamed responses),
    ``events`` (``EVENTS_SCHEMA``: the generator's GC pauses), ``signals``
    (``SIGNALS_SCHEMA``: the generator's CPU, in-flight count, GC time).
    ``flush``: objects with ``flush()`` the watcher flushes between sends.
    ``stat_windows_s``: window lengths (s, up to 300) for which each
    :class:`Progress` carries live statistics (``Progress.windows``).
    Request failures are recorded, not raised. Raises :class:`LoadError` when
    the users themselves fail or do not start.
    """
    if not progress_interval_s > 0:
        raise ValueError(f"progress_interval_s must be > 0, got {progress_interval_s!r}")
    if any(not 1 <= w <= MAX_STAT_WINDOW_S for w in stat_windows_s):
        raise ValueError(f"stat_windows_s must be within 1..{MAX_STAT_WINDOW_S} s, got {stat_windows_s!r}")
    recorder = Recorder(sink, chunk_sink=chunks,
                        window_s=max((LIVE_WINDOW_S, *(int(w) for w in stat_windows_s))))
    session = LoadSession(plan, recorder, RequestMix(plan.classes, plan.seed, trace_sample_rate=plan.trace_sample_rate))
    environment = Environment(user_classes=[bind_user_class(session)], host=plan.target)
    runner = environment.create_local_runner()
    users = plan.arrival.users if plan.arrival.process == "closed" else 1
    gc.collect()
    gc.freeze()
    monitor = None
    try:
        with _spawn_rate_advice_muted():
            runner.start(users, spawn_rate=users)
        if not session.started.wait(timeout=START_TIMEOUT_S):
            raise LoadError(f"Locust did not start the load within {START_TIMEOUT_S:g} s")
        if users > 1 and session.all_begun.wait(timeout=START_TIMEOUT_S):
            gc.freeze()  # the closed loop's users and their sessions, built by Locust after the first freeze
        monitor = GeneratorMonitor(events, signals, session.clock.now_ns, lambda: session.in_flight)
        with monitor:
            _watch(session, trimming(on_progress, environment.stats), progress_interval_s, stop,
                   housekeeping=_Housekeeping(session, monitor, flush), stat_windows_s=stat_windows_s)
    finally:
        runner.quit()
        gc.unfreeze()
    if session.failure is not None:
        raise LoadError(f"the load generator failed: {session.failure!r}") from session.failure
    return _result(session, monitor)


class _SpawnRateAdvice(logging.Filter):
    """Drops Locust's "Your selected spawn rate is very high" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


@contextlib.contextmanager
def _spawn_rate_advice_muted() -> Iterator[None]:
    """Mute Locust's spawn-rate advice while tailscope starts its own users.

    :func:`run_load` starts a closed loop's users all at once (spawn rate =
    user count): that rate is tailscope's choice, not a setting the user made,
    so Locust's advice to lower it is noise. Only that one message, only
    during ``runner.start`` (which logs it synchronously); the plain
    ``locust`` command, where the user passes ``-r``, keeps it.
    """
    runner_log = logging.getLogger("locust.runners")
    advice = _SpawnRateAdvice()
    runner_log.addFilter(advice)
    try:
        yield
    finally:
        runner_log.removeFilter(advice)


#: Longest window ``Progress.windows`` may cover, s.
MAX_STAT_WINDOW_S = 300


class _Housekeeping:
    """Work the watcher does between sends: stream flushes and the self-check."""

    def __init__(self, session: LoadSession, monitor: GeneratorMonitor, flush: tuple):
        self.session = session
        self.monitor = monitor
        self.flush_targets = tuple(flush)
        self._next_flush_s = FLUSH_INTERVAL_S

    def run(self, elapsed_s: float) -> None:
        self.monitor.poll()
        if self.flush_targets and elapsed_s >= self._next_flush_s:
            for target in self.flush_targets:
                try:
                    target.flush()
                except OSError:
                    pass  # e.g. disk full: the stream keeps its .error; the run guard stops the run
            self._next_flush_s = elapsed_s + FLUSH_INTERVAL_S


def _has_slack(session: LoadSession, waited_s: float) -> bool:
    """True when blocking the loop now cannot delay a send (or we waited long enough)."""
    return session.slack_s() >= HOUSEKEEPING_SLACK_S or waited_s >= HOUSEKEEPING_MAX_DEFER_S


def _watch(session: LoadSession, on_progress, progress_interval_s: float, stop,
           housekeeping: _Housekeeping | None = None, stat_windows_s: tuple = ()) -> None:
    """Halt the users at the duration or on ``stop``; between sends, report
    progress and do the housekeeping; wait until done."""
    plan, clock = session.plan, session.clock
    drain_limit_s = plan.timeout_s + 2 * DRAIN_GRACE_S
    halted_at_s: float | None = None
    meter = _ProgressMeter(session, stat_windows_s)
    next_progress_s = progress_interval_s
    due_since_s: float | None = None  # when housekeeping last became due
    next_housekeeping_s = 0.0
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
        progress_due = on_progress is not None and elapsed_s >= next_progress_s
        if not progress_due and elapsed_s < next_housekeeping_s:
            continue
        due_since_s = elapsed_s if due_since_s is None else due_since_s
        if not _has_slack(session, elapsed_s - due_since_s):
            continue
        due_since_s = None
        if housekeeping is not None:
            housekeeping.run(elapsed_s)
        next_housekeeping_s = elapsed_s + FLUSH_INTERVAL_S / 2
        if progress_due:
            on_progress(meter.progress())
            next_progress_s = elapsed_s + progress_interval_s
    if on_progress is not None:
        on_progress(meter.progress())


class _ProgressMeter:
    """Builds :class:`Progress` snapshots; remembers the last one for the rate."""

    def __init__(self, session: LoadSession, stat_windows_s: tuple = ()):
        self.session = session
        self.stat_windows_s = tuple(int(w) for w in stat_windows_s)
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
            dropped=recorder.dropped,
            windows={w: recorder.snapshot(clock.now_ns(), w) for w in self.stat_windows_s},
        )


def _result(session: LoadSession, monitor: GeneratorMonitor | None = None) -> LoadResult:
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
        dropped=recorder.dropped,
        generator_gc_pauses=monitor.gc_pauses if monitor is not None else 0,
        generator_gc_ms=monitor.gc_pause_ns / 1e6 if monitor is not None else 0.0,
    )
