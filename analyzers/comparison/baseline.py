"""A run against a baseline run: which percentile moved, by how much, is it real, where.

For every standard percentile (P50 … P99.9) of latency and service time,
over all requests and per request class present in both runs:

- the change (current − baseline, ms and relative) with a **bootstrap
  confidence interval** (percentile method, 95%, 2,000 resamples by default);
- *significant* when the interval excludes 0;
- **regressed** when the relative change is above ``threshold`` (10% by
  default) **and** the interval lies above 0 **and** both runs have enough
  samples to claim that percentile (early stopping, analyzers/stats/percentiles.py);
  *improved* symmetrically.

Vectorised bootstrap without resampling the data: the nearest-rank
p-quantile of a resample of n values is the r-th smallest (r = ceil(n·p)) of
n draws with replacement, whose rank J in the sorted original is exactly
``ceil(n · U)`` with ``U ~ Beta(r, n − r + 1)`` (the r-th order statistic of n
uniforms). So one replicate costs one Beta draw and one index: O(B) per
percentile, whatever n — 10 million requests compare in the time of a sort.

Stage-level attribution: the mean of every stage for the *tail* requests
(latency at or above the run's own quantile of the most-regressed percentile,
or P99) in both runs, with the change and a normal-approximation 95%
interval; the stage whose mean grew most is ``changed_stage``.

The dict follows docs/analyzers/compare.md (the reports render it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from tailscope.analyzers.comparison.judge import CompareRules, bootstrap_quantiles, compare_percentile  # noqa: F401
from tailscope.analyzers.comparison.judge import interval as _interval  # noqa: F401
from tailscope.analyzers.comparison.llm_compare import compare_llm, llm_checks, llm_summary
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays, request_arrays
from tailscope.analyzers.stages.decomposition import StageMatrix, stage_matrix
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.analyzers.stats.distribution import latency_distribution
from tailscope.analyzers.stats.percentiles import STANDARD_PERCENTILES, nearest_rank
from tailscope.analyzers.stats.summary import load_period_ns
from tailscope.rundir import Run, load_run

COMPARISON_FORMAT_VERSION = "1.0"
METRICS = (("latency_ms", "latency"), ("service_time_ms", "service time"))
Z_95 = 1.959963984540054


@dataclass
class RunSide:
    """One side of the comparison: the run, its request arrays and stage matrix."""

    run: Run
    req: RequestArrays
    matrix: StageMatrix

    @classmethod
    def load(cls, path_or_run) -> RunSide:
        run = path_or_run if isinstance(path_or_run, Run) else load_run(path_or_run)
        req = request_arrays(run.requests)
        resolved = rules_for_scenario(run.manifest.get("scenario") or {})
        return cls(run, req, stage_matrix(req, run.spans, resolved.rules))

    def values(self, metric: str, cls: str | None) -> np.ndarray:
        req = self.req
        mask = req.in_latency & (req.has_sent if metric == "service_time_ms" else True)
        if cls is not None:
            mask = mask & req.class_mask(cls)
        column = req.latency_ms if metric == "latency_ms" else req.service_ms
        return np.sort(column[mask])

    def facts(self) -> dict:
        req, manifest = self.req, self.run.manifest
        period = load_period_ns(req)
        duration = (period[1] - period[0]) / NS_PER_S if period else 0.0
        scenario = manifest.get("scenario") or {}
        return {"name": manifest.get("name") or scenario.get("name") or os.path.basename(self.run.path.rstrip("/")),
                "path": self.run.path, "requests": int(req.n),
                "achieved_rps": float(req.is_ok.sum() / duration) if duration > 0 else None,
                "error_rate": float(req.is_error.mean()) if req.n else 0.0, "duration_s": duration}

    def classes(self) -> set[str]:
        return set(self.req.class_names())


def compare_runs(current, baseline, rules: CompareRules = CompareRules()) -> dict:
    """The comparison dict of ``current`` against ``baseline`` (paths or loaded runs)."""
    now, before = RunSide.load(current), RunSide.load(baseline)
    rng = np.random.default_rng(rules.seed)
    rows = []
    scopes = [None] + sorted(now.classes() & before.classes())
    for cls in scopes:
        for metric, _ in METRICS:
            base_values, current_values = before.values(metric, cls), now.values(metric, cls)
            for name, p in STANDARD_PERCENTILES:
                row = compare_percentile(base_values, current_values, p, rules, rng)
                if row is not None:
                    rows.append({"metric": metric, "cls": cls, "percentile": name, **row})
    focus = _focus_percentile(rows)
    stages, changed = stage_attribution(before, now, focus, rules)
    llm = compare_llm((before.run, before.req), (now.run, now.req), rules)
    checks = regression_checks(rows, rules) + llm_checks(llm, rules)
    regressed = any(not c["passed"] for c in checks)
    summary = verdict_summary(rows, changed, rules)
    if llm_summary(llm):  # an LLM regression leads when latency did not regress
        latency_regressed = any(r["regressed"] and r["metric"] == "latency_ms" for r in rows)
        summary = f"{summary}; {llm_summary(llm)}" if latency_regressed else f"{llm_summary(llm)}; latency: {summary}"
    return {
        "format_version": COMPARISON_FORMAT_VERSION,
        "baseline": before.facts(), "current": now.facts(),
        "threshold": rules.threshold, "confidence": rules.confidence, "resamples": rules.resamples,
        "verdict": {"regressed": regressed, "summary": summary},
        "checks": checks, "percentiles": rows, "stages": stages, "changed_stage": changed, "llm": llm,
        "error_rate": error_rate_change(before.req, now.req),
        "classes_compared": [c for c in scopes if c is not None],
        "classes_only_in_one": sorted(now.classes() ^ before.classes()),
        "distributions": {"baseline": latency_distribution(before.req), "current": latency_distribution(now.req)},
    }


def _focus_percentile(rows: list[dict]) -> str:
    """The percentile whose latency (all requests) regressed most, else p99."""
    regressed = [r for r in rows if r["cls"] is None and r["metric"] == "latency_ms" and r["regressed"]]
    if not regressed:
        return "p99"
    return max(regressed, key=lambda r: r["relative_change"] or 0.0)["percentile"]


def regression_checks(rows: list[dict], rules: CompareRules) -> list[dict]:
    """One check per latency percentile and scope: passed unless regressed (JUnit testcases)."""
    checks = []
    for row in rows:
        if row["metric"] != "latency_ms":
            continue
        scope = row["cls"] or "all"
        label = row["percentile"].upper().replace("P999", "P99.9")
        relative = row["relative_change"]
        message = (f"{label} {row['baseline_ms']:.1f} ms → {row['current_ms']:.1f} ms "
                   f"({'—' if relative is None else f'{relative:+.1%}'}; change 95% CI "
                   f"{row['change_ci_ms'][0]:+.1f} … {row['change_ci_ms'][1]:+.1f} ms)")
        if row["regressed"]:
            message += f": regression (above {rules.threshold:.0%} and significant)"
        elif not row["claimable"]:
            message += ": too few samples to judge"
        checks.append({"name": f"{scope} {label}", "cls": row["cls"], "passed": not row["regressed"],
                       "message": message})
    return checks


def _tail_rows(side: RunSide, p: float) -> np.ndarray:
    """Stage-matrix rows of the requests at or above the side's own p-quantile of latency."""
    latency = side.req.latency_ms[side.matrix.request_index]
    if len(latency) == 0:
        return np.zeros(0, np.int64)
    ordered = np.sort(latency)
    cut = ordered[nearest_rank(len(ordered), p) - 1]
    return np.flatnonzero(latency >= cut)


def stage_attribution(before: RunSide, now: RunSide, percentile: str, rules: CompareRules) -> tuple[list[dict], dict | None]:
    """(per-stage mean change in the tail, the stage that changed most) for one percentile's tail."""
    p = dict(STANDARD_PERCENTILES)[percentile]
    shared = [s for s in now.matrix.stages if s in before.matrix.stages and s != "server"]
    rows_before, rows_now = _tail_rows(before, p), _tail_rows(now, p)
    out = []
    for stage in shared:
        a = before.matrix.column(stage)[rows_before]
        b = now.matrix.column(stage)[rows_now]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if len(a) == 0 or len(b) == 0:
            continue
        change = float(b.mean() - a.mean())
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if len(a) > 1 and len(b) > 1 else 0.0
        out.append({"stage": stage, "baseline_ms": float(a.mean()), "current_ms": float(b.mean()),
                    "change_ms": change, "change_ci_ms": [change - Z_95 * se, change + Z_95 * se],
                    "tail_percentile": percentile, "baseline_tail_requests": int(len(rows_before)),
                    "current_tail_requests": int(len(rows_now))})
    grown = [s for s in out if s["change_ci_ms"][0] > 0]
    if not grown:
        return out, None
    top = max(grown, key=lambda s: s["change_ms"])
    total = sum(max(s["change_ms"], 0.0) for s in out)
    share = top["change_ms"] / total if total > 0 else 1.0
    summary = (f"{top['stage']} changed most in the requests at or above {percentile.upper().replace('P999', 'P99.9')}: "
               f"mean {top['baseline_ms']:.1f} ms → {top['current_ms']:.1f} ms ({top['change_ms']:+.1f} ms, "
               f"{share:.0%} of the stages' growth)")
    return out, {"stage": top["stage"], "change_ms": top["change_ms"], "share_of_growth": share, "summary": summary}


def error_rate_change(before: RequestArrays, now: RequestArrays) -> dict:
    """Error rates of both runs, their difference and a two-proportion z-test p-value."""
    from scipy import stats

    n1, n2 = before.n, now.n
    e1, e2 = int(before.is_error.sum()), int(now.is_error.sum())
    r1 = e1 / n1 if n1 else 0.0
    r2 = e2 / n2 if n2 else 0.0
    pooled = (e1 + e2) / (n1 + n2) if n1 + n2 else 0.0
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)) if n1 and n2 and 0 < pooled < 1 else 0.0
    p_value = float(2 * stats.norm.sf(abs(r2 - r1) / se)) if se > 0 else 1.0
    return {"baseline": r1, "current": r2, "change": r2 - r1, "p_value": p_value}


def percentile_label(name: str) -> str:
    """``p999`` → ``P99.9``, ``p99`` → ``P99``."""
    return name.upper().replace("P999", "P99.9")


def _unjudged(row: dict, rules: CompareRules) -> str:
    """A significant change that is not a regression, and why: ``P99.9 −13.1%: improved``,
    ``P50 +3.2%: significant, but within the 10% threshold``, ``P99.9 −13.1%: significant, but too
    few requests to claim P99.9 in both runs``."""
    name, relative = percentile_label(row["percentile"]), row["relative_change"]
    change = "—" if relative is None else f"{relative:+.1%}".replace("-", "−")
    if row.get("improved"):
        return f"{name} {change}: improved"
    if not row.get("claimable", True):
        return f"{name} {change}: significant, but too few requests to claim {name} in both runs"
    return f"{name} {change}: significant, but within the {rules.threshold:.0%} threshold"


def verdict_summary(rows: list[dict], changed: dict | None, rules: CompareRules) -> str:
    """One sentence: what regressed (all requests first), and where."""
    regressed = [r for r in rows if r["regressed"] and r["metric"] == "latency_ms"]
    if not regressed:
        moved = [r for r in rows if r["significant"] and r["metric"] == "latency_ms" and r["cls"] is None]
        return f"no regression above {rules.threshold:.0%}" + "".join(f"; {_unjudged(r, rules)}" for r in moved)
    regressed.sort(key=lambda r: (r["cls"] is not None, -(r["relative_change"] or 0)))
    parts = [f"{r['cls'] or 'all'} {percentile_label(r['percentile'])} {r['baseline_ms']:.1f} → "
             f"{r['current_ms']:.1f} ms ({r['relative_change']:+.0%})" for r in regressed[:4]]
    text = "regression: " + "; ".join(parts) + (f" (+{len(regressed) - 4} more)" if len(regressed) > 4 else "")
    if changed:
        text += f". {changed['summary']}"
    return text
