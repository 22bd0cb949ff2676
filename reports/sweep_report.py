"""The sweep report: ``sweep.json`` → a self-contained ``sweep.html``.

:func:`sweep_report_data` turns the sweep dict (analyzers/patterns/load_sweep.py) into
pre-formatted strings and chart series; the template (templates/sweep.html)
only loops over them, and templates/sweep.js draws the throughput–latency
curve and, for LLM workloads, the frontier (output tokens/s against TTFT and
TPOT P50/P99, the Pareto-optimal steps and the best point under the SLOs
marked) with plotly's bundled JS (embedded like the run report's; no network). Every string from the run is
escaped by jinja2 or set as text by the page's JS. It draws the typed
:class:`~tailscope.analysis_model.sweep.Sweep`; reports/upgrade.py ``sweep_of`` reads a ``sweep.json``
of any format (1.0: rate steps only, no ``variable`` or ``frontier``; 1.1: no ``stopped``).
"""

from __future__ import annotations

from tailscope.analysis_model.sweep import BestPoint, FrontierPoint, Search, StepPercentile, Stopped, Sweep, SweepStep
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_rate, fmt_share, fmt_tokens_per_s
from tailscope.reports.html import render_page

#: The sweep page's scripts (after report_common.js's helpers).
SWEEP_SCRIPTS = ("report_common.js", "sweep.js")


def _ci(entry: StepPercentile) -> str:
    if entry.value_ms is None:
        return "—"
    return f"{fmt_ms(entry.ci_low_ms)} – {fmt_ms(entry.ci_high_ms)}"


def _verdict(passed) -> str:
    """A step's SLO outcome in words (its CSS class is ``result-`` + :func:`_verdict_css`)."""
    return {True: "pass", False: "fail", None: "no SLOs"}[passed]


def _verdict_css(passed) -> str:
    return {True: "pass", False: "fail", None: "none"}[passed]


def _level(step: SweepStep) -> str:
    """A step's level: its concurrency (``8 in flight``) or its offered rate."""
    if step.concurrency is not None:
        return f"{fmt_count(step.concurrency)} in flight"
    return fmt_rate(step.rate)


def step_rows(sweep: Sweep) -> list[dict]:
    knee = None if sweep.knee is None else sweep.knee.index
    return [{
        "rate": _level(s), "offered": fmt_rate(s.offered_rps), "achieved": fmt_rate(s.achieved_rps),
        "p50": fmt_ms(s.p50.value_ms), "p50_ci": _ci(s.p50),
        "p99": fmt_ms(s.p99.value_ms), "p99_ci": _ci(s.p99),
        "p99_claimed": "claimed" if s.p99.claimed else f"not claimed (n = {s.p99.n:,})",
        "errors": fmt_share(s.error_rate), "result": _verdict(s.passed), "result_css": _verdict_css(s.passed),
        "failed": ", ".join(s.failed_slos), "generator_limited": "generator-limited" if s.generator_limited else "",
        "run_dir": s.run_dir, "best": s.index == sweep.max_rate_step, "knee": s.index == knee,
    } for s in sweep.steps]


def _series(entries: list[StepPercentile]) -> dict:
    """A chart series: y = the percentile (ms), with its CI as error bars."""
    ys = [e.value_ms for e in entries]
    return {"y": ys,
            "plus": [None if v is None else e.ci_high_ms - v for e, v in zip(entries, ys)],
            "minus": [None if v is None else v - e.ci_low_ms for e, v in zip(entries, ys)]}


def chart_data(sweep: Sweep) -> dict:
    """Series for the curve: x = achieved req/s, y = latency ms (CI as error bars)."""
    steps, knee = sweep.steps, sweep.knee
    return {
        "achieved": [s.achieved_rps for s in steps], "offered": [s.offered_rps for s in steps],
        "rate": [s.rate for s in steps], "passed": [s.passed for s in steps],
        "level": [_level(s) for s in steps],
        "p50": _series([s.p50 for s in steps]), "p99": _series([s.p99 for s in steps]),
        "knee": None if knee is None else {"x": knee.achieved_rps, "y": knee.p99_ms},
        "max_rate": sweep.max_rate_under_slo,
        "frontier": frontier_chart(sweep),
    }


def frontier_chart(sweep: Sweep) -> dict | None:
    """Series for the frontier chart (x = output tokens/s), or None without a frontier."""
    front = sweep.frontier
    if front is None:
        return None
    points = sorted(front.points, key=lambda pt: pt.output_tokens_per_s)
    best = front.best_under_slo
    return {
        "x": [pt.output_tokens_per_s for pt in points],
        "label": [_level_of_point(pt, sweep) for pt in points],
        "pareto": [pt.pareto for pt in points],
        "ttft_p50": _series([pt.ttft_ms.p50 for pt in points]), "ttft_p99": _series([pt.ttft_ms.p99 for pt in points]),
        "tpot_p50": _series([pt.tpot_ms.p50 for pt in points]), "tpot_p99": _series([pt.tpot_ms.p99 for pt in points]),
        "best": None if best is None else {"x": best.output_tokens_per_s, "ttft": best.ttft_p99_ms,
                                           "tpot": best.tpot_p99_ms, "label": _level_of_point(best, sweep)},
    }


def _level_of_point(point: FrontierPoint | BestPoint, sweep: Sweep) -> str:
    if sweep.variable == "concurrency":
        return f"{fmt_count(point.level)} in flight"
    return fmt_rate(point.level)


def frontier_rows(sweep: Sweep) -> list[dict]:
    """The frontier table: one row per step with LLM figures, by level."""
    front = sweep.frontier
    if front is None:
        return []
    best = None if front.best_under_slo is None else front.best_under_slo.index
    return [{
        "level": _level_of_point(pt, sweep), "tokens": fmt_tokens_per_s(pt.output_tokens_per_s),
        "achieved": fmt_rate(pt.achieved_rps),
        "ttft_p50": fmt_ms(pt.ttft_ms.p50.value_ms), "ttft_p99": fmt_ms(pt.ttft_ms.p99.value_ms),
        "tpot_p50": fmt_ms(pt.tpot_ms.p50.value_ms), "tpot_p99": fmt_ms(pt.tpot_ms.p99.value_ms),
        "result": _verdict(pt.passed), "result_css": _verdict_css(pt.passed), "pareto": "on the frontier" if pt.pareto else "",
        "best": pt.index == best,
    } for pt in front.points]


def best_point_text(sweep: Sweep) -> str:
    """The frontier's best point under the SLOs in words ('—' without a frontier)."""
    front = sweep.frontier
    if front is None:
        return "—"
    best = front.best_under_slo
    if best is None:
        return "no step met the SLOs" if sweep.slos else "no SLOs"
    return (f"{_level_of_point(best, sweep)}: {fmt_tokens_per_s(best.output_tokens_per_s)} "
            f"(TTFT P99 {fmt_ms(best.ttft_p99_ms)}, TPOT P99 {fmt_ms(best.tpot_p99_ms)})")


def search_text(search: Search | None) -> str | None:
    """One sentence describing a peak search; None for a rate list."""
    if search is None:
        return None
    passing, failing = search.passing_rate, search.failing_rate
    bracket = (f"passes at {fmt_rate(passing)}" if passing is not None else "nothing passed") + (
        f", fails at {fmt_rate(failing)}" if failing is not None else ", the upper bound passed")
    return (f"Peak search between {fmt_rate(search.low)} and {fmt_rate(search.high)} "
            f"(tolerance {fmt_rate(search.tolerance_rps)}): {search.steps} of at most "
            f"{search.max_steps} steps; {bracket}.")


#: A stop's reason in words.
STOP_REASONS = {"saturation": "saturation", "slo_failures": "SLO failures"}


def stopped_text(stopped: Stopped | None) -> dict | None:
    """Why a list of levels stopped before its end (``{"reason", "message"}`` in words), None when it
    ran them all (and in sweeps before format 1.2)."""
    if stopped is None:
        return None
    return {"reason": STOP_REASONS[stopped.reason], "message": stopped.message}


def sweep_report_data(sweep: Sweep) -> dict:
    concurrency = sweep.variable == "concurrency"
    best = sweep.max_level_under_slo
    best_text = f"{fmt_count(best)} in flight" if concurrency and best is not None else fmt_rate(best)
    knee, sat = sweep.knee, sweep.saturation
    if sweep.passed is None:
        banner = {"label": "NO SLOs", "css": "none"}
    else:
        banner = {"label": "PASSED" if sweep.passed else "FAILED", "css": "pass" if sweep.passed else "fail"}
    return {
        "title": f"tailscope sweep — {sweep.name}",
        "banner": banner,
        "max_rate": best_text if best is not None else (
            f"no {'concurrency level' if concurrency else 'rate'} met the SLOs" if sweep.slos else "no SLOs to meet"),
        "max_label": "highest concurrency that met every SLO" if concurrency else "highest offered rate that met every SLO",
        "variable": "concurrency" if concurrency else "rate",
        "knee": "—" if knee is None else (f"{fmt_count(knee.concurrency)} in flight" if concurrency
                                          else f"{fmt_rate(knee.rate)} offered") + f" (latency P99 {fmt_ms(knee.p99_ms)})",
        "best_point": best_point_text(sweep),
        "frontier_rows": frontier_rows(sweep),
        "saturation": "—" if sat is None else f"{fmt_rate(sat.rate)} offered, {fmt_rate(sat.achieved_rps)} achieved",
        "mode": sweep.mode, "slos": list(sweep.slos),
        "search": search_text(sweep.search),
        "stopped": stopped_text(sweep.stopped),
        "warnings": [{"code": w.code, "message": w.message} for w in sweep.warnings],
        "rows": step_rows(sweep),
        "charts": chart_data(sweep),
    }


def render_sweep_html(sweep: Sweep, compress_plotly: bool = True) -> str:
    """The sweep page (one self-contained HTML file) for a sweep (a ``sweep.json`` of any version
    reads as one through reports/upgrade.py ``sweep_of``)."""
    data = sweep_report_data(sweep)
    return render_page("sweep.html", data, data["charts"], SWEEP_SCRIPTS, compress_plotly)
