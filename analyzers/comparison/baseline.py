"""Runs against baseline runs: which percentile moved, by how much, is it real, where.

Each side is one run or several runs of the same scenario (``tailscope compare NEW… -- BASE…``,
two folders of runs, ``tailscope run --repeat N``). For every standard percentile (P50 … P99.9)
of latency and service time, over all requests and per request class present on both sides:

- the change (current − baseline, ms and relative; each side's percentile over all its requests
  pooled) with a **resampled confidence interval** (percentile method, 95%, 2,000 replicates by
  default) whose replicates redraw the runs of each side and the time blocks within each run
  (a hierarchical block bootstrap, analyzers/comparison/resampling.py): the interval carries the
  run-to-run spread when a side has several runs, and the within-run correlation of neighbouring
  seconds always. With one run per side the run-to-run spread is unknown: the replicates redraw
  5-s time blocks only, and the verdict says so;
- *significant* when the interval excludes 0;
- **regressed** when the relative change is above ``threshold`` (10% by default) **and** the
  interval lies above 0 **and** both sides have enough samples to claim that percentile (early
  stopping, analyzers/stats/percentiles.py); *improved* symmetrically.

Stage-level attribution: the mean of every stage for the *tail* requests (latency at or above
each run's own quantile of the most-regressed percentile, or P99) on both sides, with the change
and a normal-approximation 95% interval; the stage whose mean grew most is ``changed_stage``.

:func:`compare` builds the typed :class:`~tailscope.analysis_model.comparison.Comparison`;
:func:`compare_runs` returns it encoded, the dict written as comparison.json
(docs/analyzers/compare.md; the reports render it).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.comparison import (
    METRIC_NAMES,
    ChangedStage,
    Check,
    Comparison,
    ComparisonVerdict,
    Distributions,
    EnvironmentComparison,
    EnvironmentDifference,
    ErrorRateChange,
    Method,
    PercentileChange,
    RunFacts,
    SideFacts,
    StageChange,
)
from tailscope.analysis_model.records import ClassCounts, Distribution
from tailscope.analysis_model.run import Environment
from tailscope.analyzers.comparison.host_load import host_load, run_other_cores
from tailscope.analyzers.comparison.judge import (  # noqa: F401
    CompareRules,
    Figure,
    JudgedPercentile,
    bootstrap_quantiles,
    compare_percentiles,
    gate_confidence,
)
from tailscope.analyzers.comparison.judge import interval as _interval  # noqa: F401
from tailscope.analyzers.comparison.llm_compare import compare_llm, llm_checks, llm_summary
from tailscope.analyzers.comparison.resampling import BlockLayout, replicate_weights
from tailscope.analyzers.inputs.environment import environment_differences, environment_facts
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays, request_arrays
from tailscope.analyzers.stages.decomposition import StageMatrix, stage_matrix
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.analyzers.stats.distribution import ALL_CLASSES, bin_counts, bin_edges_ms, latency_distribution
from tailscope.analyzers.stats.percentiles import STANDARD_PERCENTILES, nearest_rank
from tailscope.analyzers.stats.summary import load_period_ns
from tailscope.rundir import Run, load_run
from tailscope.support.units import percentile_label

COMPARISON_FORMAT_VERSION = "1.1"
#: The compared metrics (their words: analysis_model/comparison.py).
METRICS = tuple(METRIC_NAMES)
Z_95 = 1.959963984540054
MANIFEST = "manifest.json"


@dataclass
class RunSide:
    """One run of a side: the run, its request arrays and stage matrix."""

    run: Run
    req: RequestArrays
    matrix: StageMatrix

    @classmethod
    def load(cls, path_or_run) -> RunSide:
        run = path_or_run if isinstance(path_or_run, Run) else load_run(path_or_run)
        req = request_arrays(run.requests)
        resolved = rules_for_scenario(run.manifest.get("scenario") or {})
        return cls(run, req, stage_matrix(req, run.spans, resolved.rules))

    def mask(self, metric: str, cls: str | None) -> np.ndarray:
        """The requests that count in ``metric`` (of class ``cls``; None: all)."""
        req = self.req
        mask = req.in_latency & (req.has_sent if metric == "service_time_ms" else True)
        return mask & req.class_mask(cls) if cls is not None else mask

    def column(self, metric: str) -> np.ndarray:
        return self.req.latency_ms if metric == "latency_ms" else self.req.service_ms

    def values(self, metric: str, cls: str | None) -> np.ndarray:
        """The sorted values (ms) of ``metric`` over the requests of class ``cls`` (None: all)."""
        return np.sort(self.column(metric)[self.mask(metric, cls)])

    @property
    def name(self) -> str:
        scenario = self.run.manifest.get("scenario") or {}
        return str(self.run.manifest.get("name") or scenario.get("name")
                   or os.path.basename(self.run.path.rstrip("/")))

    @property
    def start_ns(self) -> int | None:
        """When the run's load started (its first scheduled send; else the manifest's start), epoch ns."""
        period = load_period_ns(self.req)
        if period:
            return period[0]
        start = self.run.manifest.get("start_ns")
        return start if isinstance(start, int) and start > 0 else None

    def facts(self) -> RunFacts:
        req = self.req
        period = load_period_ns(req)
        duration = (period[1] - period[0]) / NS_PER_S if period else 0.0
        return RunFacts(name=self.name, path=self.run.path, requests=int(req.n),
                        achieved_rps=float(req.is_ok.sum() / duration) if duration > 0 else None,
                        error_rate=float(req.is_error.mean()) if req.n else 0.0, duration_s=duration,
                        started=start_text(self.start_ns, seconds=True))

    def classes(self) -> set[str]:
        return set(self.req.class_names())


def start_text(start_ns: int | None, seconds: bool = False) -> str | None:
    """A run's start as UTC text: ``2026-12-06 01:40`` (``:05`` seconds added when asked)."""
    if not start_ns:
        return None
    stamp = datetime.fromtimestamp(start_ns / NS_PER_S, tz=UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def run_dirs_in(path: str) -> list[str]:
    """The run directories ``path`` stands for: itself when it is a run directory (or not a
    folder of runs: reading it then says why), else the run directories directly inside it
    (a folder made by ``tailscope run --repeat``), in natural order (run-2 before run-10)."""
    if os.path.isfile(os.path.join(path, MANIFEST)) or not os.path.isdir(path):
        return [path]
    inside = [os.path.join(path, name) for name in sorted(os.listdir(path), key=_natural_key)
              if os.path.isfile(os.path.join(path, name, MANIFEST))]
    return inside or [path]


@dataclass
class ComparisonSide:
    """One side of a comparison: its runs (one or more), the time blocks they are resampled by
    (:class:`~.resampling.BlockLayout`) and the path the side was given as."""

    runs: list[RunSide]
    layout: BlockLayout
    path: str

    @classmethod
    def load(cls, spec, block_s: float | None = None) -> ComparisonSide:
        """A side from a run directory, a folder of runs, a loaded run or a list of those."""
        if isinstance(spec, ComparisonSide):
            return spec
        items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        runs: list[RunSide] = []
        for item in items:
            if isinstance(item, (Run, RunSide)):
                runs.append(item if isinstance(item, RunSide) else RunSide.load(item))
            else:
                runs.extend(RunSide.load(path) for path in run_dirs_in(str(item)))
        kwargs = {} if block_s is None else {"block_s": block_s}
        layout = BlockLayout.of_periods([load_period_ns(r.req) for r in runs], **kwargs)
        path = str(items[0]) if len(items) == 1 and not isinstance(items[0], (Run, RunSide)) else runs[0].run.path
        return cls(runs, layout, path)

    def weights(self, rules: CompareRules, rng: np.random.Generator) -> np.ndarray | None:
        """The replicate weights of this side (None under the per-request method)."""
        return None if rules.method == "request" else replicate_weights(self.layout, rules.resamples, rng)

    def figure(self, metric: str, cls: str | None, weights: np.ndarray | None) -> Figure:
        """``metric``'s values (ms) on this side for class ``cls`` (None: all) with their blocks."""
        values, blocks = [], []
        for i, side in enumerate(self.runs):
            mask = side.mask(metric, cls)
            values.append(side.column(metric)[mask])
            blocks.append(self.layout.block_ids(i, side.req.scheduled_ns[mask]))
        return Figure(np.concatenate(values), np.concatenate(blocks), weights)

    @property
    def name(self) -> str:
        return self.runs[0].name

    def classes(self) -> set[str]:
        return set().union(*(r.classes() for r in self.runs))

    def facts(self) -> SideFacts:
        """The side in figures: the first run's name, the path given, requests, achieved rate and
        error rate over all its runs, ``duration_s`` summed over them, ``started`` (the first run's
        start, UTC) and ``runs`` (each run's own facts)."""
        runs = tuple(r.facts() for r in self.runs)
        requests = sum(f.requests for f in runs)
        duration = sum(f.duration_s for f in runs)
        ok = sum(int(r.req.is_ok.sum()) for r in self.runs)
        errors = sum(int(r.req.is_error.sum()) for r in self.runs)
        starts = [r.start_ns for r in self.runs if r.start_ns]
        return SideFacts(name=self.name, path=self.path, requests=requests,
                         achieved_rps=ok / duration if duration > 0 else None,
                         error_rate=errors / requests if requests else 0.0, duration_s=duration,
                         started=start_text(min(starts), seconds=True) if starts else None,
                         run_count=len(runs), runs=runs)

    def distribution(self) -> Distribution:
        """The side's latency distribution (the analysis's ``distribution``), its runs' counts summed."""
        if len(self.runs) == 1:
            return latency_distribution(self.runs[0].req)
        edges = bin_edges_ms()
        full: dict[str, np.ndarray] = {}
        for side in self.runs:
            req = side.req
            ok = req.is_ok
            for name, mask in [(ALL_CLASSES, ok)] + [(c, ok & req.class_mask(c)) for c in req.class_names(ok)]:
                counts = bin_counts(req.latency_ms[mask], edges)
                full[name] = full[name] + counts if name in full else counts
        occupied = np.flatnonzero(full.get(ALL_CLASSES, np.zeros(1)))
        if len(occupied) == 0:
            return Distribution("ms", [], {ALL_CLASSES: ClassCounts(0, [])})
        lo, hi = int(occupied[0]), int(occupied[-1]) + 1
        return Distribution("ms", [float(e) for e in edges[lo:hi + 1]],
                            {name: ClassCounts(int(c.sum()), c[lo:hi].tolist()) for name, c in full.items()})


def load_side(spec, block_s: float | None = None) -> ComparisonSide:
    """A comparison side (:meth:`ComparisonSide.load`). Raises RunDirError when a run cannot be read."""
    return ComparisonSide.load(spec, block_s)


def side_label(side: ComparisonSide, other: ComparisonSide) -> str:
    """How a side is named in titles: its scenario name, or — when both sides ran the same
    scenario — the name and start time (``demo 2026-12-06 01:40``, ``3 runs of demo from …``)."""
    count = len(side.runs)
    same = side.name == other.name
    starts = [r.start_ns for r in side.runs if r.start_ns]
    other_starts = [r.start_ns for r in other.runs if r.start_ns]
    seconds = bool(starts and other_starts and start_text(min(starts)) == start_text(min(other_starts)))
    when = start_text(min(starts), seconds=seconds) if starts else None
    if count == 1:
        return f"{side.name} {when}" if same and when else side.name
    return f"{count} runs of {side.name}" + (f" from {when}" if same and when else "")


def method_facts(before: ComparisonSide, now: ComparisonSide, rules: CompareRules) -> Method:
    """The comparison's ``method``: how the intervals were resampled, the runs per side, the
    block length, and whether the run-to-run spread is part of the intervals."""
    runs = min(len(before.runs), len(now.runs))
    if rules.method == "request":
        name, noise = "per-request bootstrap", "ignored"
        note = "every request resampled independently (reference only: it ignores run-to-run and within-run correlation)"
    elif runs >= 2:
        name, noise = "hierarchical block bootstrap", "resampled"
        note = (f"runs resampled within each side, then {before.layout.block_s:g}-s time blocks within each run: "
                f"the intervals include the run-to-run spread")
    else:
        name, noise = "time-block bootstrap", "unknown"
        note = (f"one run on {'each side' if max(len(before.runs), len(now.runs)) == 1 else 'a side'}: run-to-run "
                f"noise unknown; intervals from {before.layout.block_s:g}-s time blocks within the run only; repeat "
                f"the runs (tailscope run --repeat 3) and compare the folders to judge against it")
    return Method(name, rules.method, noise, note,
                  max(before.layout.block_s, now.layout.block_s) if rules.method != "request" else None,
                  len(before.runs), len(now.runs), rules.resamples)


def compare_runs(current, baseline, rules: CompareRules = CompareRules()) -> dict:
    """The comparison of ``current`` against ``baseline`` (:func:`compare`) as the JSON-ready
    dict written as comparison.json. Raises RunDirError when a run cannot be read."""
    return encode(compare(current, baseline, rules))


def percentile_change(metric: str, cls: str | None, row: JudgedPercentile) -> PercentileChange:
    """A judged percentile of ``metric`` (ms; class ``cls``, None: all) as the comparison's row."""
    j = row.judged
    return PercentileChange(metric=metric, cls=cls, percentile=row.name, baseline_ms=j.baseline,
                            baseline_ci_ms=j.baseline_ci, current_ms=j.current, current_ci_ms=j.current_ci,
                            change_ms=j.change, change_ci_ms=j.change_ci, gate_ci_ms=j.gate_ci,
                            relative_change=j.relative_change, significant=j.significant, regressed=j.regressed,
                            improved=j.improved, claimable=j.claimable, baseline_n=row.baseline_n,
                            current_n=row.current_n)


def compare(current, baseline, rules: CompareRules = CompareRules()) -> Comparison:
    """The comparison of ``current`` against ``baseline``: each a run directory, a folder of
    runs, a loaded run, a list of those or a :class:`ComparisonSide`.
    Raises RunDirError when a run cannot be read."""
    now, before = load_side(current, rules.block_s), load_side(baseline, rules.block_s)
    rng = np.random.default_rng(rules.seed)
    weights_before, weights_now = before.weights(rules, rng), now.weights(rules, rng)
    rows = []
    scopes = [None] + sorted(now.classes() & before.classes())
    family = len(scopes) * len(STANDARD_PERCENTILES)  # the latency checks judged together
    runs = (1, 1) if rules.method == "request" else (len(before.runs), len(now.runs))
    for cls in scopes:
        for metric in METRICS:
            judged = compare_percentiles(before.figure(metric, cls, weights_before),
                                         now.figure(metric, cls, weights_now), STANDARD_PERCENTILES, rules, rng,
                                         family=family, runs=runs)
            rows += [percentile_change(metric, cls, row) for row in judged]
    focus = _focus_percentile(rows)
    stages, changed = stage_attribution(before, now, focus, rules)
    llm = compare_llm(before, now, (weights_before, weights_now), rules)
    checks = regression_checks(rows, rules, gate_confidence(rules.confidence, family, runs)) + llm_checks(llm, rules)
    regressed = any(not c.passed for c in checks)
    method = method_facts(before, now, rules)
    summary = verdict_summary(rows, changed, rules)
    if llm_summary(llm):  # an LLM regression leads when latency did not regress
        latency_regressed = any(r.regressed and r.metric == "latency_ms" for r in rows)
        summary = f"{summary}; {llm_summary(llm)}" if latency_regressed else f"{llm_summary(llm)}; latency: {summary}"
    if method.run_to_run_noise == "unknown":
        summary += " (one run per side: run-to-run noise unknown, judged by a time-block bootstrap)"
    host = host_load(*(tuple(run_other_cores(r.run, r.req, r.matrix) for r in side.runs) for side in (before, now)))
    inconclusive = regressed and host.busier == "current"
    if inconclusive:  # the reason first: the figures below may be the host's
        summary = f"{host.message}; measured: {summary}"
    elif host.busier == "baseline":
        summary += f"; but {host.message}"
    # the first run of each side: server, model, GPUs (analyzers/inputs/environment.py)
    env_before, env_now = (environment_facts(side.runs[0].run.manifest) for side in (before, now))
    return Comparison(
        format_version=COMPARISON_FORMAT_VERSION,
        title=f"{side_label(now, before)} vs {side_label(before, now)}",
        baseline=before.facts(), current=now.facts(),
        threshold=rules.threshold, confidence=rules.confidence, resamples=rules.resamples,
        gate_confidence=gate_confidence(rules.confidence, family, runs), checks_judged_together=family,
        method=method,
        verdict=ComparisonVerdict(regressed, summary, inconclusive),
        checks=tuple(checks), percentiles=tuple(rows), stages=tuple(stages), changed_stage=changed, llm=llm,
        error_rate=error_rate_change(before, now),
        classes_compared=tuple(c for c in scopes if c is not None),
        classes_only_in_one=tuple(sorted(now.classes() ^ before.classes())),
        distributions=Distributions(before.distribution(), now.distribution()),
        environment=EnvironmentComparison(
            Environment(**env_before), Environment(**env_now),
            tuple(EnvironmentDifference(**d) for d in environment_differences(env_before, env_now))),
        host_load=host,
    )


def _focus_percentile(rows: list[PercentileChange]) -> str:
    """The percentile whose latency (all requests) regressed most, else p99."""
    regressed = [r for r in rows if r.cls is None and r.metric == "latency_ms" and r.regressed]
    if not regressed:
        return "p99"
    return max(regressed, key=lambda r: r.relative_change or 0.0).percentile


def regression_checks(rows: list[PercentileChange], rules: CompareRules, gate: float | None = None) -> list[Check]:
    """One check per latency percentile and scope: passed unless regressed (JUnit testcases);
    ``gate``: the confidence the judged intervals were read at (:func:`~.judge.gate_confidence`)."""
    gate = rules.confidence if gate is None else gate
    checks = []
    for row in rows:
        if row.metric != "latency_ms":
            continue
        scope = row.cls or "all"
        label = row.figure
        relative = row.relative_change
        message = (f"{label} {row.baseline_ms:.1f} ms → {row.current_ms:.1f} ms "
                   f"({'—' if relative is None else f'{relative:+.1%}'}; change {rules.confidence:.0%} CI "
                   f"{row.change_ci_ms[0]:+.1f} … {row.change_ci_ms[1]:+.1f} ms)")
        if row.regressed:
            message += (f": regression (above {rules.threshold:.0%}, and the change's "
                        f"{_percent(gate)} interval {row.gate_ci_ms[0]:+.1f} … "
                        f"{row.gate_ci_ms[1]:+.1f} ms lies above 0)")
        elif not row.claimable:
            message += ": too few samples to judge"
        checks.append(Check(f"{scope} {label}", row.cls, not row.regressed, message))
    return checks


def _percent(confidence: float) -> str:
    """A confidence as a short percentage: ``95%``, ``99.75%``, ``>99.99%``."""
    if confidence > 0.9999:
        return ">99.99%"
    return f"{100 * confidence:.2f}".rstrip("0").rstrip(".") + "%"


def _tail_rows(side: RunSide, p: float) -> np.ndarray:
    """Stage-matrix rows of the requests at or above the side's own p-quantile of latency."""
    latency = side.req.latency_ms[side.matrix.request_index]
    if len(latency) == 0:
        return np.zeros(0, np.int64)
    ordered = np.sort(latency)
    cut = ordered[nearest_rank(len(ordered), p) - 1]
    return np.flatnonzero(latency >= cut)


def _tail_stage(side: ComparisonSide, stage: str, p: float) -> np.ndarray:
    """A stage's values (ms) over the tail requests of every run of a side (each run's own quantile)."""
    parts = [r.matrix.column(stage)[_tail_rows(r, p)] for r in side.runs if stage in r.matrix.stages]
    return np.concatenate(parts) if parts else np.zeros(0)


def _stages(side: ComparisonSide) -> list[str]:
    """The stages every run of a side has, in the first run's order."""
    return [s for s in side.runs[0].matrix.stages if all(s in r.matrix.stages for r in side.runs[1:])]


def stage_attribution(before: ComparisonSide, now: ComparisonSide, percentile: str,
                      rules: CompareRules) -> tuple[list[StageChange], ChangedStage | None]:
    """(per-stage mean change in the tail, the stage that changed most) for one percentile's tail."""
    p = dict(STANDARD_PERCENTILES)[percentile]
    before_stages = _stages(before)
    shared = [s for s in _stages(now) if s in before_stages and s != "server"]
    tail_before = sum(len(_tail_rows(r, p)) for r in before.runs)
    tail_now = sum(len(_tail_rows(r, p)) for r in now.runs)
    out = []
    for stage in shared:
        a = _tail_stage(before, stage, p)
        b = _tail_stage(now, stage, p)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if len(a) == 0 or len(b) == 0:
            continue
        change = float(b.mean() - a.mean())
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if len(a) > 1 and len(b) > 1 else 0.0
        out.append(StageChange(stage, float(a.mean()), float(b.mean()), change,
                               (change - Z_95 * se, change + Z_95 * se), percentile, int(tail_before), int(tail_now)))
    grown = [s for s in out if s.change_ci_ms[0] > 0]
    if not grown:
        return out, None
    top = max(grown, key=lambda s: s.change_ms)
    total = sum(max(s.change_ms, 0.0) for s in out)
    share = top.change_ms / total if total > 0 else 1.0
    summary = (f"{top.stage} changed most in the requests at or above latency {percentile_label(percentile)}: "
               f"mean {top.baseline_ms:.1f} ms → {top.current_ms:.1f} ms ({top.change_ms:+.1f} ms, "
               f"{share:.0%} of the stages' growth)")
    return out, ChangedStage(top.stage, top.change_ms, share, summary)


def error_rate_change(before: ComparisonSide, now: ComparisonSide) -> ErrorRateChange:
    """Error rates of both sides (all their runs' requests), their difference and a
    two-proportion z-test p-value."""
    from scipy import stats

    n1, n2 = (sum(r.req.n for r in side.runs) for side in (before, now))
    e1, e2 = (sum(int(r.req.is_error.sum()) for r in side.runs) for side in (before, now))
    r1 = e1 / n1 if n1 else 0.0
    r2 = e2 / n2 if n2 else 0.0
    pooled = (e1 + e2) / (n1 + n2) if n1 + n2 else 0.0
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)) if n1 and n2 and 0 < pooled < 1 else 0.0
    p_value = float(2 * stats.norm.sf(abs(r2 - r1) / se)) if se > 0 else 1.0
    return ErrorRateChange(r1, r2, r2 - r1, p_value)


def _unjudged(row: PercentileChange, rules: CompareRules) -> str:
    """A significant change that is not a regression, and why: ``latency P99.9 −13.1%: improved``,
    ``latency P50 +3.2%: significant, but within the 10% threshold``, ``latency P99.9 −13.1%:
    significant, but too few requests to claim latency P99.9 on both sides``."""
    name, relative = row.figure, row.relative_change
    change = "—" if relative is None else f"{relative:+.1%}".replace("-", "−")
    if row.improved:
        return f"{name} {change}: improved"
    if not row.claimable:
        return f"{name} {change}: significant, but too few requests to claim {name} on both sides"
    return f"{name} {change}: significant, but within the {rules.threshold:.0%} threshold"


def verdict_summary(rows: list[PercentileChange], changed: ChangedStage | None, rules: CompareRules) -> str:
    """One sentence: what regressed (all requests first), and where."""
    regressed = [r for r in rows if r.regressed and r.metric == "latency_ms"]
    if not regressed:
        moved = [r for r in rows if r.significant and r.metric == "latency_ms" and r.cls is None]
        return f"no regression above {rules.threshold:.0%}" + "".join(f"; {_unjudged(r, rules)}" for r in moved)
    regressed.sort(key=lambda r: (r.cls is not None, -(r.relative_change or 0)))
    parts = [f"{r.cls or 'all'} {r.figure} {r.baseline_ms:.1f} → "
             f"{r.current_ms:.1f} ms ({r.relative_change:+.0%})" for r in regressed[:4]]
    text = "regression: " + "; ".join(parts) + (f" (+{len(regressed) - 4} more)" if len(regressed) > 4 else "")
    if changed:
        text += f". {changed.summary}"
    return text
