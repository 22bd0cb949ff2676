"""The report's "Load generator" section and per-class goodput/SLO cells.

Reads only the analysis dict (``generator``, ``summary.goodput``, ``verdict``,
``classes``); every value is pre-formatted text, so the template only loops.
"""

from __future__ import annotations

from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_offset, fmt_rate, fmt_share

CAUSE_TEXT = {
    "in_flight_cap": "the in-flight cap was full",
    "generator_cpu": "the generator used a whole core",
    "cpu_contention": "the generator waited for a CPU (other processes)",
    "gc": "the generator's garbage collector paused it",
    "unknown": "no recorded cause",
}


def _arrival_text(model: dict) -> str:
    """``open loop, poisson at 40 req/s`` / ``closed loop, 8 users, think 0.1 s``."""
    if model.get("loop") == "closed":
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
    if model.get("process") == "replay":
        parts.append(f"{fmt_count(model.get('arrivals'))} recorded arrivals from {model.get('file')} "
                     f"at {model.get('speed', 1):g}x" + (", looped" if model.get("loop_log") else ""))
    return ", ".join(parts)


def generator_data(analysis: dict) -> dict | None:
    """Facts and generator-limited intervals of the load generator; None for old analyses."""
    generator = analysis.get("generator")
    if not generator:
        return None
    origin = analysis["run"].get("load_start_ns")
    lateness = analysis["summary"].get("lateness_ms") or {}
    cpu, gc = generator.get("cpu") or {}, generator.get("gc") or {}
    processes = generator.get("processes") or []
    facts = [
        {"key": "arrivals", "value": _arrival_text(generator.get("load_model") or {})},
        {"key": "in-flight cap", "value": f"{fmt_count(generator.get('max_in_flight'))} "
                                          f"(when full: {generator.get('in_flight_policy', 'wait')})"},
        {"key": "dropped (never sent)", "value": fmt_count(generator.get("dropped"))},
        {"key": "lateness", "value": f"P50 {fmt_ms(lateness.get('p50_ms'))}, P99 {fmt_ms(lateness.get('p99_ms'))}, "
                                     f"{fmt_share(lateness.get('late_share'))} of sends > 1 ms late"},
        {"key": "generator CPU", "value": f"mean {fmt_number(cpu.get('mean_percent'))} %, "
                                          f"max {fmt_number(cpu.get('max_percent'))} % of one core"
                                          + (" (busiest process per window)" if len(processes) > 1 else "")},
        *([{"key": "generator processes", "value": _processes_text(processes)}] if len(processes) > 1 else []),
        {"key": "generator GC", "value": f"{fmt_count(gc.get('pauses'))} pauses, {fmt_ms(gc.get('total_ms'))} "
                                         f"in total, longest {fmt_ms(gc.get('max_ms'))}"},
        {"key": "waiting for a CPU", "value": fmt_ms(generator.get("runqueue_wait_ms"))},
    ]
    intervals = [{
        "window": f"{fmt_offset(i['start_ns'], origin)} – {fmt_offset(i['end_ns'], origin)}",
        "late": f"{fmt_count(i['late'])} of {fmt_count(i['scheduled'])} ({fmt_share(i['late_share'])})",
        "cause": CAUSE_TEXT.get(i["cause"], i["cause"]),
    } for i in generator.get("limited_windows") or []]
    windows = generator.get("windows") or []
    short = [w for w in windows if w["offered_rps"] > 0 and w["achieved_rps"] < 0.9 * w["offered_rps"]]
    return {
        "limited": bool(generator.get("limited")),
        "verdict": ("generator-limited: the generator, not the target, may explain the tail in the windows below"
                    if generator.get("limited") else "the generator kept to its schedule"),
        "facts": facts,
        "intervals": intervals,
        "short_windows": f"{len(short)} of {len(windows)} windows achieved less than 90% of the offered rate",
    }


def _processes_text(processes: list[dict]) -> str:
    """Each generator process (distributed workers): its CPU and GC pauses, one clause each."""
    return "; ".join(
        f"worker {p.get('worker')}: CPU mean {fmt_number(p.get('cpu_mean_percent'))} %, "
        f"max {fmt_number(p.get('cpu_max_percent'))} %, {fmt_count(p.get('gc_pauses'))} GC pauses"
        for p in processes)


def class_slo_cells(analysis: dict) -> dict:
    """``{class: {"goodput", "slos"}}``: per-class goodput and its SLOs' results as text."""
    goodput = ((analysis["summary"].get("goodput") or {}).get("by_class")) or {}
    rows = (analysis.get("verdict") or {}).get("slos") or []
    cells = {}
    for name in analysis.get("classes") or {}:
        results = [f"{r['slo']}: {'pass' if r['passed'] else 'FAIL'}" for r in rows if r.get("cls") == name]
        cells[name] = {"goodput": fmt_share((goodput.get(name) or {}).get("share")),
                       "slos": "; ".join(results) or "—"}
    return cells


def streaming_rates(section: dict | None) -> list[dict]:
    """Tokens/s per class (output rate and per-response decode speed) as text rows."""
    rows = []
    for name, metrics in ((section or {}).get("classes") or {}).items():
        rows.append({"scope": name, "requests": fmt_count(metrics.get("requests")),
                     "chunks": fmt_number(metrics.get("chunks_per_request")),
                     "rate": fmt_rate(metrics.get("tokens_per_s")).replace("req/s", "tokens/s"),
                     "decode": fmt_number(metrics.get("decode_tokens_per_s_p50"))})
    return rows
