"""What the subcommands share: exit codes, error printing, run options, run → report."""

from __future__ import annotations

import argparse
import sys

EXIT_OK = 0
EXIT_SLO_FAILED = 1  # also: a regression against the baseline
EXIT_USAGE = 2  # usage or setup error: bad scenario, unreachable target, unreadable run


def error(message: str) -> int:
    """Print ``tailscope: error: message`` to stderr; return the usage exit code."""
    print(f"tailscope: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def duration_arg(text: str) -> float:
    """argparse type for durations such as 30s, 2m, 1.5h."""
    from tailscope.scenario import parse_duration_s

    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return seconds


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options every load-running command (run, sweep) accepts."""
    p.add_argument("--target", metavar="URL", help="base URL of the service (overrides the scenario)")
    p.add_argument("--out", default="runs", metavar="DIR",
                   help="parent folder for the run directory (default runs/)")
    p.add_argument("--duration", type=duration_arg, metavar="D", help="override duration (e.g. 30s, 2m)")
    p.add_argument("--receiver-port", type=int, default=4318, metavar="P",
                   help="OTLP/HTTP receiver port on 127.0.0.1 (default 4318; 0 picks a free port)")
    p.add_argument("--target-pid", type=int, metavar="PID",
                   help="target process to sample (default: found from the target URL's port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback target (a service you are responsible for)")


def run_options_from(args):
    """RunOptions from parsed arguments (see add_run_options)."""
    from tailscope.conductor import RunOptions

    return RunOptions(
        out_dir=args.out,
        target=getattr(args, "target", None),
        duration_s=getattr(args, "duration", None),
        receiver_port=getattr(args, "receiver_port", 4318),
        target_pid=getattr(args, "target_pid", None),
        allow_remote=getattr(args, "allow_remote", False),
    )


def run_and_report(scenario, options, launch_target=None, console=None) -> tuple[int, str | None]:
    """Execute one run with live progress, then analyse and report it.

    Returns (exit code, run directory or None when the run could not start).
    """
    # The conductor imports Locust (gevent monkey-patching): import it first.
    from tailscope.conductor import SetupError, execute_run
    from tailscope.children import ChildError

    from rich.console import Console

    from tailscope.terminal import ProgressDisplay

    console = console or Console()
    try:
        with ProgressDisplay(console, f"tailscope run: {scenario.name}") as display:
            outcome = execute_run(scenario, options, on_progress=display.update,
                                  launch_target=launch_target)
    except (SetupError, ChildError) as exc:
        return error(str(exc)), None
    if outcome.status == "interrupted":
        console.print("[yellow]interrupted: load stopped early; reporting what was collected[/]")
    return analyse_and_report(outcome.run_dir, console), outcome.run_dir


def analyse_and_report(run_dir: str, console, window_s: float = 1.0, baseline: str | None = None) -> int:
    """Analyse ``run_dir``, write its outputs, print the summary; exit code from the verdict."""
    from tailscope.analyzers.analysis import analyze_run
    from tailscope.reports.writer import write_outputs
    from tailscope.terminal import print_summary

    analysis = analyze_run(run_dir, window_s=window_s)
    paths = write_outputs(run_dir, analysis)
    print_summary(console, analysis, paths)
    return EXIT_OK if analysis.get("verdict", {}).get("passed", True) else EXIT_SLO_FAILED
