"""A GC interval's backlog (analyzers/causes/detect_gc.py ``_backlog_drained``): where it drains is
judged on the spike's own metric. On an LLM's TPOT spike every request's end-to-end latency is far
above the TPOT threshold; reading latency there left no calm request and crashed the analysis of a
real vLLM run (an IndexError in ``tailscope report``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tailscope.analyzers.causes.detect_gc import _backlog_drained
from tailscope.analyzers.causes.protocol import SpikeContext

S = 1_000_000_000


def _context(metric: str, metric_ms, latency_ms, end_s: float = 10.0) -> SpikeContext:
    n = len(latency_ms)
    sent = np.arange(n, dtype=np.int64) * S  # one request a second from t = 0
    req = SimpleNamespace(has_sent=np.ones(n, bool), sent_ns=sent, scheduled_ns=sent,
                          latency_ms=np.asarray(latency_ms, float))
    return SpikeContext(None, 0, int(end_s * S), 0, np.array([], int), np.array([], int), None, frozenset(),
                        SimpleNamespace(req=req), threshold_ms=5.0, metric=metric,
                        metric_ms=None if metric_ms is None else np.asarray(metric_ms, float))


def test_a_tpot_spike_drains_at_the_first_request_calm_by_tpot_not_by_latency():
    tpot = [9, 9, 9, 4, 4, 4, np.nan, 4, 4, 4]  # calm again from the request sent at 3 s
    ctx = _context("tpot", tpot, latency_ms=[300.0] * 10)
    assert _backlog_drained(ctx, np.array([1 * S, 2 * S])).tolist() == [3 * S, 3 * S]


def test_with_no_calm_request_after_it_the_backlog_lasts_to_the_spike_end():
    ctx = _context("tpot", [9.0] * 10, latency_ms=[300.0] * 10, end_s=8.0)
    assert _backlog_drained(ctx, np.array([1 * S, 9 * S])).tolist() == [8 * S, 9 * S]  # never before its own end


def test_a_latency_spike_reads_latency():
    ctx = _context("latency", None, latency_ms=[9, 9, 4, 9, 9, 9, 9, 9, 9, 9])
    assert ctx.values_ms is ctx.inputs.req.latency_ms
    assert _backlog_drained(ctx, np.array([1 * S, 5 * S])).tolist() == [2 * S, 10 * S]
