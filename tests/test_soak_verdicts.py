"""The soak view's drift and leak verdicts come in two current shapes — the diagnosis patterns'
(analysis_model/patterns.Drift, Leak) or the soak module's own test (analyzers/patterns/soak.py) —
and the view reads both through their common part, analysis_model/health.TrendVerdict."""

from __future__ import annotations

import pytest

from tailscope.analysis_model.codec import AnalysisShapeError, encode
from tailscope.analysis_model.health import Soak, SoakPeriod, TrendVerdict
from tailscope.analysis_model.patterns import Drift, Leak
from tailscope.analyzers.patterns.soak import leak_verdict
from tailscope.reports.reliability_view import soak_data
from tailscope.reports.upgrade import trend_verdict_of

NS = 1_000_000_000
ORIGIN = 1_700_000_000 * NS


def _soak(drift: dict | None, leak: dict | None, source: str) -> Soak:
    periods = [SoakPeriod(ORIGIN + i * 600 * NS, ORIGIN + (i + 1) * 600 * NS, 6000, 3, 0.0005, 10.0, 12.0, 40.0, True)
               for i in range(2)]
    return Soak(period_s=600, periods=periods, drift=drift, leak=leak, verdicts_source=source)


def test_both_shapes_show_their_verdict_and_summary():
    patterns = _soak(encode(Drift(detected=True, verdict="drift", summary="median latency +40% over the run",
                                  median=None, p99=None, segments=8, segment_s=150.0)),
                     encode(Leak(False, "flat", "proc.rss_bytes", "no memory growth", None, None, None)), "patterns")
    soak = _soak({"verdict": "stable", "metrics": {"p50_ms": {"verdict": "stable", "p_value": 0.4}},
                  "summary": "no significant latency drift"},
                 leak_verdict({}), "soak")
    shown = soak_data(patterns, ORIGIN)
    assert shown["drift"] == {"verdict": "drift", "summary": "median latency +40% over the run"}
    assert shown["leak"] == {"verdict": "flat", "summary": "no memory growth"}
    assert shown["source"] == "diagnosis detectors"
    shown = soak_data(soak, ORIGIN)
    assert shown["drift"] == {"verdict": "stable", "summary": "no significant latency drift"}
    assert shown["leak"] == {"verdict": "insufficient data", "summary": "no memory series to test"}
    assert shown["source"] == "soak analysis"
    assert soak_data(_soak(None, None, "soak"), ORIGIN)["drift"] is None


def test_a_verdict_without_its_summary_is_named_by_place():
    assert trend_verdict_of({"verdict": "leak", "summary": "s", "series": {}}, "soak.leak") == TrendVerdict("leak", "s")
    with pytest.raises(AnalysisShapeError, match=r"soak\.drift\.summary: missing"):
        soak_data(_soak({"verdict": "drift"}, None, "soak"), ORIGIN)
