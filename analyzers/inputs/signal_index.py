"""Signals on a common time grid, and robust contrasts of a spike against the baseline.

:class:`SignalIndex` sorts the long-form signal table once (O(r log r) for r
readings) and keeps each series as numpy arrays. ``binned(name, edges)``
puts a series on a grid of bins (epoch ns edges):

- a *counter* (cumulative, signals.json ``kind: counter``) becomes its average
  rate per second in each bin, from the cumulative value interpolated at the
  bin edges (a decrease — a counter reset — counts as a restart from 0);
- a *gauge* becomes the mean of its readings in each bin.

Bins not covered by readings are NaN. Cost per call: O(readings + bins).

:func:`contrast` compares the bins of a spike with the baseline bins the
way BARO ranks metrics: ``z = (spike level − baseline median) / baseline
spread``, spread = IQR / 1.349 (a standard deviation for normal data), with a
floor so a flat baseline does not make every wiggle infinite. The spike level
is the 75th percentile of the spike's bins, so a cause that covers only part
of a (generously widened) spike still shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.records import NS_PER_S, int_column

IQR_TO_SIGMA = 1.349


class SignalIndex:
    """Per-series (t_ns int64, value float64) arrays of one run, with each series' kind and unit."""

    def __init__(self, signals: pa.Table, meta: dict | None):
        self._series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        declared = (meta or {}).get("series", {})
        self._meta = {name: dict(info) for name, info in declared.items()}
        if len(signals) == 0:
            return
        valid = signals.filter(pc.and_(pc.is_valid(signals.column("series")), pc.is_valid(signals.column("value"))))
        encoded = valid.column("series").combine_chunks().dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = encoded.dictionary.to_pylist()
        t_ns, _ = int_column(valid, "t_ns")
        values = valid.column("value").to_numpy().astype(np.float64, copy=False)
        order = np.lexsort((t_ns, codes))
        codes, t_ns, values = codes[order], t_ns[order], values[order]
        bounds = np.searchsorted(codes, np.arange(len(names) + 1))
        for code, name in enumerate(names):
            lo, hi = bounds[code], bounds[code + 1]
            t, v = t_ns[lo:hi], values[lo:hi]
            finite = np.isfinite(v)
            self._series[name] = (t[finite], v[finite])

    def names(self) -> list[str]:
        return sorted(self._series)

    def has(self, name: str) -> bool:
        return name in self._series and len(self._series[name][0]) > 0

    def kind(self, name: str) -> str:
        return self._meta.get(name, {}).get("kind", "gauge")

    def unit(self, name: str) -> str:
        return self._meta.get(name, {}).get("unit", "")

    def readings(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(t_ns, value) of one series, in time order (empty arrays when absent)."""
        return self._series.get(name, (np.zeros(0, np.int64), np.zeros(0)))

    def binned(self, name: str, edges_ns: np.ndarray) -> np.ndarray:
        """Per-bin rate per second (counter) or mean (gauge); NaN where no reading covers a bin."""
        t, v = self.readings(name)
        bins = len(edges_ns) - 1
        if len(t) == 0 or bins <= 0:
            return np.full(max(bins, 0), np.nan)
        if self.kind(name) == "counter":
            return _counter_rates(t, v, edges_ns)
        index = np.searchsorted(edges_ns, t, side="right") - 1
        inside = (index >= 0) & (index < bins)
        sums = np.bincount(index[inside], weights=v[inside], minlength=bins)
        counts = np.bincount(index[inside], minlength=bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _counter_rates(t: np.ndarray, v: np.ndarray, edges_ns: np.ndarray) -> np.ndarray:
    steps = np.diff(v)
    steps = np.where(steps < 0, v[1:], steps)  # a reset restarts from 0
    monotone = np.concatenate(([0.0], np.cumsum(steps)))
    if len(t) < 2:
        return np.full(len(edges_ns) - 1, np.nan)
    cumulative = np.interp(edges_ns.astype(np.float64), t.astype(np.float64), monotone)
    rates = np.diff(cumulative) / (np.diff(edges_ns) / NS_PER_S)
    covered = (edges_ns[1:] > t[0]) & (edges_ns[:-1] < t[-1])
    return np.where(covered, rates, np.nan)


@dataclass(frozen=True)
class Contrast:
    """A spike's level of one series against its baseline bins (units of the series, per s for counters).

    ``spike`` is the level the confidence is judged on, taken inside the spike *widened* by its
    margin (run_inputs.margin_ns); ``place`` says where it was measured ("in the spike", "in the
    2 s after the spike", …). ``inside`` is the same statistic over the spike's own bins only
    (None when the series has no reading inside the spike): the figure a card quotes
    (:attr:`quoted`, :attr:`quoted_place`), so two spikes of one long episode quote their own
    levels, not the episode's peak beside both."""

    spike: float
    baseline: float
    spread: float
    z: float
    spike_bins: int
    baseline_bins: int
    inside: float | None = None
    place: str = "in the spike"

    @property
    def excess(self) -> float:
        return self.spike - self.baseline

    @property
    def quoted(self) -> float:
        """The level a sentence quotes: measured inside the spike when it has a reading there."""
        return self.inside if self.inside is not None else self.spike

    @property
    def quoted_place(self) -> str:
        """Where :attr:`quoted` was measured ("in the spike" or :attr:`place`)."""
        return "in the spike" if self.inside is not None else self.place

    def as_dict(self, digits: int = 4) -> dict:
        def r(x):
            return None if x is None or not np.isfinite(x) else float(round(x, digits))
        return {"spike": r(self.spike), "baseline": r(self.baseline), "spread": r(self.spread),
                "z": r(self.z), "excess": r(self.excess), "inside": r(self.inside), "place": self.place}


def place_words(level_start_ns: int, level_end_ns: int, start_ns: int, end_ns: int) -> str:
    """Where a level measured over [level_start_ns, level_end_ns) lies against a spike's
    [start_ns, end_ns): "in the spike", "in the 2 s before the spike", "in the 3 s after the spike",
    or "from 1 s before the spike to 2 s after it" (whole seconds, at least 1)."""
    before = max(0, start_ns - level_start_ns)
    after = max(0, level_end_ns - end_ns)
    if before == 0 and after == 0:
        return "in the spike"

    def secs(ns: int) -> str:
        return f"{max(1, round(ns / 1e9)):.0f} s"
    if level_end_ns <= start_ns:
        return f"in the {secs(start_ns - level_start_ns)} before the spike"
    if level_start_ns >= end_ns:
        return f"in the {secs(level_end_ns - end_ns)} after the spike"
    return (f"from {secs(before)} before the spike" if before else "from the spike's start") + (
        f" to {secs(after)} after it" if after else " to its end")


def contrast(values: np.ndarray, spike_bins: np.ndarray, baseline_bins: np.ndarray,
             floor: float = 0.0, level: float = 0.75) -> Contrast | None:
    """Robust z of the spike's ``level``-quantile bin value against the baseline bins; None without data.

    ``floor`` is the smallest spread allowed, in the series' units (also 5% of |baseline|).
    """
    spike = values[spike_bins]
    spike = spike[np.isfinite(spike)]
    base = values[baseline_bins]
    base = base[np.isfinite(base)]
    if len(spike) == 0 or len(base) < 3:
        return None
    median = float(np.median(base))
    q1, q3 = np.quantile(base, [0.25, 0.75])
    spread = max(float(q3 - q1) / IQR_TO_SIGMA, floor, 0.05 * abs(median), 1e-12)
    level_value = float(np.quantile(spike, level))
    return Contrast(level_value, median, spread, (level_value - median) / spread, len(spike), len(base))
