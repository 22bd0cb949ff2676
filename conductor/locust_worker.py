"""One Locust worker of ``tailscope run --workers N`` (started by the conductor).

    python -m tailscope.conductor.locust_worker --master-port P --scenario S.yaml \
        [--target URL] [--duration S] [--rate RPS | --users N [--think-time S]]

Loads the scenario (the same file as the master), connects to the master on
127.0.0.1:P and walks the share of the schedule the master gives it,
streaming its rows back (:class:`~.locust_roles.WorkerRole`). Exits when the
master quits; exit code 2 when the scenario cannot be loaded.
"""

from __future__ import annotations

from tailscope.loadgen.distributed_runner import TailscopeSchedule  # noqa: I001  (imports Locust: gevent first)

# isort: split

import argparse
import dataclasses
import sys

from locust.env import Environment

from tailscope.loadgen.locust_roles import WorkerRole
from tailscope.loadgen.spec import ArrivalSpec, LoadPlan


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tailscope.conductor.locust_worker",
                                     description="a Locust worker of `tailscope run --workers`")
    parser.add_argument("--master-port", type=int, required=True, help="the master's port on 127.0.0.1")
    parser.add_argument("--scenario", required=True, help="scenario file (YAML)")
    parser.add_argument("--target", default=None, help="base URL (overrides the scenario)")
    parser.add_argument("--duration", type=float, default=None, help="schedule length, s")
    parser.add_argument("--rate", type=float, default=None, help="offered rate, requests/s (whole run)")
    parser.add_argument("--users", type=int, default=None,
                        help="a closed loop of this many users in the whole run (concurrency mode: no think time)")
    parser.add_argument("--think-time", type=float, default=0.0, help="with --users: each user's think time, s")
    return parser


def plan_from_args(args) -> LoadPlan:
    """The load plan the master runs, rebuilt from the scenario file and the overrides."""
    from tailscope.scenario_model.scenario import load_scenario

    scenario = load_scenario(args.scenario, target_override=args.target)
    plan = scenario.load_plan(args.target, args.duration)
    if args.users is not None:
        arrival = ArrivalSpec(process="closed", users=args.users, think_time_s=args.think_time,
                              sessions=plan.arrival.sessions)  # concurrent sessions stay sessions
        plan = dataclasses.replace(plan, arrival=arrival)
    elif args.rate:
        plan = dataclasses.replace(plan, arrival=dataclasses.replace(plan.arrival, rate=args.rate))
    return plan


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = plan_from_args(args)
    except ValueError as exc:
        print(f"tailscope worker: {exc}", file=sys.stderr)
        return 2
    environment = Environment(user_classes=[TailscopeSchedule], host=plan.target)
    runner = environment.create_worker_runner("127.0.0.1", args.master_port)
    WorkerRole(environment, lambda _env: plan)
    runner.greenlet.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
