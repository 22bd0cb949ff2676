"""Abort thresholds as a scenario states them: the rule model and its parser.

A scenario's ``abort_on`` (and ``tailscope run --abort-on RULE``) lists rules::

    abort_on:
      - error_rate > 50% over 10s      # errors ÷ requests that ended in the window
      - p99 > 2s over 10s              # latency (from the scheduled send) of the window
      - achieved_ratio < 0.5 over 20s  # completed ÷ offered by the schedule, in the window

``METRIC OP VALUE [over WINDOW]``: METRIC is ``error_rate`` (``%`` or a
fraction), ``p50`` / ``p99`` (a time), or ``achieved_ratio`` (a fraction;
open loop only); OP is ``>``, ``>=``, ``<`` or ``<=``; WINDOW defaults to
10 s (1–300 s). The conductor's monitor (tailscope.conductor.abort) judges
the rules during a run; this module only parses them, so the scenario model
(and any process) can validate ``abort_on`` without importing the conductor.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

METRICS = ("error_rate", "p50", "p99", "achieved_ratio")
OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
DEFAULT_WINDOW_S = 10
MAX_WINDOW_S = 300

_RULE = re.compile(
    r"^\s*(?P<metric>[a-z_0-9]+)\s*(?P<op>>=|<=|>|<)\s*(?P<value>[0-9]*\.?[0-9]+)\s*(?P<unit>%|ms|s|us)?"
    r"(?:\s+over\s+(?P<window>[0-9]*\.?[0-9]+)\s*(?P<wunit>ms|s|m)?)?\s*$")
_TIME_UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001}
_WINDOW_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass(frozen=True)
class AbortRule:
    """One threshold: ``metric op threshold`` over the last ``window_s`` seconds.
    ``threshold`` is in ms (p50/p99) or a fraction (error_rate, achieved_ratio)."""

    text: str
    metric: str
    op: str
    threshold: float
    window_s: int

    def trips(self, observed: float) -> bool:
        return OPERATORS[self.op](observed, self.threshold)


def parse_rule(text: str) -> AbortRule:
    """Parse one rule; raises ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"expected a rule such as 'error_rate > 50% over 10s', got {text!r}")
    match = _RULE.match(text)
    if not match:
        raise ValueError(f"{text!r}: expected METRIC OP VALUE [over WINDOW], e.g. 'p99 > 2s over 10s'")
    metric, op, unit = match.group("metric"), match.group("op"), match.group("unit")
    value = float(match.group("value"))
    if metric not in METRICS:
        raise ValueError(f"{text!r}: unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if metric in ("p50", "p99"):
        if unit not in _TIME_UNITS_MS:
            raise ValueError(f"{text!r}: {metric} needs a time unit (ms, s or us)")
        threshold = value * _TIME_UNITS_MS[unit]
    elif unit == "%":
        threshold = value / 100.0
    elif unit:
        raise ValueError(f"{text!r}: {metric} takes '%' or a fraction, not {unit!r}")
    else:
        threshold = value
    if metric in ("error_rate", "achieved_ratio") and not 0 <= threshold <= 1:
        raise ValueError(f"{text!r}: {metric} must be between 0 and 1 (or 0% and 100%)")
    window_s = (float(match.group("window")) * _WINDOW_UNITS_S[match.group("wunit")]
                if match.group("window") else DEFAULT_WINDOW_S)
    if not 1 <= window_s <= MAX_WINDOW_S or window_s != int(window_s):
        raise ValueError(f"{text!r}: the window must be a whole number of seconds in 1..{MAX_WINDOW_S}")
    return AbortRule(text.strip(), metric, op, threshold, int(window_s))


def parse_abort_section(value, path: tuple, reader) -> tuple[AbortRule, ...]:
    """Scenario section parser for ``abort_on`` (tailscope.scenario_model.sections)."""
    items = value if isinstance(value, list) else [value]
    rules = []
    for index, item in enumerate(items):
        at = path + ((index,) if isinstance(value, list) else ())
        try:
            rules.append(parse_rule(item))
        except ValueError as exc:
            raise reader.fail(at, str(exc)) from None
    return tuple(rules)
