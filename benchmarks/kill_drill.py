"""Kill-9 drill: kill the harness at random moments, then recover each run with `tailscope report`.

    python benchmarks/kill_drill.py                 # 20 kill points, runs of 20 s at 100 req/s
    python benchmarks/kill_drill.py --kills 5       # a quicker drill

For each kill point (uniform over the run, seeded) a real `tailscope run`
against the reference target (spans exported to the run's receiver) is
killed with SIGKILL; then `tailscope report` must analyse the run directory.

Printed per kill and in total:

* recovered: `tailscope report` exited 0/1 and the analysis says
  "incomplete: harness stopped at …";
* children: the receiver and the sampler exited on the harness's death
  (PR_SET_PDEATHSIG) within 10 s;
* requests lost: requests whose scheduled time was at least 0.2 s before the
  kill and that are missing from requests.arrow. The reference is the arrival
  schedule itself (the seeded plan, replayed here). It is an upper bound: a
  request still in flight at the kill (slower than 0.2 s) counts as lost too;
* seconds lost: kill time minus the end of the last recorded request, and the
  same as a ratio of the flush interval (goal <= 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

from tailscope.loadgen.arrivals import schedule_offsets_ns
from tailscope.rundir import FLUSH_INTERVAL_S, load_run
from tailscope.scenario_model.scenario import load_scenario
from tailscope.support.python_child import python_module

ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SETTLED_S = 0.2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def write_scenario(path: str, url: str, duration_s: float, rate: float) -> str:
    with open(path, "w") as fh:
        fh.write(f"""name: drill
target: {url}
duration: {duration_s}s
timeout: 2s
seed: 11
arrival: {{process: poisson, rate: {rate}}}
classes:
  - name: text
    path: /v1/infer/text
    headers: {{Content-Type: application/json}}
    payload: {{kind: json_text, size: 100}}
signals: {{rate: 2}}
""")
    return path


def expected_before(scenario_path: str, origin_ns: int, until_ns: int) -> int:
    """Requests the seeded plan schedules from ``origin_ns`` up to ``until_ns``."""
    scenario = load_scenario(scenario_path)
    offsets = np.concatenate(list(schedule_offsets_ns(scenario.arrival, scenario.duration_s,
                                                      scenario.max_requests, scenario.seed)))
    return int(np.sum(origin_ns + offsets <= until_ns)), int(offsets[0])


def one_kill(scenario_path: str, out: str, receiver_port: int, delay_s: float) -> dict:
    proc = subprocess.Popen(python_module("tailscope.cli.main", "run", scenario_path, "--out", out,
                                          "--receiver-port", str(receiver_port), "--receiver-grpc-port", "-1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = None
    try:
        deadline = time.monotonic() + 60
        while run_dir is None and time.monotonic() < deadline:
            for name in os.listdir(out) if os.path.isdir(out) else []:
                if os.path.exists(os.path.join(out, name, "manifest.json")):
                    run_dir = os.path.join(out, name)
            time.sleep(0.02)
        time.sleep(delay_s)
        children = children_of(proc.pid)
        kill_ns = time.time_ns()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphans = [p for p in children if alive(p)]
    report = subprocess.run(python_module("tailscope.cli.main", "report", run_dir), capture_output=True,
                            text=True)
    result = {"delay_s": delay_s, "children": len(children), "orphans": len(orphans),
              "report_exit": report.returncode, "recovered": False}
    analysis_path = os.path.join(run_dir, "analysis.json")
    if report.returncode in (0, 1) and os.path.exists(analysis_path):
        with open(analysis_path) as fh:
            analysis = json.load(fh)
        result["recovered"] = bool(analysis["run"]["incomplete"]) and \
            analysis["run"]["incomplete_reason"].startswith("incomplete: harness stopped at ")
    requests = load_run(run_dir).requests
    scheduled = requests.column("scheduled_ns").to_numpy(zero_copy_only=False)
    ends = requests.column("end_ns").drop_null().to_numpy()
    result["records"] = int(len(scheduled))
    if len(scheduled):
        _, first_offset = expected_before(scenario_path, 0, 0)
        origin = int(scheduled.min()) - first_offset
        settled = kill_ns - int(SETTLED_S * 1e9)
        expected, _ = expected_before(scenario_path, origin, settled)
        result["lost_requests"] = max(0, expected - int(np.sum(scheduled <= settled)))
        result["lost_s"] = (kill_ns - int(ends.max())) / 1e9 if len(ends) else None
    else:
        result["lost_requests"], result["lost_s"] = None, None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="tailscope-drill-")
    port, receiver_port = free_port(), free_port()
    env = dict(os.environ, **ENV, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver_port}",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_BSP_SCHEDULE_DELAY="200")
    target = subprocess.Popen(python_module("tailscope.targets.reference", "--host", "127.0.0.1", "--port", str(port)),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in target.stdout:
        if line.startswith(b"LISTENING"):
            break
    scenario = write_scenario(os.path.join(work, "drill.yaml"), f"http://127.0.0.1:{port}", args.duration, args.rate)
    results = []
    try:
        for i in range(args.kills):
            delay = rng.uniform(0.0, args.duration - 0.5)
            r = one_kill(scenario, os.path.join(work, f"k{i:02d}"), receiver_port, delay)
            results.append(r)
            print(f"kill {i + 1:2d} at {delay:5.1f} s: recovered={r['recovered']} records={r['records']:5d} "
                  f"lost_requests={r['lost_requests']} lost_s={r['lost_s'] if r['lost_s'] is None else round(r['lost_s'], 3)} "
                  f"children={r['children']} orphans={r['orphans']}", flush=True)
    finally:
        os.kill(target.pid, signal.SIGTERM)
        try:
            target.wait(timeout=15)
        except subprocess.TimeoutExpired:
            target.kill()
            target.wait()
    recovered = sum(r["recovered"] for r in results)
    lost = [r["lost_requests"] for r in results if r["lost_requests"] is not None]
    lost_s = [r["lost_s"] for r in results if r["lost_s"] is not None]
    print(f"recovered {recovered}/{len(results)} runs; orphaned children {sum(r['orphans'] for r in results)}")
    if lost:
        print(f"requests lost per recovery: mean {np.mean(lost):.1f}, max {max(lost)} "
              f"(at {args.rate:g} req/s: max {max(lost) / args.rate:.2f} s of requests; goal <= 1 s)")
    if lost_s:
        print(f"seconds lost (kill − last recorded end): median {np.median(lost_s):.3f} s, max {max(lost_s):.3f} s "
              f"= {max(lost_s) / FLUSH_INTERVAL_S:.2f}× the {FLUSH_INTERVAL_S:g} s flush interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
