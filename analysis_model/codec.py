"""Typed analysis sections ↔ their JSON in ``analysis.json``: one writer, one reader.

A *section* is a frozen dataclass whose fields hold JSON values: ``str``, ``int``, ``float``,
``bool``, ``None``, another section, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, unions with
``None`` (``X | None``) and ``Literal[...]``. The analyzers build sections and :func:`encode` them
once, into the dict ``analyze_run`` returns; a reader (the report, ``compare``, the CLI) turns a
section's JSON back into the type with :func:`decode`.

Guarantees:

- ``decode(cls, encode(x)) == x`` for every section ``x`` (tuples stay tuples, lists lists);
- a key the type declares but the JSON lacks takes the field's declared default: that default is
  how an analysis written before the field reads (an older ``format_version``); a field without a
  default that is missing raises :class:`AnalysisShapeError` naming where (``verdict.slos[2].observed``);
- a value of the wrong JSON type raises :class:`AnalysisShapeError` naming where; an ``int`` is
  accepted for a ``float`` field (JSON does not tell 1 from 1.0);
- keys the type does not declare are ignored (an analysis from a newer tailscope still reads);
- a field declared with :func:`written_when_set` is left out of the JSON while it is None (a part that
  is there only when it applies, e.g. ``llm.sessions``), instead of being written as null; one
  declared with :func:`written_with` is left out while the field it names is None, and written
  (null included) otherwise (a group of keys that is there together, e.g. a window's LLM columns).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")

#: Field metadata key of :func:`written_when_set`.
OMIT_NONE = "omit_none"
#: Field metadata key of :func:`written_with`: the name of the field whose None leaves this one out.
WRITTEN_WITH = "written_with"


def written_when_set() -> Any:
    """A section field (type ``X | None``) whose key the analysis holds only when the value is not
    None: encoded without the key while None, decoded as None where the key is absent. The schema
    states it as a non-required ``X`` (analysis_model/schema_check.py)."""
    return dataclasses.field(default=None, metadata={OMIT_NONE: True})


def written_with(leader: str) -> Any:
    """A section field (type ``X | None``, default None) whose key the analysis holds exactly when
    the field ``leader`` (a :func:`written_when_set` field of the same section) is written: left
    out while ``leader`` is None, written otherwise even when null; decoded as None where absent.
    The schema states it as a non-required ``X | None``."""
    return dataclasses.field(default=None, metadata={WRITTEN_WITH: leader})


class AnalysisShapeError(ValueError):
    """analysis.json does not have the shape its types declare; ``str()`` names the place."""


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of a section's fields, by field name (in declaration order)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def is_section(tp: Any) -> bool:
    """Whether ``tp`` is a section type (a dataclass class)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


#: The JSON scalars :func:`encode` returns as they are (exact types: a numpy number is not one).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data: a section becomes a dict of its fields in declaration order
    (each encoded; a :func:`written_when_set` field only when not None), a tuple or list a list, a
    dict a dict of encoded values; anything else is returned as it is. A list of plain JSON scalars
    (a chart series) is copied without a call per item."""
    if type(value) in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(item) for f in dataclasses.fields(value)
                if ((item := getattr(value, f.name)) is not None or not f.metadata.get(OMIT_NONE))
                and (WRITTEN_WITH not in f.metadata or getattr(value, f.metadata[WRITTEN_WITH]) is not None)}
    if isinstance(value, (list, tuple)):
        if all(type(item) in _SCALARS for item in value):
            return list(value)
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    return value


def decode(cls: type[T], data: Any, where: str = "") -> T:
    """A ``cls`` section read from its JSON ``data`` (see the module docstring for what is
    guaranteed); ``where`` names the place in error messages (e.g. ``"verdict"``)."""
    return _read(cls, data, where or cls.__name__)


def _read(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if is_section(tp):
        if not isinstance(data, dict):
            raise AnalysisShapeError(f"{where}: expected an object, got {_json_type(data)}")
        values = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                values[f.name] = _read(field_types(tp)[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise AnalysisShapeError(f"{where}.{f.name}: missing")
        return tp(**values)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None:
            if type(None) in options:
                return None
            raise AnalysisShapeError(f"{where}: null where {_name(tp)} is expected")
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _read(option, data, where)
            except AnalysisShapeError as exc:
                errors.append(str(exc))
        raise AnalysisShapeError(errors[0] if len(errors) == 1 else f"{where}: {_json_type(data)} is none of {_name(tp)}")
    if origin is Literal:
        if data not in typing.get_args(tp):
            raise AnalysisShapeError(f"{where}: {data!r} is not one of {list(typing.get_args(tp))}")
        return data
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise AnalysisShapeError(f"{where}: expected an array, got {_json_type(data)}")
        args = typing.get_args(tp)
        item = args[0] if args else Any
        items = [_read(item, value, f"{where}[{i}]") for i, value in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise AnalysisShapeError(f"{where}: expected an object, got {_json_type(data)}")
        item = typing.get_args(tp)[1]
        return {key: _read(item, value, f"{where}.{key}") for key, value in data.items()}
    if tp is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
    elif tp is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
    elif tp in (str, bool):
        if isinstance(data, tp):
            return data
    elif tp is dict or tp is list:
        if isinstance(data, tp):
            return data
    else:
        raise TypeError(f"{where}: {tp!r} is not a JSON type a section may declare")
    raise AnalysisShapeError(f"{where}: expected {_name(tp)}, got {_json_type(data)}")


def _json_type(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, list):
        return "an array"
    return "an object"


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
