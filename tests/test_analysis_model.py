"""The analysis's types (analysis_model/): the codec's guarantees, and every typed section checked
against analyzers/analysis.schema.json, so the shape has one statement that two files agree on."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Literal

import pytest

from tailscope.analysis_model.codec import AnalysisShapeError, decode, encode, written_when_set
from tailscope.analysis_model.schema_check import schema_mismatches
from tailscope.analysis_model.sections import TYPED

SCHEMA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analyzers",
                      "analysis.schema.json")


@dataclass(frozen=True)
class _Row:
    name: str
    share: float | None
    kind: Literal["a", "b"] = "a"


@dataclass(frozen=True)
class _Section:
    rows: tuple[_Row, ...]
    counts: dict[str, int]
    total: int
    added_later: list[str] = field(default_factory=list)


def test_a_section_reads_back_what_it_wrote():
    section = _Section((_Row("x", 0.5, "b"), _Row("y", None)), {"k": 2}, 3, ["z"])
    data = json.loads(json.dumps(encode(section)))
    assert data == {"rows": [{"name": "x", "share": 0.5, "kind": "b"}, {"name": "y", "share": None, "kind": "a"}],
                    "counts": {"k": 2}, "total": 3, "added_later": ["z"]}
    assert decode(_Section, data) == section


def test_an_older_analysis_without_a_later_field_reads_with_its_default():
    old = {"rows": [{"name": "x", "share": 1}], "counts": {}, "total": 0, "from_a_newer_version": True}
    section = decode(_Section, old)
    assert section.added_later == [] and section.rows[0] == _Row("x", 1.0, "a")


@pytest.mark.parametrize("data, where", [
    ({"rows": [], "counts": {}}, "s.total: missing"),
    ({"rows": [{"name": "x", "share": "1"}], "counts": {}, "total": 0}, "s.rows[0].share"),
    ({"rows": [{"name": "x", "share": 1, "kind": "c"}], "counts": {}, "total": 0}, "s.rows[0].kind: 'c' is not one of"),
    ({"rows": [], "counts": {"k": 1.5}, "total": 0}, "s.counts.k: expected int"),
    ({"rows": [], "counts": {}, "total": True}, "s.total: expected int, got a boolean"),
])
def test_a_wrong_shape_is_named_where_it_is(data, where):
    with pytest.raises(AnalysisShapeError, match=where.replace("[", r"\[").replace("]", r"\]")):
        decode(_Section, data, "s")


def _schema_node(schema: dict, place: str) -> dict:
    if place.startswith("$defs/"):
        return schema["$defs"][place.removeprefix("$defs/")]
    return schema["properties"][place]


@pytest.mark.parametrize("place", sorted(TYPED))
def test_each_typed_section_agrees_with_the_schema(place):
    schema = json.load(open(SCHEMA))
    assert schema_mismatches(TYPED[place], _schema_node(schema, place), schema["$defs"], place) == []


def test_the_schema_check_finds_each_kind_of_disagreement():
    node = {"type": "object", "required": ["rows", "counts", "total", "added_later"],
            "properties": {"rows": {"type": "array", "items": {"type": "object", "required": ["name", "share"],
                                                               "properties": {"name": {"type": "string"},
                                                                              "share": {"type": "number"},
                                                                              "kind": {"enum": ["a"]}}}},
                           "counts": {"type": "object", "additionalProperties": {"type": "string"}},
                           "extra": {"type": "integer"}}}
    found = "\n".join(schema_mismatches(_Section, node, {}, "s"))
    for expected in ("s.total: a field of _Section, not in the schema",
                     "s.extra: in the schema, not a field of _Section",
                     "s.added_later: required in the schema, has a default",
                     "s.rows[].share: the type allows null, the schema does not",
                     "s.rows[].kind: enum",
                     "s.counts.*: schema type ['string'], type int"):
        assert expected in found, found


@dataclass(frozen=True)
class _WhenSet:
    kind: Literal["k"]
    total: int
    extra: _Row | None = written_when_set()


def test_a_field_written_when_set_is_left_out_while_none():
    assert encode(_WhenSet("k", 1)) == {"kind": "k", "total": 1}
    assert decode(_WhenSet, {"kind": "k", "total": 1}) == _WhenSet("k", 1)
    full = _WhenSet("k", 1, _Row("x", None))
    assert decode(_WhenSet, encode(full)) == full and "extra" in encode(full)


def test_the_schema_check_reads_all_of_const_and_fields_written_when_set():
    defs = {"base": {"type": "object", "required": ["kind"], "properties": {"kind": {"const": "k"}}}}
    row = {"type": "object", "required": ["name", "share"],
           "properties": {"name": {"type": "string"}, "share": {"type": ["number", "null"]}, "kind": {"enum": ["a", "b"]}}}
    node = {"allOf": [{"$ref": "#/$defs/base"}], "type": "object", "required": ["total"],
            "properties": {"total": {"type": "integer"}, "extra": row}}
    assert schema_mismatches(_WhenSet, node, defs, "w") == []
    nullable = {**node, "properties": {**node["properties"], "extra": {"type": "null"}}}
    assert schema_mismatches(_WhenSet, nullable, defs, "w") != []
    wrong = {"base": {**defs["base"], "properties": {"kind": {"const": "j"}}}}
    assert "w.kind: enum" in "\n".join(schema_mismatches(_WhenSet, node, wrong, "w"))
