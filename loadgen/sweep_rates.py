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
"""

from __future__ import annotations

#: Most steps a rate list may have (each step is a full run).
MAX_STEPS = 200


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
