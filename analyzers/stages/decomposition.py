"""Per-request stage decomposition: join spans to requests by W3C trace id.

For each successful request whose trace has a server span (chosen by the
stage rules, :mod:`.stage_rules`: default the SERVER-kind span, else the
trace's top-level span; the longest if several):

- ``server``: the server span's duration;
- one column per stage the rules produce: the summed durations of the trace's
  spans that a span rule maps to that stage (first matching rule wins), plus
  the intervals of the event rules (between two span events of the trace);
  NaN when the trace has nothing of that stage;
- ``unaccounted`` = server − sum(stages), clipped at 0: server time no stage
  covers, shown explicitly;
- ``client_network`` = service time − server (generator, network, HTTP parsing).

All in ms. The join is hash-based (``pyarrow.compute.index_in``) and the
per-stage sums use ``np.bincount``: O(requests + spans), no per-span Python
(span-name rules run once per distinct name; see :mod:`.span_match`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.stats.percentiles import nearest_rank, order_statistics
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column, take_rows
from tailscope.analyzers.inputs.trace_join import distinct_positions, sampled_mask, trace_positions
from tailscope.analyzers.stages.span_match import (SPAN_KIND_SERVER, UNMAPPED, ServerSpans, assign_span_stages, event_stage_ms,
                         server_span_rows)
from tailscope.analyzers.stages.rules import PRESETS, REFERENCE_SPAN_NAMES, StageRules, rules_from_stage_map

__all__ = ["DEFAULT_STAGE_MAP", "DERIVED_STAGES", "SPAN_KIND_SERVER", "SpanJoin", "StageMatrix", "join_positions",
           "join_spans", "request_of_span",
           "stage_matrix", "stage_name_map", "summarize_stages", "traced_requests"]

#: Default stage mapping: span name → stage (the ``reference`` preset, docs/architecture.md).
DEFAULT_STAGE_MAP: Mapping[str, str] = dict(REFERENCE_SPAN_NAMES)
#: Derived columns appended after the mapped stages.
DERIVED_STAGES = ("server", "unaccounted", "client_network")
#: Most unmapped span names listed.
TOP_UNMAPPED = 20


@dataclass(frozen=True)
class StageMatrix:
    """Stage durations of the joined requests.

    ``request_index[i]`` is the position in the :class:`RequestArrays` of row i;
    ``ms[i, j]`` is the duration in ms of ``stages[j]`` (NaN: no such span).
    """

    request_index: np.ndarray
    stages: tuple[str, ...]
    ms: np.ndarray
    ok_requests: int
    unmapped: list[dict]

    def column(self, stage: str) -> np.ndarray:
        return self.ms[:, self.stages.index(stage)]


def mapped_stage_names(stage_map: Mapping[str, str]) -> tuple[str, ...]:
    """Stage names in first-appearance order of the map's values."""
    return tuple(dict.fromkeys(stage_map.values()))


def as_rules(rules: StageRules | Mapping[str, str] | None) -> StageRules:
    """StageRules from rules, a ``{span name: stage}`` map, or None (the reference preset)."""
    if rules is None:
        return PRESETS["reference"]
    return rules if isinstance(rules, StageRules) else rules_from_stage_map(rules)


def request_of_span(req: RequestArrays, spans: pa.Table) -> np.ndarray | None:
    """For each span, the index of the request with its trace id (-1: none), or None when
    two requests share a trace id (callers then join the requests they need themselves).

    With distinct ids one join answers every question about spans and requests (which
    successful request a span belongs to, which spans come from elsewhere), exactly as a
    join against any subset of the requests would (:mod:`.trace_join`)."""
    return distinct_positions(spans.column("trace_id"), req.trace_ids)


def join_positions(req: RequestArrays, spans: pa.Table,
                   span_request: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ok_index, position): the successful traced requests' indices, and for each span the
    position in ok_index of its request (-1: its trace is not a successful request's).

    ``span_request``: :func:`request_of_span` of these spans, to skip the join."""
    ok_index = np.flatnonzero(req.is_ok & pc.is_valid(req.trace_ids).to_numpy(zero_copy_only=False))
    if len(spans) == 0 or len(ok_index) == 0:
        return ok_index, np.full(len(spans), -1, dtype=np.int64)
    if span_request is None:
        return ok_index, trace_positions(spans.column("trace_id"), take_rows(req.trace_ids, ok_index))
    ok_position = np.full(req.n + 1, -1, dtype=np.int64)  # the extra last entry maps -1 to -1
    ok_position[ok_index] = np.arange(len(ok_index))
    return ok_index, ok_position[span_request]


@dataclass(frozen=True)
class SpanJoin:
    """Spans joined to the successful requests, with each joined trace's server span.

    ``ok_index``/``position`` as :func:`join_positions` returns them; ``servers`` from
    :func:`~.span_match.server_span_rows`, or None when nothing joined; ``span_request``
    the :func:`request_of_span` of every span (None when request trace ids repeat).
    Computed once per analysis and shared: positions, rows and durations do not change
    when the spans' times are shifted by a clock offset (``servers.start_ns``/``end_ns``
    are the times of the spans the join was computed on)."""

    ok_index: np.ndarray
    position: np.ndarray
    servers: ServerSpans | None
    span_request: np.ndarray | None = None


def join_spans(req: RequestArrays, spans: pa.Table,
               rules: StageRules | Mapping[str, str] | None = None) -> SpanJoin:
    """The :class:`SpanJoin` of ``spans`` and ``req`` under ``rules``: one hash join, O(requests + spans)."""
    span_request = request_of_span(req, spans) if len(spans) and req.n else None
    ok_index, position = join_positions(req, spans, span_request)
    if len(spans) == 0 or len(ok_index) == 0:
        return SpanJoin(ok_index, position, None, span_request)
    return SpanJoin(ok_index, position, server_span_rows(spans, position, as_rules(rules)), span_request)


def stage_matrix(req: RequestArrays, spans: pa.Table,
                 rules: StageRules | Mapping[str, str] | None = None,
                 join: SpanJoin | None = None) -> StageMatrix:
    """Join ``spans`` to the successful requests and build the :class:`StageMatrix`.

    ``join``: the :func:`join_spans` of these spans (or of a time-shifted copy) under the
    same rules, to skip the join."""
    rules = as_rules(rules)
    mapped = rules.stage_names()
    stages = mapped + DERIVED_STAGES
    join = join if join is not None else join_spans(req, spans, rules)
    ok_index, position = join.ok_index, join.position
    n_ok, n_mapped = len(ok_index), len(mapped)
    if join.servers is None:
        return StageMatrix(np.zeros(0, np.int64), stages, np.zeros((0, len(stages))), int(req.is_ok.sum()), [])

    servers = join.servers
    server_ms = np.full(n_ok, np.nan)
    server_ms[servers.position] = (servers.end_ns - servers.start_ns) / NS_PER_MS

    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    duration_ms = (end - start) / NS_PER_MS
    joined = position >= 0
    stage_of = assign_span_stages(spans, rules, mapped, joined & ~servers.excluded)
    is_stage = stage_of >= 0
    key = position[is_stage] * n_mapped + stage_of[is_stage]
    stage_ms = np.bincount(key, weights=duration_ms[is_stage], minlength=n_ok * n_mapped).astype(
        np.float64, copy=False).reshape(n_ok, n_mapped)  # (an empty bincount is int)
    del duration_ms
    present = np.zeros(n_ok * n_mapped, dtype=bool)
    present[key] = True
    del key
    stage_ms[~present.reshape(n_ok, n_mapped)] = np.nan
    del present
    if rules.event_rules:
        from_events = event_stage_ms(spans, position, rules, mapped, n_ok)
        stage_ms = np.where(np.isnan(from_events), stage_ms, np.nan_to_num(stage_ms) + np.nan_to_num(from_events))
        del from_events

    has_server = ~np.isnan(server_ms)
    rows = np.flatnonzero(has_server)
    if len(rows) < n_ok:  # keep only requests with a server span (usually all: no copy)
        stage_ms, server_ms = stage_ms[rows], server_ms[rows]
    unaccounted = np.clip(server_ms - np.nansum(stage_ms, axis=1), 0.0, None)
    client_network = req.service_ms[ok_index[rows]] - server_ms
    matrix = np.column_stack([stage_ms, server_ms, unaccounted, client_network])
    unmapped_mask = joined & ~servers.excluded & (stage_of == UNMAPPED)
    return StageMatrix(ok_index[rows], stages, matrix, int(req.is_ok.sum()),
                       unmapped_names(spans.filter(pa.array(unmapped_mask))))


def stage_name_map(spans: pa.Table, rules: StageRules | Mapping[str, str] | None) -> dict[str, str]:
    """``{span name: stage}`` for the span names in ``spans`` that a span rule maps by name
    alone (for labelling spans one by one, e.g. a representative trace)."""
    rules = as_rules(rules)
    if len(spans) == 0:
        return {}
    out: dict[str, str] = {}
    for name in pc.unique(pc.drop_null(spans.column("name"))).to_pylist():
        for rule in rules.span_rules:
            if not rule.match.attributes and rule.match.name is not None and rule.match.name.search(name):
                out[name] = rule.stage
                break
    return out


def unmapped_names(spans: pa.Table) -> list[dict]:
    """[{"name", "count"}] of the most frequent span names no stage rule maps."""
    if len(spans) == 0:
        return []
    counts = pc.value_counts(spans.column("name")).to_pylist()
    counts.sort(key=lambda item: (-item["counts"], str(item["values"])))
    return [{"name": item["values"], "count": item["counts"]} for item in counts[:TOP_UNMAPPED]]


def stage_stats(values_ms: np.ndarray) -> dict:
    """{"p50_ms", "p99_ms" (nearest rank), "mean_ms", "count"} of one stage column (NaN ignored)."""
    values = values_ms[~np.isnan(values_ms)]
    n = len(values)
    if n == 0:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None, "count": 0}
    p50, p99 = nearest_rank(n, 0.5), nearest_rank(n, 0.99)
    ordered = order_statistics(values, (p50, p99))
    return {
        "p50_ms": float(ordered[p50 - 1]),
        "p99_ms": float(ordered[p99 - 1]),
        "mean_ms": float(values.mean()),
        "count": int(n),
    }


def traced_requests(req: RequestArrays, join: SpanJoin, sample_rate: float) -> int:
    """How many successful requests were sent for tracing: those with a trace id that the
    head-sampling rule at ``sample_rate`` puts in the sample (their traceparent's sampled flag
    was set, :func:`tailscope.loadgen.tracecontext.new_traceparent`). At rate 1 every
    successful request (one without a trace id is then a gap in the tracing)."""
    if sample_rate >= 1.0:
        return int(np.count_nonzero(req.is_ok))
    return int(sampled_mask(take_rows(req.trace_ids, join.ok_index), sample_rate).sum())


def summarize_stages(matrix: StageMatrix, traced: int | None = None) -> dict:
    """The ``stages`` section: joined fraction, joined count, the share sent for tracing
    (``traced``: :func:`traced_requests`; None: every successful request), per-stage statistics."""
    joined = len(matrix.request_index)
    ok = matrix.ok_requests
    return {
        "joined_fraction": joined / ok if ok else 0.0,
        "traced_fraction": (ok if traced is None else traced) / ok if ok else 0.0,
        "joined_requests": joined,
        "by_stage": {stage: stage_stats(matrix.ms[:, j]) for j, stage in enumerate(matrix.stages)},
        "unmapped_span_names": matrix.unmapped,
    }
