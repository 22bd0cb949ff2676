"""The end-of-run summary on the terminal says what kind of load ran: an open loop's
achieved against offered rate and latency from the scheduled send; a closed loop's
achieved rate, how many requests it kept in flight, and latency from the send."""

from __future__ import annotations

import io
import re

from comparison_fixtures import comparison_document, llm_row, side
from report_fixtures import make_spike, run_section
from rich.console import Console

from tailscope.analysis_model.codec import encode
from tailscope.analysis_model.health import Generator, GeneratorCpu, GeneratorGc
from tailscope.analysis_model.spikes import AnswerLength
from tailscope.analysis_model.stages import Stages, StageStats
from tailscope.conductor.terminal import print_summary


def _printed(analysis: dict) -> str:
    out = io.StringIO()
    print_summary(Console(file=out, width=160), analysis, {})
    return out.getvalue()


def _analysis(load_model: str, generator_model: dict) -> dict:
    summary = {"requests": 120, "completed": 120, "errors": 0, "error_rate": 0.0, "errors_by_kind": {},
               "top_errors": [], "duration_s": 10.0, "achieved_rps": 11.9, "offered_rps": 12.0,
               "latency_ms": _percentiles(None), "service_time_ms": _percentiles(None),
               "lateness_ms": {"p50_ms": None, "p99_ms": None, "late_share": 0.0, "generator_limited": False},
               "load_model": load_model}
    generator = Generator(load_model=generator_model, in_flight_policy="wait", dropped=0, windows=[], limited=False,
                          limited_windows=[], cpu=GeneratorCpu(), gc=GeneratorGc(0, 0.0, None))
    return {"summary": summary, "generator": encode(generator), "verdict": {"passed": True}, "run": run_section(),
            "stages": _stages(120, 1.0, {})}


def _stages(joined: int, fraction: float, by_stage: dict[str, StageStats]) -> dict:
    """A whole ``stages`` section: ``joined`` requests (``fraction`` of the successful ones) with
    ``by_stage``; every request sent for tracing, no unmapped span names."""
    return encode(Stages(joined_fraction=fraction, traced_fraction=1.0, joined_requests=joined, by_stage=by_stage,
                         unmapped_span_names=[]))


def test_an_open_loop_summary_names_the_offered_rate_and_the_scheduled_send():
    text = _printed(_analysis("open", {"loop": "open", "process": "poisson"}))
    assert "achieved 11.9 of 12.0 req/s offered" in text and "latency (from scheduled send)" in text


def test_a_closed_loop_summary_names_its_concurrency_and_no_offered_rate():
    text = _printed(_analysis("closed", {"loop": "closed", "process": "closed", "users": 8}))
    assert "achieved 11.9 req/s (closed loop, 8 requests kept in flight)" in text
    assert "offered" not in text and "latency (from send)" in text and "scheduled" not in text


def test_a_comparison_prints_the_llm_rows_beside_latency():
    from tailscope.conductor.terminal import print_comparison
    from tailscope.reports.upgrade import comparison_of

    def row(metric, percentile, unit, base, now, regressed):
        return llm_row(metric, percentile, unit, baseline=base, current=now, relative_change=now / base - 1,
                       regressed=regressed, improved=False, significant=regressed, claimable=True)

    comparison = comparison_document(current=side("now"), baseline=side("before"), confidence=0.95, percentiles=[],
                                     verdict={"regressed": True, "summary": "LLM regression: TTFT P99"},
                                     llm={"rows": [row("ttft_ms", "p99", "ms", 40.0, 96.0, True),
                                                   row("goodput", None, "share", 0.99, 0.98, False)]})
    out = io.StringIO()
    print_comparison(Console(file=out, width=160), comparison_of(comparison), {})
    text = out.getvalue()
    assert "TTFT P99" in text and "40.0 ms" in text and "96.0 ms" in text and "+140.0%" in text
    assert "REGRESSED" in text and "goodput" in text and "99.0%" in text


def _pct(value, claimed=True, n=500):
    return {"value_ms": value, "ci_low_ms": value, "ci_high_ms": value, "n": n, "claimed": claimed, "bound_ms": None}


def _percentiles(base):
    """A percentile set (ms) whose P50 is ``base`` (None: no samples)."""
    return {key: _pct(None if base is None else base * factor) for key, factor in
            (("p50", 1), ("p90", 2), ("p95", 3), ("p99", 4), ("p999", 5), ("max", 6))}


def test_every_number_in_the_summary_tables_carries_its_unit_and_each_percentile_its_metric():
    analysis = _analysis("open", {"loop": "open", "process": "poisson"})
    analysis["summary"]["latency_ms"] = _percentiles(21.31)
    analysis["stages"] = _stages(120, 1.0, {"inference": StageStats(p50_ms=12.5, p99_ms=40.25, mean_ms=15.0, count=120)})
    no_stats = {"mean": None, "p50": None, "p99": None}
    analysis["llm"] = {"requests": 120, "completed": 120, "errors": 0, "streamed": 120,
                       "ttft_ms": _percentiles(80.0), "tpot_ms": _percentiles(4.0),
                       "itl_ms": _percentiles(3.9), "chunk_gap_ms": _percentiles(11.7),
                       "tokens_per_chunk": {"chunks": 900, "mean": 3.0, "p50": 3.0, "p99": 3.0},
                       "e2e_ms": _percentiles(400.0), "prompt_tokens": {"sum": 0, **no_stats},
                       "output_tokens": {"sum": 4000, **no_stats},
                       "output_tokens_per_s": {"aggregate": 100.0, "per_request": {
                           "n": 0, "mean": None, "p1": None, "p10": None, "p50": None, "p90": None, "p99": None}},
                       "token_counts_from": {}, "finish_reasons": {},
                       "goodput": {"share": 0.9, "good": 108, "total": 120, "rps": None, "criteria": [],
                                   "definition": "share meeting every per-request SLO"},
                       "classes": {}, "points": {"scheduled_ns": [], "ttft_ms": [], "tpot_ms": [], "cls": []},
                       "spike_detection": {}, "spikes": {}}
    text = _printed(analysis)
    assert "latency P50" in text and "latency P99" in text and "latency P99.9" in text
    assert "21.3 ms" in text and "85.2 ms" in text  # latency P50, P99
    assert "time in stage P50" in text and "12.5 ms" in text and "40.2 ms" in text
    for row in ("TTFT", "TPOT", "ITL", "chunk gap", "e2e"):
        assert re.search(rf"│ {row}\s+│\s+[\d.]+ ms │\s+[\d.]+ ms │", text), row
    assert "tokens per content chunk: mean 3.00, P50 3, P99 3 over 900 chunks; ITL = each chunk gap ÷ its tokens" in text
    numbers_without_unit = re.findall(r"│\s+(\d+\.\d+)\*?\s+│", text)
    assert not numbers_without_unit, numbers_without_unit


def test_a_spike_line_names_its_percentile_and_the_units_of_its_evidence():
    analysis = _analysis("open", {"loop": "open", "process": "poisson"})
    analysis["spikes"] = encode([make_spike(0, 10**9, [("gc_pause", 0.8, {"overlap_share": 0.75, "pause_ms": 210.0})],
                                            p99_ms=310.0, baseline_p99_ms=40.0)])
    text = _printed(analysis)
    assert "latency P99 310 ms vs 40 ms baseline" in text
    assert "[overlap_share 75%, pause_ms 210 ms]" in text


def test_an_llm_spike_line_quotes_what_it_was_judged_on():
    """A spike judged for answer length quotes that P99 and baseline, not the plain e2e pair (which
    read 'latency P99 198 ms vs 281 ms baseline': a spike below its own baseline)."""
    analysis = _analysis("open", {"loop": "open", "process": "poisson"})
    judged = AnswerLength(p99_ms=178.0, threshold_ms=49.6, ratio=3.6, output_tokens_ratio=1.1,
                          summary="e2e for its answer length rose 3.6×")
    analysis["spikes"] = encode([make_spike(0, 10**9, p99_ms=198.0, baseline_p99_ms=281.0, answer_length=judged)])
    text = _printed(analysis)
    assert "e2e for its answer length P99 178 ms vs 50 ms baseline" in text
    assert "198 ms" not in text


def test_the_summary_says_how_many_successful_requests_joined_a_server_span():
    analysis = _analysis("open", {"loop": "open", "process": "poisson"})
    analysis["summary"].update(requests=2400, errors=0)
    analysis["stages"] = _stages(2391, 2391 / 2400, {})
    assert "server spans joined: 2,391 of 2,400 successful requests (99.6%)" in _printed(analysis)

    analysis["stages"] = _stages(0, 0.0, {})
    text = _printed(analysis)
    assert "server spans joined: 0 of 2,400 successful requests (0.0%)" in text
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in text  # what to check when the spans do not come back
