"""The abort monitor: stop a run that is hurting its target or cannot mean anything.

The rules (a scenario's ``abort_on`` and ``tailscope run --abort-on RULE``, e.g.
``error_rate > 50% over 10s``) are parsed by :mod:`tailscope.scenario_model.abort_rules`,
which documents their syntax. A rule is judged once per progress report (about 1 s) and
only when its window is full and held at least ``MIN_REQUESTS_IN_WINDOW`` requests, so a
run never aborts on its first few replies. The first rule that trips stops the load
through :meth:`RunContext.abort`: the run is marked ``aborted`` with the reason (manifest
``abort_reasons``), then analysed and reported as usual, and its verdict fails.

No Locust import: :class:`AbortMonitor` is a run companion by shape
(``start``/``on_progress``/``stop``, see tailscope.conductor.companion.Companion).
"""

from __future__ import annotations

from collections import deque

from tailscope.loadgen.arrivals import expected_arrivals
from tailscope.scenario_model.abort_rules import DEFAULT_WINDOW_S, AbortRule

#: A window with fewer ended requests than this is not judged.
MIN_REQUESTS_IN_WINDOW = 20


class AbortMonitor:
    """A run companion: judges the abort rules on every progress report and
    aborts the run (``ctx.abort``) on the first that trips."""

    name = "abort monitor"

    def __init__(self, rules: tuple[AbortRule, ...]):
        self.rules = tuple(rules)
        self.stat_windows_s = tuple(sorted({r.window_s for r in self.rules}))
        self.tripped: AbortRule | None = None
        self._ctx = None  # tailscope.conductor.companion.RunContext
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
