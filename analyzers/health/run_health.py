"""Warnings about how faithfully a run was recorded: failures, outages, lost spans, retention.

Each is ``{"code", "message"}`` like the other analysis warnings:

* ``run_failed`` — the harness stopped the run (disk full, disk budget used
  up, a bookkeeping process died): the manifest's ``failure`` line;
* ``outage`` — the target was unreachable (see :mod:`.outages`);
* ``spans_shed`` — requests without spans because the receiver shed spans
  under pressure (``receiver.json`` ``spans_dropped``: answered 503 /
  UNAVAILABLE when its queue was full) or rejected malformed payloads;
* ``records_retained`` — under a retention policy, which records the numbers
  and the stage statistics come from;
* ``traces_sampled`` — head sampling (scenario ``trace_sample_rate`` < 1):
  which share of requests was sent with the sampled flag and has spans, so
  the stage statistics come from that share.
"""

from __future__ import annotations

from tailscope.analysis_model.health import Outages, Retention
from tailscope.analysis_model.stages import Stages
from tailscope.analysis_model.summary import Summary
from tailscope.analyzers.health.outages import DERIVED
from tailscope.analyzers.inputs.records import NS_PER_S

#: Share of requests lacking spans above which the reason is always stated.
MISSING_SPANS_SHARE = 0.01


def failure_warnings(manifest: dict) -> list[dict]:
    if manifest.get("status") != "failed":
        return []
    failure = manifest.get("failure") or "harness error"
    return [{"code": "run_failed", "message": f"run failed: {failure}; the report covers what was "
                                              "recorded until the run stopped"}]


def outage_warnings(outages: Outages) -> list[dict]:
    """The outages found in the request records (not those recorded by others), when there were any."""
    derived = [o for o in outages.outages if o.source == DERIVED]
    if not derived:
        return []
    longest = max(derived, key=lambda o: o.duration_ms)
    kinds = sorted({o.kind for o in derived})
    return [{"code": "outage", "message": (
        f"the target was unreachable {len(derived)} time(s), {outages.total_ms / 1e3:.1f} s in total "
        f"(longest {longest.duration_ms / 1e3:.1f} s, {longest.requests} requests failed: "
        f"{', '.join(f'{k} {v}' for k, v in longest.errors_by_kind.items())}); kind: {', '.join(kinds)}; "
        "the run continued")}]


def trace_sample_rate(manifest: dict) -> float:
    """The run's head-sampling rate (manifest ``options.trace_sample_rate``; 1 when absent)."""
    rate = (manifest.get("options") or {}).get("trace_sample_rate")
    return 1.0 if rate is None else float(rate)


def span_warnings(receiver: dict, joined: float | None, sent: float | None, completed: int,
                  sample_rate: float = 1.0) -> list[dict]:
    """Why requests lack spans, when the receiver shed or rejected some (``receiver``: receiver.json).

    ``joined``: the share (0–1) of the ``completed`` (successful) requests that joined a span
    (``stages.joined_fraction``); ``sent``: the share of them sent for tracing
    (``stages.traced_fraction``; None: ``sample_rate``). The share named is of the requests sent
    for tracing.
    """
    shed = int(receiver.get("spans_dropped") or 0)
    rejected = receiver.get("rejected") or {}
    malformed = int(rejected.get("malformed") or 0) + int(rejected.get("oversized") or 0)
    sent = sample_rate if sent is None else sent
    traced = joined / sent if joined is not None and sent > 0 else joined
    missing = max(0.0, 1.0 - traced) if traced is not None and completed else 0.0
    reasons = []
    if shed:
        reasons.append(f"the receiver shed {shed:,} spans (queue full: it answered 503 / UNAVAILABLE)")
    if malformed:
        reasons.append(f"{malformed:,} export requests were rejected as malformed or oversized")
    if not reasons:
        return []
    share = "of requests" if sample_rate >= 1.0 else "of the requests sent for tracing"
    return [{"code": "spans_shed", "message": f"{missing:.1%} {share} lack spans: {'; '.join(reasons)}"}]


def sampling_warnings(sample_rate: float, stages: Stages) -> list[dict]:
    """What head sampling means for the stage statistics, when the run sampled traces."""
    if sample_rate >= 1.0:
        return []
    joined, sent = stages.joined_fraction, stages.traced_fraction
    return [{"code": "traces_sampled", "message": (
        f"head sampling: the load generator set the traceparent's sampled flag on a {sample_rate:g} share "
        f"of requests (trace_sample_rate; {sent:.1%} of the successful ones); {joined:.1%} of requests "
        "have spans, and the stage statistics, queue depths and clock alignment come from them")}]


def retention_warnings(retention: Retention) -> list[dict]:
    """What selective record keeping means for the numbers, when the run's records were sampled."""
    if not retention.sampled:
        return []
    intervals = retention.keep_intervals
    full_s = sum(hi - lo for lo, hi in intervals) / NS_PER_S
    return [{"code": "records_retained", "message": (
        f"per-request records were retained selectively ({retention.records_kept:,} of "
        f"{retention.requests:,}: every error, a {retention.sample_rate:g} sample by trace id, and "
        f"all records in {len(intervals)} interval(s) around spikes, {full_s:.0f} s in total); counts, "
        "rates and percentiles come from per-window histograms (values within ±1 %), stage statistics "
        "from the kept records")}]


def run_health_warnings(manifest: dict, outages: Outages, receiver: dict | None, stages: Stages, summary: Summary,
                        retention: Retention) -> list[dict]:
    """All of the above, in that order (``receiver``: receiver.json, None when the run has none)."""
    sample_rate = trace_sample_rate(manifest)
    return (failure_warnings(manifest) + outage_warnings(outages)
            + span_warnings(receiver or {}, stages.joined_fraction, stages.traced_fraction, summary.completed,
                            sample_rate)
            + sampling_warnings(sample_rate, stages)
            + retention_warnings(retention))
