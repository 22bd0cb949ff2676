"""The ``llm_request`` span of each request, as vLLM emits it, and the server's own timing records.

vLLM (vllm/v1/engine/output_processor.py, ``do_tracing``) emits one SERVER span
named ``llm_request`` per request when it finishes: started at the request's
arrival, in the trace of the incoming ``traceparent`` (a child of the caller's
span), with these attributes, latencies in **seconds** (floats):

| attribute | value here |
| --- | --- |
| ``gen_ai.latency.time_in_queue`` | first scheduled − queued |
| ``gen_ai.latency.time_to_first_token`` | first token − arrival |
| ``gen_ai.latency.e2e`` | finished − arrival |
| ``gen_ai.latency.time_in_model_prefill`` | first token − first scheduled |
| ``gen_ai.latency.time_in_model_decode`` | last token − first token |
| ``gen_ai.latency.time_in_model_inference`` | last token − first scheduled |
| ``gen_ai.usage.prompt_tokens`` / ``gen_ai.usage.completion_tokens`` | token counts (int) |
| ``gen_ai.request.id`` | the engine request id (``chatcmpl-<X-Request-Id>``, ``cmpl-<X-Request-Id>-0``) |
| ``gen_ai.response.finish_reasons`` | a JSON-encoded list, e.g. ``'["length"]'`` (as vLLM's ``json.dumps``) |
| ``gen_ai.request.max_tokens``, ``…temperature``, ``…top_p``, ``…n`` | when the request gave them |

An interval the request never reached (an aborted request that was never
scheduled) is left out rather than guessed. Beyond vLLM, the span carries
``tailscope.llm.num_preemptions``. queue + prefill + decode = last token −
queued, which differs from e2e only by the time before queueing (parsing) and
after the last token (an EOS step, or none).

:class:`RequestRecorder` is the sequences' ``on_finish``: it emits the span
(when tracing) and keeps the last :data:`MAX_RECORDS` timing records, served by
the app at ``GET /debug/requests`` so tests can check client-side TTFT against
the server's own.
"""

from __future__ import annotations

import collections
import json
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tailscope.support.units import NS_PER_S
from tailscope.targets.llm.sequence import Sequence

LLM_REQUEST = "llm_request"
MAX_RECORDS = 10_000


def _interval(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return max(0, end_ns - start_ns) / NS_PER_S


def span_attributes(seq: Sequence) -> dict[str, Any]:
    """The vLLM ``llm_request`` attributes of a finished sequence (see the module docstring)."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.prompt_tokens": len(seq.prompt_ids),
        "gen_ai.usage.completion_tokens": len(seq.output_ids),
        "gen_ai.request.id": seq.request_id,
        "gen_ai.response.finish_reasons": json.dumps([seq.finish_reason or "abort"]),
        "tailscope.llm.num_preemptions": seq.num_preemptions,
    }
    for name, value in (
        ("gen_ai.latency.time_in_queue", _interval(seq.queued_ns, seq.scheduled_ns)),
        ("gen_ai.latency.time_to_first_token", _interval(seq.arrival_ns, seq.first_token_ns)),
        ("gen_ai.latency.e2e", _interval(seq.arrival_ns, seq.finished_ns)),
        ("gen_ai.latency.time_in_model_prefill", _interval(seq.scheduled_ns, seq.first_token_ns)),
        ("gen_ai.latency.time_in_model_decode", _interval(seq.first_token_ns, seq.last_token_ns)),
        ("gen_ai.latency.time_in_model_inference", _interval(seq.scheduled_ns, seq.last_token_ns)),
    ):
        if value is not None:
            attributes[name] = value
    for param in ("max_tokens", "temperature", "top_p", "n"):
        if seq.params.get(param) is not None:
            attributes[f"gen_ai.request.{param}"] = seq.params[param]
    return attributes


class RequestRecorder:
    """Emits each finished sequence's ``llm_request`` span (``tracer`` None: none) and keeps its timings."""

    def __init__(self, tracer: trace.Tracer | None, max_records: int = MAX_RECORDS) -> None:
        self._tracer = tracer
        self._records: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_records)

    def __call__(self, seq: Sequence) -> None:
        if seq.finished_ns is None:  # the engine stopped before finishing it
            seq.finished_ns = time.time_ns()
        attributes = span_attributes(seq)
        trace_id = span_id = None
        if self._tracer is not None:
            span = self._tracer.start_span(LLM_REQUEST, context=seq.trace_context, kind=SpanKind.SERVER,
                                           attributes=attributes, start_time=seq.arrival_ns)
            if seq.finish_reason is None:
                span.set_status(Status(StatusCode.ERROR, "engine stopped"))
            span.end(end_time=max(seq.arrival_ns, seq.finished_ns))
            context = span.get_span_context()
            if context.is_valid:
                trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        self._records.append({
            "request_id": seq.request_id,
            "trace_id": trace_id,
            "span_id": span_id,
            "arrival_ns": seq.arrival_ns,
            "queued_ns": seq.queued_ns,
            "scheduled_ns": seq.scheduled_ns,
            "first_token_ns": seq.first_token_ns,
            "last_token_ns": seq.last_token_ns,
            "reasoning_tokens": min(seq.reasoning_tokens, len(seq.output_ids)),
            "answer_token_ns": seq.answer_token_ns,
            "finished_ns": seq.finished_ns,
            "finish_reason": seq.finish_reason,
            "num_preemptions": seq.num_preemptions,
            "attributes": attributes,
        })

    def records(self, request_id: str | None = None) -> list[dict[str, Any]]:
        """The kept records, oldest first; only ``request_id``'s when given."""
        return [r for r in self._records if request_id is None or r["request_id"] == request_id]
