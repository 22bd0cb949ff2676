"""Stages without configuration: a server span's children, under their own names.

When no stage rule maps a span, the span tree says what it is: each child of a
request's server span (a *top-level* span of the request) becomes a stage named
after itself, and every deeper descendant rolls up into its top-level ancestor
(its time is inside that ancestor's). Rules and presets take precedence: a
top-level child a rule maps (or ``ignore``\\ s) is that rule's, and the time of
rule-mapped spans *inside* an unmapped top-level child is taken out of the
child's stage, so no time is counted twice. What no stage covers stays
``unaccounted``.

A span's parent is found by its ``parent_span_id`` among the same request's
spans (span ids read as exact 64-bit values, :func:`~..inputs.trace_join.hex64_values`;
ids of another shape take a string hash join). A span whose parent is the
request's server span is top-level; a span whose chain of parents ends anywhere
else (a second root, a parent never stored) is no stage of its own and stays
``unaccounted``. Ancestors are followed by pointer jumping,
one vectorised pass per tree level (at most :data:`MAX_DEPTH`). At most
:data:`MAX_SPAN_STAGES` names become stages (the most frequent); the others stay
unaccounted and listed among ``unmapped_span_names``. Derived stage names
(``server``, ``unaccounted``, ``outside_server``) are never reused: a span so
named becomes ``span:<name>``; a span named like a rule's stage is added to that
stage by the caller (:func:`~.decomposition.stage_matrix`).

Cost: nothing when every joined span is mapped (one mask test). Otherwise
O(S) array work over the joined non-server spans S, one hash join of their
parent ids and one ``np.bincount``; no per-span Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.records import NS_PER_MS, int_column, take_rows
from tailscope.analyzers.inputs.trace_join import hex64_values
from tailscope.analyzers.stages.rules import RESERVED_STAGES
from tailscope.analyzers.stages.span_match import UNMAPPED, NameCodes, ServerSpans, name_codes

#: Most span names that become stages of their own.
MAX_SPAN_STAGES = 12
#: Deepest ancestor chain followed (a cycle of parent ids stops here).
MAX_DEPTH = 64


@dataclass(frozen=True)
class SpanStages:
    """Stages named after the server spans' unmapped children.

    ``names`` in pipeline order (mean start after the server span's start);
    ``ms[p, j]``: the summed duration in ms of request position ``p``'s top-level
    spans named ``names[j]``, less the rule-mapped time inside them (NaN: none)."""

    names: tuple[str, ...]
    ms: np.ndarray


def _parent_rows(spans: pa.Table, rows: np.ndarray, position: np.ndarray,
                 server_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, under_server) for each of ``rows``: the index (into ``rows``) of its parent span,
    -1 when the parent is none of ``rows`` or belongs to another request; and whether its parent
    is its request's server span (``server_rows[p]``: position p's server span row).

    Only spans whose parent is not the server span (deeper descendants) are looked up, and only
    among the spans of their own requests: one integer hash join over those."""
    ids, ids_ok = hex64_values(take_rows(spans.column("span_id"), rows))
    parent_column = take_rows(spans.column("parent_span_id"), rows)
    pos = position[rows]
    if ids_ok.all():  # the usual shape: exact 64-bit values, integer joins
        parents, parent_ok = hex64_values(parent_column)
        server_ids, server_ok = hex64_values(take_rows(spans.column("span_id"), server_rows))
        under_server = parent_ok & server_ok[pos] & (parents == server_ids[pos])
        keys, values = pa.array(parents), pa.array(ids)
    else:  # ids of another shape (an importer's): string comparisons and a string join
        parent_ok = pc.is_valid(parent_column).to_numpy(zero_copy_only=False)
        server_ids = take_rows(spans.column("span_id"), server_rows[pos])
        under_server = pc.fill_null(pc.equal(parent_column, server_ids), False).to_numpy(zero_copy_only=False)
        keys, values = parent_column, take_rows(spans.column("span_id"), rows)
    found = np.full(len(rows), -1, np.int64)
    deep = np.flatnonzero(parent_ok & ~under_server)
    if len(deep):
        in_deep_request = np.zeros(len(server_rows), dtype=bool)
        in_deep_request[pos[deep]] = True
        candidates = np.flatnonzero(in_deep_request[pos])  # the spans of requests with deep spans
        hit = pc.index_in(take_rows(keys, deep), value_set=take_rows(values, candidates))
        hit = pc.fill_null(hit, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        matched = hit >= 0
        found[deep[matched]] = candidates[hit[matched]]
    has = found >= 0
    has[has] = pos[found[has]] == pos[has]
    found[~has] = -1
    return found, under_server


def _top_level(parent: np.ndarray) -> np.ndarray:
    """For each node, its highest ancestor (itself when it has no parent), by pointer jumping."""
    top = np.arange(len(parent))
    moving = np.flatnonzero(parent >= 0)
    top[moving] = parent[moving]
    for _ in range(MAX_DEPTH):
        up = parent[top[moving]]
        step = up >= 0
        if not step.any():
            break
        moving = moving[step]
        top[moving] = up[step]
    return top


def span_stages(spans: pa.Table, position: np.ndarray, stage_of: np.ndarray, eligible: np.ndarray,
                n_positions: int, servers: ServerSpans, names: NameCodes | None = None) -> SpanStages | None:
    """The :class:`SpanStages` of the joined spans, or None when every eligible span is mapped.

    ``position``: each span's joined-request position (-1: not joined); ``stage_of``: the
    rules' verdict per span (:func:`~.span_match.assign_span_stages`); ``eligible``: joined
    spans that are not server spans; ``servers``: each position's server span; ``names``: the
    :func:`~.span_match.name_codes` of ``spans`` when the caller has them."""
    if not np.any(eligible & (stage_of == UNMAPPED)):
        return None
    server_rows = np.zeros(n_positions, np.int64)
    server_rows[servers.position] = servers.row
    has_server = np.zeros(n_positions, dtype=bool)
    has_server[servers.position] = True
    server_start = np.zeros(n_positions, np.int64)
    server_start[servers.position] = servers.start_ns
    rows = np.flatnonzero(eligible & (position >= 0))
    rows = rows[has_server[position[rows]]]
    parent, under_server = _parent_rows(spans, rows, position, server_rows)
    top = _top_level(parent)
    is_top = (top == np.arange(len(rows))) & under_server  # a child of its request's server span
    own_stage = stage_of[rows]
    auto_top = is_top & (own_stage == UNMAPPED)
    if not auto_top.any():
        return None
    if names is None:
        names = name_codes(pa.table({"name": take_rows(spans.column("name"), rows[auto_top])}))
        codes = names.codes
    else:
        codes = names.codes[rows[auto_top]]
    counts = np.bincount(codes, minlength=len(names.names))
    chosen = np.argsort(-counts, kind="stable")[:MAX_SPAN_STAGES]
    chosen = chosen[counts[chosen] > 0]
    column_of_code = np.full(len(names.names), -1, np.int64)
    column_of_code[chosen] = np.arange(len(chosen))
    column = np.full(len(rows), -1, np.int64)
    column[np.flatnonzero(auto_top)] = column_of_code[codes]

    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    duration_ms = (end[rows] - start[rows]) / NS_PER_MS
    pos = position[rows]
    k = len(chosen)
    own = column >= 0
    key = pos[own] * k + column[own]
    total = np.bincount(key, weights=duration_ms[own], minlength=n_positions * k)
    present = np.zeros(n_positions * k, dtype=bool)
    present[key] = True
    inside = ~is_top & (own_stage >= 0) & (column[top] >= 0)  # rule-mapped spans inside an auto stage
    key_inside = pos[inside] * k + column[top[inside]]
    total -= np.bincount(key_inside, weights=duration_ms[inside], minlength=n_positions * k)
    ms = np.clip(total, 0.0, None).reshape(n_positions, k)
    ms[~present.reshape(n_positions, k)] = np.nan

    offset = (start[rows[own]] - server_start[pos[own]]) / NS_PER_MS
    order = _pipeline_order(column[own], offset, k)
    labels = [_stage_label(names.names[code]) for code in chosen]
    return SpanStages(tuple(labels[j] for j in order), ms[:, order])


def _pipeline_order(column: np.ndarray, offset_ms: np.ndarray, k: int) -> np.ndarray:
    """Stage columns ordered by the mean start of their spans after the server span's."""
    count = np.bincount(column, minlength=k)
    mean = np.bincount(column, weights=offset_ms, minlength=k) / np.maximum(count, 1)
    return np.argsort(mean, kind="stable")


def _stage_label(name: str) -> str:
    """A span name as a stage name: derived stage names are prefixed ``span:``."""
    return f"span:{name}" if name in RESERVED_STAGES else name
