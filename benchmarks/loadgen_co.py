"""Coordinated omission: tailscope vs the analytic answer vs a closed-loop Locust run.

    python benchmarks/loadgen_co.py [--seconds 30] [--rate 100]

A loopback server stalls for 1 s at the end of every 5 s (requests arriving
in a stall are answered when it ends). tailscope drives it open loop at a
constant ``--rate`` for ``--seconds``; its P99 (latency from the scheduled
send) is compared with the **analytic** P99 of that same schedule — each
scheduled time's latency is the rest of the stall it falls in (0 outside a
stall), plus the median unstalled service time — and with Locust's own P99
from a closed-loop run (10 users at ``constant_throughput(rate/10)``, the
usual way to ask Locust for a rate) against the same server for the same
time. Printed side by side, with tailscope's and Locust's error against the
analytic value. Goal (issue 3): tailscope within 5% of the analytic P99.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from bench_common import load_average, loopback_server, run_python

STALL_EVERY_S, STALL_FOR_S = 5.0, 1.0

TAILSCOPE = """
from tailscope.loadgen.local_runner import run_load
import tempfile
from tailscope.loadgen.spec import ArrivalSpec, LoadPlan, RequestClass
from tailscope.rundir import Appender, read_stream, schema
plan = LoadPlan(target=CONFIG["url"], duration_s=CONFIG["seconds"],
                arrival=ArrivalSpec("constant", rate=float(CONFIG["rate"])),
                classes=(RequestClass("get", "/", method="GET"),), timeout_s=5.0)
with tempfile.TemporaryDirectory() as tmp:
    sink = Appender(tmp + "/requests.arrow", schema.REQUESTS_SCHEMA)
    run_load(plan, sink, flush=(sink,))
    sink.close()
    table = read_stream(tmp + "/requests.arrow", schema.REQUESTS_SCHEMA).table
print(json.dumps({c: table.column(c).to_pylist() for c in ("scheduled_ns", "sent_ns", "end_ns", "error_kind")}))
"""

LOCUST = """
import gevent
from locust import FastHttpUser, task
from locust.env import Environment
from locust.user.wait_time import constant_throughput

class Closed(FastHttpUser):
    host = CONFIG["url"]
    wait_time = constant_throughput(CONFIG["rate"] / 10)
    @task
    def get(self):
        self.client.get("/")

env = Environment(user_classes=[Closed], host=CONFIG["url"])
runner = env.create_local_runner()
runner.start(10, spawn_rate=10)
gevent.sleep(CONFIG["seconds"])
runner.quit()
total = env.stats.total
print(json.dumps({"p99_ms": total.get_response_time_percentile(0.99), "requests": total.num_requests,
                  "p95_ms": total.get_response_time_percentile(0.95)}))
"""


def nearest_rank(values: np.ndarray, q: float) -> float:
    ordered = np.sort(values)
    return float(ordered[max(1, math.ceil(q * len(ordered))) - 1])


def analytic_latency_ms(scheduled_ns: np.ndarray, server_start_ns: int, service_ms: float) -> np.ndarray:
    """Latency each scheduled send must see: the rest of its stall plus the service time."""
    every, stall = int(STALL_EVERY_S * 1e9), int(STALL_FOR_S * 1e9)
    phase = (scheduled_ns - server_start_ns) % every
    wait_ns = np.where(phase >= every - stall, every - phase, 0)
    return wait_ns / 1e6 + service_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    config = {"seconds": args.seconds, "rate": args.rate}
    with loopback_server("--stall-every", str(STALL_EVERY_S), "--stall-for", str(STALL_FOR_S)) as (url, start_ns):
        config["url"] = url
        ours = run_python(TAILSCOPE, config)
        locust = run_python(LOCUST, config)
    scheduled = np.array(ours["scheduled_ns"], dtype=np.int64)
    ok = np.array([k is None for k in ours["error_kind"]])
    end = np.array([e if e is not None else 0 for e in ours["end_ns"]], dtype=np.int64)
    latency_ms = (end - scheduled)[ok] / 1e6
    expected = analytic_latency_ms(scheduled, start_ns, 0.0)
    unstalled = expected[ok] == 0
    service_ms = float(np.median(latency_ms[unstalled])) if unstalled.any() else 0.0
    analytic = nearest_rank(expected + service_ms, 0.99)
    measured = nearest_rank(latency_ms, 0.99)
    analytic95, measured95 = nearest_rank(expected + service_ms, 0.95), nearest_rank(latency_ms, 0.95)
    print(f"load average at the end: {load_average()}")
    print(f"server stalls {STALL_FOR_S:g} s every {STALL_EVERY_S:g} s; {args.rate:g} req/s for {args.seconds:g} s")
    print(f"{'':34s} {'P99 ms':>9} {'vs analytic':>12} {'P95 ms':>9} {'vs analytic':>12} {'requests':>9}")
    print(f"{'analytic (the schedule)':34s} {analytic:9.1f} {1.0:12.3f} {analytic95:9.1f} {1.0:12.3f} "
          f"{len(scheduled):9d}")
    print(f"{'tailscope (open loop)':34s} {measured:9.1f} {measured / analytic:12.3f} {measured95:9.1f} "
          f"{measured95 / analytic95:12.3f} {int(ok.sum()):9d}")
    print(f"{'Locust closed loop (its own stats)':34s} {locust['p99_ms']:9.1f} {locust['p99_ms'] / analytic:12.3f} "
          f"{locust['p95_ms']:9.1f} {locust['p95_ms'] / analytic95:12.3f} {locust['requests']:9d}")
    verdict = "met" if abs(measured / analytic - 1) <= 0.05 else "missed"
    print(f"goal: tailscope within 5% of the analytic P99: {verdict} ({100 * (measured / analytic - 1):+.1f}%)")


if __name__ == "__main__":
    main()
