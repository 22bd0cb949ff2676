"""``tailscope run --workers N``: this process is the Locust master, N local workers walk the schedule.

Imports Locust (gevent monkey-patching): import it only in the conductor.

:func:`run_distributed_load` starts a Locust ``MasterRunner`` on a free
loopback port, starts N worker processes (``python -m
tailscope.conductor.locust_worker``; each loads the same scenario file), waits until
they are connected, starts the test, and merges every worker's rows into
``sink`` — and its streamed chunks and self-check rows into ``chunks``,
``events`` and ``signals`` (:class:`~.locust_roles.MasterRole`). It returns when every worker
has walked its share and reported, or soon after ``stop`` is set. Worker
processes are stopped by PID in every case (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

from tailscope.loadgen.locust_roles import MasterRole  # noqa: I001  (imports Locust: gevent first)

# isort: split

import os
import subprocess
import time
from collections.abc import Callable, Sequence

import gevent
from locust.env import Environment

from tailscope.loadgen.local_runner import LoadError, LoadResult, Progress, StopFlag
from tailscope.loadgen.process_load import ScheduleHolder
from tailscope.loadgen.spec import LoadPlan
from tailscope.loadgen.users import DRAIN_GRACE_S
from tailscope.support.python_child import python_module

#: Longest wait for the workers to connect to the master, s.
CONNECT_TIMEOUT_S = 30.0
#: How long a worker process may take to exit after the master quits, s.
WORKER_EXIT_GRACE_S = 5.0
#: How often the master checks the stop flag and the workers' reports, s.
WATCH_TICK_S = 0.05


class TailscopeSchedule(ScheduleHolder):
    """The Locust user class of ``tailscope run --workers`` (same name on master and workers)."""

    abstract = False


def worker_command(master_port: int, scenario_path: str, plan: LoadPlan) -> list[str]:
    """argv of one worker process for ``plan`` (loaded from ``scenario_path``): the plan's
    rate, or its closed loop (users and think time: a concurrency sweep's step replaces
    the scenario file's arrival), overrides the file's."""
    arrival = plan.arrival
    load = (["--users", str(arrival.users), "--think-time", repr(arrival.think_time_s)]
            if arrival.process == "closed" else ["--rate", repr(arrival.rate)])
    return python_module("tailscope.conductor.locust_worker", "--master-port", str(master_port),
                         "--scenario", scenario_path, "--target", plan.target, "--duration", repr(plan.duration_s),
                         *load)


def split_problem(plan: LoadPlan, workers: int) -> str | None:
    """Why ``plan`` cannot be split over ``workers`` (None when it can): each worker needs at least
    one of a closed loop's users and of an ``arrival.max_concurrency`` cap."""
    arrival = plan.arrival
    if arrival.process == "closed" and arrival.users < workers:
        return (f"a closed loop's {arrival.users} users (arrival.concurrency or arrival.users) are split over "
                f"the workers: there must be at least --workers ({workers})")
    if arrival.max_concurrency is not None and arrival.max_concurrency < workers:
        return (f"arrival.max_concurrency ({arrival.max_concurrency}) is split over the workers: "
                f"it must be at least --workers ({workers})")
    return None


class _ConductorRun:
    """The master role's run handle: the conductor owns the run directory."""

    def __init__(self, sink, chunks=None, events=None, signals=None):
        self.path = "conductor"
        self.sink = sink
        self.chunks, self.events, self.signals = chunks, events, signals
        self.load: dict | None = None
        self.problems: list[str] = []

    def close(self, load: dict | None, problems: list[str]) -> None:
        self.load, self.problems = load, problems


def run_distributed_load(
    plan: LoadPlan,
    sink,
    *,
    workers: int,
    scenario_path: str,
    log_dir: str,
    on_progress: Callable[[Progress], None] | None = None,
    progress_interval_s: float = 1.0,
    stop: StopFlag | None = None,
    chunks=None,
    events=None,
    signals=None,
) -> LoadResult:
    """Run ``plan`` on ``workers`` local Locust worker processes; rows go to ``sink``
    (``append_record`` of a :class:`~tailscope.rundir.request_record.RequestRecord`, as for
    :func:`~.local_runner.run_load`).
    Optional sinks, as for run_load: ``chunks`` (every worker's streamed chunks),
    ``events`` (their ``generator_gc`` events), ``signals`` (their self-check
    gauges, labelled ``{worker="i"}``).

    A closed loop (concurrency mode) is split too: each worker runs its share
    of ``arrival.users`` (:func:`~.distributed.cap_share`), from the shared origin.

    Raises :class:`LoadError` when the plan cannot be split (:func:`split_problem`),
    the workers do not connect, a worker's load fails, or rows are lost in the
    merge (the run directory keeps what arrived).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    problem = split_problem(plan, workers)
    if problem:
        raise LoadError(problem)
    environment = Environment(user_classes=[TailscopeSchedule], host=plan.target)
    runner = environment.create_master_runner("127.0.0.1", 0)
    conductor_run = _ConductorRun(sink, chunks, events, signals)
    role = MasterRole(environment, lambda _env: plan, lambda _plan, _role: conductor_run)
    processes: list[subprocess.Popen] = []
    try:
        processes = _start_workers(worker_command(runner.server.port, scenario_path, plan), workers, log_dir)
        _wait_connected(runner, workers, processes)
        gevent.spawn(runner.start, workers, spawn_rate=workers)
        _watch(role, plan, on_progress, progress_interval_s, stop)
        runner.quit()
    finally:
        _stop_workers(processes)
    if conductor_run.load is None:
        raise LoadError("the distributed load ended without a summary")
    if conductor_run.problems:
        raise LoadError("distributed load: " + "; ".join(conductor_run.problems)
                        + f" (the workers' own output: {os.path.join(log_dir, 'worker-*.log')})")
    return _result(conductor_run.load)


def _start_workers(argv: Sequence[str], count: int, log_dir: str) -> list[subprocess.Popen]:
    processes = []
    for index in range(count):
        log = open(os.path.join(log_dir, f"worker-{index}.log"), "wb")
        try:
            processes.append(subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))
        finally:
            log.close()
    return processes


def _wait_connected(runner, workers: int, processes: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while len(runner.clients.ready) < workers:
        dead = [p.pid for p in processes if p.poll() is not None]
        if dead:
            raise LoadError(f"worker process(es) {dead} exited before connecting; see worker-*.log")
        if time.monotonic() > deadline:
            raise LoadError(f"only {len(runner.clients.ready)} of {workers} workers connected "
                            f"within {CONNECT_TIMEOUT_S:g} s")
        gevent.sleep(0.1)


def _watch(role: MasterRole, plan: LoadPlan, on_progress, progress_interval_s: float, stop) -> None:
    """Until every worker reported (or stop / a deadline): report progress."""
    started = time.monotonic()
    deadline_s = None
    next_progress_s = progress_interval_s
    meter = _MergedProgress(role, plan)
    while not role.all_reported.wait(timeout=WATCH_TICK_S):
        elapsed_s = time.monotonic() - started
        if stop is not None and stop.is_set():
            break  # runner.quit() halts the workers and waits for their reports
        if role.origin_ns is not None and deadline_s is None:
            deadline_s = elapsed_s + plan.duration_s + plan.timeout_s + 2 * DRAIN_GRACE_S + 5.0
        if deadline_s is not None and elapsed_s > deadline_s:
            break
        if on_progress is not None and elapsed_s >= next_progress_s and role.merged is not None:
            on_progress(meter.progress())
            next_progress_s = elapsed_s + progress_interval_s
    if on_progress is not None and role.merged is not None:
        on_progress(meter.progress())


class _MergedProgress:
    """:class:`Progress` snapshots from the master's merged rows."""

    def __init__(self, role: MasterRole, plan: LoadPlan):
        self.role = role
        self.plan = plan
        self._last = (time.monotonic(), 0)

    def progress(self) -> Progress:
        merged, now_ns = self.role.merged, time.time_ns()
        elapsed_s = max(0.0, (now_ns - self.role.origin_ns) / 1e9) if self.role.origin_ns else 0.0
        live = merged.snapshot(now_ns)
        last_t, last_completed = self._last
        now = time.monotonic()
        rps = (merged.completed - last_completed) / (now - last_t) if now > last_t else 0.0
        self._last = (now, merged.completed)
        return Progress(elapsed_s=elapsed_s, remaining_s=max(0.0, self.plan.duration_s - elapsed_s),
                        scheduled=merged.rows + merged.in_flight, completed=merged.completed,
                        errors=merged.errors, rps=rps, p50_ms=live.p50_ms, p99_ms=live.p99_ms,
                        in_flight=merged.in_flight, late_share=live.late_share)


def _stop_workers(processes: list[subprocess.Popen]) -> None:
    """Wait briefly for each worker to exit after the master's quit; then SIGTERM, SIGKILL (by PID)."""
    deadline = time.monotonic() + WORKER_EXIT_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=WORKER_EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _result(load: dict) -> LoadResult:
    return LoadResult(**{name: load[name] for name in LoadResult.__dataclass_fields__ if name in load})
