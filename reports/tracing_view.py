"""Pre-formatted report text for the tracing side: stage rules, clock alignment, receiver counts.

Reads only parts of the analysis dict (``stages.rules``, ``stages.clock_alignment``,
``receiver``); an older analysis without them yields empty text / no rows.
"""

from __future__ import annotations

import json

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


def occurred_stages(by_stage: dict) -> dict:
    """The ``stages.by_stage`` entries of stages that occurred in at least one request
    (a preset's stage the target never has stays out of the tables and charts)."""
    return {name: s for name, s in (by_stage or {}).items() if (s or {}).get("count")}


def rules_text(stages: dict) -> str:
    """One line: which stage rules produced the breakdown, and how the server span was chosen."""
    rules = stages.get("rules")
    if not rules:
        return ""
    source = f"preset {rules['preset']}" if rules.get("preset") else "span-name map"
    user = rules.get("user_rules") or 0
    extra = f" plus {user} rule{'s' if user != 1 else ''} from the scenario" if user and rules.get("preset") else ""
    return f"Stage rules: {source}{extra}; server span: {rules.get('server', '—')}"


def clock_text(stages: dict) -> str:
    """One line on the client→server clock offset estimated from the server spans."""
    clock = stages.get("clock_alignment")
    if not clock:
        return ""
    if clock.get("offset_ms") is None:
        return (f"Clock offset: not estimated ({_count(clock.get('requests'))} joined requests; "
                "at least 20 are needed)")
    offset, bound = clock["offset_ms"], clock["bound_ms"]
    head = f"Clock offset (add to server times): {offset:+.3f} ms ± {bound:.3f} ms from {_count(clock['requests'])} requests"
    if clock.get("applied"):
        return (f"{head}; applied: server spans and the target's GC pauses were shifted in this analysis "
                f"(spans outside their request: {clock['violating_share_before']:.1%} before, "
                f"{clock['violating_share_after']:.1%} after)")
    tolerance = clock.get("tolerance_ms")
    reason = ("mode off" if clock.get("mode") == "off" else
              "the clocks agree within the bound" if tolerance is None else
              f"no offset beyond where each side takes its timestamps, ± {tolerance:.3f} ms")
    return f"{head}; not applied ({reason})"


def receiver_rows(receiver: dict) -> list[dict]:
    """Key/value rows of the receiver's counts: received, stored, dropped, rejected by reason, ports."""
    rows = [{"key": label, "value": _count(receiver[key])} for key, label in _RECEIVER_LABELS if key in receiver]
    rejected = receiver.get("rejected")
    if isinstance(rejected, dict):
        total = sum(v for v in rejected.values() if isinstance(v, int))
        detail = ", ".join(f"{reason} {_count(n)}" for reason, n in rejected.items())
        rows.append({"key": "export requests rejected", "value": f"{_count(total)} ({detail})"})
    if "requests" in receiver:
        by = receiver.get("requests_by_transport") or {}
        split = f" (HTTP {_count(by.get('http', 0))}, gRPC {_count(by.get('grpc', 0))})" if by else ""
        rows.append({"key": "export requests", "value": f"{_count(receiver['requests'])}{split}"})
    if "port" in receiver:
        grpc = receiver.get("grpc_port")
        rows.append({"key": "ports", "value": f"OTLP/HTTP {receiver['port']}, "
                     + (f"OTLP/gRPC {grpc}" if grpc is not None else "OTLP/gRPC off")})
    if "auth" in receiver:
        token = "bearer token required" if receiver["auth"] == "bearer token" else "no token"
        rows.append({"key": "access", "value": f"{token}, {'TLS' if receiver.get('tls') else 'no TLS'}"})
    shown = {key for key, _ in _RECEIVER_LABELS} | {"rejected", "requests", "requests_by_transport", "port",
                                                     "grpc_port", "auth", "tls"}
    rows += [{"key": str(k), "value": v if isinstance(v, str) else json.dumps(v)}
             for k, v in receiver.items() if k not in shown]
    return rows
