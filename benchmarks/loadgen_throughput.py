"""Requests per second per core: tailscope's open-loop user with full
recording vs bare Locust ``FastHttpUser`` (no wait), same loopback server.

    python benchmarks/loadgen_throughput.py [--requests 60000] [--seconds 10] [--concurrency 64] [--rounds 3]

Each generator runs in its own process pinned to one core (the server on the
other), with the same concurrency. tailscope offers far more than it can send
(a constant 200,000 req/s, bounded by ``--requests`` so that no backlog is
left to record as dropped; the in-flight cap holds ``concurrency`` requests),
writes every request's record to an Arrow stream (as in a real run) and
tracks lateness; Locust runs ``concurrency`` users with
``wait_time = constant(0)`` for ``--seconds`` (the default request count lasts
about as long). The two alternate for ``--rounds`` rounds (this machine's speed
drifts by ±15% over minutes; alternating exposes both to the same drift).
Figures per round and their medians: completed requests per wall second and
per CPU second of the generator process, and tailscope ÷ Locust. Goal (issue
3): ratio >= 0.8.
"""

from __future__ import annotations

import argparse
import statistics

from bench_common import load_average, loopback_server, run_python

TAILSCOPE = """
from tailscope.loadgen.local_runner import run_load
import resource, tempfile, time
from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, RequestClass
from tailscope.rundir import Appender, schema
plan = LoadPlan(target=CONFIG["url"], duration_s=600.0,
                arrival=ArrivalSpec("constant", rate=200000.0),
                classes=(RequestClass("get", "/", method="GET"),), max_in_flight=CONFIG["concurrency"],
                timeout_s=5.0, max_requests=CONFIG["requests"])
with tempfile.TemporaryDirectory() as tmp:
    sink = Appender(tmp + "/requests.arrow", schema.REQUESTS_SCHEMA)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = run_load(plan, sink, flush=(sink,))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    sink.close()
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(json.dumps({"completed": result.completed, "errors": result.errors, "wall_s": wall, "cpu_s": cpu,
                  "rows": sink.rows_written}))
"""

LOCUST = """
import gevent
from locust import FastHttpUser, task
from locust.env import Environment
from locust.user.wait_time import constant
import resource, time

class Bare(FastHttpUser):
    host = CONFIG["url"]
    wait_time = constant(0)
    @task
    def get(self):
        self.client.get("/")

env = Environment(user_classes=[Bare], host=CONFIG["url"])
runner = env.create_local_runner()
before = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
runner.start(CONFIG["concurrency"], spawn_rate=CONFIG["concurrency"])
gevent.sleep(CONFIG["seconds"])
runner.quit()
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(json.dumps({"completed": env.stats.total.num_requests, "errors": env.stats.total.num_failures,
                  "wall_s": wall, "cpu_s": cpu}))
"""


OURS, BARE = "tailscope open loop + records", "bare Locust FastHttpUser"
GENERATORS = {OURS: TAILSCOPE, BARE: LOCUST}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = {"seconds": args.seconds, "concurrency": args.concurrency, "requests": args.requests}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in GENERATORS}
    with loopback_server() as (url, _):
        config["url"] = url
        for round_number in range(1, args.rounds + 1):
            for name, code in GENERATORS.items():
                r = run_python(code, config)
                rps, per_core = r["completed"] / r["wall_s"], r["completed"] / max(r["cpu_s"], 1e-9)
                figures[name].append((rps, per_core))
                print(f"round {round_number} {name:32s} {r['completed']:8d} requests ({r['errors']} errors) in "
                      f"{r['wall_s']:.1f} s: {rps:8.0f} req/s, {per_core:8.0f} req per CPU-second", flush=True)
    print(f"load average at the end: {load_average()}")
    medians = {name: (statistics.median(f[0] for f in rows), statistics.median(f[1] for f in rows))
               for name, rows in figures.items()}
    for name, (rps, per_core) in medians.items():
        print(f"median  {name:32s} {rps:8.0f} req/s, {per_core:8.0f} req per CPU-second")
    ours, bare = medians[OURS], medians[BARE]
    per_round = [o[1] / b[1] for o, b in zip(figures[OURS], figures[BARE])]
    print(f"ratio tailscope / Locust (medians): {ours[0] / bare[0]:.2f} (req/s), {ours[1] / bare[1]:.2f} (per core); "
          f"per round (per core): {', '.join(f'{r:.2f}' for r in per_round)}   goal >= 0.8")


if __name__ == "__main__":
    main()
