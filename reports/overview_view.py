"""The words around the report's first screen: SLO results in brief, how the P99 line and the
spikes were found, and what the "All signals" section holds.

Pure functions of the analysis dict (or of chart series already built), returning text the
template only places; every rule they state is the analyzers' own (docs/report.md).
"""

from __future__ import annotations

from tailscope.analysis_model.spikes import SpikeDetection
from tailscope.reports.formatting import fmt_count, fmt_ms


def slo_chips(verdict_rows: list[dict]) -> list[dict]:
    """One short ``{"text", "result", "css"}`` per SLO for the verdict banner: ``p99 < 250ms: 25.0 ms``."""
    return [{"text": f"{row['text']}: {row['observed']}", "result": row["result"], "css": row["css"]}
            for row in verdict_rows]


def tail_text(tail: dict | None, windows: int) -> str:
    """How the chart's P99 line was drawn, and why; or why there is none (``tail``: the timeline's
    rolling-P99 series, reports/timeline.py ``rolling_tail``)."""
    if tail is None:
        return ("P99 is drawn per window only where a window holds enough requests to claim it (459; early "
                "stopping at 99% confidence)")
    span = tail["span_median_s"]
    covered = f"; here a point covers about {span:.1f} s" if span else ""
    return (f"P99 is drawn over a rolling sample: each point is the P99 of the last {fmt_count(tail['min_samples'])} "
            f"requests or more (the fewest that can claim a P99 at 99% confidence){covered}, one point every "
            f"{tail['step_s']:g} s, so every point of the line is claimed")


def detection_text(detection: SpikeDetection | None, spikes: int, minor: int) -> str:
    """How spikes were looked for: the test, the baseline, the warm-up left out, and the minor rule
    (``detection`` None: an analysis written before spike detection had its section)."""
    if detection is None or not detection.performed:
        return "No spike detection: too few latency samples."
    warmup = detection.warmup_s
    per_length = detection.judged_on == "e2e_for_answer_length"
    text = ("Spikes: windows holding significantly more requests above the baseline P99 "
            + ("of e2e latency adjusted for answer length — each request's e2e scaled to the median answer "
               "length by the run's e2e-vs-length line (the answers differ in length: a long answer is no "
               "incident) " if per_length else "")
            + f"({fmt_ms(detection.baseline_p99_ms)}) than the 1% a steady run holds, tested over "
            f"{detection.detection_window_s:g}-s windows at α = {detection.alpha:g}")
    if warmup > 0:
        text += (f"; the first {warmup:g} s are warm-up and left out of detection (the rule: 5% of the load, "
                 "at least 2 s and at most 10 s, at most a quarter of the run)")
    text += f". {spikes} spike{'s' if spikes != 1 else ''} found"
    if minor:
        text += (f", {minor} of them minor (no known cause explains it, and its P99 stayed below twice the "
                 "baseline P99 or its impact is under a tenth of the largest spike's)")
    longer = [entry.summary for entry in detection.longer_answers if entry.summary]
    if longer:
        text += ". Not incidents, longer answers: " + "; ".join(longer)
    return text + "."


def signals_text(summary: dict) -> str:
    """What "All signals" holds: series drawn, constants listed, per-CPU series folded."""
    constants = len(summary["constants"])
    folded = [g for g in summary["folded"] if g["folded"]]
    kept = [g for g in summary["folded"] if not g["folded"]]
    text = (f"{summary['series_plotted']} series in {len(summary['panels'])} panels, drawn when opened; "
            f"{constants} that did not change listed as constants")
    if folded:
        text += f"; per-CPU series of {len(folded)} metric{'s' if len(folded) != 1 else ''} summed over the CPUs"
    if kept:
        text += "; drawn per CPU where one CPU differs: " + ", ".join(f"{g['group']} ({g['differs']})" for g in kept)
    return text
