"""``tailscope demo``: a reference service, a real load test, a real report.

``tailscope demo`` loads the reference inference target with scenarios/demo.yaml;
``tailscope demo --llm`` loads the LLM reference server with scenarios/llm-demo.yaml
(an ``openai-chat`` class, TTFT/TPOT SLOs, the server's /metrics scraped).

The classic demo injects one real, short incident mid-run, so its report names a
cause: a GC storm in the reference target (``gc_pressure`` through its admin
endpoint: no root needed, docs/lab.md), injected by the fault agent like any
``--fault``, so its ground truth is in the run (``events.faults.arrow``). Its
window follows the run's length (:func:`incident_window`): it starts at 45% of
the run and lasts 10% of it, 2 to 6 s (27–33 s of the 60-s demo), so there is
clean load before and after it. scenarios/demo.yaml itself has no faults: it is
also an example scenario against any target."""

from __future__ import annotations

from importlib import resources

from tailscope.cli.commands.common import EXIT_CODES_HELP, duration_arg, error, fault_companions, run_and_report
from tailscope.faults.injector import FaultSetupError

#: Where the incident sits: its start and length as shares of the run, the length clamped (s).
INCIDENT_START_SHARE = 0.45
INCIDENT_LENGTH_SHARE = 0.10
INCIDENT_LENGTH_S = (2.0, 6.0)
#: The incident's parameters: a tenth of the lab's live heap (lab/plan.py), so gen-2 pauses last about a
#: hundred ms (a second with the lab's 160 MB on a 2-core machine): a clear spike beside the demo's SLOs.
INCIDENT_KIND = "gc_pressure"
INCIDENT_PARAMS = {"mb_per_s": 16.0, "retained_mb": 16.0}


def incident_window(duration_s: float) -> tuple[float, float]:
    """(start s, length s) of the demo's incident in a run of ``duration_s`` seconds."""
    low, high = INCIDENT_LENGTH_S
    return round(INCIDENT_START_SHARE * duration_s, 3), round(min(max(INCIDENT_LENGTH_SHARE * duration_s, low), high), 3)


def demo_incident(duration_s: float):
    """The demo's fault spec for a run of ``duration_s`` seconds."""
    from tailscope.faults.registry import build_spec

    start, length = incident_window(duration_s)
    return build_spec(INCIDENT_KIND, start, length, dict(INCIDENT_PARAMS))


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="start a reference service, load it for about a minute, report",
        description="Start the reference inference service on a free loopback port, run "
                    "scenarios/demo.yaml against it (about 60 s, with a short GC storm injected in the "
                    "target mid-run so the report names a cause) and write a report; with --llm, the "
                    "LLM reference server (OpenAI-compatible, continuous batching) and "
                    "scenarios/llm-demo.yaml (about 30 s). The service is stopped on exit and on Ctrl-C. "
                    "The exit code is the verdict's, as for tailscope run.",
        epilog=EXIT_CODES_HELP)
    p.add_argument("--llm", action="store_true",
                   help="the LLM reference server and scenarios/llm-demo.yaml (TTFT, TPOT, tokens, goodput)")
    p.add_argument("--out", default="runs", help="parent folder for run directories (default runs/)")
    p.add_argument("--duration", type=duration_arg, default=None, metavar="D",
                   help="override the demo's duration (e.g. 20s)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from tailscope.conductor.session import RunOptions  # imports Locust first (gevent): only when it runs

    # isort: split
    from tailscope.conductor.reference_service import launch_llm_target, launch_reference_target
    from tailscope.scenario_model.scenario import load_scenario

    scenario_file, launch = (("llm-demo.yaml", launch_llm_target) if args.llm
                             else ("demo.yaml", launch_reference_target))
    with resources.as_file(resources.files("tailscope.scenarios") / scenario_file) as path:
        scenario = load_scenario(path, require_target=False)
    options = RunOptions(out_dir=args.out, duration_s=args.duration, receiver_port=0)
    if not args.llm:
        try:
            options.companions.extend(fault_companions(scenario, [demo_incident(args.duration or scenario.duration_s)]))
        except FaultSetupError as exc:
            return error(str(exc))
    code, _ = run_and_report(scenario, options, launch_target=launch)
    return code
