"""The report's whole-run findings, the join's missing spans, and the error samples, as text.

Reads the typed ``findings`` (reports/upgrade.py ``findings_of``), ``stages.missing_spans`` and the
analysis's ``error_samples``; an older analysis without them yields no rows / empty text.
Every value is pre-formatted text the template only loops over; the texts
that come from the target (error messages and bodies) are passed through as
they are and escaped by the template engine (autoescape), never marked safe.
"""

from __future__ import annotations

from tailscope.analysis_model.findings import Finding
from tailscope.analysis_model.run import ErrorSamples
from tailscope.analysis_model.stages import MissingSpans
from tailscope.reports.formatting import fmt_count

#: Labels of the finding kinds (analyzers/findings); an unknown kind shows as itself.
FINDING_TITLES = {
    "tcp_delayed_ack": "TCP delayed-ACK stall",
    "outside_server": "time outside the server's spans",
    "generator_limited": "generator-limited",
    "p99_set_by": "why P99 is what it is",
}


def findings_data(findings: list[Finding]) -> list[dict]:
    """``[{"kind", "title", "severity", "summary"}]``, most severe first (as the analysis lists them);
    a kind without a title shows as itself."""
    return [{"kind": f.kind, "title": FINDING_TITLES.get(f.kind, f.kind), "severity": f.severity, "summary": f.summary}
            for f in findings]


def missing_spans_text(missing: MissingSpans | None) -> str:
    """How many traced requests still lack their server span (``stages.missing_spans``), and why;
    '' when none do or the analysis does not say."""
    if missing is None:
        return ""
    late, never, wait = missing.end_of_run, missing.never, missing.wait
    waited = f"; the harness waited {wait.waited_s:.1f} s for late spans ({wait.ended})" if wait is not None else ""
    if not late and not never:
        return f"every traced request has its server span{waited}" if wait is not None else ""
    parts = []
    if late:
        parts.append(f"{fmt_count(late)} at the end of the run (the target's last export batches never "
                     "arrived: raise tracing.late_span_wait)")
    if never:
        parts.append(f"{fmt_count(never)} never (the target recorded no span for them: its own sampling, "
                     "or a route that does not continue the traceparent)")
    return "missing server spans: " + "; ".join(parts) + waited


def error_sample_rows(samples: ErrorSamples) -> list[dict]:
    """One row per sampled error: class, status, kind, count, message and body (untrusted text)."""
    rows = []
    for cls, entry in samples.classes.items():
        for sample in entry.samples:
            rows.append({"cls": str(cls), "status": "—" if sample.status in (None, 0) else str(sample.status),
                         "kind": sample.error_kind or "—", "count": fmt_count(sample.count),
                         "message": sample.message or "", "body": sample.body or ""})
        if entry.unsampled:
            rows.append({"cls": str(cls), "status": "", "kind": "", "count": fmt_count(entry.unsampled),
                         "message": "other errors (beyond the distinct ones kept)", "body": ""})
    return rows
