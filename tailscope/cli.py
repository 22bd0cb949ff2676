"""The ``tailscope`` command: a thin layer over the library.

Exit codes (the only place that decides them):
  0  the run passed every SLO (or the command succeeded)
  1  an SLO failed (or a regression was found)
  2  usage or setup error: bad scenario, unreachable target, unreadable run
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK = 0
EXIT_SLO_FAILED = 1
EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    return args.handler(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tailscope",
        description="Load-test a model-inference service and explain its tail latency.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a scenario against a target, then analyse and report",
                         description="Run SCENARIO (YAML) against its target, record every request, "
                                     "span and signal in a run directory, then write analysis.json "
                                     "and report.html there.")
    run.add_argument("scenario", help="scenario file (YAML); see docs/scenario-format.md")
    _add_run_options(run)
    run.set_defaults(handler=_cmd_run)

    report = sub.add_parser("report", help="(re)analyse a run directory and write its reports",
                            description="Analyse RUN_DIR (also one left by a killed harness) and "
                                        "write analysis.json, report.html, junit.xml and summary.md "
                                        "into it.")
    report.add_argument("run_dir")
    report.add_argument("--window", type=float, default=1.0, metavar="S",
                        help="analysis window length in seconds (default 1)")
    report.set_defaults(handler=_cmd_report)

    demo = sub.add_parser("demo", help="start the reference target, load it for about a minute, report",
                          description="Start the reference inference service on a free loopback port, "
                                      "run scenarios/demo.yaml against it and write a report.")
    demo.add_argument("--out", default="runs", help="parent folder for run directories (default runs/)")
    demo.add_argument("--duration", type=_duration, default=None, metavar="D",
                      help="override the demo's duration (e.g. 20s)")
    demo.set_defaults(handler=_cmd_demo)

    target = sub.add_parser("target", help="start the reference inference service alone",
                            description="The reference inference service: HTTP in, preprocessing, a "
                                        "dynamic batcher, a numpy model, postprocessing; every stage "
                                        "traced with OpenTelemetry (OTEL_EXPORTER_OTLP_ENDPOINT).")
    from tailscope.target.cli import add_arguments as add_target_arguments

    add_target_arguments(target)
    target.set_defaults(handler=_cmd_target)
    return parser


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", metavar="URL", help="base URL of the service (overrides the scenario)")
    p.add_argument("--out", default="runs", metavar="DIR",
                   help="parent folder for the run directory (default runs/)")
    p.add_argument("--duration", type=_duration, metavar="D", help="override duration (e.g. 30s, 2m)")
    p.add_argument("--receiver-port", type=int, default=4318, metavar="P",
                   help="OTLP/HTTP receiver port on 127.0.0.1 (default 4318; 0 picks a free port)")
    p.add_argument("--target-pid", type=int, metavar="PID",
                   help="target process to sample (default: found from the target URL's port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback target (a service you are responsible for)")


def _duration(text: str) -> float:
    from tailscope.scenario import parse_duration_s

    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return seconds


def _error(message: str) -> int:
    print(f"tailscope: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _cmd_run(args) -> int:
    from tailscope.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, target_override=args.target)
    except ScenarioError as exc:
        return _error(str(exc))
    return _run_and_report(scenario, args, launch_target=None)


def _cmd_demo(args) -> int:
    from importlib import resources

    from tailscope.scenario import load_scenario

    with resources.as_file(resources.files("tailscope.scenarios") / "demo.yaml") as path:
        scenario = load_scenario(path, require_target=False)
    args.target = None
    args.receiver_port = 0
    args.target_pid = None
    args.allow_remote = False
    from tailscope.demo import launch_reference_target

    return _run_and_report(scenario, args, launch_target=launch_reference_target)


def _run_and_report(scenario, args, launch_target) -> int:
    # The conductor imports Locust (gevent monkey-patching): import it first.
    from tailscope.conductor import RunOptions, SetupError, execute_run
    from tailscope.children import ChildError

    from rich.console import Console

    from tailscope.terminal import ProgressDisplay

    console = Console(stderr=False)
    options = RunOptions(
        out_dir=args.out,
        target=args.target,
        duration_s=args.duration,
        receiver_port=args.receiver_port,
        target_pid=args.target_pid,
        allow_remote=args.allow_remote,
    )
    try:
        with ProgressDisplay(console, f"tailscope run: {scenario.name}") as display:
            outcome = execute_run(scenario, options, on_progress=display.update,
                                  launch_target=launch_target)
    except (SetupError, ChildError) as exc:
        return _error(str(exc))
    if outcome.status == "interrupted":
        console.print("[yellow]interrupted: load stopped early; reporting what was collected[/]")
    return _analyse_and_report(outcome.run_dir, console)


def _cmd_report(args) -> int:
    from rich.console import Console

    from tailscope.rundir import RunDirError

    try:
        return _analyse_and_report(args.run_dir, Console(), window_s=args.window)
    except RunDirError as exc:
        return _error(str(exc))


def _analyse_and_report(run_dir: str, console, window_s: float = 1.0) -> int:
    from tailscope.analyzers.analysis import analyze_run
    from tailscope.reports.writer import write_outputs
    from tailscope.terminal import print_summary

    analysis = analyze_run(run_dir, window_s=window_s)
    paths = write_outputs(run_dir, analysis)
    print_summary(console, analysis, paths)
    return EXIT_OK if analysis.get("verdict", {}).get("passed", True) else EXIT_SLO_FAILED


def _cmd_target(args) -> int:
    from tailscope.target.cli import run_from_args

    run_from_args(args)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
