"""Keeping a long run's directory within its ``retention.disk_budget``.

No Locust or gevent import. :class:`DiskBudget` is asked about once a second
(:meth:`DiskBudget.check`). It measures the run directory (every file in it,
whoever writes it, minus the reserve file that is given back at the end),
smooths its growth rate (exponential average, ``SMOOTHING``) and projects the
size at the planned end of the run:

* projected above ``TIGHT_SHARE`` of the budget → halve the sample rate
  (records and spans; at most once per ``ADJUST_EVERY_S``), down to 0;
* projected below ``LOOSE_SHARE`` → double it again, up to the configured rate;
* while the projection is above ``TIGHT_SHARE`` or the rate is lowered,
  spikes no longer keep their surroundings in full (:attr:`tight`);
* size above ``EXHAUSTED_SHARE`` of the budget → :attr:`exhausted`: the run
  must stop (it is never silently truncated).

What the harness cannot pace — signals and windows — sets the floor: a run
whose signals alone outgrow the budget stops when the budget is used up.
"""

from __future__ import annotations

import os

from tailscope.rundir.manifest import RESERVE_FILE

TIGHT_SHARE = 0.90
LOOSE_SHARE = 0.60
EXHAUSTED_SHARE = 0.98
SMOOTHING = 0.2
ADJUST_EVERY_S = 10.0
#: Below this share of the configured rate the rate drops to 0.
MIN_RATE_SHARE = 1 / 1024


def directory_bytes(path: str) -> int:
    """Bytes of the files directly in ``path`` (the reserve file excluded)."""
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith(RESERVE_FILE):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # a temporary file renamed meanwhile
    return total


class DiskBudget:
    """Sample-rate pacing against a byte budget (see module docstring)."""

    def __init__(self, run_dir: str, budget_bytes: int, end_ns: int, configured_rate: float):
        self.run_dir = run_dir
        self.budget_bytes = budget_bytes
        self.end_ns = end_ns
        self.configured_rate = configured_rate
        self.rate = configured_rate
        self.used_bytes = 0
        self.growth_bps = 0.0
        self.exhausted = False
        self.projected = 0.0  # bytes at the planned end, as of the last check
        self._last: tuple[int, int] | None = None  # (t_ns, used)
        self._last_adjust_ns = 0

    def projected_bytes(self, now_ns: int) -> float:
        """Size at the planned end if the directory keeps growing at the smoothed rate."""
        return self.used_bytes + self.growth_bps * max(0, self.end_ns - now_ns) / 1e9

    def check(self, now_ns: int) -> bool:
        """Measure, update :attr:`rate` and :attr:`exhausted`; True when the rate changed."""
        self.used_bytes = directory_bytes(self.run_dir)
        if self._last is not None and now_ns > self._last[0]:
            instant = (self.used_bytes - self._last[1]) / ((now_ns - self._last[0]) / 1e9)
            self.growth_bps += SMOOTHING * (max(instant, 0.0) - self.growth_bps)
        self._last = (now_ns, self.used_bytes)
        self.exhausted = self.used_bytes >= EXHAUSTED_SHARE * self.budget_bytes
        self.projected = projected = self.projected_bytes(now_ns)
        if now_ns - self._last_adjust_ns < ADJUST_EVERY_S * 1e9:
            return False
        old = self.rate
        if projected > TIGHT_SHARE * self.budget_bytes:
            halved = self.rate / 2
            self.rate = 0.0 if halved < self.configured_rate * MIN_RATE_SHARE else halved
        elif projected < LOOSE_SHARE * self.budget_bytes and self.rate < self.configured_rate:
            floor = self.configured_rate * MIN_RATE_SHARE
            self.rate = min(self.configured_rate, max(self.rate * 2, floor))
        if self.rate != old:
            self._last_adjust_ns = now_ns
            return True
        return False

    @property
    def tight(self) -> bool:
        """True while the budget cannot afford extra records (spike keeps are skipped):
        the rate was lowered, or the projection is above ``TIGHT_SHARE`` of the budget."""
        return (self.rate < self.configured_rate or self.exhausted
                or self.projected > TIGHT_SHARE * self.budget_bytes)
