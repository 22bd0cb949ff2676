"""Report fixtures: synthetic runs with hostile strings and spikes whose causes are known.

``spike_with_known_causes`` builds a spike entry through the real analyzer
functions (stage decomposition, representative trace) over a ground-truth
interval, with the causes a test names — so the report's cause cards can be
checked whether or not cause detectors are registered.
"""

from __future__ import annotations

import json
import os

import numpy as np

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.spikes import CauseFinding, Decomposition, Spike
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.spikes.detection import NO_SPANS_JOINED, decompose
from tailscope.analyzers.stages.decomposition import DEFAULT_STAGE_MAP, stage_matrix
from tailscope.analyzers.stages.representative_trace import representative_trace
from tailscope.reports.llm_view import token_spike_cards
from tailscope.reports.upgrade import run_of, spikes_of, token_spikes_of
from tailscope.rundir import Appender, load_run, schema

SCRIPT_PAYLOAD = "<script>window.__pwned = 'script'</script>"
ONERROR_PAYLOAD = "<img src=x onerror=\"window.__pwned='onerror'\">"
SVG_PAYLOAD = "<svg onload=\"window.__pwned='svg'\"></svg>"


def run_section(**facts) -> dict:
    """A whole ``run`` section as analyses write it (a complete run, no load period), ``facts`` over it."""
    return {"path": "/r", "name": "r", "status": "complete", "incomplete": False, "incomplete_reason": None,
            "start_ns": None, "end_ns": None, "load_start_ns": None, "load_end_ns": None, "duration_s": 0.0,
            "target": None, "scenario": {}, "host": {}, "truncated_files": [], **facts}


def token_cards_of(analysis: dict) -> dict:
    """An analysis's TTFT/TPOT spike cards, its sections decoded as the report's door does
    (reports/data.build_report_data)."""
    return token_spike_cards(token_spikes_of(analysis), spikes_of(analysis), run_of(analysis).load_origin_ns)


def add_hostile_spans(run_path: str, count: int = 6) -> None:
    """Spans with hostile names, services and attributes, joined to real requests (listed as unmapped)."""
    run = load_run(run_path)
    trace_ids = run.requests.column("trace_id").to_pylist()[:count]
    starts = run.requests.column("sent_ns").to_pylist()[:count]
    payloads = [SCRIPT_PAYLOAD, ONERROR_PAYLOAD, SVG_PAYLOAD]
    appender = Appender(os.path.join(run_path, schema.writer_file(schema.SPANS, "hostile")), schema.SPANS_SCHEMA)
    try:
        for i, (trace_id, start) in enumerate(zip(trace_ids, starts)):
            appender.append_row({"trace_id": trace_id, "span_id": f"{i:016x}", "name": payloads[i % 3],
                                 "service": SCRIPT_PAYLOAD, "kind": 1, "start_ns": start, "end_ns": start + 1000,
                                 "status_code": 2, "attributes": json.dumps({ONERROR_PAYLOAD: SCRIPT_PAYLOAD})})
    finally:
        appender.close()


def add_hostile_fault(run_path: str, start_ns: int, end_ns: int) -> None:
    """A fault event whose name and parameters are hostile markup."""
    appender = Appender(os.path.join(run_path, schema.writer_file(schema.EVENTS, "hostile")), schema.EVENTS_SCHEMA)
    try:
        appender.append_row({"kind": "fault", "start_ns": start_ns, "end_ns": end_ns, "source": SVG_PAYLOAD,
                             "attributes": json.dumps({"name": ONERROR_PAYLOAD, "param": SCRIPT_PAYLOAD})})
    finally:
        appender.close()


def spike_with_known_causes(run_path: str, start_ns: int, end_ns: int, causes: list[dict]) -> dict:
    """A spike entry over [start_ns, end_ns) with real decomposition and trace, and the given causes."""
    run = load_run(run_path)
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, DEFAULT_STAGE_MAP)
    inside = (req.scheduled_ns >= start_ns) & (req.scheduled_ns < end_ns)
    outside_ok = req.is_ok & ~inside
    baseline = float(np.quantile(req.latency_ms[outside_ok], 0.99))
    slow_index = np.flatnonzero(inside & req.is_ok & (req.latency_ms > baseline))
    latency = req.latency_ms[inside & req.is_ok]
    p99 = float(np.quantile(latency, 0.99, method="inverted_cdf"))
    return {
        "start_ns": int(start_ns), "end_ns": int(end_ns), "peak_ns": int((start_ns + end_ns) // 2),
        "p99_ms": p99, "peak_window_p99_ms": p99, "baseline_p99_ms": baseline, "baseline_mad_ms": 1.0,
        "excess_ms": p99 - baseline, "requests": int(inside.sum()), "windows": 1,
        "p99_claimed": len(latency) >= 459, "percentiles_from": "records", "records_kept": int(inside.sum()),
        "slow_requests": len(slow_index), "slow_share": len(slow_index) / max(int(inside.sum()), 1),
        "expected_slow_share": 0.01, "p_value": 0.0, "peak_window_slow_share": len(slow_index) / max(int(inside.sum()), 1),
        "decomposition": encode(decompose(slow_index, np.flatnonzero(outside_ok), matrix, req.n)),
        "causes": causes,
        "representative_trace": encode(representative_trace(req, slow_index, run.spans, DEFAULT_STAGE_MAP)),
    }


def make_spike(start_ns: int, end_ns: int, causes=(), *, p99_ms: float = 100.0, baseline_p99_ms: float = 20.0,
               excess_ms: float | None = None, slow_requests: int = 0, requests: int = 0, **fields) -> Spike:
    """A complete latency spike (analysis_model.spikes.Spike) for report tests: the given figures,
    ``causes`` as ``(kind, confidence, evidence)`` triples or CauseFindings, no stage split."""
    found = tuple(c if isinstance(c, CauseFinding) else CauseFinding(*c) for c in causes)
    return Spike(start_ns=start_ns, end_ns=end_ns, peak_ns=(start_ns + end_ns) // 2, p99_ms=p99_ms,
                 records_kept=requests, baseline_p99_ms=baseline_p99_ms,
                 excess_ms=p99_ms - baseline_p99_ms if excess_ms is None else excess_ms,
                 slow_requests=slow_requests, slow_share=slow_requests / requests if requests else 0.0,
                 requests=requests, windows=1, causes=found,
                 decomposition=Decomposition(slow_requests, 0, 0, 0, {}, None, None, False, NO_SPANS_JOINED),
                 **fields)
