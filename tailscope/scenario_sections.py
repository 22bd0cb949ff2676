"""Optional scenario sections and the parts of tailscope that parse them.

Each entry maps a top-level scenario key to a parser
``parse(value, path, reader) -> object``; ``reader`` is the scenario's
:class:`tailscope.scenario.FieldReader`, whose ``fail(path, message)`` gives
errors with file, line and field. The parsed object lands in
``Scenario.sections[key]``; the raw YAML is in the manifest as well, so
analyzers can read a section without importing its parser.

Add a section by adding one entry here; keep the parser in the module that
owns the feature.
"""

from __future__ import annotations

from typing import Any, Callable

SectionParser = Callable[[Any, tuple, Any], Any]

SECTION_PARSERS: dict[str, SectionParser] = {}
