"""One run, start to finish: children up, load, children down, analysis, reports.

The conductor owns orchestration only. Load generation is
:func:`tailscope.loadgen.runner.run_load`; spans arrive through the receiver
process; signals through the sampler process; the analysis and the reports are
computed afterwards from the run directory alone, exactly as
``tailscope report`` would.

Importing this module imports Locust, which monkey-patches the process with
gevent: import it only from the ``run``/``demo`` commands.
"""

from __future__ import annotations

# Locust first: it monkey-patches the standard library with gevent, which must
# happen before threading, socket or subprocess are used.
from tailscope.loadgen.runner import run_load  # noqa: I001  (import order matters)

import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlparse

from tailscope.rundir import RunWriter, new_run_dir, read_json, schema

from .children import Child, ChildGroup, python_module
from .scenario import Scenario, is_loopback_url


#: CPU priority drop of the receiver and the samplers (nice value): they are
#: bookkeeping and must not delay the generator's sends on a small machine.
BOOKKEEPING_NICENESS = 5


class SetupError(RuntimeError):
    """The run cannot start: bad target, a child that did not come up, ..."""


@dataclass
class RunContext:
    """What a companion may use while the load runs."""

    run_dir: str
    writer: RunWriter  # add_event() for ground truth, outages, ...
    plan: object  # tailscope.loadgen.spec.LoadPlan
    scenario: Scenario
    target_process: dict  # manifest["target_process"]
    receiver_port: int
    stop: threading.Event  # set it to end the load early
    aborted: list = field(default_factory=list)  # reasons given to abort()

    def abort(self, reason: str) -> None:
        """Stop the load; the run is marked ``aborted`` with ``reason``."""
        self.aborted.append(reason)
        self.stop.set()


class Companion:
    """Something that runs beside the load: a fault injector, an abort monitor.

    ``start`` is called once the run directory exists and before the first
    request; ``on_progress`` with each live snapshot (about once a second);
    ``stop`` always, also on failure and Ctrl-C, and must undo whatever the
    companion created (cgroups, swap files, processes)."""

    name = "companion"

    def start(self, ctx: RunContext) -> None:
        pass

    def on_progress(self, progress) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class RunOptions:
    """Command-line choices for one run (the scenario holds the rest)."""

    out_dir: str = "runs"
    target: str | None = None
    duration_s: float | None = None
    receiver_host: str = "127.0.0.1"
    receiver_port: int = 4318  # 0: any free port
    target_pid: int | None = None
    allow_remote: bool = False  # load a non-loopback target (never in tests/demos)
    span_grace_s: float = 6.0  # longest wait for late spans after the load stops
    extra_manifest: dict = field(default_factory=dict)
    companions: list = field(default_factory=list)  # Companion instances


@dataclass
class RunOutcome:
    run_dir: str
    status: str  # complete | interrupted | aborted
    load: object | None  # tailscope.loadgen LoadResult, None if the load never started


#: Starts a target once the receiver is up: (children, receiver_port, run_dir) → (child, base URL).
TargetLauncher = Callable[[ChildGroup, int, str], tuple[Child, str]]


def execute_run(
    scenario: Scenario,
    options: RunOptions,
    on_progress: Callable | None = None,
    launch_target: TargetLauncher | None = None,
) -> RunOutcome:
    """Run ``scenario`` and leave a closed run directory behind (not analysed).

    SIGINT/SIGTERM stop the load promptly; collected data is flushed and the
    run is marked ``interrupted``. Children are stopped in every case.
    """
    os.makedirs(options.out_dir, exist_ok=True)
    run_dir = new_run_dir(options.out_dir, _safe_name(scenario.name))
    session = _Session(scenario, options, run_dir)
    try:
        return session.run(on_progress, launch_target)
    except BaseException:
        if session.writer is None:  # nothing was recorded: leave no empty run behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


class _Session:
    """State of one run while it executes (children, writer, stop flag)."""

    def __init__(self, scenario: Scenario, options: RunOptions, run_dir: str):
        self.scenario = scenario
        self.options = options
        self.run_dir = run_dir
        self.stop = threading.Event()
        self.writer: RunWriter | None = None

    def run(self, on_progress, launch_target) -> RunOutcome:
        scenario, options, run_dir = self.scenario, self.options, self.run_dir
        load = None
        status = "complete"
        with ChildGroup() as children, _stop_on_signals(self.stop):
            receiver = children.start(
                Child("OTLP receiver",
                      python_module("tailscope.tracing.receiver", "--run-dir", run_dir,
                                    "--host", options.receiver_host,
                                    "--port", str(options.receiver_port)),
                      log_path=os.path.join(run_dir, "receiver.log"), niceness=BOOKKEEPING_NICENESS),
                wait_listening=True,
            )
            target_child = None
            target_url = options.target or scenario.target
            if launch_target is not None:
                target_child, target_url = launch_target(children, receiver.port, run_dir)
            plan = scenario.load_plan(target_url, options.duration_s)
            _check_target_allowed(plan.target, options.allow_remote)
            target_proc = _find_target_process(plan.target, options.target_pid, target_child)
            children.start(Child(
                "signal sampler",
                python_module("tailscope.tracing.signals", "--run-dir", run_dir,
                              "--rate", str(scenario.signal_rate_hz),
                              *(["--pid", str(target_proc["pid"])] if target_proc.get("pid") else [])),
                log_path=os.path.join(run_dir, "signals.log"), niceness=BOOKKEEPING_NICENESS,
            ))
            self.writer = RunWriter(run_dir, self._manifest(plan, receiver.port, target_proc))
            ctx = RunContext(run_dir=run_dir, writer=self.writer, plan=plan, scenario=scenario,
                             target_process=target_proc, receiver_port=receiver.port, stop=self.stop)
            started: list[Companion] = []
            try:
                for companion in options.companions:
                    companion.start(ctx)
                    started.append(companion)
                load = run_load(plan, self.writer.requests,
                                on_progress=_fan_out(on_progress, started), stop=self.stop)
                if ctx.aborted:
                    status = "aborted"
                elif self.stop.is_set():
                    status = "interrupted"
            except KeyboardInterrupt:
                status = "interrupted"
            except BaseException:
                status = "failed"
                raise
            finally:
                cleanup_errors = _stop_companions(started)
                if target_child is None:
                    _wait_for_late_spans(run_dir, options.span_grace_s)
                # ChildGroup stops in reverse start order: sampler, target (which
                # flushes its spans on SIGTERM), then the receiver.
                children.stop_all()
                self.writer.close(status=status, load=_load_summary(load),
                                  abort_reasons=ctx.aborted, cleanup_errors=cleanup_errors)
        return RunOutcome(run_dir=run_dir, status=status, load=load)

    def _manifest(self, plan, receiver_port: int, target_proc: dict) -> dict:
        scenario = self.scenario
        return {
            "name": scenario.name,
            "scenario_path": os.path.abspath(scenario.path),
            "scenario": scenario.raw,
            "target": plan.target,
            "target_process": target_proc,
            "options": {
                "duration_s": plan.duration_s,
                "max_requests": plan.max_requests,
                "seed": plan.seed,
                "timeout_s": plan.timeout_s,
                "max_in_flight": plan.max_in_flight,
                "receiver_port": receiver_port,
                "signal_rate_hz": scenario.signal_rate_hz,
            },
            **self.options.extra_manifest,
        }


def _fan_out(on_progress, companions):
    """One progress callback that feeds the display and every companion."""

    def callback(progress) -> None:
        for companion in companions:
            companion.on_progress(progress)
        if on_progress is not None:
            on_progress(progress)

    return callback


def _stop_companions(companions) -> list[str]:
    """Stop companions in reverse order; one failing to stop does not stop the
    others. Returns the failures (recorded in the manifest, shown in the report)."""
    errors = []
    for companion in reversed(companions):
        try:
            companion.stop()
        except Exception as exc:  # noqa: BLE001  (every companion must get its stop)
            errors.append(f"{companion.name}: {exc}")
    return errors


def _safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)[:60] or "run"


def _check_target_allowed(url: str, allow_remote: bool) -> None:
    if not is_loopback_url(url) and not allow_remote:
        raise SetupError(
            f"target {url} is not a loopback address; pass --allow-remote to load a remote "
            "service you are responsible for"
        )


def _find_target_process(url: str, pid: int | None, child: Child | None) -> dict:
    """The target's process, for the samplers: given, started by us, or found by port."""
    from tailscope.tracing.signals.discovery import describe_process, find_listening_pid

    if child is not None:
        return {**describe_process(child.pid), "found_by": "started by tailscope"}
    if pid is not None:
        try:
            return {**describe_process(pid), "found_by": "--target-pid"}
        except Exception as exc:  # noqa: BLE001  (psutil raises several kinds)
            raise SetupError(f"--target-pid {pid}: {exc}") from exc
    port = urlparse(url).port or (443 if url.startswith("https") else 80)
    if is_loopback_url(url):
        found = find_listening_pid(port)
        if found is not None:
            return {**describe_process(found), "found_by": f"listening port {port}"}
    return {"pid": None, "found_by": None,
            "reason": f"no local process listens on port {port}; target-process signals are off "
                      "(give --target-pid)"}


def _wait_for_late_spans(run_dir: str, grace_s: float) -> None:
    """Give an external target's batch exporter time to send its last spans:
    wait until the receiver's span count is stable for 1.5 s, at most ``grace_s``."""
    path = os.path.join(run_dir, schema.RECEIVER_STATS)
    deadline = time.monotonic() + grace_s
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        count = (read_json(path, {}) or {}).get("spans_received")
        if count != last:
            last, stable_since = count, time.monotonic()
        elif time.monotonic() - stable_since >= 1.5:
            return
        time.sleep(0.25)


def _load_summary(load) -> dict | None:
    if load is None:
        return None
    return {k: getattr(load, k) for k in (
        "start_ns", "end_ns", "scheduled", "sent", "completed", "errors",
        "offered_rps", "achieved_rps", "stop_reason") if hasattr(load, k)}


class _stop_on_signals:
    """SIGINT/SIGTERM set ``stop`` (the load winds down and is reported);
    a second SIGINT raises KeyboardInterrupt."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.previous = {}

    def _handle(self, signum, frame):
        if self.stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.stop.set()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
