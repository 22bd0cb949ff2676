"""The stage rules themselves, and the parsing of one rule (the ``stages:`` section is :mod:`.rules`).

Four kinds of rule say which server time is which stage (docs/scenario-format.md "stages"):

* :class:`SpanRule` (``match`` + ``stage``): every span the match selects is that stage
  (its duration counts); the stage ``ignore`` maps a span to nothing.
* :class:`EventRule` (``between: [START, END]`` + ``stage``): the time between two span
  events of the request's trace.
* :class:`AttributeRule` (``match`` + ``from_attributes``): stages read from numeric
  attributes of one span — ``[{stage, attribute, unit}, ...]`` — laid end to end from the
  span's start in the order given (stage *k* covers ``[start + Σ_{j<k} d_j, start + Σ_{j≤k} d_j]``,
  clipped at the span's end, so the stages of one span never add up to more than the span).
  This is how a server that reports its phases as numbers on one span (vLLM's
  ``llm_request``: ``gen_ai.latency.time_in_queue`` …) is decomposed.
* :class:`TokenAttributes` (presets only): which span attributes carry the server's token
  counts (:mod:`.server_tokens`).

A :class:`SpanMatch` selects spans by a name regex and attribute regexes
(``re.search``; non-string values are matched as their JSON text). Parsing
raises :class:`StageRuleError` with the path of the offending field, which the
scenario reader turns into ``FILE:LINE: stages.rules[i].field: message``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tailscope.analysis_model.stages import StageRule, StageRulesInfo

#: The stage that maps a span to nothing.
STAGE_IGNORE = "ignore"
#: Stage names the analysis derives itself; a rule may not produce them.
RESERVED_STAGES = frozenset({"server", "unaccounted", "outside_server"})
RULE_FIELDS = {"match", "between", "stage", "from_attributes"}
MATCH_FIELDS = {"name", "attribute"}
ATTRIBUTE_STAGE_FIELDS = {"stage", "attribute", "unit"}
#: Units of a duration attribute, in ns per unit.
DURATION_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
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
class AttributeStage:
    """One stage read from a span attribute: a JSON number in ``unit`` (s, ms, us, ns), or a
    string with its own unit suffix (``"1.5ms"``, ``"12µs"``: Rust's ``Duration`` debug text).

    ``minus`` (presets only): attributes (same unit) subtracted from it, for a stage a server
    reports only as the rest of a total — vLLM's ``api_server`` is its time to first token less
    the engine's queue and prefill. The result is clipped at 0; without every attribute it is
    no value."""

    stage: str
    attribute: str
    unit: str
    minus: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttributeRule:
    """Stages from the numeric attributes of each span ``match`` selects, laid end to end from
    the span's start in the order of ``stages`` (see the module docstring)."""

    match: SpanMatch
    stages: tuple[AttributeStage, ...]


@dataclass(frozen=True)
class TokenAttributes:
    """The span attributes that carry a request's prompt and output token counts on the spans
    ``match`` selects (e.g. vLLM's ``gen_ai.usage.prompt_tokens`` on ``llm_request``)."""

    match: SpanMatch
    prompt: str
    output: str

    def describe(self) -> dict:
        return {"match": self.match.describe(), "prompt": self.prompt, "output": self.output}


@dataclass(frozen=True)
class StageRules:
    """The rules of one analysis, in priority order."""

    span_rules: tuple[SpanRule, ...] = ()
    event_rules: tuple[EventRule, ...] = ()
    server: SpanMatch | None = None
    preset: str | None = None
    clock: str = "auto"
    user_rules: int = 0  # how many of span_rules + event_rules + attribute_rules came from the scenario
    attribute_rules: tuple[AttributeRule, ...] = ()
    tokens: TokenAttributes | None = None

    def stage_names(self) -> tuple[str, ...]:
        """The stages these rules produce, in first-appearance order (``ignore`` excluded): the
        attribute rules' first (they list a span's phases in the order they happen), then the span
        and event rules'."""
        names = ([s.stage for r in self.attribute_rules for s in r.stages] + [r.stage for r in self.span_rules]
                 + [r.stage for r in self.event_rules])
        return tuple(dict.fromkeys(n for n in names if n != STAGE_IGNORE))

    def describe(self) -> StageRulesInfo:
        """The rules as ``analysis.json`` states them (``stages.rules``)."""
        return StageRulesInfo(
            preset=self.preset,
            user_rules=self.user_rules,
            server=self.server.describe() if self.server is not None else "SERVER-kind span, else the trace's top-level span",
            rules=[StageRule(match=r.match.describe(), stage=r.stage) for r in self.span_rules]
            + [StageRule(between=[r.start, r.end], stage=r.stage) for r in self.event_rules]
            + [StageRule(match=r.match.describe(), stage=s.stage, attribute=s.attribute, unit=s.unit,
                         minus=list(s.minus) if s.minus else None) for r in self.attribute_rules for s in r.stages],
            tokens=self.tokens.describe() if self.tokens is not None else None,
        )


def exact_name(name: str) -> SpanMatch:
    """A match of spans named exactly ``name``."""
    return SpanMatch(name=re.compile("^" + re.escape(name) + "$"))


# --------------------------------------------------------------------------- parsing


def _regex(value: Any, path: tuple) -> re.Pattern:
    if not isinstance(value, str):
        raise StageRuleError(path, f"expected a regular expression string, got {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise StageRuleError(path, f"invalid regular expression {value!r}: {exc}") from None


def mapping_of(value: Any, path: tuple, allowed: set[str]) -> dict:
    """``value`` as a mapping whose keys are all in ``allowed`` (else StageRuleError at the key)."""
    if not isinstance(value, dict):
        raise StageRuleError(path, f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise StageRuleError(path + (key,), f"unknown field {key!r}; expected one of "
                                 f"{', '.join(sorted(allowed))}")
    return value


def parse_match(value: Any, path: tuple) -> SpanMatch:
    """``{name: regex, attribute: {key: regex, ...}}`` (at least one condition)."""
    data = mapping_of(value, path, MATCH_FIELDS)
    name = _regex(data["name"], path + ("name",)) if "name" in data else None
    attrs = mapping_of(data.get("attribute") or {}, path + ("attribute",), set(data.get("attribute") or {}))
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


def _attribute_stage(value: Any, path: tuple) -> AttributeStage:
    """``{stage: S, attribute: KEY, unit: s|ms|us|ns}``."""
    data = mapping_of(value, path, ATTRIBUTE_STAGE_FIELDS)
    for key in ("stage", "attribute", "unit"):
        if key not in data:
            raise StageRuleError(path, f"missing `{key}`")
    stage = _stage(data["stage"], path + ("stage",))
    if stage == STAGE_IGNORE:
        raise StageRuleError(path + ("stage",), "an attribute stage cannot be `ignore`")
    attribute = data["attribute"]
    if not isinstance(attribute, str) or not attribute:
        raise StageRuleError(path + ("attribute",), f"expected an attribute name, got {attribute!r}")
    unit = data["unit"]
    if unit not in DURATION_UNITS:
        raise StageRuleError(path + ("unit",), f"unknown unit {unit!r}; expected one of "
                             f"{', '.join(DURATION_UNITS)}")
    return AttributeStage(stage, attribute, unit)


def _attribute_rule(data: dict, path: tuple) -> AttributeRule:
    if "match" not in data:
        raise StageRuleError(path, "`from_attributes` needs a `match` (the span that carries the attributes)")
    for other in ("stage", "between"):
        if other in data:
            raise StageRuleError(path + (other,), f"an attribute rule names its stages in `from_attributes`; "
                                 f"remove `{other}`")
    items = data["from_attributes"]
    where = path + ("from_attributes",)
    if not isinstance(items, list) or not items:
        raise StageRuleError(where, "expected a non-empty list of {stage, attribute, unit}")
    stages = tuple(_attribute_stage(item, where + (i,)) for i, item in enumerate(items))
    seen: set[str] = set()
    for i, item in enumerate(stages):
        if item.stage in seen:
            raise StageRuleError(where + (i, "stage"), f"stage {item.stage!r} appears twice in this rule")
        seen.add(item.stage)
    return AttributeRule(parse_match(data["match"], path + ("match",)), stages)


def parse_rule(value: Any, path: tuple) -> SpanRule | EventRule | AttributeRule:
    """One entry of ``stages.rules`` (see the module docstring for the three forms)."""
    data = mapping_of(value, path, RULE_FIELDS)
    if "from_attributes" in data:
        return _attribute_rule(data, path)
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
