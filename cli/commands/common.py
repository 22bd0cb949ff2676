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
    from tailscope.scenario_model.scenario import parse_duration_s

    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return seconds


def fault_arg(text: str):
    """argparse type for ``--fault KIND:at=10s,duration=5s,PARAM=VALUE``."""
    from tailscope.faults.injector import FaultSpecError
    from tailscope.faults.registry import parse_fault_option

    try:
        return parse_fault_option(text)
    except FaultSpecError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def fault_companions(scenario, extra_specs) -> list:
    """The companion injecting the scenario's ``faults`` plus ``extra_specs`` (none: []).

    Raises FaultSetupError when a fault kind cannot run on this host (e.g. not root)."""
    from tailscope.faults.registry import check_host
    from tailscope.conductor.fault_companion import FaultInjection

    specs = [*(scenario.sections.get("faults") or []), *extra_specs]
    if not specs:
        return []
    check_host(specs)
    return [FaultInjection(specs)]


def abort_rule_arg(text: str):
    """argparse type for --abort-on rules (tailscope.conductor.abort)."""
    from tailscope.conductor.abort import parse_rule

    try:
        return parse_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options every load-running command (run, sweep) accepts."""
    p.add_argument("--target", metavar="URL", help="base URL of the service (overrides the scenario)")
    p.add_argument("--out", default="runs", metavar="DIR",
                   help="parent folder for the run directory (default runs/)")
    p.add_argument("--duration", type=duration_arg, metavar="D", help="override duration (e.g. 30s, 2m)")
    p.add_argument("--receiver-port", type=int, default=4318, metavar="P",
                   help="OTLP/HTTP receiver port on 127.0.0.1 (default 4318; 0 picks a free port)")
    p.add_argument("--receiver-grpc-port", type=int, default=None, metavar="P",
                   help="OTLP/gRPC receiver port on 127.0.0.1 (default 4317, or a free port when "
                        "--receiver-port is 0; 0 picks a free port; -1 turns gRPC off)")
    p.add_argument("--timeout", type=duration_arg, metavar="D",
                   help="client timeout per request (e.g. 2s, 500ms; overrides the scenario's "
                        "timeout); a request without a complete response by then is recorded "
                        "as a timeout")
    p.add_argument("--receiver-host", default="127.0.0.1", metavar="ADDR",
                   help="address the OTLP receiver binds (default 127.0.0.1; use the harness's "
                        "address so a `tailscope agent` on the target's host can reach it)")
    p.add_argument("--target-pid", type=int, metavar="PID",
                   help="target process to sample (default: found from the target URL's port)")
    p.add_argument("--target-process", metavar="NAME",
                   help="target process to sample, by name (its workers are summed in)")
    p.add_argument("--target-container", metavar="ID",
                   help="sample a container's cgroup and its oldest process (docker/containerd id or prefix)")
    p.add_argument("--target-cgroup", metavar="PATH",
                   help="cgroup to sample (a /sys/fs/cgroup directory or a cgroup path), also without a pid")
    p.add_argument("--abort-on", action="append", type=abort_rule_arg, metavar="RULE",
                   help="stop the run early when RULE holds, e.g. 'error_rate > 50%% over 10s', "
                        "'p99 > 2s over 10s', 'achieved_ratio < 0.5 over 20s' (repeatable; adds to "
                        "the scenario's abort_on); the run is marked aborted and still reported")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback target (a service you are responsible for)")
    p.add_argument("--fault", action="append", type=fault_arg, default=[], metavar="KIND:at=T,duration=D,...",
                   help="inject a fault during the run, e.g. cpu_throttle:at=10s,duration=5s,cpus=0.3 "
                        "(repeatable; added to the scenario's faults; kinds and params: docs/lab.md)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="generate the load on N local Locust worker processes, this process being "
                        "the master (open-loop scenarios; default 0: in this process)")


def run_options_from(args):
    """RunOptions from parsed arguments (see add_run_options)."""
    from tailscope.conductor.session import RunOptions

    return RunOptions(
        out_dir=args.out,
        target=getattr(args, "target", None),
        duration_s=getattr(args, "duration", None),
        receiver_port=getattr(args, "receiver_port", 4318),
        receiver_host=getattr(args, "receiver_host", "127.0.0.1"),
        receiver_grpc_port=getattr(args, "receiver_grpc_port", None),
        target_pid=getattr(args, "target_pid", None),
        target_process_name=getattr(args, "target_process", None),
        target_container=getattr(args, "target_container", None),
        target_cgroup=getattr(args, "target_cgroup", None),
        timeout_s=getattr(args, "timeout", None),
        allow_remote=getattr(args, "allow_remote", False),
        workers=getattr(args, "workers", 0) or 0,
        abort_on=tuple(getattr(args, "abort_on", None) or ()),
    )


def workers_problem(args, scenario) -> str | None:
    """Why ``--workers`` cannot be used with ``scenario`` (None when it can)."""
    workers = getattr(args, "workers", 0) or 0
    if workers < 0:
        return f"--workers must be >= 0, got {workers}"
    if workers and scenario.arrival.process == "closed":
        return "--workers needs an open-loop arrival process; a closed-loop scenario runs in one process"
    return None


def run_and_report(scenario, options, launch_target=None, console=None,
                   baseline: dict | None = None) -> tuple[int, str | None]:
    """Execute one run with live progress, then analyse and report it.

    ``baseline`` (``{"dir", "threshold", "confidence"}``) also compares the run with a
    baseline run (exit 1 on a regression). Returns (exit code, run directory or None
    when the run could not start).
    """
    # The conductor imports Locust (gevent monkey-patching): import it first.
    from tailscope.conductor.session import SetupError, execute_run
    from tailscope.conductor.children import ChildError
    from tailscope.faults.injector import FaultSetupError
    from tailscope.loadgen.runner import LoadError

    from rich.console import Console

    from tailscope.conductor.terminal import ProgressDisplay

    console = console or Console()
    try:
        with ProgressDisplay(console, f"tailscope run: {scenario.name}") as display:
            outcome = execute_run(scenario, options, on_progress=display.update,
                                  launch_target=launch_target)
    except (SetupError, ChildError, FaultSetupError, LoadError) as exc:
        return error(str(exc)), None
    except OSError as exc:  # the run directory could not be finished (e.g. no space even for the manifest)
        reason = "disk full" if exc.errno == 28 else (exc.strerror or str(exc))
        return error(f"could not write the run directory: {reason}: {getattr(exc, 'filename', '') or exc}"), None
    if outcome.status == "interrupted":
        console.print("[yellow]interrupted: load stopped early; reporting what was collected[/]")
    if outcome.status == "aborted":
        for reason in _manifest_abort_reasons(outcome.run_dir):
            console.print(f"[red]aborted: {escape_markup(reason)}; reporting what was collected[/]")
    failure = outcome.status == "failed" and _manifest_failure(outcome.run_dir)
    if failure:
        console.print(f"[red]run failed: {escape_markup(failure)}; reporting what was collected[/]")
    code = analyse_and_report(outcome.run_dir, console, baseline=baseline)
    if failure:
        return error(f"run failed: {failure}"), outcome.run_dir
    return code, outcome.run_dir


def escape_markup(text: str) -> str:
    """``text`` safe inside rich markup."""
    from rich.markup import escape

    return escape(text)


def _manifest_abort_reasons(run_dir: str) -> list[str]:
    """The ``abort_reasons`` of an aborted run's manifest."""
    import os

    from tailscope.rundir import RunDirError, read_json

    try:
        manifest = read_json(os.path.join(run_dir, "manifest.json"), {}) or {}
    except RunDirError:
        manifest = {}
    return [str(r) for r in manifest.get("abort_reasons") or []]


def _release_stale_reserve(run_dir: str) -> None:
    """Give back the disk reserve a killed harness left behind (never a live one's)."""
    from tailscope.rundir.manifest import release_stale_reserves

    try:
        release_stale_reserves(run_dir)
    except OSError:
        pass  # a read-only run directory: the report is written elsewhere or fails clearly


def _manifest_failure(run_dir: str) -> str:
    """The ``failure`` line of a failed run's manifest ("harness error" when absent)."""
    import os

    from tailscope.rundir import RunDirError, read_json

    try:
        manifest = read_json(os.path.join(run_dir, "manifest.json"), {}) or {}
    except RunDirError:
        manifest = {}
    return str(manifest.get("failure") or "harness error")


def analyse_and_report(run_dir: str, console, window_s: float = 1.0, baseline: dict | None = None) -> int:
    """Analyse ``run_dir``, write its outputs, print the summary; exit code from the verdict.

    With ``baseline`` (``{"dir", "threshold", "confidence"}``) the run is also compared with
    the baseline run (comparison files written into ``run_dir``; junit.xml then holds both
    suites) and a regression makes the exit code 1.
    """
    from tailscope.analyzers.analysis import analyze_run
    from tailscope.reports.writer import write_outputs
    from tailscope.conductor.terminal import print_summary

    analysis = analyze_run(run_dir, window_s=window_s)
    _release_stale_reserve(run_dir)
    try:
        paths = write_outputs(run_dir, analysis)
    except OSError as exc:
        print_summary(console, analysis, {})
        reason = "disk full" if exc.errno == 28 else (exc.strerror or str(exc))
        return error(f"could not write the report into {run_dir}: {reason}; "
                     f"free space and run `tailscope report {run_dir}`")
    print_summary(console, analysis, paths)
    code = EXIT_OK if analysis.get("verdict", {}).get("passed", True) else EXIT_SLO_FAILED
    if baseline is not None:
        code = max(code, compare_with_baseline(run_dir, analysis, baseline, console, paths))
    return code


def compare_with_baseline(run_dir: str, analysis: dict, baseline: dict, console, paths: dict) -> int:
    """Compare ``run_dir`` with the baseline, write the comparison and a two-suite junit.xml."""
    from tailscope.reports.junit import render_junit
    from tailscope.reports.writer import write_text_atomic
    from tailscope.rundir import RunDirError

    from tailscope.cli.commands.compare import compare_and_report

    try:
        code, comparison = compare_and_report(run_dir, baseline["dir"], console,
                                              threshold=baseline.get("threshold", 0.10),
                                              confidence=baseline.get("confidence", 0.95))
    except RunDirError as exc:
        return error(f"baseline: {exc}")
    if paths.get("junit"):
        write_text_atomic(paths["junit"], render_junit(analysis, comparison))
    return code
