"""``tailscope run SCENARIO``: load a target, record everything, analyse, report."""

from __future__ import annotations

from .common import add_run_options, error, run_and_report, run_options_from


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run a scenario against a target, then analyse and report",
        description="Run SCENARIO (YAML) against its target, record every request, span and "
                    "signal in a run directory, then write analysis.json and report.html there. "
                    "Exit 0 when every SLO holds, 1 when one fails, 2 on usage or setup errors.")
    p.add_argument("scenario", help="scenario file (YAML); see docs/scenario-format.md")
    add_run_options(p)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from tailscope.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, target_override=args.target)
    except ScenarioError as exc:
        return error(str(exc))
    code, _ = run_and_report(scenario, run_options_from(args))
    return code
