"""A load sweep's results: per-step figures, the highest rate under the SLOs, the knee.

Pure functions over the analysis dicts of the sweep's step runs (each step is
a full run directory; see docs/sweep.md). The result is ``sweep.json``
(format below) and feeds the sweep report.

- **Per step**: offered and achieved rate (req/s), P50/P99 latency from the
  scheduled send time with their 95% confidence intervals, error rate, the
  SLO verdict, and whether the generator was the bottleneck.
- **Max rate under SLO**: the highest offered rate whose step met every SLO
  (None when no step did, or the scenario has no SLOs). A failing step below
  it is reported as a warning (pass/fail was not monotone: noise or warm-up).
- **Knee** (Kneedle, Satopää et al. 2011): on the curve P99 vs offered rate,
  normalised to [0, 1] on both axes, the step farthest below the chord from
  the first to the last step, i.e. where latency starts to climb steeply.
  Needs >= 3 steps with a P99 and a curve that bends upward; else None.
- **Saturation**: the first step whose achieved rate fell below
  ``SATURATION_SHARE`` of its offered rate (the service, or the generator,
  could not keep up).
"""

from __future__ import annotations

import numpy as np

SWEEP_FORMAT_VERSION = "1.0"
#: A step is saturated when achieved < this share of offered.
SATURATION_SHARE = 0.9
#: Smallest normalised distance below the chord that counts as a knee.
MIN_KNEE_DISTANCE = 0.05


def _percentile(entry: dict) -> dict:
    return {key: entry.get(key) for key in ("value_ms", "ci_low_ms", "ci_high_ms", "n", "claimed")}


def step_record(index: int, rate: float, run_dir: str, analysis: dict) -> dict:
    """One step's figures from its run's analysis dict."""
    summary, verdict = analysis["summary"], analysis.get("verdict") or {}
    has_slos = bool(verdict.get("slos"))
    return {
        "index": index,
        "rate": rate,
        "run_dir": run_dir,
        "status": analysis["run"]["status"],
        "duration_s": summary["duration_s"],
        "requests": summary["requests"],
        "errors": summary["errors"],
        "error_rate": summary["error_rate"],
        "offered_rps": summary["offered_rps"],
        "achieved_rps": summary["achieved_rps"],
        "p50": _percentile(summary["latency_ms"]["p50"]),
        "p99": _percentile(summary["latency_ms"]["p99"]),
        "passed": bool(verdict.get("passed")) if has_slos else None,
        "failed_slos": list(verdict.get("failed") or []),
        "generator_limited": bool(summary["lateness_ms"]["generator_limited"]),
    }


def max_rate_under_slo(steps: list[dict]) -> tuple[float | None, int | None]:
    """(highest rate whose step passed, that step's index); (None, None) if none passed."""
    passing = [s for s in steps if s["passed"]]
    if not passing:
        return None, None
    best = max(passing, key=lambda s: s["rate"])
    return best["rate"], best["index"]


def find_knee(steps: list[dict]) -> dict | None:
    """The knee of P99 vs offered rate (Kneedle); None when the curve has none."""
    points = sorted(((s["rate"], s["p99"]["value_ms"], s["index"]) for s in steps
                     if s["p99"]["value_ms"] is not None), key=lambda p: p[0])
    if len(points) < 3:
        return None
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    if x[-1] == x[0] or y.max() == y.min():
        return None
    x_n = (x - x[0]) / (x[-1] - x[0])
    y_n = (y - y.min()) / (y.max() - y.min())
    chord = y_n[0] + (y_n[-1] - y_n[0]) * x_n
    distance = chord - y_n
    best = int(np.argmax(distance[1:-1])) + 1
    if distance[best] < MIN_KNEE_DISTANCE:
        return None
    step = next(s for s in steps if s["index"] == points[best][2])
    return {"rate": step["rate"], "index": step["index"], "achieved_rps": step["achieved_rps"],
            "p99_ms": step["p99"]["value_ms"], "distance": float(distance[best]), "method": "kneedle"}


def saturation(steps: list[dict]) -> dict | None:
    """The first step (by rate) whose achieved rate fell below SATURATION_SHARE of offered."""
    for step in sorted(steps, key=lambda s: s["rate"]):
        offered, achieved = step["offered_rps"], step["achieved_rps"]
        if offered and achieved is not None and achieved < SATURATION_SHARE * offered:
            return {"rate": step["rate"], "index": step["index"], "offered_rps": offered,
                    "achieved_rps": achieved}
    return None


def sweep_warnings(steps: list[dict], best_rate: float | None, has_slos: bool) -> list[dict]:
    warnings = []
    if not has_slos:
        warnings.append({"code": "no_slos", "message": "the scenario has no SLOs: no step can pass or "
                         "fail, so there is no maximum rate under SLO (the curve and knee still stand)"})
    limited = [s["rate"] for s in steps if s["generator_limited"]]
    if limited:
        warnings.append({"code": "generator_limited", "message": (
            "generator-limited at " + ", ".join(f"{r:g}" for r in limited) + " req/s: more than 1% of "
            "sends were over 1 ms late there; those steps measure the generator, not the target "
            "(use --workers)")})
    if best_rate is not None:
        below = [s["rate"] for s in steps if s["passed"] is False and s["rate"] < best_rate]
        if below:
            warnings.append({"code": "non_monotone", "message": (
                "steps failed below the maximum passing rate (" + ", ".join(f"{r:g}" for r in below)
                + " req/s): the result is noisy; lengthen --step-duration")})
    return warnings


def summarize_sweep(name: str, mode: str, slos: list[str], steps: list[dict],
                    search: dict | None = None) -> dict:
    """The ``sweep.json`` dict."""
    best_rate, best_index = max_rate_under_slo(steps)
    return {
        "format_version": SWEEP_FORMAT_VERSION,
        "name": name,
        "mode": mode,
        "slos": list(slos),
        "steps": sorted(steps, key=lambda s: (s["rate"], s["index"])),
        "max_rate_under_slo": best_rate,
        "max_rate_step": best_index,
        "knee": find_knee(steps),
        "saturation": saturation(steps),
        "search": search,
        "passed": best_rate is not None if slos else None,
        "warnings": sweep_warnings(steps, best_rate, bool(slos)),
    }
