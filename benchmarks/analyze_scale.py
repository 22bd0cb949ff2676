"""How the analysis scales: synthetic runs of 1, 3 and 10 million requests, analysed end to end.

Each run is one hour at N/3600 requests/s with 3 spans per request (server,
queue_wait, inference: 30 million spans at 10 million requests), every
signal series at 10 Hz for the hour, and four injected faults (gc, throttle,
queue, swap) so spike detection, decomposition and every cause detector do
real work. ``analyze_run`` runs in a fresh subprocess per size; its wall
time and peak memory (the subprocess's maximum RSS) are printed with two
references measured in the same run, on the same data:

- *load*: reading the run directory (``load_run``: the Arrow tables),
- *sort*: a numpy sort of the latency column (the floor for any percentile),

and the ratio analysis / load. Goal (issue 7): 10 million requests within
60 s and 8 GB on the 2-core CI machine. ``--span-names`` analyses each run a
second time with the stage spans left to no rule, so they become stages named
after themselves (the span-tree path a plain OTel service takes), and prints
that time as a ratio of the mapped analysis.

``--duration-s`` shortens the hour (the faults keep their place in the run, scaled): ``--sizes 2.4
--duration-s 120`` is 20,000 requests/s for two minutes.

Usage: ``python benchmarks/analyze_scale.py [--sizes 1,3,10] [--duration-s 3600] [--keep DIR] [--span-names]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tailscope.support.python_child import python_argv

FAULTS = [{"kind": "gc", "at_s": 600, "duration_s": 5, "extra_ms": 120},
          {"kind": "throttle", "at_s": 1500, "duration_s": 8, "extra_ms": 60},
          {"kind": "queue", "at_s": 2400, "duration_s": 6, "extra_ms": 80, "surge": 0.5},
          {"kind": "swap", "at_s": 3000, "duration_s": 10, "extra_ms": 50}]

CHILD = r"""
import json, resource, sys, time
import numpy as np
path, what = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if what in ("analyze", "analyze-span-names"):
    from tailscope.analyzers.analysis import analyze_run
    # analyze-span-names: only `preprocess` has a rule, so queue_wait and inference become
    # stages under their own names (analyzers/stages/span_tree.py), as a plain OTel service's spans do
    analysis = analyze_run(path, stage_map={"preprocess": "preprocess"} if what != "analyze" else None)
    extra = {"spikes": len(analysis["spikes"]),
             "causes": [s["causes"][0]["kind"] for s in analysis["spikes"]]}
elif what == "load":
    from tailscope.rundir import load_run
    run = load_run(path)
    extra = {"rows": len(run.requests) + len(run.spans) + len(run.signals)}
else:
    from tailscope.rundir import load_run
    run = load_run(path)
    start = run.requests.column("scheduled_ns").to_numpy()
    end = run.requests.column("end_ns").to_numpy()
    t0 = time.perf_counter()
    np.sort((end - start) / 1e6)
    extra = {}
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}))
"""


def measure(path: str, what: str) -> dict:
    out = subprocess.run(python_argv("-c", CHILD, path, what), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,3,10", help="millions of requests, comma-separated")
    parser.add_argument("--duration-s", type=float, default=3600.0,
                        help="run length (s); the rate is sizes / duration, the faults placed at the same share of the run")
    parser.add_argument("--keep", default=None, help="keep the generated runs in this folder")
    parser.add_argument("--span-names", action="store_true",
                        help="also analyse with the stage spans unmapped (stages named after the spans)")
    args = parser.parse_args()
    from tailscope.testkit.synthetic import write_synthetic_run

    root = args.keep or tempfile.mkdtemp(prefix="tailscope-scale-")
    print(f"{'requests':>10} {'spans':>11} {'signals':>9} {'write s':>8} {'load s':>7} {'sort s':>7} "
          f"{'analyze s':>9} {'peak MB':>8} {'analyze/load':>12}  causes")
    try:
        for millions in (float(s) for s in args.sizes.split(",")):
            path = os.path.join(root, f"run-{millions:g}M")
            t0 = time.perf_counter()
            scale = args.duration_s / 3600.0
            truth = write_synthetic_run(path, duration_s=args.duration_s, rate=millions * 1e6 / args.duration_s, seed=1,
                                        spikes=[{**fault, "at_s": fault["at_s"] * scale} for fault in FAULTS],
                                        stage_spans=("queue_wait", "inference"),
                                        signal_rate_hz=10, error_rate=0.001)
            written = time.perf_counter() - t0
            load, sort, analyze = measure(path, "load"), measure(path, "sort"), measure(path, "analyze")
            signals = load["rows"] - truth["requests"] - truth["spans"]
            print(f"{truth['requests']:>10,} {truth['spans']:>11,} {signals:>9,} {written:>8.1f} "
                  f"{load['wall_s']:>7.1f} {sort['wall_s']:>7.2f} {analyze['wall_s']:>9.1f} "
                  f"{analyze['max_rss_mb']:>8,.0f} {analyze['wall_s'] / load['wall_s']:>12.1f}  "
                  f"{','.join(analyze['causes'])}", flush=True)
            if args.span_names:
                named = measure(path, "analyze-span-names")
                print(f"{'':>10} span-name stages: analyze {named['wall_s']:.1f} s, peak {named['max_rss_mb']:,.0f} MB, "
                      f"{named['wall_s'] / analyze['wall_s']:.2f}x the mapped analysis", flush=True)
            if not args.keep:
                shutil.rmtree(path, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
