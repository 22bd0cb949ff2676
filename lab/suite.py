"""``tailscope lab``: run a suite of (scenario × fault) experiments and score the diagnosis.

Each experiment (:mod:`tailscope.lab.plan`) runs in its own process
(:mod:`tailscope.lab.experiment`: target in its own cgroup, load, fault
agent, analysis and report). The lab then reads each run's
``analysis.json`` — the diagnosis as ``tailscope report`` made it, with
whatever cause detectors are registered by default — and scores it against
the fault's ground-truth window (:mod:`tailscope.lab.scoring`); it also
analyses the run with the BARO-style baseline ranker and scores that beside. Results are
written after every experiment (``lab.json``, atomically), so an
interrupted lab keeps what it measured; at the end ``lab.html`` and the
score table follow (:mod:`tailscope.lab.outputs`).

Experiments against the real vLLM (``target`` ``vllm``) share one server: the
lab starts it (:class:`~.vllm_target.VllmServer`, from ``vllm=`` the install
:func:`~.vllm_target.find_vllm` found) before the first of them, keeps it for
the next ones with the same server flags (``target_args``; their faults are
traffic), and restarts it only when the flags change or it stopped answering
``/health``; it is stopped at the end. With two or more CPUs it runs pinned to
the last one and those experiments' processes to the others (:mod:`~.placement`).
``lab.json`` lists each server start under ``servers`` (flags, CPUs, PID, seconds
to ready, log).

Layout of ``--out``::

    lab.json  lab.html  scores.md
    scenarios/<experiment>.yaml   runs/<run dir>/...   logs/<experiment>.log   logs/vllm-<n>.log
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from tailscope.analyzers.analysis import analyze_run
from tailscope.faults.injector import FaultCleanupError
from tailscope.faults.own_cgroup import remove_leftover_cgroups
from tailscope.faults.processes import stop_process
from tailscope.lab.outputs import lab_page_data, markdown_table
from tailscope.lab.placement import harness_cpus, pin_before_exec, target_cpus
from tailscope.lab.plan import CONTROL, VLLM, Experiment
from tailscope.lab.scoring import aggregate, score_control_run, score_fault_run
from tailscope.lab.vllm_target import RunningTarget, VllmInstall, VllmServer
from tailscope.reports.lab_page import render_lab_page
from tailscope.reports.upgrade import run_of
from tailscope.rundir import read_json, write_json_atomic
from tailscope.support.python_child import python_module

LAB_FORMAT_VERSION = "1.0"
#: Time an experiment may take beyond its load duration (start-up, swap files, analysis), s.
EXPERIMENT_OVERHEAD_S = 180.0
#: After a timeout or Ctrl-C: how long an experiment gets to clean up before SIGKILL, s.
EXPERIMENT_STOP_GRACE_S = 90.0


@dataclass
class LabPaths:
    root: str

    @property
    def scenarios(self) -> str:
        return os.path.join(self.root, "scenarios")

    @property
    def runs(self) -> str:
        return os.path.join(self.root, "runs")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "logs")

    def create(self) -> None:
        for path in (self.root, self.scenarios, self.runs, self.logs):
            os.makedirs(path, exist_ok=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SharedVllm:
    """The vLLM server the lab's vLLM experiments share (see the module docstring)."""

    install: VllmInstall
    logs_dir: str
    server: VllmServer | None = None
    #: One entry per start: ``target_args``, ``pid``, ``ready_s``, ``log``, ``error``.
    starts: list[dict] = field(default_factory=list)

    def serving(self, target_args: tuple[str, ...]) -> RunningTarget:
        """A ready server with ``target_args``: the running one, or a fresh one (the old one stopped).
        Raises RuntimeError (with the server's log tail) when it cannot start."""
        if self.server is not None and (self.server.extra_args != target_args or not self.server.healthy()):
            self.stop()
        if self.server is None:
            log = os.path.join(self.logs_dir, f"vllm-{len(self.starts) + 1}.log")
            entry = {"target_args": list(target_args), "cpus": target_cpus(), "pid": None, "ready_s": None, "log": log, "error": None}
            self.starts.append(entry)
            server = VllmServer(self.install.python, self.install.model_dir, _free_port(), _free_port(), log,
                                extra_args=target_args, cpus=target_cpus())
            try:
                server.start()
            except RuntimeError as exc:
                entry["error"] = str(exc).splitlines()[0]
                raise
            self.server = server
            entry.update(pid=server.pid, ready_s=round(server.ready_s or 0.0, 1))
        return self.server.running()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def run_lab(suite: list[Experiment], out_dir: str, suite_name: str, on_result=None,
            vllm: VllmInstall | None = None) -> dict:
    """Run every experiment, score, write lab.json / lab.html / scores.md; return the lab dict.

    ``on_result(result)`` is called after each experiment. Ctrl-C stops the
    running experiment (it cleans up) and ends the lab with status
    ``interrupted``; what was measured is scored and written. ``vllm``: the
    install the ``vllm`` experiments' shared server runs (required when there are any;
    ValueError otherwise).
    """
    if vllm is None and any(e.target == VLLM for e in suite):
        raise ValueError("the suite has vLLM experiments but no vLLM install was given")
    paths = LabPaths(out_dir)
    paths.create()
    shared = SharedVllm(vllm, paths.logs) if vllm is not None else None
    lab = {"format_version": LAB_FORMAT_VERSION, "suite": suite_name, "created_ns": time.time_ns(),
           "status": "running", "experiments": [], "scores": aggregate([])}
    if shared is not None:
        lab["servers"] = shared.starts
    try:
        for experiment in suite:
            result = run_one(experiment, paths, shared)
            lab["experiments"].append(result)
            lab["scores"] = aggregate(lab["experiments"])
            write_json_atomic(os.path.join(out_dir, "lab.json"), lab)
            if on_result is not None:
                on_result(result)
        lab["status"] = "complete"
    except KeyboardInterrupt:
        lab["status"] = "interrupted"
    finally:
        if shared is not None:
            shared.stop()
        lab["scores"] = aggregate(lab["experiments"])
        lab["finished_ns"] = time.time_ns()
        write_outputs(lab, out_dir)
    return lab


def write_outputs(lab: dict, out_dir: str) -> None:
    write_json_atomic(os.path.join(out_dir, "lab.json"), lab)
    with open(os.path.join(out_dir, "lab.html"), "w", encoding="utf-8") as fh:
        fh.write(render_lab_page(lab_page_data(lab, out_dir)))
    with open(os.path.join(out_dir, "scores.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown_table(lab["scores"]))


def run_one(experiment: Experiment, paths: LabPaths, shared: SharedVllm | None = None) -> dict:
    """Run one experiment in its own process and score its analysis (a ``vllm`` one against
    ``shared``'s server; a server that cannot start makes the experiment's error)."""
    scenario_path = os.path.join(paths.scenarios, f"{experiment.name}.yaml")
    with open(scenario_path, "w", encoding="utf-8") as fh:
        fh.write(experiment.scenario_yaml())
    log_path = os.path.join(paths.logs, f"{experiment.name}.log")
    result = {"name": experiment.name, "kind": experiment.kind, "target": experiment.target,
              "scenario": experiment.scenario,
              "seed": experiment.seed, "rate": experiment.rate, "duration_s": experiment.duration_s,
              "fault": experiment.fault.as_dict() if experiment.fault else None,
              "distractions": [spec.as_dict() for spec in experiment.distractions],
              "status": "error", "error": None, "run_dir": None, "log": log_path, "score": None}
    started = time.monotonic()
    running = None
    if experiment.target == VLLM:
        try:
            running = shared.serving(experiment.target_args)
        except RuntimeError as exc:
            result.update(wall_s=round(time.monotonic() - started, 1), error=f"vLLM did not start: {exc}")
            return result
    outcome, interrupted = _run_process(experiment, scenario_path, paths.runs, log_path, running)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result.update(outcome)
    if result["run_dir"]:
        _score(result)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _run_process(experiment: Experiment, scenario_path: str, runs_dir: str, log_path: str,
                 running: RunningTarget | None = None) -> tuple[dict, bool]:
    argv = python_module("tailscope.lab.experiment", "--experiment", json.dumps(experiment.as_dict()),
                         "--scenario", scenario_path, "--out", runs_dir)
    if running is not None:
        argv += ["--target-url", running.url, "--target-pid", str(running.pid),
                 "--receiver-grpc-port", str(running.grpc_port)]
        if running.cpus:
            argv += ["--target-cpus", running.cpus]
    # beside a pinned server, the harness keeps to the other CPUs (lab/placement.py)
    harness = harness_cpus() if running is not None and running.cpus else None
    interrupted = False
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=pin_before_exec(harness))
        try:
            process.wait(timeout=experiment.duration_s + EXPERIMENT_OVERHEAD_S)
        except subprocess.TimeoutExpired:
            _stop(process)
        except KeyboardInterrupt:
            interrupted = True
            _stop(process)
    outcome = _outcome_from_log(log_path, process.returncode)
    outcome["process_pid"] = process.pid
    try:
        remove_leftover_cgroups(f"tailscope-lab-{process.pid}")
    except FaultCleanupError as exc:
        outcome["error"] = f"{outcome.get('error') or ''} leftover cgroup: {exc}".strip()
    return outcome, interrupted


def _stop(process: subprocess.Popen) -> None:
    """SIGINT (the experiment stops its load and cleans up), then SIGKILL after the grace period."""
    stop_process(process, grace_s=EXPERIMENT_STOP_GRACE_S, first_signal=signal.SIGINT)


def _outcome_from_log(log_path: str, returncode: int | None) -> dict:
    run_dir, error = None, None
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("RUN_DIR "):
                run_dir = line[len("RUN_DIR "):].strip()
            elif line.startswith("ERROR "):
                error = line[len("ERROR "):].strip()
    if run_dir:
        return {"status": "ok", "run_dir": run_dir, "error": None}
    return {"status": "error", "run_dir": None,
            "error": error or f"the experiment exited with status {returncode}; see {log_path}"}


def _score(result: dict) -> None:
    analysis = read_json(os.path.join(result["run_dir"], "analysis.json"))
    if analysis is None:
        result.update(status="error", error="the run has no analysis.json")
        return
    run = run_of(analysis)
    result["load_start_ns"] = run.load_start_ns
    result["run_status"] = run.status
    baro = analyze_run(result["run_dir"], method="baro")
    if result["kind"] == CONTROL:
        result["score"] = score_control_run(analysis)
        result["baro_score"] = score_control_run(baro)
    else:
        result["score"] = score_fault_run(analysis)
        result["baro_score"] = score_fault_run(baro)
        if not result["score"]["ground_truth"]:
            result.update(status="error", error="the run has no fault event (the fault never started)")
        elif result["score"].get("fault_error"):
            result.update(status="error", error=f"the fault did not run as planned: {result['score']['fault_error']}")
        elif len(result["score"].get("distractions") or []) < len(result.get("distractions") or []):
            result.update(status="error", error="a distraction never started (no fault event of it)")
        elif result["score"].get("distraction_errors"):
            result.update(status="error", error="the distraction did not run as planned: "
                                                f"{'; '.join(result['score']['distraction_errors'])}")
