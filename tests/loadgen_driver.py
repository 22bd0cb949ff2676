"""Runs one load plan with tailscope.loadgen.runner.run_load in its own process.

Locust monkey-patches the process with gevent, so the loadgen tests never
import it in the pytest process; they run this script instead:

    python tests/loadgen_driver.py '<json>'

JSON: {"run_dir": str, "plan": {LoadPlan fields; "arrival": {...},
"classes": [{RequestClass fields; "payload": {...; "size": {...}}}]},
"stop_after_s": float | null}. Requests go to ``run_dir/requests.arrow``.
Prints one JSON line: {"result": LoadResult fields, "progress": [Progress ...]}.
"""

from __future__ import annotations

from tailscope.loadgen.runner import run_load  # noqa: I001  (Locust first: gevent patching)

import dataclasses
import json
import os
import sys
import threading

from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, PayloadSpec, RequestClass, SizeSpec
from tailscope.rundir import Appender, schema


def plan_from_dict(data: dict) -> LoadPlan:
    """A LoadPlan from plain JSON values (nested specs as dicts)."""
    classes = []
    for cls in data["classes"]:
        payload = dict(cls.get("payload", {}))
        payload["size"] = SizeSpec(**payload.get("size", {}))
        classes.append(RequestClass(**{**cls, "payload": PayloadSpec(**payload)}))
    return LoadPlan(**{**data, "arrival": ArrivalSpec(**data["arrival"]), "classes": tuple(classes)})


def main(config: dict) -> dict:
    plan = plan_from_dict(config["plan"])
    sink = Appender(os.path.join(config["run_dir"], schema.REQUESTS), schema.REQUESTS_SCHEMA)
    stop = threading.Event()
    if config.get("stop_after_s") is not None:
        threading.Timer(config["stop_after_s"], stop.set).start()
    progress = []
    try:
        result = run_load(plan, sink, on_progress=lambda p: progress.append(dataclasses.asdict(p)),
                          progress_interval_s=config.get("progress_interval_s", 0.5), stop=stop)
    finally:
        sink.close()
    return {"result": dataclasses.asdict(result), "progress": progress}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
