"""Abort thresholds: stop a run that is hurting its target or cannot mean anything.

A scenario's ``abort_on`` (and ``tailscope run --abort-on RULE``) lists rules::

    abort_on:
      - error_rate > 50% over 10s      # errors ÷ requests that ended in the window
      - p99 > 2s over 10s              # latency (from the scheduled send) of the window
      - achieved_ratio < 0.5 over 20s  # completed ÷ offered by the schedule, in the window

``METRIC OP VALUE [over WINDOW]``: METRIC is ``error_rate`` (``%`` or a
fraction), ``p50`` / ``p99`` (a time), or ``achieved_ratio`` (a fraction;
open loop only); OP is ``>``, ``>=``, ``<`` or ``<=``; WINDOW defaults to
10 s (1–300 s). A rule is judged once per progress report (about 1 s) and
only when its window is full and held at least ``MIN_REQUESTS_IN_WINDOW``
requests, so a run never aborts on its first few replies. The first rule that
trips stops the load through :meth:`RunContext.abort`: the run is marked
``aborted`` with the reason (manifest ``abort_reasons``), then analysed and
reported as usual, and its verdict fails.

No Locust import: :class:`AbortMonitor` is a run companion by shape
(``start``/``on_progress``/``stop``, see tailscope.conductor.session.Companion), so
scenario parsing can use this module in any process.
"""

from __future__ import annotations

import operator
import re
from collections import deque
from dataclasses import dataclass

from tailscope.loadgen.arrivals import expected_arrivals

METRICS = ("error_rate", "p50", "p99", "achieved_ratio")
OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
DEFAULT_WINDOW_S = 10
MAX_WINDOW_S = 300
#: A window with fewer ended requests than this is not judged.
MIN_REQUESTS_IN_WINDOW = 20

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


class AbortMonitor:
    """A run companion: judges the abort rules on every progress report and
    aborts the run (``ctx.abort``) on the first that trips."""

    name = "abort monitor"

    def __init__(self, rules: tuple[AbortRule, ...]):
        self.rules = tuple(rules)
        self.stat_windows_s = tuple(sorted({r.window_s for r in self.rules}))
        self.tripped: AbortRule | None = None
        self._ctx = None  # tailscope.conductor.session.RunContext
        self._history: deque = deque()  # (elapsed_s, completed, errors, dropped)

    def start(self, ctx) -> None:
        self._ctx = ctx

    def stop(self) -> None:
        """Nothing to undo."""

    def on_progress(self, progress) -> None:
        if self.tripped is not None or self._ctx is None:
            return
        self._history.append((progress.elapsed_s, progress.completed, progress.errors,
                              getattr(progress, "dropped", 0)))
        longest = max(self.stat_windows_s, default=0)
        while len(self._history) > 2 and progress.elapsed_s - self._history[1][0] >= longest:
            self._history.popleft()
        for rule in self.rules:
            observed = self._observe(rule, progress)
            if observed is not None and rule.trips(observed):
                self.tripped = rule
                self._ctx.abort(f"{rule.text} (observed {_format(rule, observed)} at "
                                f"{progress.elapsed_s:.0f} s)")
                return

    def _observe(self, rule: AbortRule, progress) -> float | None:
        """The rule's metric over its window, or None when the window cannot be judged yet."""
        if progress.elapsed_s < rule.window_s:
            return None
        if rule.metric == "achieved_ratio":
            return self._achieved_ratio(rule.window_s, progress)
        stats = (getattr(progress, "windows", None) or {}).get(rule.window_s)
        if stats is None:
            return self._from_totals(rule, progress)
        if stats.count < MIN_REQUESTS_IN_WINDOW:
            return None
        if rule.metric == "error_rate":
            return stats.errors / stats.count
        return stats.p99_ms if rule.metric == "p99" else stats.p50_ms

    def _from_totals(self, rule: AbortRule, progress) -> float | None:
        """Without live windows (a distributed run): the error rate from the
        totals' change over the window; P50/P99 only for the live 10 s window."""
        if rule.metric != "error_rate":
            return getattr(progress, f"{rule.metric}_ms", None) if rule.window_s == DEFAULT_WINDOW_S else None
        start = self._window_start(rule.window_s, progress)
        if start is None:
            return None
        ended = (progress.completed - start[1]) + (getattr(progress, "dropped", 0) - start[3])
        if ended < MIN_REQUESTS_IN_WINDOW:
            return None
        return (progress.errors - start[2]) / ended

    def _window_start(self, window_s: int, progress):
        """The oldest history entry inside the window, if the history covers 90% of it."""
        start = next((h for h in self._history if progress.elapsed_s - h[0] <= window_s), None)
        if start is None or progress.elapsed_s - start[0] < window_s * 0.9:
            return None
        return start

    def _achieved_ratio(self, window_s: int, progress) -> float | None:
        arrival = self._ctx.plan.arrival
        if not arrival.open_loop:
            return None
        start = self._window_start(window_s, progress)
        if start is None:
            return None
        offered = (expected_arrivals(arrival, progress.elapsed_s)
                   - expected_arrivals(arrival, start[0]))
        if offered < MIN_REQUESTS_IN_WINDOW:
            return None
        return (progress.completed - start[1]) / offered


def _format(rule: AbortRule, observed: float) -> str:
    if rule.metric in ("p50", "p99"):
        return f"{observed:.0f} ms"
    return f"{observed:.1%}" if rule.metric == "error_rate" else f"{observed:.2f}"


def abort_monitor_for(scenario_rules, command_line_rules) -> AbortMonitor | None:
    """One monitor for the scenario's and the command line's rules; None when there are none."""
    rules = tuple(scenario_rules or ()) + tuple(command_line_rules or ())
    return AbortMonitor(rules) if rules else None
