"""Requests per second per core: tailscope's open-loop user with full
recording vs bare Locust ``FastHttpUser`` (no wait), same loopback server.

    python benchmarks/loadgen_throughput.py [--requests 20000] [--seconds 10] [--concurrency 64]

Each generator runs in its own process pinned to one core (the server on the
other), with the same concurrency. tailscope offers far more than it can send
(a constant 200,000 req/s, bounded by ``--requests`` so that no backlog is
left to record as dropped; the in-flight cap holds ``concurrency`` requests),
writes every request's record to an Arrow stream (as in a real run) and
tracks lateness; Locust runs ``concurrency`` users with
``wait_time = constant(0)`` for ``--seconds``. Figures: completed requests per wall second and
per CPU second of the generator process, and tailscope ÷ Locust. Goal (issue
3): ratio >= 0.8.
"""

from __future__ import annotations

import argparse

from bench_common import load_average, loopback_server, run_python

TAILSCOPE = """
from tailscope.loadgen.runner import run_load
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    config = {"seconds": args.seconds, "concurrency": args.concurrency, "requests": args.requests}
    with loopback_server() as (url, _):
        config["url"] = url
        ours = run_python(TAILSCOPE, config)
        bare = run_python(LOCUST, config)
    print(f"load average at the end: {load_average()}")
    rows = []
    for name, r in (("tailscope open loop + records", ours), ("bare Locust FastHttpUser", bare)):
        rps, per_core = r["completed"] / r["wall_s"], r["completed"] / max(r["cpu_s"], 1e-9)
        rows.append((rps, per_core))
        print(f"{name:32s} {r['completed']:8d} requests ({r['errors']} errors) in {r['wall_s']:.1f} s: "
              f"{rps:8.0f} req/s, {per_core:8.0f} req per CPU-second")
    print(f"ratio tailscope / Locust: {rows[0][0] / rows[1][0]:.2f} (req/s), "
          f"{rows[0][1] / rows[1][1]:.2f} (per core)   goal >= 0.8")


if __name__ == "__main__":
    main()
