"""What the subcommands share: exit codes, error printing, run options, run → report.

Imports at the top are the quick ones; the conductor (it imports Locust, whose gevent
monkey-patching must come before the other network modules), the run-directory reader and
the fault registry are imported by the functions that use them, so that ``tailscope --help``
and the argument parsing stay quick (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import os
import sys

from tailscope.analysis_model.comparison import ComparisonVerdict
from tailscope.faults.injector import FaultSetupError, FaultSpecError
from tailscope.faults.undo_journal import JOURNAL_NAME
from tailscope.reports.upgrade import verdict_of
from tailscope.scenario_model.abort_rules import parse_rule
from tailscope.support.exit_codes import (  # noqa: F401  (re-exported: the commands import them from here)
    EXIT_CODES_HELP,
    EXIT_INCONCLUSIVE,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_SEVERITY,
    EXIT_SLO_FAILED,
    EXIT_USAGE,
    EXIT_WORDS,
    OUTCOME_EXIT_CODES,
    worse_exit_code,
    worst_exit_code,
)
from tailscope.support.receiver_token import TOKEN_ENV
from tailscope.support.units import parse_duration_s


def error(message: str) -> int:
    """Print ``tailscope: error: message`` to stderr; return the usage exit code."""
    print(f"tailscope: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def duration_arg(text: str) -> float:
    """argparse type for durations such as 30s, 2m, 1.5h."""
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return seconds


def fault_arg(text: str):
    """argparse type for ``--fault KIND:at=10s,duration=5s,PARAM=VALUE``."""
    from tailscope.faults.registry import parse_fault_option  # imports every fault kind: only when given

    try:
        return parse_fault_option(text)
    except FaultSpecError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def fault_companions(scenario, extra_specs) -> list:
    """The companion injecting the scenario's ``faults`` plus ``extra_specs`` (none: []).

    Raises FaultSetupError when a fault kind cannot run on this host (e.g. not root)."""
    from tailscope.conductor.fault_companion import FaultInjection
    from tailscope.faults.registry import check_host

    specs = [*(scenario.sections.get("faults") or []), *extra_specs]
    if not specs:
        return []
    check_host(specs)
    return [FaultInjection(specs)]


def abort_rule_arg(text: str):
    """argparse type for --abort-on rules (tailscope.scenario_model.abort_rules)."""
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
    p.add_argument("--late-span-wait", type=duration_arg, metavar="D",
                   help="after the load, wait at most this long for spans the target has not exported "
                        "yet (default 15s, the OTel SDK's export interval plus its export timeout; "
                        "overrides the scenario's tracing.late_span_wait); the wait ends as soon as "
                        "every traced request has its server span")
    p.add_argument("--receiver-host", default="127.0.0.1", metavar="ADDR",
                   help="address the OTLP receiver binds (default 127.0.0.1; use the harness's "
                        "address so a `tailscope agent` on the target's host can reach it; any "
                        "address but loopback needs --receiver-token)")
    p.add_argument("--receiver-token", metavar="TOKEN",
                   help="bearer token every OTLP request must carry (default: the environment variable "
                        "TAILSCOPE_RECEIVER_TOKEN); targets send it with "
                        "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%%20TOKEN (docs/receiver.md)")
    p.add_argument("--receiver-tls-cert", metavar="FILE",
                   help="PEM certificate chain: the receiver serves HTTPS and gRPC over TLS")
    p.add_argument("--receiver-tls-key", metavar="FILE", help="PEM private key of --receiver-tls-cert")
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
        receiver_token=receiver_token_from(args),
        receiver_tls_cert=getattr(args, "receiver_tls_cert", None),
        receiver_tls_key=getattr(args, "receiver_tls_key", None),
        target_pid=getattr(args, "target_pid", None),
        target_process_name=getattr(args, "target_process", None),
        target_container=getattr(args, "target_container", None),
        target_cgroup=getattr(args, "target_cgroup", None),
        timeout_s=getattr(args, "timeout", None),
        late_span_wait_s=getattr(args, "late_span_wait", None),
        allow_remote=getattr(args, "allow_remote", False),
        workers=getattr(args, "workers", 0) or 0,
        abort_on=tuple(getattr(args, "abort_on", None) or ()),
    )


def receiver_token_from(args, attribute: str = "receiver_token") -> str | None:
    """The receiver token: the option, else the environment variable TAILSCOPE_RECEIVER_TOKEN, else None."""
    return getattr(args, attribute, None) or os.environ.get(TOKEN_ENV) or None


def receiver_problem(options) -> str | None:
    """Why the run's receiver must not start (None when it may): a non-loopback address
    without a token, a malformed token, unusable TLS files. Imports the conductor (Locust)."""
    from tailscope.conductor.session import SetupError, check_receiver_access

    try:
        check_receiver_access(options)
    except SetupError as exc:
        return str(exc)
    return None


def workers_problem(args, scenario) -> str | None:
    """Why ``--workers`` cannot be used with ``scenario`` (None when it can)."""
    workers = getattr(args, "workers", 0) or 0
    if workers < 0:
        return f"--workers must be >= 0, got {workers}"
    arrival = scenario.arrival
    if workers and arrival.process == "closed" and arrival.users < workers:
        field = "concurrency" if "concurrency" in ((scenario.raw or {}).get("arrival") or {}) else "users"
        return (f"arrival.{field} ({arrival.users}) is split over the workers: it must be at least "
                f"--workers ({workers})")
    cap = arrival.max_concurrency
    if workers and cap is not None and cap < workers:
        return (f"arrival.max_concurrency ({cap}) is split over the workers: it must be at least "
                f"--workers ({workers})")
    return None


def run_and_report(scenario, options, launch_target=None, console=None,
                   baseline: dict | None = None) -> tuple[int, str | None]:
    """Execute one run with live progress, then analyse and report it.

    ``baseline`` (``{"dir", "threshold", "confidence"}``) also compares the run with a
    baseline run (exit 1 on a regression). Returns (exit code, run directory or None
    when the run could not start).
    """
    # The conductor imports Locust (gevent monkey-patching): import it first.
    from rich.console import Console

    from tailscope.conductor.children import ChildError
    from tailscope.conductor.session import SetupError, execute_run
    from tailscope.conductor.terminal import ProgressDisplay
    from tailscope.loadgen.local_runner import LoadError

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
        for reason in (str(r) for r in read_manifest(outcome.run_dir).get("abort_reasons") or []):
            console.print(f"[red]aborted: {escape_markup(reason)}; reporting what was collected[/]")
    failure = outcome.status == "failed" and str(read_manifest(outcome.run_dir).get("failure") or "harness error")
    if failure:
        console.print(f"[red]run failed: {escape_markup(failure)}; reporting what was collected[/]")
    try:
        code = analyse_and_report(outcome.run_dir, console, baseline=baseline)
    except Exception:
        console.print(f"[red]the analysis failed; the run's records, spans and manifest are kept in "
                      f"{escape_markup(outcome.run_dir)}: retry with tailscope report "
                      f"{escape_markup(outcome.run_dir)}[/]", highlight=False, soft_wrap=True)
        raise  # cli.main reports it as a tailscope bug (exit 4)
    if failure:
        return error(f"run failed: {failure}"), outcome.run_dir
    return code, outcome.run_dir


def escape_markup(text: str) -> str:
    """``text`` safe inside rich markup."""
    from rich.markup import escape

    return escape(text)


def read_manifest(run_dir: str) -> dict:
    """The run's manifest.json as a dict; {} when it is missing or unreadable (the report that
    follows says what is wrong with the run directory)."""
    from tailscope.rundir import RunDirError, read_json

    try:
        return read_json(os.path.join(run_dir, "manifest.json"), {}) or {}
    except RunDirError:
        return {}


def analyse_and_report(run_dir: str, console, window_s: float = 1.0, baseline: dict | None = None) -> int:
    """Analyse ``run_dir``, write its outputs, print the summary; exit code from the verdict.

    With ``baseline`` (``{"dir", "threshold", "confidence"}``) the run is also compared with
    the baseline run (comparison files written into ``run_dir``; junit.xml then holds both
    suites) and a regression makes the exit code 1. The work is the conductor's
    (tailscope.conductor.reporting); this prints and picks the exit code.
    """
    from tailscope.conductor.reporting import ReportWriteError, analyse_and_write
    from tailscope.conductor.terminal import print_summary

    try:
        report = analyse_and_write(run_dir, window_s=window_s)
    except ReportWriteError as exc:
        print_summary(console, exc.analysis, {})
        return error(str(exc))
    print_summary(console, report.analysis, report.paths)
    warn_of_fault_leftovers(run_dir, console)
    if report.damaged:
        return error(damaged_line(report))
    code = verdict_of(report.analysis).exit_code
    if baseline is not None:
        code = worse_exit_code(code, compare_with_baseline(report, baseline, console))
    return code


def warn_of_fault_leftovers(run_dir: str, console) -> None:
    """Say so when the run's fault agent was killed and what it changed on the host is not
    yet put back (its undo journal is still in the run directory; docs/lab.md, Cleanup)."""
    if os.path.exists(os.path.join(run_dir, JOURNAL_NAME)):
        console.print(f"[yellow]the fault agent of this run was killed before it put back its changes to the host; "
                      f"put them back with: python -m tailscope.faults.leftovers {escape_markup(run_dir)}[/]")


def damaged_line(report) -> str:
    """One line on a run whose data files are damaged: which file and batch, and where the
    report went (beside the earlier good one, which was kept)."""
    first = report.damaged[0].message
    more = f" (and {len(report.damaged) - 1} more damaged files)" if len(report.damaged) > 1 else ""
    html = os.path.basename(report.paths.get("html", ""))
    where = (f"; the earlier report.html was kept, this analysis is in {html}" if report.kept_earlier
             else f"; the numbers in {html} cover what could be read")
    return first + more + where


def compare_with_baseline(report, baseline: dict, console) -> int:
    """Compare an analysed run (a conductor RunReport) with the baseline, print the comparison;
    exit code 1 on a regression, 3 when it may be the host's, 2 when a run cannot be read."""
    from tailscope.conductor import reporting
    from tailscope.conductor.terminal import print_comparison
    from tailscope.rundir import RunDirError

    try:
        compared = reporting.compare_with_baseline(
            report, baseline["dir"], threshold=baseline.get("threshold", reporting.DEFAULT_THRESHOLD),
            confidence=baseline.get("confidence", reporting.DEFAULT_CONFIDENCE))
    except RunDirError as exc:
        return error(f"baseline: {exc}")
    print_comparison(console, compared.comparison, compared.paths)
    return comparison_exit_code(compared.comparison.verdict)


def comparison_exit_code(verdict: ComparisonVerdict) -> int:
    """A comparison's exit code: 1 on a regression, 3 when it is inconclusive (a regression on a
    busier host: analyzers/comparison/host_load.py), else 0."""
    if verdict.inconclusive:
        return EXIT_INCONCLUSIVE
    return EXIT_SLO_FAILED if verdict.regressed else EXIT_OK
