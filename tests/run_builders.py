"""Building small run directories in the real format from given requests (tests only)."""

from __future__ import annotations

import json
import os

from tailscope.rundir import RunWriter

TRITON_FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "triton_otlp.jsonl")
TRITON_REQUESTS = os.path.join(os.path.dirname(__file__), "fixtures", "triton_requests.json")


def write_requests_run(path: str, requests: list[dict], scenario: dict | None = None) -> str:
    """A closed run directory whose requests.arrow holds ``requests``
    (dicts with ``trace_id``, ``sent_ns``, ``end_ns``; all successful, 200)."""
    writer = RunWriter(str(path), {"name": "built", "scenario": scenario or {}, "target": "http://127.0.0.1:9"})
    for r in requests:
        writer.requests.append_row({
            "scheduled_ns": r["sent_ns"], "sent_ns": r["sent_ns"], "end_ns": r["end_ns"],
            "first_byte_ns": r["end_ns"], "cls": r.get("cls", "infer"), "status": 200,
            "bytes_out": 100, "bytes_in": 100, "trace_id": r["trace_id"], "error_kind": None,
            "error": None, "chunks": 0, "max_gap_ns": None, "worker": 0,
        })
    writer.close()
    return str(path)


def triton_requests() -> list[dict]:
    with open(TRITON_REQUESTS, encoding="utf-8") as fh:
        return json.load(fh)


def requests_around(server_spans, margin_ns: int = 200_000) -> list[dict]:
    """Client records enclosing SDK SERVER spans by ``margin_ns`` on each side."""
    return [{"trace_id": format(s.context.trace_id, "032x"), "sent_ns": s.start_time - margin_ns,
             "end_ns": s.end_time + margin_ns} for s in server_spans]
