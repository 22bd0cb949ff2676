"""The report's "Load generator" section and per-class goodput/SLO cells.

Takes the ``generator`` section, the summary's lateness and goodput and the verdict as their types
(analysis_model/health.py, summary.py, verdict.py; decoded once by reports/data.py through
reports/upgrade.py). The generator's ``load_model`` stays a dict by design: the scenario's arrival,
whose keys each arrival process defines. Every value is pre-formatted text, so the template only loops.
"""

from __future__ import annotations

from tailscope.analysis_model.health import Generator, GeneratorProcess, LatenessRule
from tailscope.analysis_model.streaming import Streaming
from tailscope.analysis_model.summary import Goodput, Lateness
from tailscope.analysis_model.verdict import Verdict
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_offset, fmt_rate, fmt_share

CAUSE_TEXT = {
    "in_flight_cap": "the in-flight cap was full",
    "generator_cpu": "the generator used a whole core",
    "cpu_contention": "the generator waited for a CPU (other processes)",
    "gc": "the generator's garbage collector paused it",
    "unknown": "no recorded cause",
}


def _arrival_text(model: dict) -> str:
    """``open loop, poisson at 40 req/s`` / ``closed loop, 8 users, think 0.1 s`` /
    ``closed loop (concurrency mode): 8 requests kept in flight``."""
    if model.get("loop") == "closed":
        if not model.get("think_time_s"):
            return (f"closed loop (concurrency mode): {model.get('users', '?')} requests kept in flight, each sent "
                    "as soon as one ends; latency from the send (subject to coordinated omission)")
        return (f"closed loop: {model.get('users', '?')} users, think time {model.get('think_time_s', 0):g} s "
                "(subject to coordinated omission)")
    parts = [f"open loop: {model.get('process', '?')}"]
    if model.get("rate") is not None and model.get("process") != "replay":
        parts.append(f"{model['rate']:g} req/s" + (" peak" if model.get("profile") else ""))
    if model.get("burstiness") is not None:
        parts.append(f"burstiness {model['burstiness']:g}")
    profile = model.get("profile") or {}
    if profile:
        parts.append(f"{profile.get('kind')} rate profile")
    if model.get("max_concurrency") is not None:
        parts.append(f"at most {fmt_count(model['max_concurrency'])} in flight (max_concurrency: a request "
                     "that waits for a slot is late, and its wait is in its latency)")
    if model.get("process") == "replay":
        trace = model.get("trace") or {}
        what = f"requests of a {trace['format']} trace" if trace else "recorded arrivals"
        parts.append(f"{fmt_count(model.get('arrivals'))} {what} from {model.get('file')} "
                     f"at {model.get('speed', 1):g}x" + (", looped" if model.get("loop_log") else ""))
        if model.get("slice_s"):
            start, end = model["slice_s"]
            parts.append(f"trace time {start:g} s to {'the end' if end is None else f'{end:g} s'}")
        if model.get("max_rate") is not None:
            parts.append(f"at most {model['max_rate']:g} req/s (bursts spread out)")
        if trace.get("block_reuse") is not None:
            parts.append(f"{trace['block_reuse']:.1%} of its {trace['block_tokens']}-token prompt blocks repeat an "
                         "earlier one (hash ids)")
    return ", ".join(parts)


def generator_data(generator: Generator | None, lateness: Lateness, origin: int | None) -> dict | None:
    """Facts and generator-limited intervals of the load generator (the ``generator`` section, with
    the summary's ``lateness``; interval times as s since ``origin``, epoch ns: the load start); None
    for analyses without it."""
    if generator is None:
        return None
    cpu, gc, processes = generator.cpu, generator.gc, generator.processes
    facts = [
        {"key": "arrivals", "value": _arrival_text(generator.load_model)},
        {"key": "in-flight cap", "value": f"{fmt_count(generator.max_in_flight)} "
                                          f"(when full: {generator.in_flight_policy})"},
        {"key": "dropped (never sent)", "value": fmt_count(generator.dropped)},
        {"key": "lateness", "value": f"P50 {fmt_ms(lateness.p50_ms)}, P99 {fmt_ms(lateness.p99_ms)}, "
                                     f"{fmt_share(lateness.late_share)} of sends > 1 ms late"},
        {"key": "generator CPU", "value": f"mean {fmt_number(cpu.mean_percent)} %, "
                                          f"max {fmt_number(cpu.max_percent)} % of one core"
                                          + (" (busiest process per window)" if len(processes) > 1 else "")},
        *([{"key": "generator processes", "value": _processes_text(processes)}] if len(processes) > 1 else []),
        {"key": "generator GC", "value": f"{fmt_count(gc.pauses)} pauses, {fmt_ms(gc.total_ms)} "
                                         f"in total, longest {fmt_ms(gc.max_ms)}"},
        {"key": "waiting for a CPU", "value": fmt_ms(generator.runqueue_wait_ms)},
    ]
    intervals = [{
        "window": f"{fmt_offset(i.start_ns, origin)} – {fmt_offset(i.end_ns, origin)}",
        "late": f"{fmt_count(i.late)} of {fmt_count(i.scheduled)} ({fmt_share(i.late_share)})",
        "cause": CAUSE_TEXT.get(i.cause, i.cause),
        "shift": fmt_ms(i.p99_shift_ms),
        "mattered": "yes" if i.material else "no",
    } for i in generator.limited_windows]
    windows = generator.windows
    short = [w for w in windows if w.offered_rps > 0 and w.achieved_rps < 0.9 * w.offered_rps]
    rule = generator.lateness_rule
    if rule is not None:
        facts.append({"key": "does lateness matter?", "value": _rule_text(rule)})
    return {
        "limited": headline_limited(generator),
        "verdict": generator_verdict(generator, len(intervals)),
        "facts": facts,
        "intervals": intervals,
        "short_windows": f"{len(short)} of {len(windows)} windows achieved less than 90% of the offered rate",
    }


def _rule_text(rule: LatenessRule) -> str:
    checks = "; ".join(f"{c.percentile} latency {fmt_ms(c.latency_ms)} vs service time {fmt_ms(c.service_ms)}: "
                       f"lateness adds {fmt_ms(c.shift_ms)} ({fmt_share(c.share)})"
                       + ("" if c.claimed else f", {c.percentile} not claimed")
                       for c in rule.checks if c.share is not None)
    return ("yes" if rule.material else "no") + (f": {checks}" if checks else "") + f" ({rule.rule})"


def headline_limited(generator: Generator) -> bool:
    """Whether generator-limited is the headline: the lateness mattered (``lateness_rule.material``,
    :mod:`tailscope.analyzers.health.lateness_rule`); an analysis written before the rule: more
    than 1% of sends were late (``limited``)."""
    rule = generator.lateness_rule
    return rule.material if rule is not None else generator.limited


def generator_verdict(generator: Generator, intervals: int) -> str:
    """One line that never contradicts the windows listed under it: kept to its schedule only
    when no window was generator-limited; a headline "generator-limited" only when lateness
    mattered (:func:`headline_limited`)."""
    if headline_limited(generator):
        return ("generator-limited: late sends changed the claimed percentiles, so the generator, not the "
                "target, may explain the tail in the windows below")
    if intervals or generator.limited:
        mattered = sum(1 for w in generator.limited_windows if w.material)
        return (f"the generator fell behind its schedule in {intervals} window{'s' if intervals != 1 else ''} "
                "(more than 1% of sends over 1 ms late), but the lateness did not materially change a claimed "
                "percentile, so it is no headline warning; "
                + (f"grey bands on the latency chart mark the {mattered} where it mattered"
                   if mattered else "no window's lateness mattered, so no grey band is drawn"))
    return "the generator kept to its schedule: no window had more than 1% of its sends over 1 ms late"


def _processes_text(processes: list[GeneratorProcess]) -> str:
    """Each generator process (distributed workers): its CPU and GC pauses, one clause each."""
    return "; ".join(
        f"worker {p.worker}: CPU mean {fmt_number(p.cpu_mean_percent)} %, "
        f"max {fmt_number(p.cpu_max_percent)} %, {fmt_count(p.gc_pauses)} GC pauses"
        for p in processes)


def class_slo_cells(classes: list[str], goodput: Goodput | None, verdict: Verdict) -> dict:
    """``{class: {"goodput", "slos"}}`` for each of ``classes``: its goodput share (the summary's
    ``goodput.by_class``; — without one) and its SLOs' results as text."""
    by_class = goodput.by_class if goodput is not None else {}
    cells = {}
    for name in classes:
        results = [f"{r.slo}: {'pass' if r.passed else 'FAIL'}" for r in verdict.slos if r.cls == name]
        cells[name] = {"goodput": fmt_share(by_class[name].share if name in by_class else None),
                       "slos": "; ".join(results) or "—"}
    return cells


def streaming_rates(section: Streaming | None) -> list[dict]:
    """Tokens/s per class that streamed (output rate and per-response decode speed) as text rows;
    none without the section."""
    classes = section.classes if section is not None else {}
    return [{"scope": name, "requests": fmt_count(metrics.requests),
             "chunks": fmt_number(metrics.chunks_per_request),
             "rate": fmt_rate(metrics.tokens_per_s).replace("req/s", "tokens/s"),
             "decode": fmt_number(metrics.decode_tokens_per_s_p50)} for name, metrics in classes.items()]
