"""``tailscope demo``: the reference target, a real load test, a real report."""

from __future__ import annotations

from tailscope.cli.commands.common import duration_arg, run_and_report


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="start the reference target, load it for about a minute, report",
        description="Start the reference inference service on a free loopback port, run "
                    "scenarios/demo.yaml against it (about 60 s) and write a report; the "
                    "target is stopped on exit and on Ctrl-C.")
    p.add_argument("--out", default="runs", help="parent folder for run directories (default runs/)")
    p.add_argument("--duration", type=duration_arg, default=None, metavar="D",
                   help="override the demo's duration (e.g. 20s)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from importlib import resources

    from tailscope.conductor.session import RunOptions  # imports Locust first (gevent)
    from tailscope.conductor.reference_service import launch_reference_target
    from tailscope.scenario_model.scenario import load_scenario

    with resources.as_file(resources.files("tailscope.scenarios") / "demo.yaml") as path:
        scenario = load_scenario(path, require_target=False)
    options = RunOptions(out_dir=args.out, duration_s=args.duration, receiver_port=0)
    code, _ = run_and_report(scenario, options, launch_target=launch_reference_target)
    return code
