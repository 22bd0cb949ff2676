"""YAML loading that remembers where every value came from.

``load_located(text)`` returns plain Python values plus a map from each value's
path (a tuple of keys and list indexes) to its 1-based line number, so that a
validation error can name the file, the line and the field.
"""

from __future__ import annotations

from typing import Any

import yaml

Path = tuple  # of str (mapping keys) and int (list indexes)


class YamlSyntaxError(ValueError):
    """The text is not valid YAML; ``line`` is 1-based."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


def load_located(text: str) -> tuple[Any, dict[Path, int]]:
    """Parse one YAML document into plain values and a path → line map.

    Only the safe YAML types are built (no tags, no Python objects). Duplicate
    mapping keys are an error, as they are almost always a mistake.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise YamlSyntaxError(line, f"invalid YAML: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(1, f"invalid YAML: {exc}") from exc
    lines: dict[Path, int] = {}
    if node is None:
        return None, {(): 1}
    return _build(node, (), lines), lines


def _build(node: yaml.Node, path: Path, lines: dict[Path, int]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if not isinstance(key, (str, int, float, bool)) or isinstance(key_node, yaml.CollectionNode):
                raise YamlSyntaxError(key_node.start_mark.line + 1, "mapping keys must be plain scalars")
            key = str(key)
            if key in result:
                raise YamlSyntaxError(key_node.start_mark.line + 1, f"duplicate key {key!r}")
            result[key] = _build(value_node, path + (key,), lines)
            # Point errors about a scalar value at the key's line as well.
            lines.setdefault(path + (key,), key_node.start_mark.line + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), lines) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        return None
    try:
        return yaml.SafeLoader(" ").construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError) as exc:  # e.g. an unknown !!tag, a bad !!int
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlSyntaxError(node.start_mark.line + 1, f"invalid YAML value: {problem}") from exc


def line_of(lines: dict[Path, int], path: Path) -> int:
    """Line of ``path``, or of its nearest ancestor that has one."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def format_path(path: Path) -> str:
    """``("classes", 1, "weight")`` → ``classes[1].weight``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"
