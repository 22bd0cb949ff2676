"""Soak benchmark: a long run at a steady rate against the reference target.

    python benchmarks/soak.py               # 30 minutes at 300 requests/s (quote this one)
    python benchmarks/soak.py --minutes 2   # the CI version
    python benchmarks/soak.py --minutes 2 --rate 20 \
        --retention "{full_records_around_spikes: 10s, sample_rate: 0.05, disk_budget: 200MB}"

Two real `tailscope run`s against one reference target (spans exported to
the run's receiver):

1. the **reference**: one minute with every record kept (no retention);
2. the **soak**: ``--minutes`` with ``retention: {full_records_around_spikes:
   30s, sample_rate: 0.01, disk_budget: 2GB}`` (``--retention``: another policy,
   e.g. issue 26's ``{full_records_around_spikes: 10s, sample_rate: 0.05,
   disk_budget: 200MB}``).

Printed, each against its reference measured here:

* harness RSS at the start (median of the first minute after 30 s of warm-up)
  and at the end (median of the last minute), growth in MB (goal <= 50 MB) —
  and the same for the receiver and the sampler;
* disk bytes per request of the soak vs the reference (full records) — and
  the projected size of a 24-hour run at 1,000 requests/s;
* correctness of the soak's report, which computes counts and percentiles
  from windows.arrow histograms: total requests vs the generator's own count
  (manifest ``load.scheduled``), and P50/P99 vs the uniform trace-id
  sample of records (an unbiased sample; its 95 % CI is printed);
* the report's wall time;
* the retained figures: records kept of requests counted, keep intervals and
  the share of the run they cover, spikes with their percentiles from the
  histograms, spikes whose stage split is unavailable (no full record kept),
  the exit codes of `tailscope run` and `tailscope report`, and ``.reserve-*``
  files left in the run directory (goal 0).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_common import start_reference_target, stop_process  # benchmarks/ is on sys.path

from tailscope.analyzers.stats.percentiles import percentile_ci
from tailscope.rundir import load_run, read_stream, schema
from tailscope.rundir.manifest import RESERVE_FILE
from tailscope.rundir.retention_policy import trace_sampled
from tailscope.support.python_child import python_module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: A lighter model than the default so that one core serves 300 requests/s.
TARGET_ARGS = ("--model-dim", "64", "--max-batch-size", "32")


#: The soak's default ``retention:`` section (``--retention``).
DEFAULT_RETENTION = "{full_records_around_spikes: 30s, sample_rate: 0.01, disk_budget: 2GB}"


def scenario(path: str, url: str, minutes: float, rate: float, retention: str | None) -> str:
    """A two-class text scenario; ``retention``: its ``retention:`` section as YAML flow text (None: none)."""
    text = f"""name: soak
target: {url}
duration: {minutes * 60:.0f}s
max_requests: 100000000
timeout: 5s
seed: 5
arrival: {{process: poisson, rate: {rate}}}
classes:
  - name: short_text
    weight: 3
    path: /v1/infer/text
    headers: {{Content-Type: application/json}}
    payload: {{kind: json_text, size: {{dist: lognormal, median: 200, sigma: 0.5, min: 16, max: 2000}}}}
  - name: long_text
    weight: 1
    path: /v1/infer/text
    headers: {{Content-Type: application/json}}
    payload: {{kind: json_text, size: {{dist: lognormal, median: 1000, sigma: 0.4, min: 200, max: 4000}}}}
signals: {{rate: 1}}
"""
    if retention:
        text += f"retention: {retention}\n"
    with open(path, "w") as fh:
        fh.write(text)
    return path


def run(scenario_path: str, out: str, receiver_port: int) -> tuple[str, float, int, int]:
    """`tailscope run`, then `tailscope report` on its run directory; returns (run dir, seconds the
    report took, the run's exit code, the report's exit code)."""
    proc = subprocess.run(python_module("tailscope.cli.main", "run", scenario_path, "--out", out,
                                        "--receiver-port", str(receiver_port), "--receiver-grpc-port", "-1"),
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1, 3):  # passed, failed, inconclusive/incomplete: the run has a report
        raise RuntimeError(f"tailscope run failed ({proc.returncode}): {proc.stderr[-3000:]}")
    run_dir = os.path.join(out, sorted(os.listdir(out))[-1])
    started = time.perf_counter()
    report = subprocess.run(python_module("tailscope.cli.main", "report", run_dir), capture_output=True,
                            check=False)
    return run_dir, time.perf_counter() - started, proc.returncode, report.returncode


def rss_growth(run_dir: str, series: str) -> tuple[float, float] | None:
    """(start MB, end MB): median of the minute after a 2-minute warm-up (the retention rings
    fill in their first ~50 s), median of the last minute."""
    table = read_stream(os.path.join(run_dir, "signals.harness.arrow"), schema.SIGNALS_SCHEMA).table
    rows = table.filter(__import__("pyarrow").compute.equal(table.column("series"), series))
    if len(rows) < 10:
        return None
    t = rows.column("t_ns").to_numpy()
    v = rows.column("value").to_numpy() / 2**20
    t0, t1 = t.min(), t.max()
    start = v[(t >= t0 + 120e9) & (t < t0 + 180e9)]
    end = v[t >= t1 - 60e9]
    start = start if len(start) else v[: max(1, len(v) // 4)]
    return float(np.median(start)), float(np.median(end))


def dir_bytes(run_dir: str) -> int:
    return sum(os.path.getsize(os.path.join(run_dir, f)) for f in os.listdir(run_dir)
               if f.endswith((".arrow", ".json")) and f not in ("analysis.json",))


def sample_check(run_dir: str, analysis: dict) -> dict:
    """Histogram percentiles vs the uniform trace-id sample of the kept records."""
    run = load_run(run_dir)
    rate = analysis["retention"]["sample_rate"]
    req = run.requests
    trace = req.column("trace_id").to_pylist()
    error = req.column("error_kind").to_pylist()
    lat = (req.column("end_ns").to_numpy(zero_copy_only=False).astype(np.float64)
           - req.column("scheduled_ns").to_numpy(zero_copy_only=False)) / 1e6
    chosen = np.array([trace_sampled(t, rate) and e is None for t, e in zip(trace, error)])
    sample = np.sort(lat[chosen])
    out = {"sample_n": int(len(sample)), "rate": rate}
    for key, p in (("p50", 0.5), ("p99", 0.99)):
        entry = percentile_ci(sample, p)
        out[key] = {"histogram_ms": analysis["summary"]["latency_ms"][key]["value_ms"],
                    "sample_ms": entry["value_ms"], "ci": [entry["ci_low_ms"], entry["ci_high_ms"]]}
    return out


def retained_figures(run_dir: str, analysis: dict) -> list[str]:
    """The retained run's own lines: what was kept, its spikes' sources, stage splits, leftovers."""
    retention = analysis["retention"]
    intervals = retention.get("keep_intervals") or []
    covered_s = sum(hi - lo for lo, hi in intervals) / 1e9
    duration_s = analysis["summary"]["duration_s"] or 0.0
    spikes = analysis["spikes"]
    from_histograms = sum(s.get("percentiles_from") == "histograms" for s in spikes)
    no_split = [s for s in spikes if not s["decomposition"].get("available", True)]
    no_records = sum(s.get("records_kept") == 0 for s in spikes)
    reserves = [f for f in os.listdir(run_dir) if f.startswith(RESERVE_FILE)]
    return [
        f"  retained: {retention['records_kept']:,} records kept of {retention['requests']:,} requests counted "
        f"({retention['kept_share']:.1%}); sample rate {retention['sample_rate']:g} (configured "
        f"{retention['configured_sample_rate']:g}); {len(intervals)} keep intervals covering {covered_s:,.0f} s "
        f"of {duration_s:,.0f} s ({covered_s / duration_s if duration_s else 0:.1%})",
        f"  retained spikes: {len(spikes)}, {from_histograms} with P99 and requests from the histograms; "
        f"{no_records} with no record kept; {len(no_split)} with the stage split unavailable"
        + (f" ({no_split[0]['decomposition']['unavailable_reason']})" if no_split else ""),
        f"  reserve files left after `tailscope report`: {len(reserves)} (goal 0)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--retention", default=DEFAULT_RETENTION,
                        help=f"the soak's retention: section as YAML flow text (default {DEFAULT_RETENTION})")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="tailscope-soak-")
    os.makedirs(out, exist_ok=True)
    port, receiver_port = free_port(), free_port()
    target = start_reference_target(port, receiver_port, *TARGET_ARGS, OTEL_BSP_MAX_QUEUE_SIZE="65536")
    url = f"http://127.0.0.1:{port}"
    try:
        ref_dir, *_ = run(scenario(os.path.join(out, "ref.yaml"), url, 1.0, args.rate, None),
                          os.path.join(out, "reference"), receiver_port)
        soak_dir, report_s, run_exit, report_exit = run(
            scenario(os.path.join(out, "soak.yaml"), url, args.minutes, args.rate, args.retention),
            os.path.join(out, "soak"), receiver_port)
    finally:
        stop_process(target)
    ref = json.load(open(os.path.join(ref_dir, "analysis.json")))
    soak = json.load(open(os.path.join(soak_dir, "analysis.json")))
    manifest = json.load(open(os.path.join(soak_dir, "manifest.json")))
    print(f"soak: {args.minutes:g} min at {args.rate:g} req/s, retention {args.retention}; run dir {soak_dir}")
    for role in ("harness", "receiver", "sampler"):
        growth = rss_growth(soak_dir, f"{role}.rss_bytes")
        if growth:
            print(f"  {role:8s} RSS start {growth[0]:7.1f} MB  end {growth[1]:7.1f} MB  growth "
                  f"{growth[1] - growth[0]:+6.1f} MB  (end/start {growth[1] / growth[0]:.3f}; goal growth <= 50 MB)")
    soak_bytes, ref_bytes = dir_bytes(soak_dir), dir_bytes(ref_dir)
    soak_n, ref_n = soak["summary"]["requests"], ref["summary"]["requests"]
    per_soak, per_ref = soak_bytes / max(soak_n, 1), ref_bytes / max(ref_n, 1)
    kept_share = soak["retention"].get("kept_share") or 0.0
    print(f"  disk: {per_soak:,.1f} B/request with retention (records kept: {kept_share:.1%}, "
          f"{len(soak['retention'].get('keep_intervals') or [])} spike intervals) vs {per_ref:,.1f} B/request "
          f"keeping every record (ratio {per_soak / per_ref:.3f}); unpaced, 24 h at 1,000 req/s would be "
          f"{per_soak * 86.4e6 / 1e9:,.1f} GB: the 2 GB budget's pacing then lowers the sample rate and "
          "skips spike keeps")
    scheduled = (manifest.get("load") or {}).get("scheduled")
    print(f"  requests in the report {soak_n:,} vs scheduled by the generator {scheduled:,} "
          f"(ratio {soak_n / max(scheduled or 1, 1):.5f}); records kept {soak['retention'].get('records_kept', 0):,}")
    check = sample_check(soak_dir, soak)
    for key in ("p50", "p99"):
        c = check[key]
        inside = c["ci"][0] is not None and c["ci"][0] * 0.99 <= c["histogram_ms"] <= c["ci"][1] * 1.01
        print(f"  {key.upper()} from histograms {c['histogram_ms']:.2f} ms vs uniform {check['rate']:g} sample "
              f"{c['sample_ms']:.2f} ms (ratio {c['histogram_ms'] / c['sample_ms']:.3f}; sample 95% CI "
              f"{c['ci'][0]:.2f}-{c['ci'][1]:.2f} ms, n={check['sample_n']:,}) {'inside' if inside else 'OUTSIDE'}")
    print(f"  report of the soak took {report_s:.1f} s; spikes {len(soak['spikes'])}; "
          f"warnings {[w['code'] for w in soak['warnings']]}")
    print(f"  exit codes: tailscope run {run_exit}, tailscope report {report_exit}")
    for line in retained_figures(soak_dir, soak):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
