"""Stage-mapping rules: which span — or which pair of span events — is which stage.

A target's spans are named however its authors chose (Triton's, BentoML's, a
user's own); the rules say which of them are the stages tailscope decomposes a
request's server time into. They come from the scenario's ``stages:`` section
(docs/scenario-format.md)::

    stages:
      preset: triton                 # reference (default) | triton | none
      server: {name: "^InferRequest$"}
      clock: auto                    # auto | on | off (analyzers/stages/clock_alignment.py)
      rules:                         # tried before the preset's; first match wins
        - match: {name: "^tokenize$"}
          stage: preprocess
        - match: {attribute: {"stage.kind": "^queue$"}}
          stage: queue
        - between: [QUEUE_START, COMPUTE_START]
          stage: queue

* A **span rule** (``match``) maps each span whose name matches the ``name``
  regex and whose attributes match every ``attribute`` regex (``re.search``;
  anchor with ``^…$``; non-string values are matched as their JSON text) to
  ``stage``. Rules are tried in order — the user's, then the preset's — and
  the first match wins. The stage ``ignore`` maps a span to nothing (it is
  neither a stage nor reported as unmapped).
* An **event rule** (``between: [START, END]``) makes a stage of the time
  between the first span event named START and the first named END anywhere
  in the request's trace (Triton records its timestamps as span events).
* ``server`` says which span is the request's server span; by default the
  SERVER-kind span, else the trace's top-level span.

Presets: ``reference`` (the reference target and the instrumentation kit:
exact span names, docs/architecture.md), ``triton`` (Triton's OpenTelemetry
trace mode: ``InferRequest`` root span, a model span and a ``compute`` span
whose events are ``QUEUE_START``, ``COMPUTE_START``, ``COMPUTE_INPUT_END``,
``COMPUTE_OUTPUT_START``, ``COMPUTE_END``), and ``none``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

#: The stage that maps a span to nothing.
STAGE_IGNORE = "ignore"
#: Stage names the analysis derives itself; a rule may not produce them.
RESERVED_STAGES = frozenset({"server", "unaccounted", "client_network"})
CLOCK_MODES = ("auto", "on", "off")
SECTION_FIELDS = {"preset", "rules", "server", "clock"}
RULE_FIELDS = {"match", "between", "stage"}
MATCH_FIELDS = {"name", "attribute"}
_STAGE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


class StageRuleError(ValueError):
    """A rule that cannot be used; ``path`` locates it in the ``stages`` section."""

    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


@dataclass(frozen=True)
class SpanMatch:
    """A span-name regex and attribute regexes; every given condition must hold."""

    name: re.Pattern | None = None
    attributes: tuple[tuple[str, re.Pattern], ...] = ()

    def describe(self) -> str:
        parts = [f"name ~ /{self.name.pattern}/"] if self.name is not None else []
        parts += [f"{key} ~ /{pattern.pattern}/" for key, pattern in self.attributes]
        return " and ".join(parts)


@dataclass(frozen=True)
class SpanRule:
    match: SpanMatch
    stage: str


@dataclass(frozen=True)
class EventRule:
    """The stage between two span events of one trace (first occurrence of each)."""

    start: str
    end: str
    stage: str


@dataclass(frozen=True)
class StageRules:
    """The rules of one analysis, in priority order."""

    span_rules: tuple[SpanRule, ...] = ()
    event_rules: tuple[EventRule, ...] = ()
    server: SpanMatch | None = None
    preset: str | None = None
    clock: str = "auto"
    user_rules: int = 0  # how many of span_rules + event_rules came from the scenario

    def stage_names(self) -> tuple[str, ...]:
        """The stages these rules produce, in first-appearance order (``ignore`` excluded)."""
        names = [r.stage for r in self.span_rules] + [r.stage for r in self.event_rules]
        return tuple(dict.fromkeys(n for n in names if n != STAGE_IGNORE))

    def describe(self) -> dict:
        """JSON-ready summary for ``analysis.json`` (``stages.rules``)."""
        return {
            "preset": self.preset,
            "user_rules": self.user_rules,
            "server": self.server.describe() if self.server is not None else "SERVER-kind span, else the trace's top-level span",
            "rules": [{"match": r.match.describe(), "stage": r.stage} for r in self.span_rules]
            + [{"between": [r.start, r.end], "stage": r.stage} for r in self.event_rules],
        }


def _exact(name: str) -> SpanMatch:
    return SpanMatch(name=re.compile("^" + re.escape(name) + "$"))


#: Reference target / instrumentation kit span names (docs/architecture.md).
REFERENCE_SPAN_NAMES = (
    ("preprocess", "preprocess"),
    ("queue_wait", "queue"),
    ("batch_wait", "batch_wait"),
    ("inference", "inference"),
    ("postprocess", "postprocess"),
)

#: Triton's span-event timestamps, in the order an HTTP request passes them (tailscope loads
#: over HTTP; for spans imported from gRPC clients add ``between: [GRPC_WAITREAD_START,
#: GRPC_WAITREAD_END]`` and ``[GRPC_SEND_START, GRPC_SEND_END]`` rules).
TRITON_EVENT_STAGES = (
    ("HTTP_RECV_START", "HTTP_RECV_END", "http_recv"),
    ("QUEUE_START", "COMPUTE_START", "queue"),
    ("COMPUTE_START", "COMPUTE_INPUT_END", "compute_input"),
    ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "inference"),
    ("COMPUTE_OUTPUT_START", "COMPUTE_END", "compute_output"),
    ("HTTP_SEND_START", "HTTP_SEND_END", "http_send"),
)

PRESETS: dict[str, StageRules] = {
    "reference": StageRules(
        span_rules=tuple(SpanRule(_exact(name), stage) for name, stage in REFERENCE_SPAN_NAMES),
        preset="reference",
    ),
    "triton": StageRules(
        # The model span (named after the model, attribute model_name) and the
        # "compute" span carry the events; their own durations overlap the
        # event stages, so they are ignored rather than counted twice.
        span_rules=(
            SpanRule(_exact("compute"), STAGE_IGNORE),
            SpanRule(SpanMatch(attributes=(("model_name", re.compile("")),)), STAGE_IGNORE),
        ),
        event_rules=tuple(EventRule(start, end, stage) for start, end, stage in TRITON_EVENT_STAGES),
        server=_exact("InferRequest"),
        preset="triton",
    ),
    "none": StageRules(preset="none"),
}
DEFAULT_PRESET = "reference"


def rules_from_stage_map(stage_map: Mapping[str, str]) -> StageRules:
    """Exact span-name rules from a ``{span name: stage}`` map (the older ``stage_map`` form)."""
    return StageRules(span_rules=tuple(SpanRule(_exact(name), stage) for name, stage in stage_map.items()),
                      preset=None, user_rules=len(stage_map))


# --------------------------------------------------------------------------- parsing


def _regex(value: Any, path: tuple) -> re.Pattern:
    if not isinstance(value, str):
        raise StageRuleError(path, f"expected a regular expression string, got {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise StageRuleError(path, f"invalid regular expression {value!r}: {exc}") from None


def _mapping(value: Any, path: tuple, allowed: set[str]) -> dict:
    if not isinstance(value, dict):
        raise StageRuleError(path, f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise StageRuleError(path + (key,), f"unknown field {key!r}; expected one of "
                                 f"{', '.join(sorted(allowed))}")
    return value


def parse_match(value: Any, path: tuple) -> SpanMatch:
    """``{name: regex, attribute: {key: regex, ...}}`` (at least one condition)."""
    data = _mapping(value, path, MATCH_FIELDS)
    name = _regex(data["name"], path + ("name",)) if "name" in data else None
    attrs = _mapping(data.get("attribute") or {}, path + ("attribute",), set(data.get("attribute") or {}))
    attributes = tuple((str(key), _regex(pattern, path + ("attribute", key))) for key, pattern in attrs.items())
    if name is None and not attributes:
        raise StageRuleError(path, "a match needs `name` or `attribute`")
    return SpanMatch(name=name, attributes=attributes)


def _stage(value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not _STAGE_NAME.match(value):
        raise StageRuleError(path, f"stage must be a name (letters, digits, _ . -), got {value!r}")
    if value in RESERVED_STAGES:
        raise StageRuleError(path, f"{value!r} is derived by the analysis; choose another stage name")
    return value


def parse_rule(value: Any, path: tuple) -> SpanRule | EventRule:
    data = _mapping(value, path, RULE_FIELDS)
    if "stage" not in data:
        raise StageRuleError(path, "missing `stage`")
    stage = _stage(data["stage"], path + ("stage",))
    if ("match" in data) == ("between" in data):
        raise StageRuleError(path, "give exactly one of `match` (a span rule) or `between` (an event rule)")
    if "match" in data:
        return SpanRule(parse_match(data["match"], path + ("match",)), stage)
    between = data["between"]
    if (not isinstance(between, list) or len(between) != 2
            or not all(isinstance(e, str) and e for e in between)):
        raise StageRuleError(path + ("between",), "expected [START_EVENT, END_EVENT] (two event names)")
    if stage == STAGE_IGNORE:
        raise StageRuleError(path + ("stage",), "an event rule cannot use the stage `ignore`")
    return EventRule(between[0], between[1], stage)


def parse_stages_config(value: Any, path: tuple = ("stages",)) -> StageRules:
    """The ``stages:`` section → :class:`StageRules` (user rules first, then the preset's).

    Raises :class:`StageRuleError` with the offending field's path."""
    data = _mapping(value if value is not None else {}, path, SECTION_FIELDS)
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
