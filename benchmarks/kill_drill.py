"""Kill-9 drill: kill the harness at random moments, then recover each run with `tailscope report`.

    python benchmarks/kill_drill.py                 # 20 kill points, runs of 20 s at 100 req/s
    python benchmarks/kill_drill.py --kills 5       # a quicker drill
    python benchmarks/kill_drill.py --kills 5 --rate 20 \
        --retention "{full_records_around_spikes: 10s, sample_rate: 0.05, disk_budget: 200MB}"

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
  same as a ratio of the flush interval (goal <= 1 s);
* reserves left: ``.reserve-*`` files in the run directory after `tailscope
  report` (goal 0).

With ``--retention`` (a ``retention:`` section as YAML flow text) the runs keep
records selectively, so requests are counted from windows.arrow instead: the
requests lost are those scheduled before the end of the last window that ended
at least 0.2 s before the kill minus the requests its windows counted, seconds
lost are the kill time minus that window's end (window increments are
appended every second of request end time, then flushed). Also printed per
kill: records kept of requests counted, and the spikes whose stage split is
unavailable because no full record of them was kept.
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
from tailscope.rundir.manifest import RESERVE_FILE
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


def write_scenario(path: str, url: str, duration_s: float, rate: float, retention: str | None = None) -> str:
    """The drill's scenario; ``retention``: its ``retention:`` section as YAML flow text (None: none)."""
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
""" + (f"retention: {retention}\n" if retention else ""))
    return path


def expected_before(scenario_path: str, origin_ns: int, until_ns: int) -> int:
    """Requests the seeded plan schedules from ``origin_ns`` up to ``until_ns``."""
    scenario = load_scenario(scenario_path)
    offsets = np.concatenate(list(schedule_offsets_ns(scenario.arrival, scenario.duration_s,
                                                      scenario.max_requests, scenario.seed)))
    return int(np.sum(origin_ns + offsets <= until_ns)), int(offsets[0])


def window_counts(run_dir: str, settled_ns: int) -> tuple[int, int | None]:
    """(requests counted in windows.arrow by the windows that ended by ``settled_ns``, the last such
    window's end in epoch ns; None without one)."""
    windows = load_run(run_dir).windows
    if windows is None or len(windows) == 0:
        return 0, None
    end = windows.column("end_ns").to_numpy()
    done = end <= settled_ns
    if not done.any():
        return 0, None
    return int(windows.column("requests").to_numpy()[done].sum()), int(end[done].max())


def schedule_origin(scenario_path: str, scheduled: np.ndarray) -> int | None:
    """The plan's origin (epoch ns) from a sample of its records: each request is scheduled at
    origin + one of the seeded plan's offsets, so the origin is the candidate (the first record's time
    minus an offset) under which the most records fall exactly on an offset. None without records."""
    if len(scheduled) == 0:
        return None
    scenario = load_scenario(scenario_path)
    offsets = np.concatenate(list(schedule_offsets_ns(scenario.arrival, scenario.duration_s,
                                                      scenario.max_requests, scenario.seed)))
    first, sample = int(scheduled.min()), np.sort(scheduled.astype(np.int64))[:200]
    candidates = first - offsets
    hits = [int(np.isin(sample - c, offsets).sum()) for c in candidates]
    return int(candidates[int(np.argmax(hits))])


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
    analysis = None
    analysis_path = os.path.join(run_dir, "analysis.json")
    if report.returncode in (0, 1, 3) and os.path.exists(analysis_path):  # 3: INCOMPLETE, as a killed run is
        with open(analysis_path) as fh:
            analysis = json.load(fh)
        result["recovered"] = bool(analysis["run"]["incomplete"]) and \
            analysis["run"]["incomplete_reason"].startswith("incomplete: harness stopped at ")
    result["reserves_left"] = sum(name.startswith(RESERVE_FILE) for name in os.listdir(run_dir))
    requests = load_run(run_dir).requests
    scheduled = requests.column("scheduled_ns").to_numpy(zero_copy_only=False)
    ends = requests.column("end_ns").drop_null().to_numpy()
    result["records"] = int(len(scheduled))
    retained = analysis is not None and (analysis.get("retention") or {}).get("sampled")
    if retained:
        result["counted"] = analysis["retention"]["requests"]
        result["no_stage_split"] = sum(not s["decomposition"].get("available", True) for s in analysis["spikes"])
        result["spikes"] = len(analysis["spikes"])
        counted, window_end = window_counts(run_dir, kill_ns - int(SETTLED_S * 1e9))
        origin = schedule_origin(scenario_path, scheduled)
        if window_end is not None and origin is not None:
            expected, _ = expected_before(scenario_path, origin, window_end - 1)
            result["lost_requests"] = max(0, expected - counted)
            result["lost_s"] = (kill_ns - window_end) / 1e9
        else:
            result["lost_requests"], result["lost_s"] = None, None
    elif len(scheduled):
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
    parser.add_argument("--retention", default=None,
                        help="a retention: section as YAML flow text, e.g. \"{full_records_around_spikes: 10s, "
                             "sample_rate: 0.05, disk_budget: 200MB}\" (default: every record kept)")
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
    scenario = write_scenario(os.path.join(work, "drill.yaml"), f"http://127.0.0.1:{port}", args.duration, args.rate,
                              args.retention)
    if args.retention:
        print(f"retention: {args.retention}", flush=True)
    results = []
    try:
        for i in range(args.kills):
            delay = rng.uniform(0.0, args.duration - 0.5)
            r = one_kill(scenario, os.path.join(work, f"k{i:02d}"), receiver_port, delay)
            results.append(r)
            print(f"kill {i + 1:2d} at {delay:5.1f} s: recovered={r['recovered']} records={r['records']:5d} "
                  f"lost_requests={r['lost_requests']} lost_s={r['lost_s'] if r['lost_s'] is None else round(r['lost_s'], 3)} "
                  f"children={r['children']} orphans={r['orphans']} reserves_left={r['reserves_left']}"
                  + (f" counted={r['counted']} spikes={r['spikes']} no_stage_split={r['no_stage_split']}"
                     if "counted" in r else ""), flush=True)
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
    what = "counted in windows.arrow" if args.retention else "recorded"
    print(f"recovered {recovered}/{len(results)} runs; orphaned children {sum(r['orphans'] for r in results)}; "
          f"reserve files left {sum(r['reserves_left'] for r in results)} (goal 0)")
    counted = [r for r in results if "counted" in r]
    if counted:
        records, requests = sum(r["records"] for r in counted), sum(r["counted"] for r in counted)
        print(f"retained: {records:,} records kept of {requests:,} requests counted ({records / max(requests, 1):.1%}); "
              f"{sum(r['spikes'] for r in counted)} spikes, {sum(r['no_stage_split'] for r in counted)} with the "
              "stage split unavailable (no full record kept)")
    if lost:
        print(f"requests lost per recovery: mean {np.mean(lost):.1f}, max {max(lost)} "
              f"(at {args.rate:g} req/s: max {max(lost) / args.rate:.2f} s of requests; goal <= 1 s)")
    if lost_s:
        print(f"seconds lost (kill − last {what} end): median {np.median(lost_s):.3f} s, max {max(lost_s):.3f} s "
              f"= {max(lost_s) / FLUSH_INTERVAL_S:.2f}× the {FLUSH_INTERVAL_S:g} s flush interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
