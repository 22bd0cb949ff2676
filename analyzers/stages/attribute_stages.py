"""Stages read from span attributes, column-wise (the attribute rules of :mod:`.rule_model`).

:func:`duration_ns` reads one attribute of many spans as a duration:

* a JSON number is taken in the rule's unit (s, ms, us, ns);
* a JSON string ``"<number><unit>"`` is taken in its own unit, where the unit is one of
  ``s``, ``ms``, ``us``, ``µs``/``μs`` (as the JSON text holds them, ``\\u00b5``/``\\u03bc``
  escapes included) or ``ns`` — the form Rust's ``Duration`` debug output has (TGI's
  handler fields: ``"1.234567ms"``, ``"820.5µs"``);
* anything else (absent, null, a boolean, another text), and a negative or non-finite
  value, is no duration (NaN).

:func:`attribute_stage_ms` lays each matched span's stages end to end from the span's start:
with durations ``d_1 … d_k`` (an absent one counts 0 and gives no value; a stage with ``minus``
attributes is its attribute less them, clipped at 0), stage ``j`` is
``min(Σ_{i≤j} d_i, span) − min(Σ_{i<j} d_i, span)``, so the stages of one span add up to at
most its duration. Each span is read by the first attribute rule that matches it; several
matched spans of one request add up per stage.

Cost: per rule, one match over the joined spans (:func:`~.span_match.match_spans`: regexes once
per distinct name), one read of all its attributes from the matched rows (:func:`attribute_numbers`:
Arrow's JSON reader; where it refuses a chunk, the column-wise regex reading of
:mod:`~..inputs.json_fields`), for string values one RE2 ``extract_regex`` pass, then
O(matched × stages) numpy and one ``np.bincount`` per stage. No per-span Python. 200,000
``llm_request`` spans (shared 2-core VM, best of three): 0.33 s for the stage matrix with the
``vllm`` preset, token counts included, against 0.07 s with the ``reference`` preset (which
reads no attributes); the regex reading alone took 1.3 s.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tailscope.analyzers.inputs.json_fields import json_number_fields
from tailscope.analyzers.inputs.records import NS_PER_MS, int_column, take_rows
from tailscope.analyzers.stages.rule_model import DURATION_UNITS, StageRules
from tailscope.analyzers.stages.span_match import NameCodes, match_spans

_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
#: Unit suffixes of a duration string, as they appear in JSON text, → ns per unit.
_SUFFIX_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "\\u00b5s": 1_000, "\\u03bcs": 1_000,
              "ms": 1_000_000, "s": 1_000_000_000}
_SUFFIX = "|".join(re.escape(s) for s in sorted(_SUFFIX_NS, key=len, reverse=True))
_WS = r"[ \t\n\r]*"


def attribute_numbers(texts: pa.Array | pa.ChunkedArray, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``{key: float64 per row}``, as :func:`~..inputs.json_fields.json_number_fields` gives it (a
    top-level JSON number, else NaN), read chunk by chunk with Arrow's JSON reader (the keys as
    float64 columns, the rest ignored): one multi-threaded C++ pass however many keys. A chunk
    the reader refuses (a key holding a string, a boolean or an object in some row, a row that is
    not an object, a key given twice) is read by ``json_number_fields`` instead."""
    keys = tuple(dict.fromkeys(keys))
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    parts = [_numbers_of_chunk(chunk, keys) for chunk in chunks if len(chunk)]
    if not parts:
        return {key: np.zeros(0) for key in keys}
    return {key: np.concatenate([part[key] for part in parts]) for key in keys}


def _numbers_of_chunk(chunk: pa.Array, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    filled = pc.fill_null(chunk, "")
    filled = pc.if_else(pc.equal(pc.utf8_length(filled), 0), "{}", filled)  # one object per line
    lines = pc.binary_join_element_wise(filled, "", "\n")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    body = lines.buffers()[2][int(offsets[0]):int(offsets[-1])]
    options = pj.ParseOptions(explicit_schema=pa.schema([(key, pa.float64()) for key in keys]),
                              unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(pa.BufferReader(body), parse_options=options)
    except pa.ArrowInvalid:
        table = None
    if table is None or table.num_rows != len(chunk):
        return json_number_fields(chunk, keys)
    return {key: pc.fill_null(table.column(key), np.nan).to_numpy().astype(np.float64) for key in keys}


def duration_ns(texts: pa.Array | pa.ChunkedArray, key: str, unit: str) -> np.ndarray:
    """float64 ns per row: the JSON attribute ``key`` as a duration (see the module docstring)."""
    return durations_ns(texts, ((key, unit),))[0]


def durations_ns(texts: pa.Array | pa.ChunkedArray, keys: tuple[tuple[str, str], ...]) -> np.ndarray:
    """(len(keys) × rows) float64 ns: each ``(attribute, unit)`` of ``keys`` read as :func:`duration_ns`
    does, the numbers of every key in one pass over the texts."""
    numbers = attribute_numbers(texts, tuple(key for key, _ in keys))
    out = np.empty((len(keys), len(texts)))
    for i, (key, unit) in enumerate(keys):
        values = numbers[key] * DURATION_UNITS[unit]
        missing = np.isnan(values)
        if missing.any():  # not a number: a string with its own unit, or nothing
            values[missing] = _duration_strings(take_rows(texts, np.flatnonzero(missing)), key)
        values[~np.isfinite(values) | (values < 0)] = np.nan
        out[i] = values
    return out


def _duration_strings(texts: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """float64 ns per row from a ``"key": "<number><unit>"`` member (NaN where there is none)."""
    out = np.full(len(texts), np.nan)
    if len(texts) == 0:
        return out
    quoted = '"' + re.escape(key) + '"'
    pattern = (rf'(?:^|[{{,]){_WS}{quoted}{_WS}:{_WS}"{_WS}(?P<v>{_NUMBER}){_WS}(?P<u>{_SUFFIX}){_WS}"')
    found = pc.extract_regex(pc.fill_null(texts, ""), pattern)
    number = pc.cast(pc.struct_field(found, [0]), pa.float64()).to_numpy(zero_copy_only=False)
    suffixes = pa.array(list(_SUFFIX_NS))
    code = pc.fill_null(pc.index_in(pc.struct_field(found, [1]), value_set=suffixes), -1).to_numpy(
        zero_copy_only=False)
    factor = np.array(list(_SUFFIX_NS.values()), dtype=np.float64)
    has = (code >= 0) & pc.is_valid(found).to_numpy(zero_copy_only=False)
    out[has] = number[has] * factor[code[has]]
    return out


def _stage_durations_ns(texts: pa.Array | pa.ChunkedArray, stages) -> np.ndarray:
    """(len(stages) × rows) ns: each :class:`~.rule_model.AttributeStage`'s attribute less its
    ``minus`` attributes, clipped at 0 (NaN where any of them is missing)."""
    keys = [(s.attribute, s.unit) for s in stages] + [(m, s.unit) for s in stages for m in s.minus]
    values = durations_ns(texts, tuple(keys))
    out = values[:len(stages)].copy()
    at = len(stages)
    for j, item in enumerate(stages):
        for _ in item.minus:
            out[j] -= values[at]
            at += 1
        if item.minus:
            out[j] = np.where(out[j] < 0, 0.0, out[j])
    return out


def attribute_stage_ms(spans: pa.Table, position: np.ndarray, rules: StageRules, stages: tuple[str, ...],
                       n_positions: int, names: NameCodes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ms, matched)``: the (n_positions × len(stages)) ms of the attribute rules' stages (NaN where
    no matched span of the request gave that stage; other stages' columns stay NaN), and the mask
    of span rows some attribute rule read. ``position``: each span's joined-request position (-1:
    not joined; those are never read); ``names``: the :func:`~.span_match.name_codes` of ``spans``
    when the caller has them."""
    out = np.full((n_positions, len(stages)), np.nan)
    matched = np.zeros(len(spans), dtype=bool)
    if not rules.attribute_rules or len(spans) == 0:
        return out, matched
    open_rows = position >= 0
    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    for rule in rules.attribute_rules:
        if not open_rows.any():
            break
        hit = match_spans(spans, rule.match, open_rows, names)
        open_rows &= ~hit
        matched |= hit
        rows = np.flatnonzero(hit)
        if len(rows) == 0:
            continue
        texts = take_rows(spans.column("attributes"), rows)
        durations = _stage_durations_ns(texts, rule.stages)
        span_ns = np.clip(end[rows] - start[rows], 0, None).astype(np.float64)
        reached = np.minimum(np.cumsum(np.nan_to_num(durations), axis=0), span_ns)  # laid end to end, clipped
        parts = np.diff(reached, axis=0, prepend=0.0)
        pos = position[rows]
        for j, item in enumerate(rule.stages):
            present = ~np.isnan(durations[j])
            if not present.any():
                continue
            column = stages.index(item.stage)
            total = np.bincount(pos[present], weights=parts[j][present] / NS_PER_MS, minlength=n_positions)
            has = np.bincount(pos[present], minlength=n_positions) > 0
            out[:, column] = np.where(has, np.nan_to_num(out[:, column]) + total, out[:, column])
    return out, matched
