"""Base of the injectors whose fault is another client's traffic, sent by a child process.

The child (a :mod:`.loopback_traffic` program named by :attr:`TrafficChildInjector.module`)
runs for the fault's window; revert and cleanup stop it by PID (SIGTERM, a
grace period, SIGKILL) and the JSON counts it wrote on its way out become the
fault's observed ground truth. A child that stopped itself early writes why in
its counts' ``failure``, which the schedule (:mod:`.schedule`) records as the
fault's error.
"""

from __future__ import annotations

import json
import os
import subprocess
from abc import abstractmethod

from tailscope.faults.injector import Injector
from tailscope.faults.processes import start_python_module, stop_process

STOP_GRACE_S = 10.0


class TrafficChildInjector(Injector):
    """Starts ``python -m <module> <_child_args()> --report <file>`` on apply; its report on revert."""

    #: The traffic child's module, e.g. ``tailscope.faults.burst``.
    module: str

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._process: subprocess.Popen | None = None
        self._report_path = os.path.join(target.work_dir, f"{self.kind}-{target.run_id}-{os.getpid()}.json")

    @abstractmethod
    def _child_args(self) -> list[str]:
        """The child's arguments (its URL, shape and duration), without ``--report``."""

    @abstractmethod
    def _applied(self) -> dict:
        """What apply reports besides the child's PID (the parameters that matter)."""

    def check(self) -> None:
        self.require_url()

    def apply(self) -> dict:
        self._process = start_python_module(self.module, [*self._child_args(), "--report", self._report_path])
        return {"generator_pid": self._process.pid, **self._applied()}

    def revert(self) -> dict:
        self._stop_child()
        try:
            with open(self._report_path, encoding="utf-8") as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            report = {"error": f"the {self.kind} traffic child wrote no report"}
        self._remove_report()
        return report

    def cleanup(self) -> None:
        self._stop_child()
        self._remove_report()

    def _stop_child(self) -> None:
        if self._process is not None:
            stop_process(self._process, grace_s=STOP_GRACE_S)
            self._process = None

    def _remove_report(self) -> None:
        try:
            os.unlink(self._report_path)
        except FileNotFoundError:
            pass
