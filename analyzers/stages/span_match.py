"""Applying stage rules to a spans table, column-wise.

* :func:`match_spans` — which rows a :class:`SpanMatch` selects. Name regexes
  run once per *distinct* span name (a run has a handful) and are broadcast
  with a hash lookup; attribute regexes parse the JSON attributes only of rows
  whose text contains the key, once per distinct attribute text.
* :func:`assign_span_stages` — first-match-wins over the span rules.
* :func:`server_span_rows` — the server span of each joined trace.
* :func:`event_stage_ms` — stages between two span events of a trace.

Cost: O(spans) array work plus O(distinct names × rules) regex calls; event
rules parse the JSON of spans that carry events (O(such spans)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.records import NS_PER_MS, int_column, take_rows
from tailscope.analyzers.stages.rules import STAGE_IGNORE, SpanMatch, StageRules

#: OTLP SpanKind of a server span.
SPAN_KIND_SERVER = 2
#: assign_span_stages value of a span no rule matches / a span an ``ignore`` rule matches.
UNMAPPED = -1
IGNORED = -2


def _strings(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """The column with nulls as "" (chunks kept: no copy of the whole column)."""
    return pc.fill_null(column, "")


@dataclass(frozen=True)
class NameCodes:
    """The span names of a table (null as ""), dictionary-encoded once: row i is named
    ``names[codes[i]]``. Shared by every rule that matches names."""

    names: list[str]
    codes: np.ndarray


def name_codes(spans: pa.Table) -> NameCodes:
    """:class:`NameCodes` of ``spans``: one hash pass over the names. O(spans)."""
    names = _strings(spans.column("name"))
    chunks = [c for c in pc.dictionary_encode(names).chunks if len(c)] if len(names) else []
    if not chunks:
        return NameCodes([], np.zeros(0, np.int64))
    if all(c.dictionary.equals(chunks[0].dictionary) for c in chunks[1:]):
        return NameCodes(chunks[0].dictionary.to_pylist(),
                         np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks]))
    distinct = pc.unique(names)
    return NameCodes(distinct.to_pylist(), pc.index_in(names, value_set=distinct).to_numpy(zero_copy_only=False))


def _name_mask(names: NameCodes, pattern) -> np.ndarray:
    """Rows whose name matches ``pattern`` (re.search), evaluated once per distinct name."""
    hits = np.array([pattern.search(n) is not None for n in names.names], dtype=bool)
    return hits[names.codes] if len(hits) else np.zeros(len(names.codes), dtype=bool)


def _attribute_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _attributes_mask(attributes: pa.Array, conditions, candidates: np.ndarray) -> np.ndarray:
    """Rows among ``candidates`` whose JSON attributes satisfy every (key, regex) condition."""
    mask = candidates.copy()
    for key, _ in conditions:  # cheap prefilter: the key must appear in the text
        needle = json.dumps(key) + ":"
        mask &= pc.fill_null(pc.match_substring(attributes, needle), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return mask
    texts = take_rows(attributes, rows).to_pylist()
    verdict: dict[str, bool] = {}
    for row, text in zip(rows, texts):
        if text not in verdict:
            try:
                parsed = json.loads(text)
            except (TypeError, ValueError):
                parsed = None
            verdict[text] = isinstance(parsed, dict) and all(
                key in parsed and pattern.search(_attribute_text(parsed[key])) is not None
                for key, pattern in conditions)
        mask[row] = verdict[text]
    return mask


def match_spans(spans: pa.Table, match: SpanMatch, candidates: np.ndarray | None = None,
                names: NameCodes | None = None) -> np.ndarray:
    """Boolean mask of the rows of ``spans`` that ``match`` selects (within ``candidates``);
    ``names``: the :func:`name_codes` of ``spans`` when the caller has them."""
    mask = np.ones(len(spans), dtype=bool) if candidates is None else candidates.copy()
    if match.name is not None and mask.any():
        mask &= _name_mask(names if names is not None else name_codes(spans), match.name)
    if match.attributes and mask.any():
        mask = _attributes_mask(_strings(spans.column("attributes")), match.attributes, mask)
    return mask


def assign_span_stages(spans: pa.Table, rules: StageRules, stages: tuple[str, ...],
                       eligible: np.ndarray, names: NameCodes | None = None) -> np.ndarray:
    """Per row: index into ``stages`` of the first span rule that matches, ``IGNORED``
    for an ``ignore`` rule, ``UNMAPPED`` when none does (rows outside ``eligible`` too).
    ``names``: the :func:`name_codes` of ``spans`` when the caller has them."""
    assigned = np.full(len(spans), UNMAPPED, dtype=np.int64)
    open_rows = eligible.copy()
    if names is None and any(rule.match.name is not None for rule in rules.span_rules):
        names = name_codes(spans)
    for rule in rules.span_rules:
        if not open_rows.any():
            break
        hit = match_spans(spans, rule.match, open_rows, names)
        assigned[hit] = IGNORED if rule.stage == STAGE_IGNORE else stages.index(rule.stage)
        open_rows &= ~hit
    return assigned


@dataclass(frozen=True)
class ServerSpans:
    """The server span chosen for each joined trace.

    ``position[i]`` is the joined-request position of choice i, ``row[i]`` its
    row in the spans table, ``start_ns``/``end_ns`` its times. ``excluded``
    marks the rows that are server spans and therefore not stage spans.
    """

    position: np.ndarray
    row: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    excluded: np.ndarray


def _longest_per_position(rows: np.ndarray, position: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Of ``rows``, the one with the longest duration per distinct position (ties: the last
    row), in position order. O(n) when no position repeats (one server span per trace, the
    usual case), else one lexsort."""
    if len(rows) == 0:
        return rows
    positions = position[rows]
    row_at = np.full(int(positions.max()) + 1, -1, dtype=np.int64)
    row_at[positions] = rows
    if np.count_nonzero(row_at >= 0) == len(rows):  # every position once: nothing to choose
        return row_at[row_at >= 0]
    order = rows[np.lexsort((duration[rows], position[rows]))]
    last = np.r_[position[order][1:] != position[order][:-1], True]
    return order[last]


def _parent_missing(spans: pa.Table, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: its parent span id is not the span id of any stored span.

    Only the parents of ``rows`` are looked up (a pass over the span ids against a set
    of those parents), so the usual case, no such rows, costs nothing."""
    if len(rows) == 0:
        return np.zeros(0, dtype=bool)
    parents = take_rows(spans.column("parent_span_id"), rows)
    stored = spans.column("span_id")
    found = stored.filter(pc.fill_null(pc.is_in(stored, value_set=pc.unique(parents)), False))
    has_parent = pc.fill_null(pc.is_in(parents, value_set=pc.unique(found)), False)
    return ~has_parent.to_numpy(zero_copy_only=False)


def server_span_rows(spans: pa.Table, position: np.ndarray, rules: StageRules) -> ServerSpans:
    """Per joined trace, its server span: the longest span the ``server`` rule selects
    (default: SERVER kind); for a trace with none, its longest top-level span (no
    parent, or a parent not among the stored spans — e.g. the generator's)."""
    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    duration = end - start
    joined = position >= 0
    if rules.server is not None:
        preferred = match_spans(spans, rules.server, joined)
    else:
        kind = pc.fill_null(spans.column("kind"), 0).to_numpy(zero_copy_only=False)
        preferred = joined & (kind == SPAN_KIND_SERVER)
    chosen = _longest_per_position(np.flatnonzero(preferred), position, duration)
    covered = np.zeros(int(position.max()) + 1 if len(position) else 0, dtype=bool)
    covered[position[chosen]] = True
    open_rows = np.flatnonzero(joined)
    open_rows = open_rows[~covered[position[open_rows]]]
    fallback_rows = open_rows[_parent_missing(spans, open_rows)]
    fallback = _longest_per_position(fallback_rows, position, duration)
    rows = np.concatenate([chosen, fallback]).astype(np.int64)
    excluded = preferred.copy()
    excluded[fallback] = True
    return ServerSpans(position=position[rows], row=rows, start_ns=start[rows], end_ns=end[rows],
                       excluded=excluded)


def _first_event_times(events_json: list, positions: np.ndarray) -> dict[int, dict[str, int]]:
    """{position: {event name: earliest t_ns}} over the spans' events JSON."""
    out: dict[int, dict[str, int]] = {}
    for text, pos in zip(events_json, positions):
        try:
            events = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(events, list):
            continue
        times = out.setdefault(int(pos), {})
        for event in events:
            if not isinstance(event, dict):
                continue
            name, t_ns = event.get("name"), event.get("t_ns")
            if isinstance(name, str) and isinstance(t_ns, int) and (name not in times or t_ns < times[name]):
                times[name] = t_ns
    return out


def event_stage_ms(spans: pa.Table, position: np.ndarray, rules: StageRules, stages: tuple[str, ...],
                   n_positions: int, servers: ServerSpans | None = None,
                   intervals: list | None = None) -> np.ndarray:
    """(n_positions × len(stages)) ms of the event rules' stages; NaN where a trace lacks
    either event or the end precedes the start. Columns of span-only stages stay NaN.

    ``servers``: the server span of each position; an event interval is then clipped to it
    (a stage is part of the server's time: Triton's ``HTTP_RECV_END`` precedes its
    ``InferRequest`` span, so ``HTTP_RECV_END → REQUEST_START`` counts from the span's start).
    The events must be on the clock of ``servers``' times (the join's, before any clock shift).
    ``intervals``: a list that receives ``(position, column, start_ns, end_ns)`` of every interval
    counted (for the overlap check, :mod:`.consistency`)."""
    out = np.full((n_positions, len(stages)), np.nan)
    if not rules.event_rules or "events" not in spans.column_names or len(spans) == 0:
        return out
    with_events = (position >= 0) & pc.is_valid(spans.column("events")).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(with_events)
    if len(rows) == 0:
        return out
    texts = take_rows(spans.column("events"), rows).to_pylist()
    per_trace = _first_event_times(texts, position[rows])
    bounds: dict[int, tuple[int, int]] = {}
    if servers is not None:
        bounds = dict(zip(servers.position.tolist(), zip(servers.start_ns.tolist(), servers.end_ns.tolist())))
    for rule in rules.event_rules:
        column = stages.index(rule.stage)
        for pos, times in per_trace.items():
            if rule.start in times and rule.end in times and times[rule.end] >= times[rule.start]:
                start, end = times[rule.start], times[rule.end]
                if pos in bounds:
                    low, high = bounds[pos]
                    start, end = min(max(start, low), high), max(min(end, high), low)
                value = (end - start) / NS_PER_MS
                if intervals is not None:
                    intervals.append((pos, column, start, end))
                current = out[pos, column]
                out[pos, column] = value if np.isnan(current) else current + value
    return out
