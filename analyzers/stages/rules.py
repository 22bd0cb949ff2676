"""Stage-mapping rules: which span — pair of span events, or span attribute — is which stage.

A target's spans are named however its authors chose (Triton's, vLLM's, a
user's own); the rules say which of them are the stages tailscope decomposes a
request's server time into. They come from the scenario's ``stages:`` section
(docs/scenario-format.md)::

    stages:
      preset: vllm                   # reference (default) | triton | vllm | tgi | sglang | none
      server: {name: "^InferRequest$"}
      clock: auto                    # auto | on | off (analyzers/stages/clock_alignment.py)
      rules:                         # tried before the preset's; first match wins
        - match: {name: "^tokenize$"}
          stage: preprocess
        - match: {attribute: {"stage.kind": "^queue$"}}
          stage: queue
        - between: [QUEUE_START, COMPUTE_START]
          stage: queue
        - match: {name: "^handler$"}
          from_attributes:           # laid end to end from the span's start
            - {stage: queue, attribute: queue_ms, unit: ms}
            - {stage: compute, attribute: compute_ms, unit: ms}

* A **span rule** (``match`` + ``stage``) maps each span whose name matches the
  ``name`` regex and whose attributes match every ``attribute`` regex
  (``re.search``; anchor with ``^…$``; non-string values are matched as their
  JSON text) to ``stage``. Rules are tried in order — the user's, then the
  preset's — and the first match wins. The stage ``ignore`` maps a span to
  nothing (it is neither a stage nor reported as unmapped).
* An **event rule** (``between: [START, END]``) makes a stage of the time
  between the first span event named START and the first named END anywhere
  in the request's trace (Triton records its timestamps as span events).
* An **attribute rule** (``match`` + ``from_attributes``) reads stages from
  numeric attributes of the spans it matches (server spans included), each
  with its unit (s, ms, us, ns), laid end to end from the span's start
  (:mod:`.rule_model`, :mod:`.attribute_stages`). It fills a stage only for
  requests that no span or event rule gave that stage.
* ``server`` says which span is the request's server span; by default the
  SERVER-kind span, else the trace's top-level span.

The presets (``reference``, ``triton``, ``vllm``, ``tgi``, ``sglang``, ``none``)
and the Prometheus metrics each one maps live in :mod:`.presets`; the rule
types and the parsing of one rule in :mod:`.rule_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailscope.analyzers.stages.presets import DEFAULT_PRESET, REFERENCE_SPAN_NAMES, STAGE_PRESETS, TRITON_EVENT_STAGES
from tailscope.analyzers.stages.rule_model import (
    RESERVED_STAGES,
    STAGE_IGNORE,
    AttributeRule,
    EventRule,
    SpanMatch,
    SpanRule,
    StageRuleError,
    StageRules,
    exact_name,
    mapping_of,
    parse_match,
    parse_rule,
)

__all__ = ["CLOCK_MODES", "DEFAULT_PRESET", "PRESETS", "REFERENCE_SPAN_NAMES", "RESERVED_STAGES", "STAGE_IGNORE",
           "SECTION_FIELDS", "TRITON_EVENT_STAGES", "ResolvedRules", "SpanMatch", "StageRuleError", "StageRules",
           "parse_match", "parse_rule", "parse_stages_config", "parse_stages_section", "rules_for_scenario",
           "rules_from_stage_map"]

CLOCK_MODES = ("auto", "on", "off")
SECTION_FIELDS = {"preset", "rules", "server", "clock"}

#: Each preset's rules, by name (the presets themselves, with their metric maps: presets.STAGE_PRESETS).
PRESETS: Mapping[str, StageRules] = {name: preset.rules for name, preset in STAGE_PRESETS.items()}


def rules_from_stage_map(stage_map: Mapping[str, str]) -> StageRules:
    """Exact span-name rules from a ``{span name: stage}`` map (the older ``stage_map`` form)."""
    return StageRules(span_rules=tuple(SpanRule(exact_name(name), stage) for name, stage in stage_map.items()),
                      preset=None, user_rules=len(stage_map))


def parse_stages_config(value: Any, path: tuple = ("stages",)) -> StageRules:
    """The ``stages:`` section → :class:`StageRules` (user rules first, then the preset's).

    Raises :class:`StageRuleError` with the offending field's path."""
    data = mapping_of(value if value is not None else {}, path, SECTION_FIELDS)
    preset_name = data.get("preset", DEFAULT_PRESET)
    if preset_name not in PRESETS:
        raise StageRuleError(path + ("preset",), f"unknown preset {preset_name!r}; expected one of "
                             f"{', '.join(sorted(PRESETS))}")
    preset = PRESETS[preset_name]
    rules = data.get("rules") or []
    if not isinstance(rules, list):
        raise StageRuleError(path + ("rules",), f"expected a list of rules, got {type(rules).__name__}")
    parsed = [parse_rule(rule, path + ("rules", i)) for i, rule in enumerate(rules)]
    clock = data.get("clock", "auto")
    if isinstance(clock, bool):  # YAML reads a bare on/off as a boolean
        clock = "on" if clock else "off"
    if clock not in CLOCK_MODES:
        raise StageRuleError(path + ("clock",), f"expected one of {', '.join(CLOCK_MODES)}, got {clock!r}")
    server = parse_match(data["server"], path + ("server",)) if "server" in data else preset.server
    return StageRules(
        span_rules=tuple(r for r in parsed if isinstance(r, SpanRule)) + preset.span_rules,
        event_rules=tuple(r for r in parsed if isinstance(r, EventRule)) + preset.event_rules,
        attribute_rules=tuple(r for r in parsed if isinstance(r, AttributeRule)) + preset.attribute_rules,
        tokens=preset.tokens,
        server=server,
        preset=preset_name,
        clock=clock,
        user_rules=len(parsed),
    )


def parse_stages_section(value: Any, path: tuple, reader) -> StageRules:
    """Scenario section parser (tailscope.scenario_model.sections): errors with file, line and field."""
    try:
        return parse_stages_config(value, path)
    except StageRuleError as exc:
        raise reader.fail(exc.path, exc.message) from None


@dataclass
class ResolvedRules:
    """The rules an analysis uses, and the warnings met on the way."""

    rules: StageRules
    warnings: list[dict] = field(default_factory=list)


def rules_for_scenario(scenario: Mapping, stage_map: Mapping[str, str] | None = None) -> ResolvedRules:
    """The rules for a run: ``stage_map`` (an explicit override), else the scenario's
    ``stages`` section, else its older ``stage_map``, else the reference preset.

    A section that does not parse (a hand-edited manifest) falls back to the
    reference preset with a warning instead of failing the analysis."""
    if stage_map:
        return ResolvedRules(rules_from_stage_map(stage_map))
    if scenario.get("stages") is not None:
        try:
            return ResolvedRules(parse_stages_config(scenario["stages"]))
        except StageRuleError as exc:
            where = ".".join(str(p) for p in exc.path)
            return ResolvedRules(PRESETS[DEFAULT_PRESET], [{
                "code": "invalid_stage_rules",
                "message": f"{where}: {exc.message}; using the reference preset"}])
    if scenario.get("stage_map"):
        return ResolvedRules(rules_from_stage_map(scenario["stage_map"]))
    return ResolvedRules(PRESETS[DEFAULT_PRESET])
