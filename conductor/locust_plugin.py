"""tailscope's open-loop user in a plain locustfile, run by the ``locust`` command.

::

    # locustfile.py
    from tailscope.conductor.locust_plugin import OpenLoopUser

    class Inference(OpenLoopUser):
        scenario = "scenario.yaml"        # arrival process, request mix, SLOs
        host = "http://127.0.0.1:8000"

    $ locust -f locustfile.py --headless -t 30s --tailscope-out runs
    $ locust -f locustfile.py --processes 4 --headless -t 30s      # 4 workers, one run directory
    $ tailscope report runs/<run>                                   # or read the report written at the end

Importing this module registers tailscope's command-line options
(``--tailscope-scenario``, ``--tailscope-out``, ``--tailscope-rate``,
``--tailscope-duration``, ``--tailscope-receiver-port``,
``--tailscope-no-report``; they also appear in the web UI's custom
parameters) and an ``init`` listener with Locust's global ``locust.events``.
When the locustfile defines a subclass of :class:`OpenLoopUser`, every test
(headless, or each Start in the web UI) becomes a run directory with
``manifest.json``, ``requests.arrow``, ``chunks.arrow`` (streamed
responses), the generator processes' self-check (``signals.generator.arrow``,
``generator_gc`` events in ``events.arrow``; labelled per worker when
distributed) and the receiver's spans when a receiver port is given, analysed
at the end into ``report.html``.

The offered load is the scenario's arrival process, not Locust's user count:
each process walks the schedule (workers each take an interleaved share, see
:mod:`.distributed`), and ``OpenLoopUser`` instances send nothing. The
schedule's length is ``--run-time`` when given, else ``--tailscope-duration``,
else the scenario's ``duration``; when the schedule is over the test stops
(headless: Locust quits).

Configuration, highest precedence first: command-line options, class
attributes (``scenario``, ``rate``, ``duration_s``, ``out_dir``), the scenario
file. Without a scenario file, the class gives the plan inline: ``arrival``
(:class:`~.spec.ArrivalSpec`), ``request_classes`` (tuple of
:class:`~.spec.RequestClass`), and optionally ``duration_s``, ``seed``,
``timeout_s``, ``max_in_flight``, ``max_requests``, ``slo`` (list of SLO lines).
"""

from __future__ import annotations

from tailscope.loadgen.locust_roles import attach_role  # noqa: I001  (imports Locust: gevent first)

# isort: split

import copy
import dataclasses
import logging
import os
import sys

import gevent
import gevent.monkey
from locust import events
from locust.runners import WorkerRunner

from tailscope.conductor.run_setup import (
    bound_grpc_port,
    open_run_dir,
    receiver_child,
    receiver_grpc_port,
    receiver_options,
    run_manifest,
)
from tailscope.loadgen.process_load import ScheduleHolder
from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, RequestClass

logger = logging.getLogger("tailscope.loadgen")

#: Default parent folder of run directories.
DEFAULT_OUT_DIR = "runs"
#: The receiver started with ``--tailscope-receiver-port`` binds loopback only.
RECEIVER_HOST = "127.0.0.1"
#: Schedule length a forked worker assumes until its share brings the master's, s.
WORKER_PLACEHOLDER_DURATION_S = 1.0


class OpenLoopUser(ScheduleHolder):
    """Subclass this in a locustfile to run a tailscope open-loop load under Locust.

    Class attributes (all optional; command-line options win):

    - ``scenario``: path of a scenario YAML (relative to the working directory,
      else to the locustfile).
    - ``rate``: requests/s, overriding the scenario's arrival rate.
    - ``duration_s``: schedule length, s, when ``--run-time`` is not given.
    - ``out_dir``: parent folder of run directories (default ``runs``).
    - inline plan instead of a scenario: ``arrival``, ``request_classes``,
      ``seed``, ``timeout_s``, ``max_in_flight``, ``max_requests``, ``slo``, ``name``.
    """

    abstract = True
    scenario: str | None = None
    rate: float | None = None
    duration_s: float | None = None
    out_dir: str | None = None
    name: str | None = None
    arrival: ArrivalSpec | None = None
    request_classes: tuple[RequestClass, ...] = ()
    seed: int = 1
    timeout_s: float = 10.0
    max_in_flight: int = 1000
    max_requests: int = 1_000_000
    slo: tuple[str, ...] = ()


@dataclasses.dataclass
class _Config:
    """The plan and manifest facts of one locustfile run."""

    plan: LoadPlan
    name: str
    scenario_raw: dict
    scenario_path: str | None
    #: The scenario's parsed ``tracing`` section (late-span wait, export interval); {} inline.
    tracing: dict = dataclasses.field(default_factory=dict)


class NativeRun:
    """A run directory opened for one Locust test (the roles' RunHandle).

    Opened, described and reported by the conductor's own code (:mod:`.run_setup`,
    :mod:`.reporting`), so it reads like a ``tailscope run`` directory; what differs is
    that Locust drives the load and no samplers run (no target process is known).

    With a receiver, closing waits for the target's late spans exactly as ``tailscope run``
    does (:func:`~.late_spans.wait_after_load`); with the report, the verdict sets
    ``environment.process_exit_code`` (README "Exit codes": PASSED 0, FAILED 1, INCONCLUSIVE or
    INCOMPLETE 3; a report that cannot be written 2, an analysis that raises 4)."""

    def __init__(self, config: _Config, out_dir: str, role: dict, receiver_port: int | None,
                 report: bool, environment=None):
        from tailscope.rundir import RunWriter

        self.path = open_run_dir(out_dir, config.name)
        self.report = report
        self.environment = environment
        self.plan = config.plan
        self.tracing = config.tracing
        grpc_port = receiver_grpc_port(receiver_port) if receiver_port is not None else None
        self.receiver = (receiver_child(self.path, RECEIVER_HOST, receiver_port, grpc_port).start(wait_listening=True)
                         if receiver_port is not None else None)
        receiver = receiver_options(host=RECEIVER_HOST, port=self.receiver.port if self.receiver else None,
                                    grpc_port=bound_grpc_port(self.path) if self.receiver else None)
        self.writer = RunWriter(self.path, run_manifest(
            name=config.name, scenario_path=config.scenario_path, scenario_raw=config.scenario_raw,
            plan=config.plan, receiver=receiver,
            target_process={"pid": None, "found_by": None,
                            "reason": "run under the locust command: target-process signals are off"},
            extra={"locust": {**role, "command": " ".join(sys.argv)}}))
        self.sink = self.writer.requests
        self.chunks = self.writer.chunks
        self.events = self.writer.events
        self.signals = self.writer.generator_signals
        logger.info("tailscope: run directory %s", self.path)

    def close(self, load: dict | None, problems: list[str]) -> None:
        late_spans = None
        if self.receiver is not None:
            from tailscope.conductor.late_spans import wait_after_load

            start_ns = (load or {}).get("start_ns") or self.writer.manifest["start_ns"]
            # the OS's sleep: a gevent sleep would let Locust's main greenlet shut the process down
            late_spans = wait_after_load(self.path, self.writer, load_start_ns=start_ns,
                                         sample_rate=self.plan.trace_sample_rate, wait_s=None,
                                         tracing=self.tracing, sleep=gevent.monkey.get_original("time", "sleep"))
            self.receiver.stop()
        failed = any(p.startswith("load failed") for p in problems)
        self.writer.close(status="failed" if failed else "complete", load=load, merge_problems=problems,
                          **({"late_spans": late_spans} if late_spans is not None else {}))
        for problem in problems:
            logger.error("tailscope: %s", problem)
        if self.report:
            self._write_report()
        sys.stderr.write(f"tailscope: run directory {self.path}\n")

    def _write_report(self) -> None:
        from tailscope.conductor.reporting import ReportWriteError, analyse_and_write
        from tailscope.reports.upgrade import verdict_of
        from tailscope.support.exit_codes import EXIT_INTERNAL, EXIT_USAGE

        try:
            report = analyse_and_write(self.path)
        except ReportWriteError as exc:
            logger.error("tailscope: %s", exc)
            self._exit_with(EXIT_USAGE)
            return
        except Exception:  # noqa: BLE001  (a bug in tailscope: said so, the run directory is kept)
            logger.exception("tailscope: internal error (this is a bug in tailscope, please report it); "
                             "the run directory %s is kept: retry with tailscope report", self.path)
            self._exit_with(EXIT_INTERNAL)
            return
        verdict = verdict_of(report.analysis)
        sys.stderr.write(f"tailscope: {verdict.line()}\n")
        sys.stderr.write(f"tailscope: report {report.paths['html']}\n")
        self._exit_with(verdict.exit_code)

    def _exit_with(self, code: int) -> None:
        """Make ``code`` the ``locust`` process's exit code (Locust's ``process_exit_code``); a
        worse code already set by an earlier test of this process is kept."""
        from tailscope.support.exit_codes import EXIT_OK, worse_exit_code

        if self.environment is None:
            return
        self.environment.process_exit_code = worse_exit_code(code, self.environment.process_exit_code or EXIT_OK)


def tailscope_run_dir(environment) -> str | None:
    """The run directory of the current (or last) test in this process; None before any."""
    return getattr(environment, "tailscope_run_dir", None)


@events.init_command_line_parser.add_listener
def _add_arguments(parser, **_) -> None:
    group = parser.add_argument_group("tailscope", "tailscope's open-loop user (tailscope.conductor.locust_plugin)")
    group.add_argument("--tailscope-scenario", metavar="YAML", default=None,
                       help="scenario file: arrival process, request mix, SLOs (overrides the class's `scenario`)")
    group.add_argument("--tailscope-out", metavar="DIR", default=None,
                       help=f"parent folder of run directories (default {DEFAULT_OUT_DIR}/)")
    group.add_argument("--tailscope-rate", metavar="RPS", type=float, default=None,
                       help="offered rate, requests/s (overrides the scenario's arrival rate)")
    group.add_argument("--tailscope-duration", metavar="S", type=float, default=None,
                       help="schedule length in seconds when --run-time is not given")
    group.add_argument("--tailscope-receiver-port", metavar="PORT", type=int, default=None,
                       help="start tailscope's OTLP receiver on 127.0.0.1:PORT for each run (0: any free port)")
    group.add_argument("--tailscope-no-report", action="store_true", default=False,
                       help="do not analyse the run and write report.html at the end")


@events.init.add_listener
def _on_init(environment, **_) -> None:
    user_class = _tailscope_user_class(environment.user_classes)
    if user_class is None or environment.runner is None:
        return
    # A forked worker does not know --run-time: its schedule length comes with its share.
    fallback_duration_s = WORKER_PLACEHOLDER_DURATION_S if isinstance(environment.runner, WorkerRunner) else None
    try:
        _build_config(user_class, environment, environment.parsed_options, fallback_duration_s)
    except (ValueError, OSError) as exc:  # ScenarioError is a ValueError
        logger.error("tailscope: %s", exc)
        environment.process_exit_code = 2
        environment.runner.quit()
        return

    def make_plan(env) -> LoadPlan:
        return _build_config(user_class, env, env.parsed_options, fallback_duration_s).plan

    def open_run(plan: LoadPlan, role: dict) -> NativeRun:
        opts = environment.parsed_options
        config = _build_config(user_class, environment, opts)
        run = NativeRun(config, _option(opts, "tailscope_out") or user_class.out_dir or DEFAULT_OUT_DIR,
                        role, _option(opts, "tailscope_receiver_port"),
                        report=not _option(opts, "tailscope_no_report"), environment=environment)
        environment.tailscope_run_dir = run.path
        return run

    attach_role(environment, make_plan, open_run, on_finished=_stop_test)
    # Loading the scenario above blocked the event loop; refresh its cached
    # clock, or Locust's --run-time timer (armed next) would fire early.
    gevent.get_hub().loop.update_now()


def _stop_test(environment) -> None:
    """The schedule is over: headless runs quit, web-UI runs stop the test."""
    options = environment.parsed_options
    if options is not None and getattr(options, "headless", False):
        environment.runner.quit()
    else:
        environment.runner.stop()


def _tailscope_user_class(user_classes) -> type[OpenLoopUser] | None:
    ours = [cls for cls in user_classes if issubclass(cls, OpenLoopUser)]
    if len(ours) > 1:
        raise ValueError("a locustfile may define one OpenLoopUser subclass (one schedule per run); found "
                         + ", ".join(cls.__name__ for cls in ours))
    return ours[0] if ours else None


def _option(options, name: str):
    return getattr(options, name, None) if options is not None else None


def _build_config(user_class: type[OpenLoopUser], environment, options,
                  fallback_duration_s: float | None = None) -> _Config:
    """The plan for one test from the command line, the class and the scenario file."""
    host = (environment.host or user_class.host or "").rstrip("/")
    if not host:
        raise ValueError("no target: give --host or the user class's `host`")
    run_time = _option(options, "run_time")
    duration_s = (float(run_time) if run_time else None) or _option(options, "tailscope_duration") \
        or user_class.duration_s or fallback_duration_s
    rate = _option(options, "tailscope_rate") or user_class.rate
    path = _option(options, "tailscope_scenario") or user_class.scenario
    config = (_scenario_config(_resolve(path, user_class), host, duration_s) if path
              else _inline_config(user_class, host, duration_s))
    if config.plan.arrival.process == "closed":
        raise ValueError("OpenLoopUser needs an open-loop arrival process (constant, poisson, gamma, ...); "
                         "a closed loop is Locust's own model")
    if rate:
        config.plan = dataclasses.replace(config.plan, arrival=dataclasses.replace(config.plan.arrival, rate=rate))
        config.scenario_raw.setdefault("arrival", {})["rate"] = rate
    return config


def _resolve(path: str, user_class) -> str:
    """A scenario path as given if it exists, else relative to the locustfile."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    module = sys.modules.get(user_class.__module__)
    here = os.path.dirname(os.path.abspath(getattr(module, "__file__", "") or "."))
    return os.path.join(here, path)


def _scenario_config(path: str, host: str, duration_s: float | None) -> _Config:
    from tailscope.scenario_model.scenario import load_scenario

    scenario = load_scenario(path, target_override=host)
    raw = copy.deepcopy(scenario.raw)
    if duration_s:
        raw["duration"] = f"{duration_s:g}s"
    return _Config(plan=scenario.load_plan(host, duration_s), name=scenario.name,
                   scenario_raw=raw, scenario_path=os.path.abspath(path), tracing=dict(scenario.tracing))


def _inline_config(user_class: type[OpenLoopUser], host: str, duration_s: float | None) -> _Config:
    if user_class.arrival is None or not user_class.request_classes:
        raise ValueError(f"{user_class.__name__}: give `scenario` (a YAML file) or both `arrival` "
                         "and `request_classes`")
    if not duration_s:
        raise ValueError(f"{user_class.__name__}: give --run-time, --tailscope-duration or `duration_s`")
    plan = LoadPlan(target=host, duration_s=duration_s, arrival=user_class.arrival,
                    classes=tuple(user_class.request_classes), max_requests=user_class.max_requests,
                    seed=user_class.seed, timeout_s=user_class.timeout_s,
                    max_in_flight=user_class.max_in_flight)
    name = user_class.name or user_class.__name__
    raw = {"name": name, "duration": f"{duration_s:g}s", "seed": plan.seed,
           "arrival": dataclasses.asdict(plan.arrival),
           "classes": [dataclasses.asdict(c) for c in plan.classes], "slo": list(user_class.slo)}
    return _Config(plan=plan, name=name, scenario_raw=raw, scenario_path=None)
