"""How tailscope names the stop-the-world pauses of a plain FastAPI + OpenTelemetry service.

Runs ``tailscope run`` against tests/stalling_otel_service.py (OpenTelemetry's FastAPI
instrumentation, nothing of tailscope; bursts of full collections holding the GIL) and counts the
latency spikes over the pauses by their top cause: without GC events they should be
``process_stall`` (from the spans alone), with ``--gc-events`` (the snippet of docs/tracing.md)
``gc``; never ``generator``. Also prints the run's ``p99_set_by`` answer.

    python3 benchmarks/stall_diagnosis.py --duration 120 --rate 30 --every-s 10 --burst 3 [--gc-events]

About duration + 15 s of wall time (start-up, the late-span wait, the analysis).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope  # noqa: E402
from reliability_helpers import OwnedProcess, write_scenario  # noqa: E402

#: A spike counts as over a pause when the pause started inside it or this long before it (ns).
LEAD_NS = 2_000_000_000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=120, help="seconds of load")
    parser.add_argument("--rate", type=float, default=30.0, help="requests per second (Poisson)")
    parser.add_argument("--start-s", type=float, default=8.0)
    parser.add_argument("--every-s", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=3)
    parser.add_argument("--heap", type=int, default=500_000)
    parser.add_argument("--gc-events", action="store_true")
    parser.add_argument("--out", default=None, help="keep the run here (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="stall-diagnosis-")
    os.makedirs(out, exist_ok=True)
    receiver_port = free_port()
    count = max(int((args.duration - args.start_s) // args.every_s), 1)
    command = [sys.executable, os.path.join(ROOT, "tests", "stalling_otel_service.py"), "--heap", str(args.heap),
               "--start-s", str(args.start_s), "--every-s", str(args.every_s), "--count", str(count),
               "--burst", str(args.burst)] + (["--gc-events"] if args.gc_events else [])
    service = OwnedProcess(command, stdout=subprocess.PIPE,
                           env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
                                "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        line = service.proc.stdout.readline().decode()
        if not line.startswith("LISTENING "):
            raise SystemExit("the service did not start: " + "".join(service.stderr_lines)[-2000:])
        scenario = write_scenario(os.path.join(out, "stalls.yaml"), f"http://127.0.0.1:{line.split()[1]}",
                                  duration=f"{args.duration}s", rate=args.rate, request_path="/predict")
        result = run_tailscope("run", scenario, "--out", os.path.join(out, "runs"), "--receiver-port",
                               str(receiver_port), "--receiver-grpc-port", "-1", timeout=args.duration + 300)
    finally:
        service.stop()
    pauses = [(int(text.split()[1]), float(text.split()[2])) for text in service.proc.stdout.read().decode().splitlines()
              if text.startswith("PAUSE ")]
    if result.returncode not in (0, 1, 3):
        raise SystemExit(result.stderr[-3000:])
    analysis = load_analysis(only_run_dir(os.path.join(out, "runs")))
    spikes = analysis["spikes"]
    over = [s for s in spikes if any(s["start_ns"] - LEAD_NS <= at < s["end_ns"] for at, _ in pauses)]
    tops = collections.Counter(s["causes"][0]["kind"] for s in over)
    named = collections.Counter(kind for s in over for kind in (c["kind"] for c in s["causes"]))
    lengths = sorted(ms for _, ms in pauses)
    print(f"run: {out}  ({args.duration} s at {args.rate:g} req/s, GC events {'on' if args.gc_events else 'off'})")
    print(f"pauses: {len(pauses)} full collections in {count} bursts of {args.burst}, "
          f"{lengths[0]:.0f}-{lengths[-1]:.0f} ms (median {lengths[len(lengths) // 2]:.0f} ms)")
    print(f"gc_pause events in the run: {analysis['events']['gc_pauses']['count']}")
    print(f"spikes: {len(spikes)}, over a pause: {len(over)}; top causes of those: {dict(tops)}")
    expected = "gc" if args.gc_events else "process_stall"
    if over:
        print(f"named {expected} first: {tops[expected]} of {len(over)} ({tops[expected] / len(over):.0%}); "
              f"generator named in {named['generator']}")
    for finding in analysis["findings"]:
        if finding["kind"] == "p99_set_by":
            print("p99_set_by:", finding["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
