"""A scenario rewritten for one step of a sweep: at a rate, or at a concurrency.

Pure scenario transformations (no load, no Locust), so the sweep loop in ``conductor/sweep.py``,
the CLI's checks and tests share them without importing the load generator's runner (importing
Locust monkey-patches the process with gevent).
"""

from __future__ import annotations

import copy
import dataclasses

from tailscope.loadgen.spec import ArrivalSpec


def at_rate(scenario, rate: float):
    """The scenario with its arrival rate replaced (in the manifest's copy too); ``rate`` in req/s."""
    raw = copy.deepcopy(scenario.raw)
    arrival = raw.setdefault("arrival", {})
    (arrival["sessions"] if scenario.arrival.sessions is not None else arrival)["rate"] = rate  # sessions/s
    return dataclasses.replace(scenario, arrival=dataclasses.replace(scenario.arrival, rate=rate),
                               name=f"{scenario.name}-{rate:g}rps", raw=raw)


def at_concurrency(scenario, concurrency: int):
    """The scenario in concurrency mode: ``concurrency`` requests kept in flight (in the manifest's copy too);
    a multi-turn session scenario keeps its sessions, ``concurrency`` of them at a time."""
    raw = copy.deepcopy(scenario.raw)
    sessions = scenario.arrival.sessions
    if sessions is not None:
        fields = {k: v for k, v in ((raw.get("arrival") or {}).get("sessions") or {}).items() if k != "rate"}
        raw["arrival"] = {"sessions": {**fields, "concurrency": concurrency}}
    else:
        raw["arrival"] = {"concurrency": concurrency}
    return dataclasses.replace(scenario, arrival=ArrivalSpec(process="closed", users=concurrency, sessions=sessions),
                               name=f"{scenario.name}-c{concurrency}", raw=raw)
