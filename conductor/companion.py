"""What runs beside the load during one run, and what it may touch.

A :class:`Companion` (a fault injector, the abort monitor, the run guard) is
started by the session (tailscope.conductor.session) with a :class:`RunContext`
once the run directory exists, fed every progress snapshot, and always stopped.
Both live here, below the session, so that companions and the session import
them without importing each other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailscope.rundir import RunWriter
    from tailscope.scenario_model.scenario import Scenario


@dataclass
class RunContext:
    """What a companion may use while the load runs."""

    run_dir: str
    writer: RunWriter  # add_event() for ground truth, outages, ...
    plan: object  # tailscope.loadgen.spec.LoadPlan
    scenario: Scenario
    target_process: dict  # manifest["target_process"]
    receiver_port: int
    stop: threading.Event  # set it to end the load early
    aborted: list = field(default_factory=list)  # reasons given to abort()
    failures: list = field(default_factory=list)  # reasons given to fail()

    def abort(self, reason: str) -> None:
        """Stop the load; the run is marked ``aborted`` with ``reason``."""
        self.aborted.append(reason)
        self.stop.set()

    def fail(self, reason: str) -> None:
        """Stop the load because the run can no longer record faithfully (disk full,
        a dead receiver); the run is marked ``failed`` with ``reason``."""
        self.failures.append(reason)
        self.stop.set()


class Companion:
    """Something that runs beside the load: a fault injector, an abort monitor.

    ``start`` is called once the run directory exists and before the first
    request; ``on_progress`` with each live snapshot (about once a second);
    ``stop`` always, also on failure and Ctrl-C, and must undo whatever the
    companion created (cgroups, swap files, processes)."""

    name = "companion"

    def start(self, ctx: RunContext) -> None:
        pass

    def on_progress(self, progress) -> None:
        pass

    def stop(self) -> None:
        pass
