"""Other traffic: requests the server answered that tailscope did not send.

In staging or production the server also serves other clients. Their spans reach the receiver
beside ours but join none of tailscope's requests (their trace ids are not the harness's). A
trace is one request of *other traffic* when one of its spans is a SERVER span, or the preset's
request span (the spans its :class:`~..stages.rule_model.TokenAttributes` select, vLLM's
``llm_request``), and it joins no request of the run. The request counts at the start of the
earliest such span of its trace.

Token counts come from the preset's token attributes (vLLM: ``gen_ai.usage.prompt_tokens`` and
``gen_ai.usage.completion_tokens``) of the other traffic's request spans, when they carry them:
prompt tokens count at the span's start (the prompt is prefilled soon after arrival), output
tokens at its end (when the server reports them). Without token attributes, or without the
attributes on a span, only requests are counted.

Cost: one pass over the spans' kind column, one name match, one JSON read of the matched
foreign rows' attributes and one group-by of their trace ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.server import OtherTraffic as OtherTrafficSection
from tailscope.analysis_model.server import OtherTrafficWindow
from tailscope.analyzers.inputs.records import NS_PER_S, int_column, take_rows
from tailscope.analyzers.stages.attribute_stages import attribute_numbers
from tailscope.analyzers.stages.decomposition import SPAN_KIND_SERVER
from tailscope.analyzers.stages.rule_model import TokenAttributes
from tailscope.analyzers.stages.span_match import match_spans


@dataclass(frozen=True)
class OtherTraffic:
    """Other traffic's requests and tokens as event times (epoch ns) and weights."""

    starts_ns: np.ndarray  # int64, sorted: one per request of other traffic
    prompt_at_ns: np.ndarray  # int64: start of each request span that carried a prompt count
    prompt_tokens: np.ndarray  # float64, aligned with prompt_at_ns
    output_at_ns: np.ndarray  # int64: end of each request span that carried an output count
    output_tokens: np.ndarray  # float64, aligned with output_at_ns
    tokens: TokenAttributes | None  # where the counts were read; None: no preset declares them

    @property
    def requests(self) -> int:
        return len(self.starts_ns)

    def per_second(self, edges: np.ndarray) -> dict[str, np.ndarray]:
        """Per bin of ``edges`` (sorted epoch ns, uniform or not): ``requests``, ``prompt_tokens``
        and ``output_tokens`` per second. A bin's count is of events in [edges[i], edges[i+1])."""
        seconds = np.diff(edges) / NS_PER_S
        return {"requests": _binned(self.starts_ns, None, edges) / seconds,
                "prompt_tokens": _binned(self.prompt_at_ns, self.prompt_tokens, edges) / seconds,
                "output_tokens": _binned(self.output_at_ns, self.output_tokens, edges) / seconds}

    def section(self, start_ns: int, end_ns: int, window_s: float) -> OtherTrafficSection:
        """The ``other_traffic`` section of analysis.json: totals, where tokens were read, and per
        window of ``window_s`` over [start_ns, end_ns) the counts (not rates); ``windows`` is
        empty when there is no other traffic."""
        has_prompt, has_output = len(self.prompt_at_ns) > 0, len(self.output_at_ns) > 0
        windows = []
        if self.requests and end_ns > start_ns:
            step = int(window_s * NS_PER_S)
            edges = start_ns + np.arange(int(-(-(end_ns - start_ns) // step)) + 1, dtype=np.int64) * step
            counts = {key: rate * (step / NS_PER_S) for key, rate in self.per_second(edges).items()}
            windows = [OtherTrafficWindow(int(edges[i]), int(round(counts["requests"][i])),
                                          int(round(counts["prompt_tokens"][i])) if has_prompt else None,
                                          int(round(counts["output_tokens"][i])) if has_output else None)
                       for i in range(len(edges) - 1)]
        return OtherTrafficSection(self.requests, int(self.prompt_tokens.sum()) if has_prompt else None,
                            int(self.output_tokens.sum()) if has_output else None,
                            self.tokens.describe() if self.tokens is not None else None, window_s, windows)


def _binned(times_ns: np.ndarray, weights: np.ndarray | None, edges: np.ndarray) -> np.ndarray:
    index = np.searchsorted(edges, times_ns, side="right") - 1
    inside = (index >= 0) & (index < len(edges) - 1)
    return np.bincount(index[inside], weights=None if weights is None else weights[inside],
                       minlength=len(edges) - 1).astype(np.float64)


def foreign_spans(spans: pa.Table, span_request: np.ndarray | None, trace_ids: pa.Array) -> np.ndarray:
    """Boolean per span: it joins none of the run's requests (``span_request`` < 0 when the
    analysis' join is known, else its trace id is none of ``trace_ids``)."""
    if span_request is not None:
        return np.asarray(span_request) < 0
    if len(spans) == 0:
        return np.zeros(0, dtype=bool)
    return pc.invert(pc.fill_null(pc.is_in(spans.column("trace_id"), value_set=trace_ids), False)).to_numpy(
        zero_copy_only=False)


def other_traffic(spans: pa.Table, foreign: np.ndarray, tokens: TokenAttributes | None) -> OtherTraffic:
    """:class:`OtherTraffic` of ``spans`` whose rows ``foreign`` (:func:`foreign_spans`) marks."""
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    if len(spans) == 0 or not foreign.any():
        return OtherTraffic(empty_i, empty_i, empty_f, empty_i, empty_f, tokens)
    kind = pc.fill_null(spans.column("kind"), 0).to_numpy(zero_copy_only=False)
    request_span = match_spans(spans, tokens.match, foreign) if tokens is not None else np.zeros(len(spans), bool)
    rows = np.flatnonzero(foreign & ((kind == SPAN_KIND_SERVER) | request_span))
    if len(rows) == 0:
        return OtherTraffic(empty_i, empty_i, empty_f, empty_i, empty_f, tokens)
    picked = take_rows(spans.select(["trace_id", "start_ns"]), rows)
    first = picked.group_by("trace_id").aggregate([("start_ns", "min")])
    starts = np.sort(first.column("start_ns_min").to_numpy(zero_copy_only=False).astype(np.int64))
    prompt_at, prompt, output_at, output = empty_i, empty_f, empty_i, empty_f
    token_rows = np.flatnonzero(request_span)
    if len(token_rows):
        matched = take_rows(spans.select(["start_ns", "end_ns", "attributes"]), token_rows)
        values = attribute_numbers(matched.column("attributes"), (tokens.prompt, tokens.output))
        start, _ = int_column(matched, "start_ns")
        end, _ = int_column(matched, "end_ns")
        has_prompt, has_output = ~np.isnan(values[tokens.prompt]), ~np.isnan(values[tokens.output])
        prompt_at, prompt = start[has_prompt], values[tokens.prompt][has_prompt]
        output_at, output = end[has_output], values[tokens.output][has_output]
    return OtherTraffic(starts, prompt_at, prompt, output_at, output, tokens)
