"""``python -m tailscope.lab.experiment``: one lab experiment, in a process of its own.

Runs the experiment's target (the reference target, or the LLM reference
server for the LLM suite) in a cgroup of its own (when this process may
create one: root, writable cgroups) and pinned to the last CPU (when there
are two or more), one scenario against it with the
experiment's fault (if any) injected by the fault agent, then analyses and
reports the run exactly as ``tailscope report`` does. The lab
(:mod:`tailscope.lab.suite`) starts one such process per experiment, so every
experiment gets a fresh Locust, target and receiver. Against the real vLLM
(``target`` ``vllm``) the lab has started the server already and passes it in
(``--target-url``, ``--target-pid``, ``--receiver-grpc-port``: the port its spans
go to, where this run's receiver listens; ``--target-cpus``: the CPU it is pinned to, when the lab
pinned it, and then the lab started this process on the other CPUs, :mod:`tailscope.lab.placement`);
the run then loads it like ``tailscope run --target``, waiting for its late spans.

Last line on stdout: ``RUN_DIR <path>`` (exit 0), or ``ERROR <reason>``
(exit 2) when the experiment could not start.
"""

from __future__ import annotations

# The conductor imports Locust, which monkey-patches with gevent: first.
from tailscope.conductor.session import RunOptions, SetupError, execute_run  # noqa: I001

# isort: split

import argparse
import json
import os
import sys

from tailscope.conductor.children import Child, ChildError, ChildGroup
from tailscope.conductor.fault_companion import FaultInjection
from tailscope.conductor.reference_service import reference_target_env
from tailscope.faults.injector import FaultError, FaultSetupError
from tailscope.faults.own_cgroup import create_own_cgroups, remove_own_cgroups
from tailscope.lab.placement import target_cpus
from tailscope.lab.plan import LLM, Experiment
from tailscope.lab.vllm_target import RunningTarget
from tailscope.scenario_model.scenario import ScenarioError, load_scenario
from tailscope.support.python_child import python_module

EXIT_SETUP = 2


#: The server module and child name of each lab target (lab/plan.py ``TARGETS``).
TARGET_MODULES = {"reference": ("tailscope.targets.reference", "reference target"),
                  LLM: ("tailscope.targets.llm", "LLM reference server")}


def lab_target_launcher(target_args: tuple[str, ...], cgroup_dirs: list[str], cpus: str | None,
                        target: str = "reference"):
    """A conductor TargetLauncher: the lab ``target`` (:data:`TARGET_MODULES`) with ``target_args``,
    inside ``cgroup_dirs``, on ``cpus``."""
    module, name = TARGET_MODULES[target]

    def launch(children: ChildGroup, receiver_port: int, run_dir: str) -> tuple[Child, str]:
        server = python_module(module, "--host", "127.0.0.1", "--port", "0", *target_args)
        placement = [arg for directory in cgroup_dirs for arg in ("--cgroup", directory)]
        placement += ["--cpus", cpus] if cpus else []
        argv = python_module("tailscope.faults.own_cgroup", *placement, "--", *server) if placement else server
        child = children.start(Child(name, argv, env=reference_target_env(receiver_port),
                                     log_path=os.path.join(run_dir, "target.log")), wait_listening=True)
        return child, f"http://127.0.0.1:{child.port}"

    return launch


def _own_cpus() -> str:
    """The CPUs this process (the harness) may run on, as a list (``"0"``)."""
    return ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))


def run_experiment(experiment: Experiment, scenario_path: str, out_dir: str,
                   running: RunningTarget | None = None) -> str:
    """Run and report one experiment; return its run directory. Raises SetupError, ChildError, FaultError.

    With ``running`` the experiment loads that server instead of starting its target."""
    from rich.console import Console

    from tailscope.conductor.reporting import ReportWriteError, analyse_and_write
    from tailscope.conductor.terminal import print_summary

    scenario = load_scenario(scenario_path, require_target=False)
    cgroups, placement_note = [], "the lab started the server before the experiment" if running else None
    if running is None:
        try:
            cgroups = create_own_cgroups(f"tailscope-lab-{os.getpid()}")
        except FaultSetupError as exc:
            placement_note = str(exc)
    try:
        options = RunOptions(
            out_dir=out_dir, receiver_port=0,
            companions=[FaultInjection(experiment.faults)] if experiment.faults else [],
            extra_manifest={"lab": {**experiment.as_dict(),
                                    "target_cgroups": [c.path for c in cgroups],
                                    "target_cgroup_note": placement_note,
                                    "target_cpus": running.cpus if running else target_cpus(),
                                    "harness_cpus": _own_cpus() if running and running.cpus else None}},
        )
        if running is None:
            launcher = lab_target_launcher(experiment.target_args, [c.path for c in cgroups], target_cpus(),
                                           experiment.target)
        else:
            launcher = None
            options.target, options.target_pid, options.receiver_grpc_port = (running.url, running.pid,
                                                                              running.grpc_port)
        outcome = execute_run(scenario, options, launch_target=launcher)
    finally:
        remove_own_cgroups(cgroups)
    console = Console(width=120)
    try:
        report = analyse_and_write(outcome.run_dir)
    except ReportWriteError as exc:  # the lab scores what was written; the log says what was not
        print_summary(console, exc.analysis, {})
        print(f"tailscope: error: {exc}", file=sys.stderr)
    else:
        print_summary(console, report.analysis, report.paths)
    return outcome.run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailscope.lab.experiment")
    parser.add_argument("--experiment", required=True, help="JSON of a tailscope.lab.plan.Experiment")
    parser.add_argument("--scenario", required=True, help="the experiment's scenario file")
    parser.add_argument("--out", required=True, help="parent folder of the run directory")
    parser.add_argument("--target-url", default=None, help="a server the lab started (then also --target-pid "
                                                           "and --receiver-grpc-port)")
    parser.add_argument("--target-pid", type=int, default=None, help="that server's PID")
    parser.add_argument("--receiver-grpc-port", type=int, default=None, help="the port that server sends its "
                                                                             "spans to over OTLP/gRPC")
    parser.add_argument("--target-cpus", default=None, help="the CPUs that server is pinned to (recorded)")
    args = parser.parse_args(argv)
    experiment = Experiment.from_dict(json.loads(args.experiment))
    running = None
    if args.target_url:
        if args.target_pid is None or args.receiver_grpc_port is None:
            parser.error("--target-url needs --target-pid and --receiver-grpc-port")
        running = RunningTarget(args.target_url, args.target_pid, args.receiver_grpc_port, args.target_cpus)
    try:
        run_dir = run_experiment(experiment, args.scenario, args.out, running)
    except (SetupError, ChildError, FaultError, ScenarioError) as exc:
        print(f"ERROR {exc}", flush=True)
        return EXIT_SETUP
    print(f"RUN_DIR {run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
