"""overload: a burst of arrivals above capacity, with client retries, for a window.

Mechanism: a separate process (:mod:`.burst`) sends ``rate`` requests/s
(Poisson, open loop) of ``text_chars``-character texts to ``path`` on the
target for the window, each over its own loopback connection. Above the
target's capacity its batcher queue fills to ``--max-queue-size`` and answers
429; the burst retries each 429 up to ``retries`` times with exponential
backoff, which adds load. The tailscope load itself sees long ``queue_wait``
and 429s. Needs a loopback target; nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess

from tailscope.faults.injector import Injector, Param
from tailscope.faults.processes import start_python_module, stop_process


class Overload(Injector):
    kind = "overload"
    summary = "an open-loop burst above capacity with retrying clients (queue saturation, 429s)"
    requires = "a loopback target"
    params = {
        "rate": Param("number", 400.0, "burst arrivals per second", minimum=1.0, maximum=20000.0),
        "path": Param("string", "/v1/infer/text", "route the burst posts to (JSON {'text': ...})"),
        "text_chars": Param("integer", 2000, "characters of each burst request's text", minimum=1),
        "retries": Param("integer", 2, "retries of a request answered 429", minimum=0, maximum=10),
        "backoff_ms": Param("number", 50.0, "first retry delay; doubles per retry (ms)", minimum=0.0),
        "max_in_flight": Param("integer", 512, "most open burst requests", minimum=1, maximum=10000),
        "seed": Param("integer", 1, "seed of the burst's arrivals and texts"),
    }

    def __init__(self, spec, target) -> None:
        super().__init__(spec, target)
        self._process: subprocess.Popen | None = None
        self._report_path = os.path.join(target.work_dir, f"overload-{target.run_id}-{os.getpid()}.json")

    def check(self) -> None:
        self.require_url()

    def apply(self) -> dict:
        params = self.spec.params
        args = ["--url", self.require_url(), "--path", params["path"], "--rate", str(params["rate"]),
                "--duration", str(self.spec.duration_s), "--text-chars", str(params["text_chars"]),
                "--retries", str(params["retries"]), "--backoff-ms", str(params["backoff_ms"]),
                "--max-in-flight", str(params["max_in_flight"]), "--seed", str(params["seed"]),
                "--report", self._report_path]
        self._process = start_python_module("tailscope.faults.burst", args)
        return {"generator_pid": self._process.pid, "rate": params["rate"], "path": params["path"]}

    def revert(self) -> dict:
        self._stop_generator()
        try:
            with open(self._report_path, encoding="utf-8") as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            report = {"error": "the burst generator wrote no report"}
        self._remove_report()
        return report

    def cleanup(self) -> None:
        self._stop_generator()
        self._remove_report()

    def _stop_generator(self) -> None:
        if self._process is not None:
            stop_process(self._process, grace_s=10.0)
            self._process = None

    def _remove_report(self) -> None:
        try:
            os.unlink(self._report_path)
        except FileNotFoundError:
            pass
