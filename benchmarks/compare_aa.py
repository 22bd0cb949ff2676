"""A/A comparisons of the reference target: the false "REGRESSION" rate and the detectable P99 change.

    python benchmarks/compare_aa.py record --out /tmp/aa --runs 44 --seconds 20 --prefix aa
    python benchmarks/compare_aa.py record --out /tmp/aa --runs 6 --seconds 60 --prefix power
    python benchmarks/compare_aa.py record --out /tmp/aa --runs 78 --seconds 10 --prefix ab
    python benchmarks/compare_aa.py judge --out /tmp/aa --series aa,ab [--method request] [--no-power]

``record`` makes real runs one after the other: for each, a fresh reference target (the
``tailscope target`` service, default model, its spans exported to the run's receiver) on a free
loopback port, then ``tailscope run scenarios/demo.yaml --duration D`` against it (40 requests/s
Poisson, the demo's mixed classes), then the target is stopped by PID. Every run is a normal run
directory under ``OUT/PREFIX-NN`` (nothing changes between runs: an A/A series).

``judge`` re-reads the recorded runs and judges them with the comparison of this checkout
(``analyzers/comparison``; docs/analyzers/compare.md), printing:

* **false-alarm rate, 1 vs 1**: per series (``--series``), disjoint consecutive pairs of its runs
  (run 2k+1 against run 2k), the share judged a REGRESSION (any failed check); ``--method request``
  gives the same shares for the old per-request bootstrap;
* **false-alarm rate, 3 vs 3**: disjoint sextets of six consecutive runs, split consecutively
  (runs 6k+3..6k+5 against 6k..6k+2) and interleaved (6k+1, 6k+3, 6k+5 against 6k, 6k+2, 6k+4);
* **power, 3 vs 3 of 60 s**: the ``power`` runs split 3 + 3; the new side's latencies (and service
  times) multiplied by ``1 + s`` (a known multiplicative slowdown added to real recorded
  runs), for s on a grid; for each s, the share of the 20 ways to split the six runs in 3 + 3 in
  which the ``all`` latency P99 row is judged regressed. The smallest s with a share >= 80% is
  the detectable change.

Every process started here is stopped by PID; load goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import subprocess
import sys
import time

from bench_common import start_reference_target, stop_process  # benchmarks/ is on sys.path

from tailscope.support.python_child import python_module

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(os.path.dirname(HERE), "scenarios", "demo.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(out: str, runs: int, seconds: float, prefix: str) -> None:
    os.makedirs(out, exist_ok=True)
    for i in range(runs):
        port, receiver = free_port(), free_port()
        target = start_reference_target(port, receiver)
        parent = os.path.join(out, f"{prefix}-{i:02d}")
        started = time.monotonic()
        try:
            proc = subprocess.run(python_module("tailscope.cli.main", "run", SCENARIO, "--target",
                                                f"http://127.0.0.1:{port}", "--duration", f"{seconds:g}s",
                                                "--out", parent, "--receiver-port", str(receiver),
                                                "--receiver-grpc-port", "-1"),
                                  capture_output=True, text=True, timeout=seconds + 240)
        finally:
            stop_process(target)
        print(f"{prefix}-{i:02d}: exit {proc.returncode} in {time.monotonic() - started:.0f} s, "
              f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        if proc.returncode not in (0, 1, 3):
            print(proc.stderr[-2000:], file=sys.stderr, flush=True)


def run_dirs(out: str, prefix: str) -> list[str]:
    """The recorded run directories of one series, in order (each OUT/PREFIX-NN holds one run)."""
    dirs = []
    for name in sorted(os.listdir(out)):
        if not name.startswith(prefix + "-"):
            continue
        inner = sorted(os.listdir(os.path.join(out, name)))
        if inner:
            dirs.append(os.path.join(out, name, inner[-1]))
    return dirs


def slowed(side, factor: float):
    """A copy of a comparison side whose latencies and service times are multiplied by ``factor``."""
    from dataclasses import replace

    from tailscope.analyzers.comparison.baseline import ComparisonSide, RunSide

    runs = [RunSide(r.run, replace(r.req, latency_ms=r.req.latency_ms * factor, service_ms=r.req.service_ms * factor),
                    r.matrix) for r in side.runs]
    return ComparisonSide(runs, side.layout, side.path)


def judge(out: str, method: str, series: list[str], power: bool = True) -> None:
    from tailscope.analyzers.comparison.baseline import CompareRules

    rules = CompareRules(method=method)
    for prefix in series:
        judge_aa(out, prefix, rules)
    if power:
        judge_power(out, rules)


def judge_aa(out: str, prefix: str, rules) -> None:
    """The false-alarm rates of one A/A series (OUT/PREFIX-NN): 1 vs 1 and 3 vs 3."""
    from tailscope.analyzers.comparison.baseline import compare, load_side

    method = f"{rules.method} [{prefix}]"
    aa = run_dirs(out, prefix)
    sides = {path: load_side([path]) for path in aa}
    pairs = [(aa[k + 1], aa[k]) for k in range(0, len(aa) - 1, 2)]
    false = 0
    for new, base in pairs:
        verdict = compare(sides[new], sides[base], rules).verdict
        false += verdict.regressed
        if verdict.regressed:
            print(f"  1v1 false alarm: {os.path.basename(os.path.dirname(new))} vs "
                  f"{os.path.basename(os.path.dirname(base))}: {verdict.summary[:160]}")
    print(f"method {method}: 1 vs 1 ({len(aa)} runs): {false} REGRESSION in {len(pairs)} A/A pairs ({false / max(len(pairs), 1):.1%})")
    sextets = [aa[k:k + 6] for k in range(0, len(aa) - 5, 6)]
    for design, split in (("consecutive (runs 4-6 vs 1-3)", lambda six: (six[3:], six[:3])),
                          ("interleaved (runs 2,4,6 vs 1,3,5)", lambda six: (six[1::2], six[0::2]))):
        false3 = 0
        for six in sextets:
            new, base = split(six)
            comparison = compare(load_side([sides[p].runs[0] for p in new]),
                                 load_side([sides[p].runs[0] for p in base]), rules)
            false3 += comparison.verdict.regressed
        print(f"method {method}: 3 vs 3, {design}: {false3} REGRESSION in {len(sextets)} disjoint A/A sextets "
              f"({false3 / max(len(sextets), 1):.1%})", flush=True)


def judge_power(out: str, rules, prefix: str = "power", first: int = 0) -> None:
    """The share of 3 vs 3 splits of six runs (``prefix`` series from run ``first``: the six 60-s
    ``power`` runs by default) in which a known slowdown of the new side's latencies is judged a
    P99 regression, per slowdown."""
    from tailscope.analyzers.comparison.baseline import compare, load_side

    method = f"{rules.method} [{prefix} {first}-{first + 5}]"
    power_runs = run_dirs(out, prefix)[first:]
    if len(power_runs) < 6:
        return
    power_runs = [load_side([path]).runs[0] for path in power_runs[:6]]
    splits = [c for c in itertools.combinations(range(6), 3) if 0 in c]  # 10 splits; each also swapped
    for slowdown in (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
        hits, total = 0, 0
        for base_idx in splits:
            base = [power_runs[i] for i in base_idx]
            new = [power_runs[i] for i in range(6) if i not in base_idx]
            for a, b in ((base, new), (new, base)):
                comparison = compare(slowed(load_side(b), 1 + slowdown), load_side(a), rules)
                row = next(r for r in comparison.percentiles
                           if r.cls is None and r.metric == "latency_ms" and r.percentile == "p99")
                hits += row.regressed
                total += 1
        print(f"method {method}: 3 vs 3, P99 x{1 + slowdown:.2f}: all-latency P99 judged regressed "
              f"in {hits}/{total} splits ({hits / total:.0%})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("record", "judge"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=44)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--prefix", default="aa")
    parser.add_argument("--method", default="hierarchical", choices=("hierarchical", "request"))
    parser.add_argument("--series", default="aa", help="judge: the A/A series' prefixes, comma-separated")
    parser.add_argument("--no-power", action="store_true", help="judge: skip the power estimate")
    args = parser.parse_args()
    if args.phase == "record":
        record(args.out, args.runs, args.seconds, args.prefix)
    else:
        judge(args.out, args.method, args.series.split(","), power=not args.no_power)


if __name__ == "__main__":
    main()
