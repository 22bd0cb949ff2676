"""One run, start to finish: children up, load, children down, analysis, reports.

The conductor owns orchestration only. Load generation is
:func:`tailscope.loadgen.local_runner.run_load`; spans arrive through the receiver
process; signals through the sampler process; the analysis and the reports are
computed afterwards from the run directory alone, exactly as
``tailscope report`` would.

Importing this module imports Locust, which monkey-patches the process with
gevent: import it only from the ``run``/``demo`` commands.
"""

from __future__ import annotations

# Locust first: it monkey-patches the standard library with gevent, which must
# happen before threading, socket or subprocess are used.
from tailscope.loadgen.local_runner import run_load  # noqa: I001  (import order matters)

# isort: split

import dataclasses
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

from tailscope.conductor.children import Child, ChildGroup
from tailscope.conductor.companion import Companion, RunContext
from tailscope.conductor.run_setup import (
    BOOKKEEPING_NICENESS,
    bound_grpc_port,
    open_run_dir,
    receiver_child,
    receiver_grpc_port,
    receiver_options,
    run_manifest,
)
from tailscope.conductor.server_facts import server_facts
from tailscope.rundir import RunWriter
from tailscope.scenario_model.scenario import Scenario
from tailscope.support.loopback import is_loopback_url
from tailscope.support.python_child import python_module


class SetupError(RuntimeError):
    """The run cannot start: bad target, a child that did not come up, ..."""


@dataclass
class RunOptions:
    """Command-line choices for one run (the scenario holds the rest)."""

    out_dir: str = "runs"
    #: The run directory's own name under out_dir (None: ``<UTC stamp>-<scenario name>``);
    #: ``run --repeat`` names its runs run-1 … run-N.
    run_dir_name: str | None = None
    target: str | None = None
    duration_s: float | None = None
    receiver_host: str = "127.0.0.1"
    receiver_port: int = 4318  # 0: any free port
    receiver_grpc_port: int | None = None  # OTLP/gRPC: None = 4317 (0 when receiver_port is 0); -1 = off
    #: Bearer token every OTLP request must carry; required when receiver_host is not loopback.
    #: Reaches the receiver through its environment; never written to the manifest or a log.
    receiver_token: str | None = field(default=None, repr=False)
    receiver_tls_cert: str | None = None  # PEM files: the receiver serves HTTPS and gRPC over TLS
    receiver_tls_key: str | None = None
    target_pid: int | None = None
    target_process_name: str | None = None  # --target-process NAME
    target_container: str | None = None  # --target-container ID (its cgroup, its oldest process)
    target_cgroup: str | None = None  # --target-cgroup PATH (sampled even without a pid)
    timeout_s: float | None = None  # client timeout per request (overrides the scenario)
    allow_remote: bool = False  # load a non-loopback target (never in tests/demos)
    late_span_wait_s: float | None = None  # --late-span-wait: cap of the wait for late spans (None: scenario/default)
    extra_manifest: dict = field(default_factory=dict)
    companions: list = field(default_factory=list)  # Companion instances
    abort_on: tuple = ()  # tailscope.scenario_model.abort_rules.AbortRule from --abort-on (the scenario's abort_on adds to them)
    workers: int = 0  # > 0: this process is a Locust master with that many local worker processes


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
    Raises :class:`SetupError` before anything starts when the receiver would
    bind a non-loopback address without a token, or its TLS files are unusable.
    """
    check_receiver_access(options)
    run_dir = open_run_dir(options.out_dir, scenario.name, options.run_dir_name)
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
                receiver_child(run_dir, options.receiver_host, options.receiver_port,
                               receiver_grpc_port(options.receiver_port, options.receiver_grpc_port),
                               token=options.receiver_token, extra_args=_receiver_tls_args(options)),
                wait_listening=True,
            )
            target_child = None
            target_url = options.target or scenario.target
            if launch_target is not None:
                target_child, target_url = launch_target(children, receiver.port, run_dir)
            plan = scenario.load_plan(target_url, options.duration_s)
            if options.timeout_s is not None:
                plan = dataclasses.replace(plan, timeout_s=options.timeout_s)
            _check_target_allowed(plan.target, options.allow_remote)
            # a process the user named is looked for first: its absence is the more specific error
            target_proc = _find_target_process(plan.target, options.target_pid, target_child, options)
            _check_target_listening(plan.target)
            children.start(Child(
                "signal sampler",
                python_module("tailscope.signals", "--run-dir", run_dir,
                              *_sampler_arguments(target_proc, scenario, plan.target)),
                log_path=os.path.join(run_dir, "signals.log"), niceness=BOOKKEEPING_NICENESS,
            ))
            grpc_port = bound_grpc_port(run_dir)
            self.writer = RunWriter(run_dir, self._manifest(plan, receiver.port, target_proc, grpc_port))
            ctx = RunContext(run_dir=run_dir, writer=self.writer, plan=plan, scenario=scenario,
                             target_process=target_proc, receiver_port=receiver.port, stop=self.stop)
            keeper = _record_keeper(self.writer, run_dir, scenario, plan)
            started: list[Companion] = []
            try:
                for companion in (*_harness_watchers(self.writer, keeper, children, run_dir),
                                  *_abort_monitors(scenario, options), *options.companions):
                    companion.start(ctx)
                    started.append(companion)
                load = _generate_load(plan, keeper, scenario, options, run_dir,
                                      _fan_out(on_progress, started), self.stop,
                                      extras=_loadgen_extras(self.writer, started))
                if ctx.failures:
                    status = "failed"
                elif ctx.aborted:
                    status = "aborted"
                elif self.stop.is_set():
                    status = "interrupted"
            except KeyboardInterrupt:
                status = "interrupted"
            except BaseException as exc:
                status = "failed"
                ctx.failures.append(f"harness error: {type(exc).__name__}: {exc}")
                raise
            finally:
                _close_keeper(keeper, ctx)
                cleanup_errors = _stop_companions(started)
                late_spans = (_wait_for_late_spans(run_dir, self.writer, plan, scenario, options, load)
                              if target_child is None and status in ("complete", "aborted") else None)
                # ChildGroup stops in reverse start order: sampler, target (which
                # flushes its spans on SIGTERM), then the receiver.
                children.stop_all()
                failure = "; ".join(ctx.failures) or _child_failure(started)
                self.writer.close(status="failed" if failure else status, load=_load_summary(load),
                                  abort_reasons=ctx.aborted, cleanup_errors=cleanup_errors,
                                  **({"late_spans": late_spans} if late_spans is not None else {}),
                                  **({"failure": failure} if failure else {}))
                status = self.writer.manifest["status"]
        return RunOutcome(run_dir=run_dir, status=status, load=load)

    def _manifest(self, plan, receiver_port: int, target_proc: dict, grpc_port: int | None) -> dict:
        scenario, options = self.scenario, self.options
        receiver = receiver_options(host=options.receiver_host, port=receiver_port, grpc_port=grpc_port,
                                    token=options.receiver_token, tls=options.receiver_tls_cert is not None)
        stages = scenario.sections.get("stages")
        server = server_facts(plan.target, getattr(stages, "preset", None),
                              any(getattr(c, "llm", None) is not None for c in plan.classes))
        return run_manifest(name=scenario.name, scenario_path=os.path.abspath(scenario.path),
                            scenario_raw=scenario.raw, plan=plan, target_process=target_proc,
                            receiver=receiver, signal_rate_hz=scenario.signal_rate_hz,
                            extra=options.extra_manifest, workers=options.workers, server=server)


def _abort_monitors(scenario: Scenario, options: RunOptions) -> list:
    """The abort monitor for the scenario's ``abort_on`` and ``--abort-on`` rules (none without rules)."""
    from tailscope.conductor.abort import abort_monitor_for

    monitor = abort_monitor_for(scenario.sections.get("abort_on"), options.abort_on)
    return [monitor] if monitor is not None else []


def _loadgen_extras(writer: RunWriter, companions) -> dict:
    """The generator's other sinks (streamed chunks, its GC pauses and CPU), the
    streams it flushes between sends, and the live windows companions ask for
    (``stat_windows_s``, e.g. the abort monitor's)."""
    windows = sorted({int(w) for c in companions for w in getattr(c, "stat_windows_s", ())})
    return {"chunks": writer.chunks, "events": writer.events, "signals": writer.generator_signals,
            "flush": (writer.requests, writer.events, writer.windows, writer.chunks, writer.generator_signals),
            "stat_windows_s": tuple(windows)}


def _record_keeper(writer: RunWriter, run_dir: str, scenario: Scenario, plan):
    """The generator's sink: windows.arrow always, requests.arrow per the retention policy."""
    from tailscope.loadgen.record_keeper import RecordKeeper

    end_ns = time.time_ns() + int(plan.duration_s * 1e9)
    return RecordKeeper(writer.requests, writer.windows, run_dir,
                        policy=scenario.sections.get("retention"), timeout_s=plan.timeout_s, end_ns=end_ns)


def _close_keeper(keeper, ctx: RunContext) -> None:
    """Emit the last window increments; a write error there fails the run, never the cleanup."""
    try:
        keeper.close()
    except OSError as exc:
        from tailscope.rundir.manifest import describe_write_error

        ctx.failures.append(describe_write_error(exc))


def _harness_watchers(writer: RunWriter, keeper, children: ChildGroup, run_dir: str) -> list:
    """Companions every run has: the run guard (write errors, disk budget, dead children)
    and the harness's own memory series."""
    from tailscope.conductor.run_guard import ResourceMonitor, RunGuard

    return [RunGuard(writer, keeper, children.children), ResourceMonitor(run_dir, children.children)]


def _child_failure(companions) -> str | None:
    """A failure the run guard sees only after the load ended (e.g. the receiver died
    while in-flight requests drained); None when every child is fine."""
    from tailscope.conductor.run_guard import RunGuard

    for companion in companions:
        if isinstance(companion, RunGuard):
            return companion.check()
    return None


def _generate_load(plan, sink, scenario: Scenario, options: RunOptions, run_dir: str, on_progress, stop,
                   extras: dict | None = None):
    """The load, in this process or (``options.workers``) on local Locust workers.
    ``extras``: run_load's optional sinks and settings (workers get the sinks only)."""
    extras = extras or {}
    if not options.workers:
        return run_load(plan, sink, on_progress=on_progress, stop=stop, **extras)
    from tailscope.loadgen.distributed_runner import run_distributed_load

    return run_distributed_load(plan, sink, workers=options.workers,
                                scenario_path=os.path.abspath(scenario.path), log_dir=run_dir,
                                on_progress=on_progress, stop=stop,
                                **{key: extras[key] for key in ("chunks", "events", "signals") if key in extras})


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


def check_receiver_access(options: RunOptions) -> None:
    """Refuse a receiver that strangers could write into, or one that cannot start
    (a malformed token, one TLS file without the other, unusable TLS files)."""
    from tailscope.tracing.ingest.receiver_auth import ReceiverAccessError, check_token, require_token, tls_files

    try:
        require_token(options.receiver_host, options.receiver_token)
        if options.receiver_token is not None:
            check_token(options.receiver_token)
        tls_files(options.receiver_tls_cert, options.receiver_tls_key)
    except ReceiverAccessError as exc:
        raise SetupError(str(exc)) from None


def _receiver_tls_args(options: RunOptions) -> list[str]:
    """The receiver's ``--tls-cert``/``--tls-key`` flags (none without TLS)."""
    if options.receiver_tls_cert is None:
        return []
    return ["--tls-cert", os.path.abspath(options.receiver_tls_cert),
            "--tls-key", os.path.abspath(options.receiver_tls_key)]


def _check_target_listening(url: str) -> None:
    """Refuse to start against a target that refuses every connection (see :mod:`.target_probe`)."""
    from tailscope.conductor.target_probe import TargetUnreachable, wait_until_accepting

    try:
        wait_until_accepting(url)
    except TargetUnreachable as exc:
        raise SetupError(str(exc)) from None


def _check_target_allowed(url: str, allow_remote: bool) -> None:
    if not is_loopback_url(url) and not allow_remote:
        raise SetupError(
            f"target {url} is not a loopback address; pass --allow-remote to load a remote "
            "service you are responsible for"
        )


def _find_target_process(url: str, pid: int | None, child: Child | None,
                         options: RunOptions | None = None) -> dict:
    """The target's process (and cgroup), for the samplers: started by us, or
    found by pid, name, container, cgroup or listening port (docs/signals.md)."""
    from tailscope.signals.discovery import TargetNotFound, describe_process
    from tailscope.signals.launch import TargetChoice, find_target

    if child is not None:
        return {**describe_process(child.pid), "found_by": "started by tailscope"}
    choice = TargetChoice(pid=pid, process_name=getattr(options, "target_process_name", None),
                          container=getattr(options, "target_container", None),
                          cgroup=getattr(options, "target_cgroup", None))
    port = urlparse(url).port or (443 if url.startswith("https") else 80)
    try:
        return find_target(choice, port, is_loopback_url(url))
    except TargetNotFound as exc:
        raise SetupError(str(exc)) from exc


def _sampler_arguments(target_proc: dict, scenario: Scenario, target_url: str) -> list[str]:
    """The sampler process's flags: rate, pid, cgroup, Prometheus URLs, process tree."""
    from tailscope.signals.launch import prometheus_urls, sampler_arguments

    return sampler_arguments(target_proc, scenario.signal_rate_hz,
                             prometheus_urls(scenario.signal_prometheus, target_url),
                             scenario.signal_process_tree)


def _wait_for_late_spans(run_dir: str, writer: RunWriter, plan, scenario: Scenario, options: RunOptions,
                         load) -> dict:
    """Wait for the spans an external target still has to export (:mod:`.late_spans`); the
    wait's facts for the manifest (``late_spans``), None when a second Ctrl-C cut it short."""
    from tailscope.conductor.late_spans import wait_after_load

    start_ns = getattr(load, "start_ns", None) or writer.manifest["start_ns"]
    return wait_after_load(run_dir, writer, load_start_ns=start_ns, sample_rate=plan.trace_sample_rate,
                           wait_s=options.late_span_wait_s, tracing=scenario.tracing)


def _load_summary(load) -> dict | None:
    if load is None:
        return None
    return {k: getattr(load, k) for k in (
        "start_ns", "end_ns", "scheduled", "sent", "completed", "errors",
        "offered_rps", "achieved_rps", "stop_reason", "dropped", "generator_gc_pauses",
        "generator_gc_ms") if hasattr(load, k)}


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
