"""Per-spike cause cards: ranked causes with evidence, slow-vs-normal stages, a waterfall.

A card is built for each of the ``MAX_CARDS`` (12) spikes with the largest
excess over the baseline (shown in time order); every spike, carded or not,
is one row of the spike table. Evidence may carry strings from the run
(span names, messages): like every run string it is only ever rendered as text. Keys read from
each spike (all optional except the times): ``p99_ms``, ``baseline_p99_ms``,
``excess_ms``, ``requests``, ``decomposition``, ``causes[]`` (``kind``,
``confidence``, ``evidence``), ``representative_trace`` (docs/report.md).
"""

from __future__ import annotations

from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_number, fmt_offset, fmt_signed_ms

MAX_CARDS = 12
MAX_EVIDENCE_ROWS = 16
#: Evidence keys that hold whole structures shown elsewhere on the card.
EVIDENCE_SHOWN_ELSEWHERE = ("decomposition",)


def evidence_rows(evidence, prefix: str = "") -> list[dict]:
    """Flatten a detector's evidence into ``{"key", "value"}`` text rows (bounded, nested keys dotted)."""
    rows = []
    for key, value in (evidence or {}).items():
        if key in EVIDENCE_SHOWN_ELSEWHERE and not prefix:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += evidence_rows(value, f"{name}.")
        elif isinstance(value, list):
            shown = ", ".join(fmt_number(v) if not isinstance(v, dict) else str(v.get("kind") or v.get("name") or "…")
                              for v in value[:8])
            rows.append({"key": name, "value": shown + (" …" if len(value) > 8 else "")})
        else:
            rows.append({"key": name, "value": fmt_number(value)})
    return rows[:MAX_EVIDENCE_ROWS]


def cause_rows(causes: list[dict]) -> list[dict]:
    """Ranked causes: rank, kind, confidence (%), evidence rows."""
    return [{"rank": i, "kind": str(c.get("kind", "?")),
             "confidence": f"{(c.get('confidence') or 0):.0%}",
             "confidence_share": round(float(c.get("confidence") or 0), 4),
             "evidence": evidence_rows(c.get("evidence"))}
            for i, c in enumerate(causes or [], 1)]


def stage_comparison(decomposition: dict) -> tuple[list[dict], dict]:
    """(table rows, chart series) of the slow-vs-normal stage means of one spike."""
    stages = (decomposition or {}).get("stages") or {}
    dominant = (decomposition or {}).get("dominant_stage")
    rows, chart = [], {"names": [], "normal": [], "slow": []}
    for stage, v in stages.items():
        normal, slow = (v.get("normal") or {}).get("mean_ms"), (v.get("slow") or {}).get("mean_ms")
        rows.append({"stage": stage, "normal": fmt_ms(normal), "slow": fmt_ms(slow),
                     "growth": fmt_signed_ms(v.get("growth_ms")), "dominant": stage == dominant})
        if stage != "server":
            chart["names"].append(stage)
            chart["normal"].append(normal)
            chart["slow"].append(slow)
    return rows, chart


def waterfall(trace: dict | None) -> dict | None:
    """Waterfall bars of a representative trace: client phases, then spans by start (ms since scheduled)."""
    if not trace:
        return None
    bars = [{"label": "request (scheduled → reply)", "start": 0.0, "end": trace.get("end_ms") or 0.0,
             "kind": "client", "detail": f"class {trace.get('cls') or '—'}"}]
    if trace.get("sent_ms") is not None:
        bars.append({"label": "generator lateness", "start": 0.0, "end": trace["sent_ms"], "kind": "client",
                     "detail": "scheduled → sent"})
    for span in trace.get("spans") or []:
        bars.append({"label": "\u2003" * min(int(span.get("depth") or 0), 6) + str(span.get("name", "")),
                     "start": span.get("start_ms") or 0.0, "end": span.get("end_ms") or 0.0,
                     "kind": "error" if span.get("error") else (span.get("stage") or "unmapped"),
                     "detail": "; ".join(f"{k}={v}" for k, v in (span.get("attributes") or {}).items())})
    return {"trace_id": str(trace.get("trace_id") or ""), "cls": str(trace.get("cls") or "—"),
            "latency": fmt_ms(trace.get("latency_ms")), "bars": bars}


def spike_row(number: int, spike: dict, origin_ns) -> dict:
    """The table row (and card header) of one spike; the keys Markdown and the terminal reuse."""
    decomposition = spike.get("decomposition") or {}
    causes = spike.get("causes") or []
    top = causes[0] if causes else {}
    return {
        "number": number,
        "window": f"{fmt_offset(spike['start_ns'], origin_ns)} – {fmt_offset(spike['end_ns'], origin_ns)}",
        "peak": fmt_offset(spike.get("peak_ns"), origin_ns),
        "p99": fmt_ms(spike.get("p99_ms")), "baseline": fmt_ms(spike.get("baseline_p99_ms")),
        "excess": fmt_ms(spike.get("excess_ms")), "requests": fmt_count(spike.get("requests")),
        "slow_requests": fmt_count(decomposition.get("slow_requests")),
        "dominant": decomposition.get("dominant_stage") or "—",
        "summary": decomposition.get("summary") or "",
        "top_cause": str(top.get("kind", "unexplained")),
        "top_confidence": f"{(top.get('confidence') or 0):.0%}",
        "causes": [{"kind": str(c.get("kind", "?")), "confidence": f"{(c.get('confidence') or 0):.0%}"}
                   for c in causes],
    }


def carded_spikes(spikes: list[dict]) -> set[int]:
    """Numbers (1-based) of the MAX_CARDS spikes with the largest excess."""
    order = sorted(range(len(spikes)), key=lambda i: -(spikes[i].get("excess_ms") or 0))
    return {i + 1 for i in order[:MAX_CARDS]}


def spike_cards(spikes: list[dict], origin_ns) -> dict:
    """``{"rows": [...every spike], "cards": [...], "uncarded": n}`` and the cards' chart series."""
    with_card = carded_spikes(spikes)
    rows, cards, charts = [], [], []
    for number, spike in enumerate(spikes, 1):
        row = spike_row(number, spike, origin_ns)
        rows.append(row)
        if number not in with_card:
            continue
        stage_rows, stage_chart = stage_comparison(spike.get("decomposition"))
        trace = waterfall(spike.get("representative_trace"))
        cards.append({**row, "cause_rows": cause_rows(spike.get("causes")), "stage_rows": stage_rows,
                      "trace": trace, "chart_index": len(charts)})
        charts.append({"number": number, "stages": stage_chart, "waterfall": trace})
    return {"rows": rows, "cards": cards, "uncarded": len(rows) - len(cards), "charts": charts}
