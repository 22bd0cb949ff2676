"""``tailscope run SCENARIO``: load a target, record everything, analyse, report."""

from __future__ import annotations

import argparse

from tailscope.cli.commands.common import (
    EXIT_CODES_HELP,
    EXIT_INCONCLUSIVE,
    EXIT_SEVERITY,
    EXIT_WORDS,
    add_run_options,
    error,
    fault_companions,
    receiver_problem,
    run_and_report,
    run_options_from,
    workers_problem,
    worst_exit_code,
)
from tailscope.cli.commands.compare import add_compare_options, compare_and_print
from tailscope.faults.injector import FaultSetupError


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run a scenario against a target, then analyse and report",
        description="Run SCENARIO (YAML) against its target, record every request, span and "
                    "signal in a run directory, then write analysis.json and report.html there. "
                    "The exit code is the verdict's: PASSED 0, FAILED 1, INCONCLUSIVE or INCOMPLETE 3.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("scenario", help="scenario file (YAML); see docs/scenario-format.md")
    add_run_options(p)
    p.add_argument("--baseline", metavar="DIR",
                   help="compare the run with this baseline: a run directory or a folder of runs "
                        "(from --repeat); exit 1 on a regression")
    p.add_argument("--repeat", type=repeat_arg, default=1, metavar="N",
                   help="run the scenario N times, one after the other, into one folder "
                        "(<out>/<name>-<stamp>-xN/run-1 … run-N, each with its report) for `tailscope compare`; "
                        "with --baseline the folder is compared once, after the last run; the exit code is "
                        "the worst of the runs'")
    add_compare_options(p)
    p.set_defaults(handler=handle)


def repeat_arg(text: str) -> int:
    """argparse type: a count of runs, 1 to 100."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of runs such as 3, got {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be 1 to 100, got {value}")
    return value


def handle(args) -> int:
    # loading a scenario imports the analyzers (its sections' parsers): only when a command runs
    from tailscope.scenario_model.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, target_override=args.target)
    except ScenarioError as exc:
        return error(str(exc))
    problem = workers_problem(args, scenario)
    if problem:
        return error(problem)
    options = run_options_from(args)
    problem = receiver_problem(options)
    if problem:
        return error(problem)
    try:
        options.companions.extend(fault_companions(scenario, args.fault))
    except FaultSetupError as exc:
        return error(str(exc))
    baseline = None
    if args.baseline:
        from tailscope.analyzers.comparison.baseline import run_dirs_in
        from tailscope.rundir import RunDirError, load_run
        try:
            for path in run_dirs_in(args.baseline):
                load_run(path)  # fail before loading the target, not after
        except RunDirError as exc:
            return error(f"--baseline: {exc}")
        baseline = {"dir": args.baseline, "threshold": args.threshold, "confidence": args.confidence}
    if args.repeat > 1:
        return repeat(scenario, options, args.repeat, baseline)
    code, _ = run_and_report(scenario, options, baseline=baseline)
    return code


def repeat(scenario, options, count: int, baseline: dict | None) -> int:
    """``--repeat N``: the runs (conductor/repeat.py), each reported as a single run is, a line per
    run and one at the end; with a baseline, the folder compared with it once. The worst exit code."""
    from rich.console import Console

    from tailscope.conductor.repeat import run_repeated

    console = Console()

    def run_once(run_options):
        return run_and_report(scenario, run_options, console=console)

    def heard(result) -> None:
        console.print(f"run {result.index} of {count}: {EXIT_WORDS.get(result.code, result.code)} (exit {result.code})"
                      + (f" — {result.run_dir}" if result.run_dir else ""), highlight=False, soft_wrap=True)

    folder, results = run_repeated(options, scenario.name, count, run_once, on_run=heard)
    codes = [r.code for r in results]
    if len(results) < count:
        codes.append(EXIT_INCONCLUSIVE)  # stopped early: the repeat is incomplete
    if baseline is not None and any(r.run_dir for r in results):
        codes.append(compare_and_print(folder, baseline["dir"], console, threshold=baseline["threshold"],
                                       confidence=baseline["confidence"]))
    worst = worst_exit_code(codes)
    tally = ", ".join(f"{sum(1 for r in results if r.code == code)} {EXIT_WORDS[code]}"
                      for code in EXIT_SEVERITY if any(r.code == code for r in results))
    console.print(f"{len(results)} of {count} runs of {scenario.name} in {folder}: {tally}; "
                  f"exit {worst} ({EXIT_WORDS.get(worst, worst)})", highlight=False, soft_wrap=True)
    return worst
