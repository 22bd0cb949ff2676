"""Spike detection over rates, incident shares and run lengths (issue 28's measure).

Each cell is seeded runs of :func:`tailscope.testkit.synthetic_series.latency_series`
(Poisson arrivals, the synthetic target's five lognormal stages) tested exactly as
``tailscope`` tests a run's latency (:func:`~tailscope.analyzers.spikes.detection.detect_series`:
warm-up, windows, the tail-share test, episodes). An *incident run* multiplies the
latency of the requests in one stretch of ``share`` × the run, centred after the
warm-up, by ``--factor`` (2: the tail raised 2×); it is *detected* when a spike
overlaps it. A *steady run* has no incident; a false spike is any spike in it.
Cells whose incident holds fewer than 10 requests are shown but not scored against
the target; a run too short to tell (fewer than 48 samples after the warm-up) is
counted as such, not as a miss.

Scale: cells with more than ``--max-samples`` requests (rate × length) are skipped
(``—``), so the grid runs in minutes on two shared cores; ``--seeds`` incident runs
per cell and ``--steady`` steady runs per (rate, length).

Usage: ``python benchmarks/detection_sweep.py [--seeds 10] [--steady 40] [--json out.json]``;
prints a Markdown table (detected / scored runs per cell) and the summary line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from tailscope.analyzers.spikes.detection import SpikeRules, detect_series, warmup_ns
from tailscope.testkit.synthetic import NS_PER_S, SYNTHETIC_START_NS
from tailscope.testkit.synthetic_series import latency_series

RATES = (0.5, 2, 20, 200, 2_000, 20_000)
SHARES = (0.01, 0.05, 0.2, 0.5)
LENGTHS_S = (60, 600, 3_600)


def windows_of(duration_s: float) -> dict[str, np.ndarray]:
    """The 1-s window table's bounds of a run starting at SYNTHETIC_START_NS."""
    starts = SYNTHETIC_START_NS + np.arange(int(duration_s), dtype=np.int64) * NS_PER_S
    return {"start_ns": starts, "end_ns": starts + NS_PER_S}


def incident_bounds(duration_s: float, share: float) -> tuple[float, float]:
    """(at_s, length_s) of an incident of ``share`` × the run, centred in the tested part."""
    warm = warmup_ns(0, int(duration_s * NS_PER_S), NS_PER_S, SpikeRules()) / NS_PER_S
    length = share * duration_s
    middle = warm + (duration_s - warm) / 2
    return max(warm, middle - length / 2), length


def one_run(rate, duration_s, seed, share=None, factor=2.0) -> dict:
    windows = windows_of(duration_s)
    incident = None
    if share is not None:
        at, length = incident_bounds(duration_s, share)
        incident = (at, length, factor)
    t, latency = latency_series(rate, duration_s, seed, incident=incident)
    result = detect_series(t, latency, windows)
    out = {"too_short": result is None, "spikes": 0, "hit": False, "extra": 0, "incident_requests": 0}
    if incident is not None:
        lo, hi = SYNTHETIC_START_NS + int(at * NS_PER_S), SYNTHETIC_START_NS + int((at + length) * NS_PER_S)
        out["incident_requests"] = int(np.count_nonzero((t >= lo) & (t < hi)))
    if result is None:
        return out
    bounds = [result.window_bounds(a, b) for a, b in result.episodes(SpikeRules().merge_gap)]
    out["spikes"] = len(bounds)
    if incident is not None:
        overlap = [s < hi and e > lo for s, e in bounds]
        out["hit"], out["extra"] = any(overlap), len(bounds) - sum(overlap)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steady", type=int, default=40)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--max-samples", type=float, default=2.5e6)
    parser.add_argument("--json")
    args = parser.parse_args()
    began = time.monotonic()
    cells, steady = [], []
    for length in LENGTHS_S:
        for rate in RATES:
            if rate * length > args.max_samples:
                continue
            runs = [one_run(rate, length, 10_000 + s) for s in range(args.steady)]
            steady.append({"rate": rate, "length_s": length, "runs": len(runs),
                           "too_short": sum(r["too_short"] for r in runs),
                           "false": sum(r["spikes"] > 0 for r in runs)})
            for share in SHARES:
                runs = [one_run(rate, length, s, share, args.factor) for s in range(args.seeds)]
                held = int(np.median([r["incident_requests"] for r in runs]))
                cells.append({"rate": rate, "length_s": length, "share": share, "runs": len(runs),
                              "incident_requests": held, "scored": held >= 10,
                              "too_short": sum(r["too_short"] for r in runs),
                              "detected": sum(r["hit"] for r in runs),
                              "extra_spikes": sum(r["extra"] for r in runs)})
    print_tables(cells, steady, args)
    print(f"\n{time.monotonic() - began:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"cells": cells, "steady": steady, "args": vars(args)}, fh, indent=1)


def print_tables(cells, steady, args) -> None:
    print(f"Detected / runs (incident ×{args.factor:g}, {args.seeds} seeds; * = incident holds < 10 requests, "
          "not scored; s = runs too short to tell)\n")
    print("| run | rate (req/s) | " + " | ".join(f"{s:.0%}" for s in SHARES) + " | steady: false spikes |")
    print("|---|---:|" + "---:|" * len(SHARES) + "---:|")
    for length in LENGTHS_S:
        for rate in RATES:
            row = {c["share"]: c for c in cells if c["rate"] == rate and c["length_s"] == length}
            base = next((s for s in steady if s["rate"] == rate and s["length_s"] == length), None)
            if base is None:
                print(f"| {length} s | {rate:g} | " + " | ".join("—" for _ in SHARES) + " | — |")
                continue
            parts = []
            for share in SHARES:
                c = row[share]
                mark = "" if c["scored"] else "*"
                short = f" ({c['too_short']} s)" if c["too_short"] else ""
                parts.append(f"{c['detected']}/{c['runs']}{mark}{short}")
            tail = f"{base['false']}/{base['runs']}" + (f" ({base['too_short']} s)" if base["too_short"] else "")
            print(f"| {length} s | {rate:g} | " + " | ".join(parts) + f" | {tail} |")
    scored = [c for c in cells if c["scored"] and c["too_short"] < c["runs"]]
    detected = sum(c["detected"] for c in scored)
    tested = sum(c["runs"] - c["too_short"] for c in scored)
    false = sum(s["false"] for s in steady)
    runs = sum(s["runs"] - s["too_short"] for s in steady)
    extra = sum(c["extra_spikes"] for c in cells)
    print(f"\nscored cells: {detected}/{tested} incident runs detected ({detected / max(tested, 1):.3f}); "
          f"steady runs with a false spike: {false}/{runs} ({false / max(runs, 1):.3%}); "
          f"spikes outside the incident in incident runs: {extra}")


if __name__ == "__main__":
    main()
