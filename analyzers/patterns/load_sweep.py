"""A load sweep's results: per-step figures, the highest rate (or concurrency)
under the SLOs, the knee, and for LLM workloads the throughput–latency frontier.

Pure functions over the analysis dicts of the sweep's step runs (each step is
a full run directory; see docs/sweep.md). The result is ``sweep.json``
(its types: analysis_model/sweep.py) and feeds the sweep report. A sweep varies one *level*: the
offered rate (``variable`` ``rate``, req/s; the step's ``rate``) or the
number of requests kept in flight in concurrency mode (``concurrency``; the
step's ``concurrency``, its ``rate`` null).

- **Per step**: offered and achieved rate (req/s), P50/P99 latency from the
  scheduled send time with their 95% confidence intervals, error rate, the
  SLO verdict, and whether the generator was the bottleneck; for a run with
  OpenAI-API requests, ``llm``: output tokens/s (aggregate over the load) and
  TTFT/TPOT P50/P99 with their CIs, read from the run's ``llm`` section.
- **Max level under SLO**: the highest level whose step met every SLO
  (None when no step did, or the scenario has no SLOs). A failing step below
  it is reported as a warning (pass/fail was not monotone: noise or warm-up).
- **Knee** (Kneedle, Satopää et al. 2011): on the curve P99 vs level,
  normalised to [0, 1] on both axes, the step farthest below the chord from
  the first to the last step, i.e. where latency starts to climb steeply.
  Needs >= 3 steps with a P99 and a curve that bends upward; else None.
- **Saturation** (rate sweeps): the first step whose achieved rate fell below
  ``SATURATION_SHARE`` of its offered rate (the service, or the generator,
  could not keep up). A closed loop offers what it achieves: None.
- **Frontier** (steps with ``llm`` figures): each step as a point (output
  tokens/s; TTFT and TPOT P50/P99). A point is *Pareto-optimal* when no
  other step has at least its throughput and at most its TTFT P99 and TPOT
  P99, one of them strictly. The *best point under the SLOs* is the step
  with the highest output tokens/s among those that met every SLO (ties:
  the lower TPOT P99); None without SLOs or when none passed.
- **Saturation stop** (:func:`saturation_stop`, judged after each step of a list of rates or
  concurrencies): the last ``steps_past_knee`` steps each gained less throughput over the
  knee step (output tokens/s for LLM steps, else achieved req/s) than
  ``MIN_THROUGHPUT_SCALING`` of their level's relative increase over it, while latency
  (P50, else P99) rose at each of them: the service saturated at the knee, more load only
  queues. The sweep then stops stepping and ``sweep.json``'s ``stopped`` says why.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.llm import Llm
from tailscope.analysis_model.percentiles import Percentile
from tailscope.analysis_model.run import Run
from tailscope.analysis_model.summary import Summary
from tailscope.analysis_model.sweep import (
    BestPoint,
    Frontier,
    FrontierPoint,
    Knee,
    KneeStep,
    PastKnee,
    Saturation,
    SaturationStop,
    Search,
    StepLlm,
    StepPercentile,
    StepPercentiles,
    Stopped,
    Sweep,
    SweepStep,
)
from tailscope.analysis_model.verdict import Verdict
from tailscope.analysis_model.warning import AnalysisWarning

SWEEP_FORMAT_VERSION = "1.2"
#: What a sweep varies from step to step.
SWEEP_VARIABLES = ("rate", "concurrency")
#: A step is saturated when achieved < this share of offered.
SATURATION_SHARE = 0.9
#: Smallest normalised distance below the chord that counts as a knee.
MIN_KNEE_DISTANCE = 0.05
#: Past the saturation knee a step's throughput grew by less than this share of its level's
#: relative increase over the knee step (a service with room grows ~1:1 with its load).
MIN_THROUGHPUT_SCALING = 0.5


def _percentile(entry: Percentile) -> StepPercentile:
    """A step's percentile (ms): value, 95% CI, sample size and claim."""
    return StepPercentile(entry.value_ms, entry.ci_low_ms, entry.ci_high_ms, entry.n, entry.claimed)


def llm_figures(analysis: dict) -> StepLlm | None:
    """Output tokens/s (aggregate) and TTFT/TPOT P50/P99 from a run's ``llm`` section (read as
    :class:`~tailscope.analysis_model.llm.Llm`); None without one."""
    llm = decode(Llm | None, analysis.get("llm"), "llm")
    if llm is None:
        return None
    return StepLlm(requests=llm.requests, completed=llm.completed,
                   output_tokens_per_s=llm.output_tokens_per_s.aggregate,
                   ttft_ms=StepPercentiles(_percentile(llm.ttft_ms.p50), _percentile(llm.ttft_ms.p99)),
                   tpot_ms=StepPercentiles(_percentile(llm.tpot_ms.p50), _percentile(llm.tpot_ms.p99)))


def step_record(index: int, level: float, run_dir: str, analysis: dict, variable: str = "rate") -> SweepStep:
    """One step's figures from its run's analysis dict; ``level`` is its offered rate
    (``variable`` ``rate``) or its concurrency (``concurrency``)."""
    if variable not in SWEEP_VARIABLES:
        raise ValueError(f"unknown sweep variable {variable!r}; expected one of {', '.join(SWEEP_VARIABLES)}")
    summary = decode(Summary, analysis["summary"], "summary")
    verdict = decode(Verdict, analysis["verdict"], "verdict")
    has_slos = bool(verdict.slos)
    return SweepStep(
        index=index,
        rate=level if variable == "rate" else None,
        concurrency=int(level) if variable == "concurrency" else None,
        run_dir=run_dir,
        status=decode(Run, analysis["run"], "run").status,
        duration_s=summary.duration_s,
        requests=summary.requests,
        errors=summary.errors,
        error_rate=summary.error_rate,
        offered_rps=summary.offered_rps,
        achieved_rps=summary.achieved_rps,
        p50=_percentile(summary.latency_ms.p50),
        p99=_percentile(summary.latency_ms.p99),
        passed=verdict.passed if has_slos else None,
        # passed | failed | inconclusive | incomplete (analyzers/health/outcome.py); None without SLOs
        outcome=verdict.outcome if has_slos else None,
        failed_slos=list(verdict.failed),
        generator_limited=summary.lateness_ms.generator_limited,
        llm=llm_figures(analysis),
    )


def max_rate_under_slo(steps: list[SweepStep]) -> tuple[float | None, int | None]:
    """(highest level whose step passed, that step's index); (None, None) if none passed."""
    passing = [s for s in steps if s.passed]
    if not passing:
        return None, None
    best = max(passing, key=lambda s: s.level)
    return best.level, best.index


def find_knee(steps: list[SweepStep]) -> Knee | None:
    """The knee of P99 vs level (Kneedle); None when the curve has none."""
    points = sorted(((s.level, s.p99.value_ms, s.index) for s in steps
                     if s.p99.value_ms is not None), key=lambda p: p[0])
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
    step = next(s for s in steps if s.index == points[best][2])
    return Knee(rate=step.rate, concurrency=step.concurrency, level=step.level, index=step.index,
                achieved_rps=step.achieved_rps, p99_ms=step.p99.value_ms, distance=float(distance[best]),
                method="kneedle")


def saturation(steps: list[SweepStep]) -> Saturation | None:
    """The first step (by rate) whose achieved rate fell below SATURATION_SHARE of offered
    (rate sweeps; None for concurrency steps, which offer what they achieve)."""
    if any(s.concurrency is not None for s in steps):
        return None
    for step in sorted(steps, key=lambda s: s.rate):
        offered, achieved = step.offered_rps, step.achieved_rps
        if offered and achieved is not None and achieved < SATURATION_SHARE * offered:
            return Saturation(rate=step.rate, index=step.index, offered_rps=offered, achieved_rps=achieved)
    return None


def _throughput(step: SweepStep) -> tuple[float | None, str]:
    """A step's throughput and its unit: output tokens/s for a step with ``llm`` figures, else
    achieved req/s."""
    if step.llm is not None and step.llm.output_tokens_per_s is not None:
        return step.llm.output_tokens_per_s, "output tokens/s"
    return step.achieved_rps, "req/s"


def _latency_ms(step: SweepStep) -> float | None:
    """A step's latency for the saturation rule: P50 (ms; steady in steps of a few seconds, where a
    P99 rests on a handful of requests), else P99 when P50 has no value."""
    for p in (step.p50, step.p99):
        if p.value_ms is not None:
            return p.value_ms
    return None


def saturation_stop(steps: list[SweepStep], steps_past_knee: int) -> SaturationStop | None:
    """Whether a sweep has stepped past saturation, judged on ``steps`` in the order they ran
    (rising levels): the step ``steps_past_knee`` before the last is the knee when each step
    after it gained less throughput than ``MIN_THROUGHPUT_SCALING`` of its level's relative
    increase over the knee, and latency rose at each of them (module docstring).

    Returns the knee step, the throughput unit, ``steps_past_knee`` and the steps after the knee
    with their gains relative to the knee step (0.05 = 5%), or None when the sweep has not saturated."""
    if steps_past_knee < 1:
        raise ValueError(f"steps_past_knee must be >= 1, got {steps_past_knee}")
    if len(steps) < steps_past_knee + 1:
        return None
    knee, after = steps[-(steps_past_knee + 1)], steps[-steps_past_knee:]
    knee_throughput, unit = _throughput(knee)
    if not knee_throughput or _latency_ms(knee) is None:
        return None
    previous, evidence = knee, []
    for step in after:
        throughput, _ = _throughput(step)
        latency, level = _latency_ms(step), step.level
        level_gain = level / knee.level - 1.0
        if throughput is None or latency is None or level_gain <= 0:
            return None
        gain = throughput / knee_throughput - 1.0
        if gain >= MIN_THROUGHPUT_SCALING * level_gain or latency <= _latency_ms(previous):
            return None
        evidence.append(PastKnee(index=step.index, level=level, throughput=throughput, latency_ms=latency,
                                 throughput_gain=gain, level_gain=level_gain))
        previous = step
    return SaturationStop(knee=KneeStep(index=knee.index, level=knee.level, throughput=knee_throughput,
                                        latency_ms=_latency_ms(knee)),
                          unit=unit, steps_past_knee=steps_past_knee, after=evidence)


def sweep_warnings(steps: list[SweepStep], best_rate: float | None, has_slos: bool) -> list[AnalysisWarning]:
    """The sweep's warnings (``code``, ``message``), worded for what the steps varied:
    offered rates, or concurrency levels (requests kept in flight)."""
    warnings = []
    concurrency = any(s.concurrency is not None for s in steps)
    if not has_slos:
        best_name = "highest concurrency" if concurrency else "highest rate"
        warnings.append(AnalysisWarning("no_slos", "the scenario has no SLOs: no step can pass or "
                                        f"fail, so there is no {best_name} under the SLOs (the curve and knee still stand)"))
    unit = " in flight" if concurrency else " req/s"
    limited = [s.level for s in steps if s.generator_limited]
    if limited:
        warnings.append(AnalysisWarning("generator_limited", (
            "generator-limited at " + ", ".join(f"{r:g}" for r in limited) + unit + ": more than 1% of "
            "sends were over 1 ms late there; those steps measure the generator, not the target "
            "(use --workers)")))
    if best_rate is not None:
        below = [s.level for s in steps if s.passed is False and s.level < best_rate]
        if below:
            warnings.append(AnalysisWarning("non_monotone", (
                f"steps failed below the maximum passing {'concurrency' if concurrency else 'rate'} ("
                + ", ".join(f"{r:g}" for r in below) + unit + "): the result is noisy; lengthen --step-duration")))
    return warnings


def frontier(steps: list[SweepStep], has_slos: bool) -> Frontier | None:
    """The throughput–latency frontier of the steps with ``llm`` figures (module docstring);
    None when no step has them."""
    steps = [s for s in sorted(steps, key=lambda s: (s.level, s.index))
             if s.llm is not None and s.llm.output_tokens_per_s is not None]
    if not steps:
        return None

    def objectives(s: SweepStep) -> tuple | None:
        ttft, tpot = s.llm.ttft_ms.p99.value_ms, s.llm.tpot_ms.p99.value_ms
        return None if ttft is None or tpot is None else (s.llm.output_tokens_per_s, ttft, tpot)

    def dominates(a: tuple, b: tuple) -> bool:
        return a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2] and a != b

    scored = [objectives(s) for s in steps]
    points = [FrontierPoint(index=s.index, level=s.level, output_tokens_per_s=s.llm.output_tokens_per_s,
                            achieved_rps=s.achieved_rps, ttft_ms=s.llm.ttft_ms, tpot_ms=s.llm.tpot_ms,
                            passed=s.passed,
                            pareto=o is not None and not any(q is not None and dominates(q, o) for q in scored))
              for s, o in zip(steps, scored)]
    passing = [p for p in points if p.passed]
    best = None
    if has_slos and passing:
        top = max(passing, key=lambda p: (p.output_tokens_per_s, -(p.tpot_ms.p99.value_ms or 0.0)))
        best = BestPoint(index=top.index, level=top.level, output_tokens_per_s=top.output_tokens_per_s,
                         ttft_p99_ms=top.ttft_ms.p99.value_ms, tpot_p99_ms=top.tpot_ms.p99.value_ms)
    return Frontier(throughput="output_tokens_per_s", points=points, best_under_slo=best)


def summarize_sweep(name: str, mode: str, slos: list[str], steps: list[SweepStep],
                    search: Search | None = None, variable: str = "rate", stopped: Stopped | None = None, *,
                    path: str, step_duration_s: float, interrupted: bool) -> Sweep:
    """The sweep (``sweep.json``, written once by conductor/sweep.py); ``variable``: what the steps
    varied (:data:`SWEEP_VARIABLES`); ``stopped``: why a list of levels stopped before its end, None
    when it ran them all; ``path``: the sweep's folder, ``step_duration_s`` each step's length (s),
    ``interrupted`` whether Ctrl-C ended it."""
    if variable not in SWEEP_VARIABLES:
        raise ValueError(f"unknown sweep variable {variable!r}; expected one of {', '.join(SWEEP_VARIABLES)}")
    best_level, best_index = max_rate_under_slo(steps)
    return Sweep(
        format_version=SWEEP_FORMAT_VERSION,
        name=name,
        mode=mode,
        variable=variable,
        slos=list(slos),
        steps=sorted(steps, key=lambda s: (s.level, s.index)),
        max_rate_under_slo=best_level if variable == "rate" else None,
        max_concurrency_under_slo=best_level if variable == "concurrency" else None,
        max_rate_step=best_index,
        knee=find_knee(steps),
        saturation=saturation(steps),
        frontier=frontier(steps, bool(slos)),
        search=search,
        stopped=stopped,
        passed=best_level is not None if slos else None,
        warnings=sweep_warnings(steps, best_level, bool(slos)),
        path=path,
        step_duration_s=step_duration_s,
        interrupted=interrupted,
    )
