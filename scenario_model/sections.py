"""Optional scenario sections and the parts of tailscope that parse them.

Each entry maps a top-level scenario key to a parser
``parse(value, path, reader) -> object``; ``reader`` is the scenario's
:class:`tailscope.scenario_model.scenario.FieldReader`, whose ``fail(path, message)`` gives
errors with file, line and field. The parsed object lands in
``Scenario.sections[key]``; the raw YAML is in the manifest as well, so
analyzers can read a section without importing its parser.

Add a section by adding one entry here; keep the parser in the module that
owns the feature.
"""

from __future__ import annotations

from typing import Any, Callable

SectionParser = Callable[[Any, tuple, Any], Any]

from tailscope.loadgen.retention_section import parse_retention

SECTION_PARSERS: dict[str, SectionParser] = {}

#: Soak runs: which per-request records are kept (loadgen/retention_section.py).
SECTION_PARSERS["retention"] = parse_retention

#: Lab and incident drills: fault windows with ground truth (faults/section.py, docs/lab.md).
from tailscope.faults.section import parse_faults_section  # noqa: E402

SECTION_PARSERS["faults"] = parse_faults_section

#: Stage mapping (span name/attribute rules, span-event intervals, presets) and clock alignment
#: (analyzers/stages/rules.py, docs/scenario-format.md "stages").
from tailscope.analyzers.stages.rules import parse_stages_section  # noqa: E402

SECTION_PARSERS["stages"] = parse_stages_section

#: Abort thresholds: stop a run early on error rate, P99 or achieved/offered rate
#: (conductor/abort.py, docs/scenario-format.md "abort_on").
from tailscope.conductor.abort import parse_abort_section  # noqa: E402

SECTION_PARSERS["abort_on"] = parse_abort_section
