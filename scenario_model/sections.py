"""Optional scenario sections and the parts of tailscope that parse them.

Each entry maps a top-level scenario key to a parser
``parse(value, path, reader) -> object``; ``reader`` is the scenario's
:class:`tailscope.scenario_model.scenario.FieldReader`, whose ``fail(path, message)`` gives
errors with file, line and field. The parsed object lands in
``Scenario.sections[key]``; the raw YAML is in the manifest as well, so
analyzers can read a section without importing its parser.

:data:`SECTION_PARSERS` declares every section, one registration each, with
its parser imported from the module that owns the feature (importing that
module registers nothing). Add a section by adding one registration here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailscope.analyzers.health.outcome import parse_verdict_section
from tailscope.analyzers.stages.rules import parse_stages_section
from tailscope.faults.section import parse_faults_section
from tailscope.loadgen.retention_section import parse_retention
from tailscope.loadgen.sweep_rates import parse_sweep_section
from tailscope.scenario_model.abort_rules import parse_abort_section
from tailscope.support.registry import Registry

SectionParser = Callable[[Any, tuple, Any], Any]

#: Every optional scenario section, by its top-level key, in the order they are parsed.
SECTION_PARSERS: Registry[SectionParser] = Registry("scenario section")

#: Soak runs: which per-request records are kept (loadgen/retention_section.py).
SECTION_PARSERS.register(parse_retention, name="retention")

#: Lab and incident drills: fault windows with ground truth (faults/section.py, docs/lab.md).
SECTION_PARSERS.register(parse_faults_section, name="faults")

#: Stage mapping (span name/attribute rules, span-event intervals, presets) and clock alignment
#: (analyzers/stages/rules.py, docs/scenario-format.md "stages").
SECTION_PARSERS.register(parse_stages_section, name="stages")

#: Abort thresholds: stop a run early on error rate, P99 or achieved/offered rate
#: (scenario_model/abort_rules.py; judged by conductor/abort.py; docs/scenario-format.md "abort_on").
SECTION_PARSERS.register(parse_abort_section, name="abort_on")

#: The outcome policy: what an SLO whose percentile is not claimed makes of the run
#: (analyzers/health/outcome.py; docs/scenario-format.md "verdict").
SECTION_PARSERS.register(parse_verdict_section, name="verdict")

#: Load sweeps: stop a list of rates or concurrencies at saturation, and how many steps past the
#: knee first (loadgen/sweep_rates.py; docs/sweep.md "Stopping at saturation").
SECTION_PARSERS.register(parse_sweep_section, name="sweep")
