"""Per-request stage decomposition: join spans to requests by W3C trace id.

For each successful request whose trace has a server span (chosen by the
stage rules, :mod:`.stage_rules`: default the SERVER-kind span, else the
trace's top-level span; the longest if several):

- ``server``: the server span's duration;
- one column per stage the rules produce: the summed durations of the trace's
  spans that a span rule maps to that stage (first matching rule wins), plus
  the intervals of the event rules (between two span events of the trace);
  NaN when the trace has nothing of that stage;
- the stages of the attribute rules (:mod:`.attribute_stages`: numeric attributes of one
  span laid end to end from its start), for the requests whose span and event rules gave
  that stage nothing;
- one column per *unmapped child* of the server span, named after it, when no
  rule maps it (:mod:`.span_tree`: deeper descendants roll up into their
  top-level child; rule-mapped time inside it is taken out);
- ``unaccounted`` = server − sum(stages), clipped at 0: server time no stage
  covers, shown explicitly; where the stages add up to more than the server span (they
  overlap), :mod:`.consistency` says so and names the rule (``StageMatrix.consistency``);
- ``outside_server`` = service time − server (generator, network, HTTP parsing).

All in ms. The join is hash-based (``pyarrow.compute.index_in``) and the
per-stage sums use ``np.bincount``: O(requests + spans), no per-span Python
(span-name rules run once per distinct name; see :mod:`.span_match`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis_model.codec import decode
from tailscope.analysis_model.stages import (
    ClockAlignment,
    Consistency,
    LateSpanWait,
    MissingSpans,
    NameCount,
    ServerMetrics,
    SlowSplit,
    StageRulesInfo,
    Stages,
    StageStats,
)
from tailscope.analyzers.inputs.records import NS_PER_MS, RequestArrays, int_column, take_rows
from tailscope.analyzers.inputs.trace_join import distinct_positions, sampled_mask, trace_positions
from tailscope.analyzers.stages.attribute_stages import attribute_stage_ms
from tailscope.analyzers.stages.consistency import IntervalOverlap, interval_overlap, stage_consistency
from tailscope.analyzers.stages.rule_model import SpanMatch
from tailscope.analyzers.stages.rules import PRESETS, REFERENCE_SPAN_NAMES, StageRules, rules_from_stage_map
from tailscope.analyzers.stages.server_tokens import ServerTokens, server_token_counts
from tailscope.analyzers.stages.span_match import (
    IGNORED,
    SPAN_KIND_SERVER,
    UNMAPPED,
    ServerSpans,
    assign_span_stages,
    event_stage_ms,
    name_codes,
    server_span_rows,
)
from tailscope.analyzers.stages.span_tree import SpanStages, span_stages
from tailscope.analyzers.stats.percentiles import nearest_rank, order_statistics

__all__ = ["DEFAULT_STAGE_MAP", "DERIVED_STAGES", "SPAN_KIND_SERVER", "SpanJoin", "StageMatrix", "join_positions",
           "join_spans", "missing_spans", "request_of_span",
           "stage_matrix", "stage_name_map", "summarize_stages", "traced_requests"]

#: Default stage mapping: span name → stage (the ``reference`` preset, docs/architecture.md).
DEFAULT_STAGE_MAP: Mapping[str, str] = dict(REFERENCE_SPAN_NAMES)
#: Derived columns appended after the mapped stages.
DERIVED_STAGES = ("server", "unaccounted", "outside_server")
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
    unmapped: list[NameCount]
    #: Stages named after the server span's unmapped children (:mod:`.span_tree`), in ``stages``.
    span_stages: tuple[str, ...] = ()
    #: The server's token counts of each row, from its spans (:mod:`.server_tokens`); None when
    #: the rules name no token attributes (only presets do: ``vllm``).
    server_tokens: ServerTokens | None = None
    #: Do the stages of each row fit in its server span (:func:`.consistency.stage_consistency`)?
    consistency: Consistency | None = None

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
    # the span names, encoded once for the name rules and the span-name stages
    names = name_codes(spans) if any(match.name is not None for match in _matches(rules)) else None
    stage_of = assign_span_stages(spans, rules, mapped, joined & ~servers.excluded, names)
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
    # every span-rule and event-rule stage interval, on the server spans' clock (the join's): the overlap check
    offset = np.zeros(n_ok, np.int64)
    offset[servers.position] = start[servers.row] - servers.start_ns  # a clock alignment's shift, if any
    stage_rows = np.flatnonzero(is_stage)
    intervals = [(position[stage_rows], stage_of[stage_rows], start[stage_rows] - offset[position[stage_rows]],
                  end[stage_rows] - offset[position[stage_rows]])]
    if rules.event_rules:
        from_events_intervals: list = []
        from_events = event_stage_ms(spans, position, rules, mapped, n_ok, servers, from_events_intervals)
        if from_events_intervals:
            intervals.append(tuple(np.array(column, dtype=np.int64) for column in zip(*from_events_intervals)))
        stage_ms = np.where(np.isnan(from_events), stage_ms, np.nan_to_num(stage_ms) + np.nan_to_num(from_events))
        del from_events
    if rules.attribute_rules:  # stages read from span attributes fill what no span or event rule gave
        from_attributes, read = attribute_stage_ms(spans, position, rules, mapped, n_ok, names)
        stage_ms = np.where(np.isnan(stage_ms), from_attributes, stage_ms)
        stage_of[read & (stage_of == UNMAPPED)] = IGNORED  # a span read for its attributes is no stage itself
        del from_attributes
    tokens = server_token_counts(spans, position, rules.tokens, n_ok, names) if rules.tokens is not None else None

    by_name = span_stages(spans, position, stage_of, joined & ~servers.excluded, n_ok, servers, names)
    if by_name is not None:  # unmapped children of the server span: stages under their own names
        stage_ms, by_name = _add_span_stages(stage_ms, mapped, by_name)
        stages = mapped + by_name.names + DERIVED_STAGES
    has_server = ~np.isnan(server_ms)
    rows = np.flatnonzero(has_server)
    if len(rows) < n_ok:  # keep only requests with a server span (usually all: no copy)
        stage_ms, server_ms = stage_ms[rows], server_ms[rows]
        tokens = tokens.take(rows) if tokens is not None else None
    unaccounted = np.clip(server_ms - np.nansum(stage_ms, axis=1), 0.0, None)
    server_start = np.zeros(n_ok, np.int64)
    server_end = np.zeros(n_ok, np.int64)
    server_start[servers.position], server_end[servers.position] = servers.start_ns, servers.end_ns
    overlap = interval_overlap(*(np.concatenate(parts) for parts in zip(*intervals)), server_start, server_end)
    consistency = stage_consistency(stage_ms, server_ms, stages[:-len(DERIVED_STAGES)], rules,
                                    by_name.names if by_name is not None else (),
                                    IntervalOverlap(overlap.ms[rows], overlap.pairs))
    outside_server = req.service_ms[ok_index[rows]] - server_ms
    matrix = np.column_stack([stage_ms, server_ms, unaccounted, outside_server])
    unmapped_mask = joined & ~servers.excluded & (stage_of == UNMAPPED)
    return StageMatrix(ok_index[rows], stages, matrix, int(req.is_ok.sum()),
                       unmapped_names(pa.table({"name": spans.column("name").filter(pa.array(unmapped_mask))})),
                       by_name.names if by_name is not None else (), tokens, consistency)


def _matches(rules: StageRules) -> list[SpanMatch]:
    """Every span match the rules apply to the spans table."""
    return ([rule.match for rule in rules.span_rules] + [rule.match for rule in rules.attribute_rules]
            + ([rules.tokens.match] if rules.tokens is not None else []))


def _add_span_stages(stage_ms: np.ndarray, mapped: tuple[str, ...], by_name: SpanStages) -> tuple[np.ndarray, SpanStages]:
    """The rules' stage columns with the span-name stages added: a span-name stage named like a
    rule's stage is summed into that column, the others become new columns (returned)."""
    new = [j for j, name in enumerate(by_name.names) if name not in mapped]
    for j, name in enumerate(by_name.names):
        if name in mapped:
            i, extra = mapped.index(name), by_name.ms[:, j]
            stage_ms[:, i] = np.where(np.isnan(stage_ms[:, i]), extra,
                                      np.nan_to_num(stage_ms[:, i]) + np.nan_to_num(extra))
    kept = SpanStages(tuple(by_name.names[j] for j in new), by_name.ms[:, new])
    return np.column_stack([stage_ms, kept.ms]), kept


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


def unmapped_names(spans: pa.Table) -> list[NameCount]:
    """The most frequent span names no stage rule maps, with their counts (most first)."""
    if len(spans) == 0:
        return []
    counts = pc.value_counts(spans.column("name")).to_pylist()
    counts.sort(key=lambda item: (-item["counts"], str(item["values"])))
    return [NameCount(item["values"], item["counts"]) for item in counts[:TOP_UNMAPPED]]


def stage_stats(values_ms: np.ndarray) -> StageStats:
    """P50 and P99 (nearest rank), mean (ms) and count of one stage column (ms; NaN ignored)."""
    values = values_ms[~np.isnan(values_ms)]
    n = len(values)
    if n == 0:
        return StageStats(None, None, None, 0)
    p50, p99 = nearest_rank(n, 0.5), nearest_rank(n, 0.99)
    ordered = order_statistics(values, (p50, p99))
    return StageStats(float(ordered[p50 - 1]), float(ordered[p99 - 1]), float(values.mean()), int(n))


def traced_requests(req: RequestArrays, join: SpanJoin, sample_rate: float) -> int:
    """How many successful requests were sent for tracing: those with a trace id that the
    head-sampling rule at ``sample_rate`` puts in the sample (their traceparent's sampled flag
    was set, :func:`tailscope.loadgen.tracecontext.new_traceparent`). At rate 1 every
    successful request (one without a trace id is then a gap in the tracing)."""
    if sample_rate >= 1.0:
        return int(np.count_nonzero(req.is_ok))
    return int(sampled_mask(take_rows(req.trace_ids, join.ok_index), sample_rate).sum())


def missing_spans(req: RequestArrays, matrix: StageMatrix, join: SpanJoin, sample_rate: float,
                  wait: dict | None = None) -> MissingSpans:
    """The successful requests sent for tracing that have no server span, in two kinds:

    - ``end_of_run``: they ended after the last request that did join (``last_joined_end_ns``):
      the spans stopped arriving — the target's last export batches never came (the wait for
      late spans ended first, or the target was stopped before it flushed);
    - ``never``: a request that ended later did join, so the exporter had sent past them:
      the target recorded no span for them (its own sampling, a route that does not continue
      the ``traceparent``, spans lost on the way).

    Without any joined request every missing one is ``never``. ``wait``: the conductor's wait for
    late spans as the manifest records it (``late_spans``; None: it did not wait). O(successful
    requests)."""
    candidates = join.ok_index
    if sample_rate < 1.0 and len(candidates):
        candidates = candidates[sampled_mask(take_rows(req.trace_ids, candidates), sample_rate)]
    joined = np.zeros(req.n, dtype=bool)
    joined[matrix.request_index] = True
    unjoined = candidates[~joined[candidates]]
    last = int(req.end_ns[matrix.request_index].max()) if len(matrix.request_index) else None
    late = int(np.count_nonzero(req.end_ns[unjoined] > last)) if last is not None else 0
    return MissingSpans(late, int(len(unjoined) - late), last,
                        decode(LateSpanWait, wait, "manifest.late_spans") if wait is not None else None)


def summarize_stages(matrix: StageMatrix, traced: int | None = None, *, missing: MissingSpans | None = None,
                     rules: StageRulesInfo | None = None, clock: ClockAlignment | None = None,
                     servers: ServerMetrics | None = None, split: SlowSplit | None = None) -> Stages:
    """The ``stages`` section: joined fraction, joined count, the share sent for tracing
    (``traced``: :func:`traced_requests`; None: every successful request), per-stage statistics,
    the matrix's unmapped names, span stages, server tokens and consistency check, and the parts
    other steps tell: the missing spans, the rules, the clock alignment, the server metric map and
    the slow/normal split."""
    joined = len(matrix.request_index)
    ok = matrix.ok_requests
    return Stages(
        joined_fraction=joined / ok if ok else 0.0,
        traced_fraction=(ok if traced is None else traced) / ok if ok else 0.0,
        joined_requests=joined,
        by_stage={stage: stage_stats(matrix.ms[:, j]) for j, stage in enumerate(matrix.stages)},
        unmapped_span_names=matrix.unmapped,
        span_stages=list(matrix.span_stages),
        server_tokens=matrix.server_tokens.summary() if matrix.server_tokens is not None else None,
        consistency=matrix.consistency,
        missing_spans=missing,
        rules=rules,
        clock_alignment=clock,
        server_metrics=servers,
        slow_split=split,
    )
