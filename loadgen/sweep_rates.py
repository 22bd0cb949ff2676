"""Which offered rates (or concurrencies) a load sweep runs: a list, a range, or a peak search.

No Locust import. ``tailscope sweep`` runs one full run per step
(docs/sweep.md); this module only decides the levels.

- :func:`parse_rates`: ``"50:500:50"`` (start:stop:step, stop included when
  the steps land on it) or ``"50,100,200"``.
- :func:`parse_concurrency`: the same for concurrency mode, whole numbers
  (``"1,2,4,8,16"``, ``"8:64:8"``).
- :class:`PeakSearch`: MLPerf-style peak finding between two bounds: probe the
  lower bound (it must pass), then the upper bound (if it passes, it is the
  answer), then bisect until the bracket is narrower than ``tolerance_rps``
  or ``max_steps`` runs were spent. The answer is the highest rate that passed.
- When a list of levels stops early: :data:`STOP_AFTER_FAILED_STEPS` steps in a row
  failed their SLOs (:func:`early_stop_note`), or the service saturated (the scenario's
  ``sweep`` section, :class:`SweepPolicy`; the rule itself is
  ``analyzers/patterns/load_sweep.saturation_stop``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Most steps a rate list may have (each step is a full run).
MAX_STEPS = 200
#: In a list of levels, stop after this many consecutive steps failed their SLOs
#: (the target is past its limit; more load only hurts it). ``--keep-going`` disables it.
STOP_AFTER_FAILED_STEPS = 2
#: Steps run past the saturation knee before a sweep stops (scenario ``sweep.steps_past_knee``).
DEFAULT_STEPS_PAST_KNEE = 2


@dataclass(frozen=True)
class SweepPolicy:
    """The scenario's ``sweep`` section: whether a list of rates or concurrencies stops at
    saturation (throughput stopped growing while latency kept rising) and how many steps
    past the knee it runs first (>= 1: the steps that show the knee is one)."""

    stop_at_saturation: bool = True
    steps_past_knee: int = DEFAULT_STEPS_PAST_KNEE


#: The ``sweep`` section's fields and their defaults.
SWEEP_SECTION_FIELDS = ("stop_at_saturation", "steps_past_knee")


def parse_sweep_section(value, path: tuple, reader) -> SweepPolicy:
    """Scenario section parser for ``sweep`` (tailscope.scenario_model.sections), e.g.
    ``sweep: {stop_at_saturation: true, steps_past_knee: 2}``; errors name the file, line and
    field through ``reader.fail``."""
    if not isinstance(value, dict):
        raise reader.fail(path, f"expected a mapping like {{stop_at_saturation: true, steps_past_knee: 2}}, "
                                f"got {value!r}")
    for key in value:
        if key not in SWEEP_SECTION_FIELDS:
            raise reader.fail(path + (key,), f"unknown field {key!r}; expected one of "
                              f"{', '.join(SWEEP_SECTION_FIELDS)}")
    stop = value.get("stop_at_saturation", True)
    if not isinstance(stop, bool):
        raise reader.fail(path + ("stop_at_saturation",), f"expected true or false, got {stop!r}")
    steps = value.get("steps_past_knee", DEFAULT_STEPS_PAST_KNEE)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise reader.fail(path + ("steps_past_knee",), f"expected a whole number >= 1, got {steps!r}")
    return SweepPolicy(stop_at_saturation=stop, steps_past_knee=steps)


def early_stop_note(failed_in_a_row: int, rates_left: int, keep_going: bool, what: str = "rate") -> str | None:
    """The line that says the sweep stops early, or None: a sweep stops after
    STOP_AFTER_FAILED_STEPS consecutive failing steps (unless ``keep_going``), and only
    says so when rates were left to run — after its last step there is nothing to stop.
    ``what``: the word for a step's level ("rate", "concurrency level")."""
    if keep_going or failed_in_a_row < STOP_AFTER_FAILED_STEPS or rates_left <= 0:
        return None
    skipped = f"{rates_left} remaining {what}{'s' if rates_left != 1 else ''}"
    return (f"{failed_in_a_row} steps in a row failed their SLOs: stopping the sweep, {skipped} not run "
            f"(--keep-going runs every {what})")


def parse_rates(text: str) -> list[float]:
    """Rates in requests/s from ``start:stop:step`` or a comma-separated list.

    Raises ValueError with the reason. Rates must be > 0; a list keeps its order."""
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"expected START:STOP:STEP such as 50:500:50, got {text!r}")
        start, stop, step = (_rate(p, text) for p in parts)
        if stop < start:
            raise ValueError(f"{text!r}: STOP ({stop:g}) is below START ({start:g})")
        count = int((stop - start) / step + 1e-9) + 1
        if count > MAX_STEPS:
            raise ValueError(f"{text!r} makes {count} steps; at most {MAX_STEPS}")
        return [round(start + i * step, 9) for i in range(count)]
    rates = [_rate(p, text) for p in text.split(",") if p.strip()]
    if not rates:
        raise ValueError("no rates given")
    if len(rates) > MAX_STEPS:
        raise ValueError(f"{len(rates)} rates; at most {MAX_STEPS}")
    return rates


def parse_concurrency(text: str) -> list[int]:
    """Concurrency levels (requests kept in flight) from ``start:stop:step`` or a
    comma-separated list, as :func:`parse_rates` reads them; each a whole number >= 1.

    Raises ValueError with the reason."""
    levels = []
    for value in parse_rates(text):
        if value != int(value):
            raise ValueError(f"{text!r}: a concurrency is a whole number of requests, got {value:g}")
        levels.append(int(value))
    return levels


def _rate(part: str, text: str) -> float:
    try:
        value = float(part)
    except ValueError:
        raise ValueError(f"{text!r}: {part.strip()!r} is not a number of requests/s") from None
    if not value > 0:
        raise ValueError(f"{text!r}: rates must be > 0, got {part.strip()}")
    return value


class PeakSearch:
    """Bisection for the highest rate that meets the SLOs, between ``low`` and ``high`` (req/s).

    Use: ``while (rate := search.next_rate()) is not None: search.record(rate, passed)``.
    Assumes pass/fail is monotone in the rate (a service that holds its SLOs at
    a rate holds them below it); ``best`` is the highest passing rate seen.
    """

    def __init__(self, low: float, high: float, tolerance_rps: float, max_steps: int = 8):
        if not (0 < low < high):
            raise ValueError(f"search bounds must satisfy 0 < low < high, got {low:g} and {high:g}")
        if not tolerance_rps > 0:
            raise ValueError(f"tolerance must be > 0 requests/s, got {tolerance_rps!r}")
        if max_steps < 2:
            raise ValueError(f"a search needs at least 2 steps (both bounds), got {max_steps}")
        self.low, self.high = low, high
        self.tolerance_rps = tolerance_rps
        self.max_steps = max_steps
        self.best: float | None = None
        self.history: list[tuple[float, bool]] = []
        self._pass_floor: float | None = None  # highest rate known to pass
        self._fail_ceiling: float | None = None  # lowest rate known to fail

    def next_rate(self) -> float | None:
        """The next rate to run, or None when the search is over."""
        if len(self.history) >= self.max_steps:
            return None
        if not self.history:
            return self.low
        if len(self.history) == 1:
            return self.high if self.history[0][1] else None  # the lower bound failed: nothing passes
        if self._fail_ceiling is None:
            return None  # the upper bound passed
        if self._fail_ceiling - self._pass_floor <= self.tolerance_rps:
            return None
        return round((self._pass_floor + self._fail_ceiling) / 2, 6)

    def record(self, rate: float, passed: bool) -> None:
        """The outcome of the step run at ``rate``."""
        self.history.append((rate, bool(passed)))
        if passed:
            self._pass_floor = rate if self._pass_floor is None else max(self._pass_floor, rate)
            self.best = self._pass_floor
        else:
            self._fail_ceiling = rate if self._fail_ceiling is None else min(self._fail_ceiling, rate)

    @property
    def bracket(self) -> tuple[float | None, float | None]:
        """(highest passing rate, lowest failing rate) found so far."""
        return self._pass_floor, self._fail_ceiling
