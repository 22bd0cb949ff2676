"""``tailscope run SCENARIO``: load a target, record everything, analyse, report."""

from __future__ import annotations

from tailscope.cli.commands.common import (
    EXIT_CODES_HELP,
    add_run_options,
    error,
    fault_companions,
    receiver_problem,
    run_and_report,
    run_options_from,
    workers_problem,
)


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
                   help="compare the run with this baseline run directory; exit 1 on a regression")
    from tailscope.cli.commands.compare import add_compare_options
    add_compare_options(p)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from tailscope.faults.injector import FaultSetupError
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
        from tailscope.rundir import RunDirError, load_run
        try:
            load_run(args.baseline)  # fail before loading the target, not after
        except RunDirError as exc:
            return error(f"--baseline: {exc}")
        baseline = {"dir": args.baseline, "threshold": args.threshold, "confidence": args.confidence}
    code, _ = run_and_report(scenario, options, baseline=baseline)
    return code
