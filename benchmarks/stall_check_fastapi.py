"""Recurring stalls on a service we did not write: the plain FastAPI + OpenTelemetry service
(tests/fastapi_otel_service.py, no tailscope code) stopped with SIGSTOP for ``--pause-ms`` every
``--period`` s (± 5%) while ``tailscope run`` loads it — a stop-the-world pause of the whole process,
as a full collection or swapping in would be. Prints the spikes (the recurring-stall record's
summary and each spike's top cause) and the periodic pattern.

Usage: ``python benchmarks/stall_check_fastapi.py [--rate 50] [--duration 40] [--period 4] [--pause-ms 150]``
(needs fastapi, uvicorn and opentelemetry-instrumentation-fastapi: ``pip install -e '.[test]'``).
The service process is started, paused, resumed and stopped by its PID only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SERVICE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fastapi_otel_service.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--duration", type=int, default=40)
    parser.add_argument("--period", type=float, default=4.0)
    parser.add_argument("--pause-ms", type=float, default=150)
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="stall-check-")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, SERVICE, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        proc.kill()
        raise SystemExit(f"the service did not start: {line!r}")
    scenario = os.path.join(out, "stalls.yaml")
    with open(scenario, "w", encoding="utf-8") as fh:
        fh.write(f"name: stalls\nduration: {args.duration}s\narrival: {{process: poisson, rate: {args.rate}}}\n"
                 "classes:\n  - {name: predict, weight: 1, path: /predict, payload: {kind: fixed, body: \"a b c\"}}\n")
    stop, pauses = threading.Event(), []

    def pauser() -> None:
        time.sleep(5)
        while not stop.is_set():
            os.kill(proc.pid, signal.SIGSTOP)
            pauses.append(time.time())
            time.sleep(args.pause_ms / 1000)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(args.period * random.uniform(0.95, 1.05))

    threading.Thread(target=pauser, daemon=True).start()
    try:
        done = subprocess.run(["tailscope", "run", scenario, "--target", f"http://127.0.0.1:{line.split()[1]}",
                               "--out", os.path.join(out, "runs"), "--receiver-port", str(port),
                               "--receiver-grpc-port", "-1"], capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        time.sleep(args.pause_ms / 1000 + 0.1)
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=15)
    analysis_path = glob.glob(os.path.join(out, "runs", "*", "analysis.json"))
    if not analysis_path:
        raise SystemExit(f"no analysis (exit {done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    with open(analysis_path[0], encoding="utf-8") as fh:
        analysis = json.load(fh)
    origin = analysis["run"]["load_start_ns"]
    median = analysis["summary"]["latency_ms"]["p50"]["value_ms"]
    print(f"exit {done.returncode}; {len(pauses)} pauses of {args.pause_ms:g} ms; latency P50 {median:.1f} ms; "
          f"baseline P99 {analysis['spike_detection']['baseline_p99_ms']:.1f} ms")
    for spike in analysis["spikes"]:
        stalls = (spike.get("recurring_stalls") or {}).get("summary")
        print(f"  {(spike['start_ns'] - origin) / 1e9:5.1f}–{(spike['end_ns'] - origin) / 1e9:5.1f} s "
              f"P99 {spike['p99_ms']:.0f} vs {spike['baseline_p99_ms']:.0f} ms · top cause {spike['causes'][0]['kind']}"
              + (f" · {stalls}" if stalls else ""))
    print("periodic:", analysis["patterns"]["periodic"]["summary"])


if __name__ == "__main__":
    main()
