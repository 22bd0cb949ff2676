"""Runs one load plan with tailscope.loadgen.local_runner.run_load in its own process.

Locust monkey-patches the process with gevent, so the loadgen tests never
import it in the pytest process; they run this script instead:

    python tests/loadgen_driver.py '<json>'

JSON: {"run_dir": str, "plan": {LoadPlan fields; "arrival": {...},
"classes": [{RequestClass fields; "payload": {...; "size": {...}}}]},
"stop_after_s": float | null}. Requests go to ``run_dir/requests.arrow``;
streamed chunks to ``chunks.arrow``, the generator's GC pauses to
``events.arrow`` and its gauges to ``signals.generator.arrow``.
Prints one JSON line: {"result": LoadResult fields, "progress": [Progress ...]}.
"""

from __future__ import annotations

from tailscope.loadgen.local_runner import run_load  # noqa: I001  (Locust first: gevent patching)

# isort: split

import dataclasses
import json
import os
import sys
import threading

from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, PayloadSpec, RateProfile, RequestClass, SizeSpec
from tailscope.rundir import Appender, schema


def plan_from_dict(data: dict) -> LoadPlan:
    """A LoadPlan from plain JSON values (nested specs as dicts)."""
    classes = []
    for cls in data["classes"]:
        payload = dict(cls.get("payload", {}))
        payload["size"] = SizeSpec(**payload.get("size", {}))
        classes.append(RequestClass(**{**cls, "payload": PayloadSpec(**payload)}))
    arrival = dict(data["arrival"])
    if arrival.get("profile"):
        profile = dict(arrival["profile"])
        profile["steps"] = tuple(tuple(step) for step in profile.get("steps", ()))
        arrival["profile"] = RateProfile(**profile)
    return LoadPlan(**{**data, "arrival": ArrivalSpec(**arrival), "classes": tuple(classes)})


def main(config: dict) -> dict:
    plan = plan_from_dict(config["plan"])
    run_dir = config["run_dir"]
    sink = Appender(os.path.join(run_dir, schema.REQUESTS), schema.REQUESTS_SCHEMA)
    chunks = Appender(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA)
    events = Appender(os.path.join(run_dir, schema.EVENTS), schema.EVENTS_SCHEMA)
    signals = Appender(os.path.join(run_dir, schema.writer_file(schema.SIGNALS, schema.GENERATOR_WRITER)),
                       schema.SIGNALS_SCHEMA)
    stop = threading.Event()
    if config.get("stop_after_s") is not None:
        threading.Timer(config["stop_after_s"], stop.set).start()
    progress = []
    try:
        result = run_load(plan, sink, on_progress=lambda p: progress.append(dataclasses.asdict(p)),
                          progress_interval_s=config.get("progress_interval_s", 0.5), stop=stop,
                          chunks=chunks, events=events, signals=signals, flush=(sink, chunks))
    finally:
        for appender in (sink, chunks, events, signals):
            appender.close()
    return {"result": dataclasses.asdict(result), "progress": progress}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
