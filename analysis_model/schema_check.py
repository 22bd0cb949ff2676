"""Whether ``analysis.schema.json`` says what the section types say: one shape, stated twice, checked.

The schema keeps what types cannot hold (descriptions, units, minimums); the types are what the
code builds and reads. :func:`schema_mismatches` lists every place where they disagree:

- a section is an object whose ``properties`` are exactly its fields, and whose ``required`` are
  exactly its fields without a default (a field with a default is one older analyses may lack); a
  :func:`~.codec.written_when_set` field ``X | None`` is stated as ``X`` (its null is never written);
- ``str``/``int``/``float``/``bool``/``None`` are the JSON types ``string``/``integer``/``number``/
  ``boolean``/``null`` (``X | None`` allows ``null`` as well); a ``Literal`` is an ``enum`` of its
  values (or the ``const`` of its one value); ``list``/``tuple`` an ``array`` whose ``items`` agree;
  ``dict[str, X]`` an ``object`` whose ``additionalProperties`` agree; ``Any`` agrees with anything.

``$ref`` (``#/$defs/…``), ``anyOf`` and ``oneOf`` are followed; an ``allOf`` object's ``properties``
and ``required`` are those of its parts and its own together.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from typing import Any, Literal, Union

from tailscope.analysis_model.codec import OMIT_NONE, field_types, is_section

_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def schema_mismatches(tp: Any, node: dict, defs: dict, where: str) -> list[str]:
    """Every disagreement between the type ``tp`` and the schema ``node`` (``defs``: the schema's
    ``$defs``), each naming its place under ``where``; empty when they agree."""
    node = _resolve(node, defs)
    if tp is Any:
        return []
    if typing.get_origin(tp) in (Union, types.UnionType) or "anyOf" in node or "oneOf" in node:
        return _union_mismatches(tp, node, defs, where)
    if typing.get_origin(tp) is Literal:
        values = set(typing.get_args(tp))
        if "const" in node:
            node = {**node, "enum": [node["const"]]}
        if "enum" not in node:
            return [f"{where}: the type is an enum of {sorted(map(repr, values))}, the schema has no enum"]
        if set(node["enum"]) != values:
            return [f"{where}: enum {sorted(map(repr, node['enum']))} in the schema, "
                    f"{sorted(map(repr, values))} in the type"]
        return []
    kinds = _schema_types(node)
    expected = _json_type(tp)
    if kinds is not None and expected not in kinds and not (expected == "integer" and "number" in kinds):
        return [f"{where}: schema type {sorted(kinds)}, type {_label(tp)} ({expected})"]
    if is_section(tp):
        return _section_mismatches(tp, node, defs, where)
    origin = typing.get_origin(tp)
    if origin in (list, tuple) and "items" in node:
        return schema_mismatches(typing.get_args(tp)[0], node["items"], defs, f"{where}[]")
    if origin is dict and isinstance(node.get("additionalProperties"), dict):
        return schema_mismatches(typing.get_args(tp)[1], node["additionalProperties"], defs, f"{where}.*")
    return []


def _section_mismatches(tp: type, node: dict, defs: dict, where: str) -> list[str]:
    fields = field_types(tp)
    properties = node.get("properties", {})
    out = []
    for name in sorted(set(fields) - set(properties)):
        out.append(f"{where}.{name}: a field of {tp.__name__}, not in the schema")
    for name in sorted(set(properties) - set(fields)):
        out.append(f"{where}.{name}: in the schema, not a field of {tp.__name__}")
    without_default = {f.name for f in dataclasses.fields(tp)
                       if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    required = set(node.get("required", []))
    for name in sorted(without_default - required):
        out.append(f"{where}.{name}: no default in {tp.__name__} (always written), not required in the schema")
    for name in sorted(required - without_default):
        out.append(f"{where}.{name}: required in the schema, has a default in {tp.__name__}")
    omitted = {f.name for f in dataclasses.fields(tp) if f.metadata.get(OMIT_NONE)}
    for name in fields:
        if name in properties:
            field_tp = _without_none(fields[name]) if name in omitted else fields[name]
            out += schema_mismatches(field_tp, properties[name], defs, f"{where}.{name}")
    return out


def _without_none(tp: Any) -> Any:
    """``X`` of ``X | None`` (a union of the rest when several)."""
    rest = [o for o in typing.get_args(tp) if o is not type(None)]
    return functools.reduce(operator.or_, rest)


def _union_mismatches(tp: Any, node: dict, defs: dict, where: str) -> list[str]:
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    nullable = type(None) in options
    rest = [o for o in options if o is not type(None)]
    branches = [_resolve(b, defs) for b in node.get("anyOf", node.get("oneOf", []))] or [node]
    schema_null = any(_allows_null(b) for b in branches)
    out = []
    if nullable != schema_null:
        out.append(f"{where}: the type {'allows' if nullable else 'does not allow'} null, the schema "
                   f"{'does' if schema_null else 'does not'}")
    for option in rest:
        problems = [schema_mismatches(option, _without_null(b), defs, where) for b in branches
                    if not _only_null(b)]
        if problems and all(problems):
            out += min(problems, key=len)
    return out


def _resolve(node: dict, defs: dict) -> dict:
    while "$ref" in node:
        node = defs[node["$ref"].removeprefix("#/$defs/")]
    if "allOf" in node:
        parts = [_resolve(part, defs) for part in node["allOf"]] + [node]
        node = {key: value for key, value in node.items() if key != "allOf"}
        node["properties"] = {k: v for part in parts for k, v in part.get("properties", {}).items()}
        node["required"] = [k for part in parts for k in part.get("required", [])]
    return node


def _schema_types(node: dict) -> set[str] | None:
    kind = node.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


def _allows_null(node: dict) -> bool:
    kinds = _schema_types(node)
    return (kinds is not None and "null" in kinds) or None in node.get("enum", ())


def _only_null(node: dict) -> bool:
    return _schema_types(node) == {"null"} or node.get("enum") == [None]


def _without_null(node: dict) -> dict:
    out = dict(node)
    kinds = _schema_types(node)
    if kinds is not None and "null" in kinds:
        rest = sorted(kinds - {"null"})
        out["type"] = rest[0] if len(rest) == 1 else rest
    if "enum" in out:
        out["enum"] = [v for v in out["enum"] if v is not None]
    return out


def _json_type(tp: Any) -> str:
    if is_section(tp) or typing.get_origin(tp) is dict or tp is dict:
        return "object"
    if typing.get_origin(tp) in (list, tuple) or tp in (list, tuple):
        return "array"
    return _JSON_NAMES.get(tp, "?")


def _label(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
