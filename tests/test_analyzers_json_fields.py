"""json_number_fields reads exactly what json.loads would, on both of its paths."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from tailscope.analyzers.inputs import json_fields
from tailscope.analyzers.inputs.json_fields import json_number_field, json_number_fields

CASES = [
    '{"queue.depth": 3, "queue.capacity": 256}', "{}", "", None, '{"queue.depth": true}',
    '{"queue.depth": "3"}', '{"queue.depth": 1e3}', '{"a": {"queue.depth": 5}}',
    '{"queue.depth": 2, "queue.depth": 7}', '{"x": "\\"queue.depth\\": 9"}', '{"queue.depth": NaN}',
    "not json", "[1, 2]", '{"queue.depth": -0.5 }', '{"queue.depth":null}', '{"queue.depth": 01}',
    ' {"queue.depth":4}\n', '{"queue.depthx": 4}', '{"b": [1], "queue.depth": 6}',
    '{"queue.depth": 12345678901234567890123}', '{"queue.depth": 1E+2,"k":"v"}', '\x0c{"queue.depth": 3}',
    '{"k": "queue.depth", "queue.depth": 8}', '{"k": "queue.depth"}', '{"queue.capacity": 16.5}',
    '{"\\u0071ueue.depth": 11}', '{"queue.depth": 3,}', '{"queue.depth": 3} x',
]


def reference(text, key):
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        return math.nan
    value = parsed.get(key) if isinstance(parsed, dict) else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else math.nan


def assert_same(got, texts, key):
    want = np.array([reference(t, key) for t in texts])
    assert np.array_equal(got, want, equal_nan=True), [(t, g, w) for t, g, w in zip(texts, got, want)
                                                       if not (g == w or (np.isnan(g) and np.isnan(w)))]


@pytest.mark.parametrize("path", ["distinct", "regex"])
def test_numbers_match_json_loads_on_both_paths(monkeypatch, path):
    if path == "regex":
        monkeypatch.setattr(json_fields, "MAX_DISTINCT_PARSED", 0)
    texts = pa.chunked_array([pa.array(CASES[:7], pa.string()), pa.array(CASES[7:], pa.string())])
    got = json_number_fields(texts, ("queue.depth", "queue.capacity", "k"))
    for key in ("queue.depth", "queue.capacity", "k"):
        assert_same(got[key], CASES, key)


def test_high_cardinality_column_takes_the_regex_path_and_stays_exact():
    texts = [f'{{"queue.depth": {i}, "batch.id": "b{i}"}}' for i in range(5000)] + ['{"queue.depth": {"n": 1}}']
    got = json_number_field(pa.array(texts), "queue.depth")
    assert_same(got, texts, "queue.depth")
    assert got[4999] == 4999.0 and np.isnan(got[-1])


def test_empty_column():
    assert json_number_fields(pa.array([], pa.string()), ("a",))["a"].shape == (0,)
