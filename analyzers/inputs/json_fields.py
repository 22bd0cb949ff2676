"""Reading top-level numbers out of a column of JSON object texts, column-wise.

:func:`json_number_field` gives, for every row, the value of a top-level key
when it is a JSON number (``true``/``false``, strings, ``null``, objects and
arrays are not numbers), NaN otherwise; exactly what ``json.loads`` followed
by an ``isinstance(value, (int, float))`` check would give, without parsing
every row in Python.

How: a column with few distinct texts is read by parsing each distinct text
once with ``json.loads``. Otherwise, a row whose text is a *flat* object (string keys and scalar values, no
escapes, no control characters, JSON whitespace only) can be read with
regexes without ambiguity: the key's quoted name cannot appear inside a value.
Such rows (the kit's span attributes are all of this kind) are read by
Arrow's RE2 kernels; every other non-empty row (nested values, escapes,
duplicate keys, ``NaN``/``Infinity``, invalid JSON) is parsed with
``json.loads``. Null and empty texts read as an empty object.

Cost: a hash pass over the column; then either one ``json.loads`` per
distinct text, or regex passes over the column in C++ plus one ``json.loads``
per row that is not flat.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WS = r"[ \t\n\r]*"
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_STRING = r'"[^"\\\x00-\x1f]*"'
_SCALAR = rf"(?:{_NUMBER}|{_STRING}|true|false|null)"
_MEMBER = rf"{_STRING}{_WS}:{_WS}{_SCALAR}{_WS}"
#: Most distinct texts parsed one by one instead of read with regexes.
MAX_DISTINCT_PARSED = 200_000
#: A flat JSON object: keys and scalar values without escapes.
FLAT_OBJECT = rf"^{_WS}\{{{_WS}(?:{_MEMBER}(?:,{_WS}{_MEMBER})*)?\}}{_WS}$"


def _key_pattern(key: str) -> str:
    return '"' + re.escape(key) + '"' + _WS + ":"


def json_number_fields(texts: pa.Array | pa.ChunkedArray, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``{key: float64 per row}``: each top-level ``key`` of the JSON object texts when it is a
    number, else NaN. Booleans are not numbers; a row that is not valid JSON or not an
    object gives NaN.

    A column with few distinct texts (at most MAX_DISTINCT_PARSED, and at most an eighth of
    the rows: the usual case, e.g. a queue depth and a capacity) is read by parsing each
    distinct text once; any other column by the regex reading of flat objects."""
    if len(texts) == 0:
        return {key: np.zeros(0) for key in keys}
    distinct = pc.unique(texts)
    if len(distinct) <= min(MAX_DISTINCT_PARSED, max(64, len(texts) // 8)):
        index = pc.index_in(texts, value_set=distinct).to_numpy(zero_copy_only=False)
        everything = np.ones(len(distinct), dtype=bool)
        return {key: _parsed_numbers(distinct, everything, key)[index] for key in keys}
    filled = pc.fill_null(texts, "")
    flat = pc.match_substring_regex(filled, FLAT_OBJECT).to_numpy(zero_copy_only=False)
    empty = pc.equal(pc.utf8_length(filled), 0).to_numpy(zero_copy_only=False)
    return {key: _number_field(texts, filled, flat, empty, key) for key in keys}


def json_number_field(texts: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """float64 per row: the top-level ``key`` of the JSON object text when it is a number, else NaN."""
    return json_number_fields(texts, (key,))[key]


def _number_field(texts, filled, flat: np.ndarray, empty: np.ndarray, key: str) -> np.ndarray:
    if not key or re.search(r'["\\\x00-\x1f]', key):
        return _parsed_numbers(texts, ~empty, key)
    # the quoted key anywhere (as a key or, harmlessly, as a string value): one occurrence that
    # is followed by ':' is the key; more than one is left to json.loads (duplicate keys)
    occurrences = pc.count_substring(filled, json.dumps(key, ensure_ascii=False)).to_numpy(zero_copy_only=False)
    found = pc.struct_field(pc.extract_regex(filled, _key_pattern(key) + _WS + rf"(?P<v>{_NUMBER}){_WS}[,}}]"), [0])
    values = pc.cast(found, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
    readable = flat & (occurrences <= 1)
    values[~readable | (occurrences == 0)] = np.nan
    others = ~readable & ~empty
    if others.any():
        values[others] = _parsed_numbers(texts, others, key)[others]
    return values


def _parsed_numbers(texts: pa.Array | pa.ChunkedArray, rows: np.ndarray, key: str) -> np.ndarray:
    """json.loads of the selected rows (NaN elsewhere and where the key holds no number)."""
    out = np.full(len(texts), np.nan)
    index = np.flatnonzero(rows)
    for row, text in zip(index, texts.take(pa.array(index)).to_pylist()):
        try:
            parsed = json.loads(text) if text else {}
        except ValueError:
            continue
        value = parsed.get(key) if isinstance(parsed, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out[row] = float(value)
            except OverflowError:
                out[row] = np.inf if value > 0 else -np.inf
    return out
