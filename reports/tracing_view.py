"""Pre-formatted report text for the tracing side: the stage table, stage rules, clock alignment,
receiver counts.

Takes the ``stages`` section as :class:`~tailscope.analysis_model.stages.Stages` (decoded once by
the report's door through reports/upgrade.py ``stages_of``) and reads the ``receiver`` section as
:class:`~tailscope.analysis_model.receiver.Receiver` (receiver.json as the receiver wrote it; keys
a newer receiver adds are shown as they are); an older analysis without a part yields empty text /
no rows (the part's default in the type).
"""

from __future__ import annotations

import json

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.receiver import Receiver
from tailscope.analysis_model.stages import ClockAlignment, StageRulesInfo, Stages
from tailscope.reports.findings_view import missing_spans_text
from tailscope.reports.formatting import fmt_count, fmt_ms, fmt_share

#: receiver.json keys shown first, with a label; other keys follow as they are.
_RECEIVER_LABELS = (
    ("spans_received", "spans received"),
    ("spans_stored", "spans stored"),
    ("spans_dropped", "spans dropped (ingest queue full)"),
    ("spans_refused_after_close", "spans refused after the run closed"),
    ("gc_events", "GC pauses received"),
    ("metrics_points", "metric points received"),
    ("logs_records", "log records received"),
)


def _count(value) -> str:
    return "—" if value is None else f"{int(value):,}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def stage_data(stages: Stages) -> dict:
    """The stage table and its lines: how many requests joined a server span, each stage that
    occurred (P50/P99/mean ms, count), the unmapped span names, missing spans, rules and clock."""
    traced = (f" ({fmt_share(stages.traced_fraction)} were sent for tracing)"
              if stages.traced_fraction < 1.0 else "")
    return {
        "joined": f"{fmt_share(stages.joined_fraction)} of successful requests "
                  f"({fmt_count(stages.joined_requests)}) joined a server span" + traced,
        "rows": [{"stage": name, "p50": fmt_ms(s.p50_ms), "p99": fmt_ms(s.p99_ms),
                  "mean": fmt_ms(s.mean_ms), "count": fmt_count(s.count)}
                 for name, s in stages.occurred().items()],
        "unmapped": [{"name": str(u.name), "count": fmt_count(u.count)} for u in stages.unmapped_span_names],
        "missing": missing_spans_text(stages.missing_spans),
        "rules": rules_text(stages.rules),
        "clock": clock_text(stages.clock_alignment),
    }


def rules_text(rules: StageRulesInfo | None) -> str:
    """One line: which stage rules produced the breakdown, and how the server span was chosen
    ('' for an analysis that does not say)."""
    if rules is None:
        return ""
    source = f"preset {rules.preset}" if rules.preset else "span-name map"
    user = rules.user_rules
    extra = f" plus {user} rule{'s' if user != 1 else ''} from the scenario" if user and rules.preset else ""
    return f"Stage rules: {source}{extra}; server span: {rules.server}"


def clock_text(clock: ClockAlignment | None) -> str:
    """One line on the client→server clock offset estimated from the server spans ('' for an
    analysis that does not say)."""
    if clock is None:
        return ""
    if clock.offset_ms is None or clock.bound_ms is None:
        return (f"Clock offset: not estimated ({_count(clock.requests)} joined requests; "
                "at least 20 are needed)")
    offset, bound = clock.offset_ms, clock.bound_ms
    head = f"Clock offset (add to server times): {offset:+.3f} ms ± {bound:.3f} ms from {_count(clock.requests)} requests"
    if clock.applied:
        return (f"{head}; applied: server spans and the target's GC pauses were shifted in this analysis "
                f"(spans outside their request: {_share(clock.violating_share_before)} before, "
                f"{_share(clock.violating_share_after)} after)")
    tolerance = clock.tolerance_ms
    reason = ("mode off" if clock.mode == "off" else
              "the clocks agree within the bound" if tolerance is None else
              f"no offset beyond where each side takes its timestamps, ± {tolerance:.3f} ms")
    return f"{head}; not applied ({reason})"


def receiver_rows(receiver: dict) -> list[dict]:
    """Key/value rows of the ``receiver`` section (read once as :class:`Receiver`): received,
    stored, dropped, rejected by reason, export requests by transport, ports, access; then any
    other key as it is (a newer receiver's, the write error). A count the receiver did not write
    has no row."""
    counts = decode(Receiver, receiver, "receiver")
    rows = [{"key": label, "value": _count(getattr(counts, key))} for key, label in _RECEIVER_LABELS
            if getattr(counts, key) is not None]
    if counts.rejected is not None:
        detail = ", ".join(f"{reason} {_count(n)}" for reason, n in counts.rejected.items())
        rows.append({"key": "export requests rejected", "value": f"{_count(sum(counts.rejected.values()))} ({detail})"})
    if counts.requests is not None:
        by = {"http": 0, "grpc": 0, **counts.requests_by_transport} if counts.requests_by_transport else None
        split = f" (HTTP {_count(by['http'])}, gRPC {_count(by['grpc'])})" if by else ""
        rows.append({"key": "export requests", "value": f"{_count(counts.requests)}{split}"})
    if "port" in receiver:
        grpc = counts.grpc_port
        rows.append({"key": "ports", "value": f"OTLP/HTTP {counts.port}, "
                     + (f"OTLP/gRPC {grpc}" if grpc is not None else "OTLP/gRPC off")})
    if counts.auth is not None:
        token = "bearer token required" if counts.auth == "bearer token" else "no token"
        rows.append({"key": "access", "value": f"{token}, {'TLS' if counts.tls else 'no TLS'}"})
    shown = {key for key, _ in _RECEIVER_LABELS} | {"rejected", "requests", "requests_by_transport", "port",
                                                     "grpc_port", "auth", "tls"}
    rows += [{"key": str(k), "value": v if isinstance(v, str) else json.dumps(v)}
             for k, v in receiver.items() if k not in shown]
    return rows
