"""Per-spike cause cards: ranked by impact, each answering first and holding its evidence one click away.

Every spike is one row of the spike table. A spike is **minor** when no known
cause explains it (its top cause is ``unexplained``) and either its P99 stayed
below ``MINOR_RATIO`` (2) × the baseline P99 or its impact (below) is under
``MINOR_IMPACT_SHARE`` (10%) of the largest spike's: it is listed in one line, not carded.
The other spikes get a **card** each — at most ``MAX_CARDS`` (12), ranked by
**impact** = excess (spike P99 − baseline P99, ms) × the requests it pushed above the
baseline P99 beyond the 1% a steady run has (at least 1). A card states when,
how much worse (P99 vs baseline, ratio and excess), the top cause with its
confidence and its one-sentence evidence (the detector's ``summary``), and the
stage that grew most; it expands to the series that made the cause's case
(``spikes[].evidence_series``, drawn over the spike with the baseline band), the
slow-vs-normal stage split, the representative slow request's waterfall and
every cause with its evidence as sentences (:mod:`.evidence_text`). Evidence
may carry strings from the run (span names, messages): like every run string
it is only ever rendered as text. The spikes arrive as their type
(:class:`~tailscope.analysis_model.spikes.Spike`, decoded once by reports/upgrade.py
``spikes_of``, which completes an older analysis): the card reads ``p99_ms``,
``baseline_p99_ms``, ``excess_ms``, ``requests``, ``slow_requests``, ``expected_slow_share``,
``decomposition`` (its ``unavailable_reason`` is the card's stage note, :func:`stage_note`),
``causes`` (each cause's ``evidence`` a per-detector dict, :mod:`.evidence_text`),
``evidence_series``, ``representative_trace``, ``recurring_stalls`` (a record grouping
recurring stalls: its ``summary``, "28 stalls, every ~4.1 s, each ~150 ms, cause gc", is the
row's ``stalls``) (docs/report.md).
"""

from __future__ import annotations

from tailscope.analysis_model.llm import TokenSpike
from tailscope.analysis_model.spikes import CauseFinding, Decomposition, RecurringStalls, RepresentativeTrace, Spike
from tailscope.reports.evidence_text import evidence_chart, evidence_sentences
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_offset, fmt_signed_ms
from tailscope.support.cause_words import cause_title

MAX_CARDS = 12
#: An unexplained spike whose P99 stays below this multiple of the baseline P99 is minor,
#: and so is one whose impact is below this share of the largest spike's.
MINOR_RATIO = 2.0
MINOR_IMPACT_SHARE = 0.1
#: The share of requests above the baseline P99 a steady run holds, where a spike does not say.
STEADY_SLOW_SHARE = 0.01


def cause_rows(causes: tuple[CauseFinding, ...]) -> list[dict]:
    """Ranked causes: rank, kind, title, confidence (%), evidence as sentences."""
    return [{"rank": i, "kind": c.kind, "title": cause_title(c.kind), "confidence": f"{c.confidence:.0%}",
             "confidence_share": round(float(c.confidence), 4), "sentences": evidence_sentences(c)}
            for i, c in enumerate(causes, 1)]


def stage_comparison(decomposition: Decomposition) -> tuple[list[dict], dict]:
    """(table rows, chart series) of the slow-vs-normal stage means of one spike; a stage
    neither the slow nor the normal requests had is left out."""
    rows, chart = [], {"names": [], "normal": [], "slow": []}
    for stage, v in decomposition.stages.items():
        if not (v.normal.count or v.slow.count):
            continue
        normal, slow = v.normal.mean_ms, v.slow.mean_ms
        rows.append({"stage": stage, "normal": fmt_ms(normal), "slow": fmt_ms(slow),
                     "growth": fmt_signed_ms(v.growth_ms), "dominant": stage == decomposition.dominant_stage})
        if stage != "server":
            chart["names"].append(stage)
            chart["normal"].append(normal)
            chart["slow"].append(slow)
    return rows, chart


def waterfall(trace: RepresentativeTrace | None) -> dict | None:
    """Waterfall bars of a representative trace: client phases, then spans by start (ms since scheduled)."""
    if trace is None:
        return None
    bars = [{"label": "request (scheduled → reply)", "start": 0.0, "end": trace.end_ms,
             "kind": "client", "detail": f"class {trace.cls or '—'}"}]
    if trace.sent_ms is not None:
        bars.append({"label": "generator lateness", "start": 0.0, "end": trace.sent_ms, "kind": "client",
                     "detail": "scheduled → sent"})
    for span in trace.spans:
        bars.append({"label": "\u2003" * min(span.depth, 6) + span.name,
                     "start": span.start_ms, "end": span.end_ms,
                     "kind": "error" if span.error else (span.stage or "unmapped"),
                     "detail": "; ".join(f"{k}={v}" for k, v in span.attributes.items())})
    return {"trace_id": trace.trace_id, "cls": trace.cls or "—", "latency": fmt_ms(trace.latency_ms), "bars": bars}


def impact_of(excess_ms: float | None, slow_requests: int, requests: int,
              expected_slow_share: float = STEADY_SLOW_SHARE) -> float:
    """Excess (ms) × requests pushed above the baseline P99 beyond a steady run's share (at least 1)."""
    extra = slow_requests - expected_slow_share * requests
    return max(excess_ms or 0.0, 0.0) * max(extra, 1.0)


def minor_by_ratio(unexplained: bool, p99_ms: float | None, baseline_ms: float | None) -> bool:
    """No known cause explains it and its P99 stayed below MINOR_RATIO × the baseline P99 (the part
    of the minor rule that needs no other spike; :func:`minor_flags` has all of it)."""
    return unexplained and p99_ms is not None and bool(baseline_ms) and p99_ms < MINOR_RATIO * baseline_ms


def impact(spike: Spike) -> float:
    """:func:`impact_of` a latency spike (token spikes: llm_view calls :func:`impact_of` itself)."""
    return impact_of(spike.excess_ms, spike.slow_requests, spike.requests, spike.expected_slow_share)


def is_minor(spike: Spike | TokenSpike) -> bool:
    """:func:`minor_by_ratio` of a spike, on what it was judged on (:meth:`Spike.judged_p99`; a token
    spike on its own metric, never for answer length)."""
    return minor_by_ratio(spike.unexplained, *spike.judged_p99())


def ratio_text(p99, baseline) -> str:
    """``p99 ÷ baseline`` as ``"3.5×"``; ``"—"`` without both."""
    return f"{p99 / baseline:.1f}×" if p99 is not None and baseline else "—"


def spike_row(number: int, spike: Spike, origin_ns, minor: bool | None = None) -> dict:
    """The table row (and card header) of one spike; the keys Markdown and the terminal reuse."""
    decomposition = spike.decomposition
    top = spike.top_cause
    dominant = decomposition.dominant_stage
    growth = decomposition.stages[dominant].growth_ms if dominant in decomposition.stages else None
    kind = top.kind if top is not None else "unexplained"
    p99, baseline = spike.judged_p99()
    return {
        "number": number,
        "window": f"{fmt_offset(spike.start_ns, origin_ns)} – {fmt_offset(spike.end_ns, origin_ns)}",
        "peak": fmt_offset(spike.peak_ns, origin_ns),
        "p99": fmt_ms(p99), "baseline": fmt_ms(baseline), "ratio": ratio_text(p99, baseline),
        "excess": (fmt_ms(spike.excess_ms) if spike.answer_length is None else
                   fmt_ms(p99 - baseline) if None not in (p99, baseline) else "—"),
        "requests": fmt_count(spike.requests),
        "slow_requests": fmt_count(spike.slow_requests),
        "dominant": dominant or "—",
        "dominant_growth": fmt_signed_ms(growth) if growth is not None else "",
        "summary": decomposition.summary or "",
        "stalls": stalls_text(spike.recurring_stalls, origin_ns),
        "answer_length": spike.answer_length.summary if spike.answer_length is not None else "",
        "stage_note": stage_note(decomposition),
        "top_cause": kind,
        "top_title": cause_title(kind),
        "top_confidence": f"{(top.confidence if top is not None else 0):.0%}",
        "top_sentence": (evidence_sentences(top) or [""])[0] if top is not None else "",
        "minor": is_minor(spike) if minor is None else minor,
        "causes": [{"kind": c.kind, "confidence": f"{c.confidence:.0%}"} for c in spike.causes],
    }


def stalls_text(stalls: RecurringStalls | None, origin_ns) -> str:
    """A recurring-stalls record's summary, and where its causes' evidence was read: "14 stalls, every
    ~4.0 s, each ~149 ms, cause gc; the evidence below was read in the largest stall, 34.0 s – 34.2 s"."""
    if stalls is None:
        return ""
    where = stalls.evidence_ns
    return stalls.summary + (
        f"; the evidence below was read in the largest stall, {fmt_offset(where[0], origin_ns)} – "
        f"{fmt_offset(where[1], origin_ns)}" if where else "")


def stage_note(decomposition: Decomposition) -> str:
    """Why a spike has no slow-vs-normal stage split, as a sentence ("" when it has one): no
    full records kept in its windows (a retained run), or no span joined."""
    if decomposition.available and decomposition.stages:
        return ""
    reason = decomposition.unavailable_reason or "no spans joined the slow or normal requests"
    return f"Stage split unavailable: {reason}."


def minor_flags(spikes: list[Spike]) -> list[bool]:
    """Per spike: minor when no known cause explains it and either its P99 stayed below
    MINOR_RATIO × the baseline P99 (:func:`is_minor`) or its impact is under MINOR_IMPACT_SHARE
    of the largest spike's."""
    impacts = [impact(s) for s in spikes]
    largest = max(impacts, default=0.0)
    return [is_minor(s) or (s.unexplained and impacts[i] < MINOR_IMPACT_SHARE * largest)
            for i, s in enumerate(spikes)]


def carded_spikes(spikes: list[Spike], minor: list[bool] | None = None) -> list[int]:
    """Numbers (1-based) of the spikes that get a card, by impact (largest first): at most
    MAX_CARDS, minor spikes left out."""
    minor = minor_flags(spikes) if minor is None else minor
    order = sorted((i for i in range(len(spikes)) if not minor[i]), key=lambda i: -impact(spikes[i]))
    return [i + 1 for i in order[:MAX_CARDS]]


def spike_cards(spikes: list[Spike], origin_ns) -> dict:
    """``{"rows": [...every spike], "cards": [...by impact], "minor": [...rows], "uncarded": n}``
    and the cards' chart series (``charts``: stages, waterfall, evidence series)."""
    minor = minor_flags(spikes)
    rows = [spike_row(number, spike, origin_ns, minor[number - 1]) for number, spike in enumerate(spikes, 1)]
    cards, charts = [], []
    for rank, number in enumerate(carded_spikes(spikes, minor), 1):
        spike, row = spikes[number - 1], rows[number - 1]
        stage_rows, stage_chart = stage_comparison(spike.decomposition)
        trace = waterfall(spike.representative_trace)
        evidence = [evidence_chart(e, origin_ns) for e in spike.evidence_series]
        cards.append({**row, "rank": rank, "impact": impact(spike), "token": False,
                      "cause_rows": cause_rows(spike.causes), "stage_rows": stage_rows,
                      "trace": trace, "chart_index": len(charts), "evidence_charts": len(evidence)})
        charts.append({"number": number, "stages": stage_chart, "waterfall": trace, "evidence": evidence,
                       "spike": [round((spike.start_ns - origin_ns) / 1e9, 3),
                                 round((spike.end_ns - origin_ns) / 1e9, 3)] if origin_ns is not None else None})
    minor = [row for row in rows if row["minor"]]
    return {"rows": rows, "cards": cards, "minor": minor, "uncarded": len(rows) - len(cards) - len(minor),
            "charts": charts}


def rank_cards(cards: list[dict], extra: list[dict]) -> tuple[list[dict], int]:
    """(the latency spikes' cards and ``extra`` cards (each with an ``impact``, e.g. an LLM run's
    TTFT/TPOT spikes, reports/llm_view.py) in one ranking by impact, largest first, ``rank``
    renumbered from 1 and at most MAX_CARDS; how many cards the cap left out)."""
    merged = sorted(cards + extra, key=lambda c: -c["impact"])
    return [{**c, "rank": rank} for rank, c in enumerate(merged[:MAX_CARDS], 1)], max(len(merged) - MAX_CARDS, 0)
