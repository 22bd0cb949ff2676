"""What the signal samplers cost, and how well they keep their schedule.

Runs the real sampler process (``python -m tailscope.signals``) with
every default sampler against a 9-thread target process, for ``--seconds``
each at 10 Hz and 100 Hz, and once at 10 Hz with a Prometheus endpoint (a real
prometheus_client exposition of ~100 samples on loopback) scraped every tick.
Reference measured in the same run: the same sampler process with no source
available to it (``--rate`` loop, probes and writes only: the fixed cost of
the process), so the figures separate the samplers from the interpreter.

CPU = utime + stime of the sampler process (/proc/PID/stat) between 1 s after
start (start-up excluded) and the end, over the same wall time: a share of one
core. Jitter = how late each tick started after its deadline (the sampler's
own record, ``signals.json`` ``sampling.lateness_ms``), and the P99 deviation
of the recorded read times of the first sampler from the ideal schedule
``t0 + k / rate`` (computed here from ``signals.arrow``).

    python benchmarks/signals_overhead.py [--seconds 20]

Goal (issue 5): <= 1 % of one core at 10 Hz.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from tailscope.rundir import read_json, read_stream, schema
from tailscope.support.python_child import python_argv, python_module

TARGET_CODE = (
    "import threading, time\n"
    "for _ in range(8): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
    "time.sleep(3600)\n"
)
EXPOSITION_CODE = (
    "import sys, time\n"
    "from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server\n"
    "r = CollectorRegistry()\n"
    "g = Gauge('pending_requests', 'queue', ('model',), registry=r)\n"
    "h = Histogram('stage_seconds', 'stage', ('stage', 'model'), registry=r)\n"
    "for m in range(4):\n"
    "    g.labels(str(m)).set(m)\n"
    "    for s in ('pre', 'infer', 'post'):\n"
    "        h.labels(s, str(m)).observe(0.01)\n"
    "server, _ = start_http_server(0, addr='127.0.0.1', registry=r)\n"
    "print(server.server_port, flush=True)\n"
    "time.sleep(3600)\n"
)
WARMUP_S = 1.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schedule_deviation_p99_ms(run_dir: str, rate_hz: float) -> float | None:
    """P99 |read time - (t0 + k / rate)| of the first sampler's reads (host.cpu.user_s), ms."""
    table = read_stream(os.path.join(run_dir, schema.SIGNALS), schema.SIGNALS_SCHEMA).table
    rows = [r["t_ns"] for r in table.to_pylist() if r["series"] == "host.cpu.user_s"]
    if len(rows) < 3:
        return None
    t = np.sort(np.asarray(rows, dtype=np.int64))
    period = 1e9 / rate_hz
    k = np.round((t - t[0]) / period)
    return float(np.percentile(np.abs((t - t[0]) - k * period), 99) / 1e6)


def measure(label: str, args: list[str], seconds: float) -> dict:
    """Run the sampler process with ``args`` for ``seconds`` (+ warm-up); its CPU share and jitter."""
    run_dir = tempfile.mkdtemp(prefix="tailscope-bench-signals-")
    sampler = subprocess.Popen(python_module("tailscope.signals", "--run-dir", run_dir, *args))
    try:
        time.sleep(WARMUP_S)
        cpu0, wall0 = cpu_seconds(sampler.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = cpu_seconds(sampler.pid), time.monotonic()
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(timeout=30)
    finally:
        if sampler.poll() is None:
            sampler.kill()
            sampler.wait()
    meta = read_json(os.path.join(run_dir, schema.SIGNALS_META), {})
    sampling = meta.get("sampling") or {}
    rate = float(args[args.index("--rate") + 1])
    return {
        "label": label,
        "share": (cpu1 - cpu0) / (wall1 - wall0),
        "series": len(meta.get("series", {})),
        "late_p99_ms": (sampling.get("lateness_ms") or {}).get("p99"),
        "missed": sampling.get("missed_ticks"),
        "ticks": sampling.get("ticks"),
        "deviation_p99_ms": schedule_deviation_p99_ms(run_dir, rate),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per configuration")
    args = parser.parse_args()
    target = subprocess.Popen(python_argv("-c", TARGET_CODE))
    exposition = subprocess.Popen(python_argv("-c", EXPOSITION_CODE), stdout=subprocess.PIPE, text=True)
    try:
        metrics_url = f"http://127.0.0.1:{int(exposition.stdout.readline())}/metrics"
        time.sleep(0.5)
        pid = ["--pid", str(target.pid)]
        results = [
            measure("reference: sampler process, no target (host samplers only)", ["--rate", "10"], args.seconds),
            measure("all samplers, 9-thread target, 10 Hz", ["--rate", "10", *pid], args.seconds),
            measure("all samplers, 9-thread target, 100 Hz", ["--rate", "100", *pid], args.seconds),
            measure("all samplers + Prometheus scrape (~50 samples), 10 Hz",
                    ["--rate", "10", *pid, "--prometheus", metrics_url], args.seconds),
        ]
    finally:
        for process in (target, exposition):
            process.kill()
            process.wait()
    print(f"{'configuration':58} {'% of a core':>11} {'series':>6} {'tick late P99':>13} "
          f"{'read dev P99':>12} {'missed':>6}")
    for r in results:
        print(f"{r['label']:58} {100 * r['share']:10.2f}% {r['series']:6d} "
              f"{r['late_p99_ms'] or 0:11.2f}ms {r['deviation_p99_ms'] or 0:10.2f}ms {r['missed'] or 0:6d}")
    ref, ten, hundred, prom = results
    print()
    print(f"10 Hz, all samplers: {100 * ten['share']:.2f}% of one core (goal <= 1%: "
          f"{'met' if ten['share'] <= 0.01 else 'NOT met'}); {ten['share'] / max(ref['share'], 1e-9):.1f}x the "
          f"host-only reference")
    print(f"100 Hz / 10 Hz CPU ratio: {hundred['share'] / max(ten['share'], 1e-9):.1f}x "
          f"(10x the ticks)")
    print(f"Prometheus scrape adds {100 * (prom['share'] - ten['share']):.2f}% of one core at 10 Hz "
          f"({prom['share'] / max(ten['share'], 1e-9):.2f}x)")
    print(f"sampling jitter at 10 Hz: P99 tick lateness {ten['late_p99_ms']:.2f} ms = "
          f"{ten['late_p99_ms'] / 100:.1%} of the 100 ms period; at 100 Hz {hundred['late_p99_ms']:.2f} ms = "
          f"{hundred['late_p99_ms'] / 10:.1%} of the 10 ms period")
    return 0


if __name__ == "__main__":
    sys.exit(main())
