"""The ``retention`` scenario section: which per-request records a long run keeps.

No Locust or gevent import. Example (docs/scenario-format.md)::

    retention:
      full_records_around_spikes: 30s   # full records this long before and after a spike
      sample_rate: 0.01                 # share of other requests kept (by trace id)
      disk_budget: 2GB                  # cap on the whole run directory
      spike_factor: 3                   # a window is a spike when its P99 > 3 × running median
      window: 1s                        # histogram window of windows.arrow

Without the section every record is kept (``windows.arrow`` is written
either way). Errors are always kept unless the disk budget forces the sample
rate down. :func:`parse_retention` is the section parser registered in
:mod:`tailscope.scenario_model.sections`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RETENTION_FIELDS = {"full_records_around_spikes", "sample_rate", "disk_budget", "spike_factor",
                    "window", "baseline_windows", "keep_errors"}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|kB|KB|KiB|MB|MiB|GB|GiB|TB|TiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "kB": 10**3, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20,
               "GB": 10**9, "GiB": 2**30, "TB": 10**12, "TiB": 2**40}
#: Smallest disk budget accepted: the reserve file, the manifest and the report need room.
MIN_DISK_BUDGET_BYTES = 32 * 10**6


@dataclass(frozen=True)
class RetentionPolicy:
    """Record keeping of one run. Durations in seconds, sizes in bytes."""

    full_records_around_spikes_s: float = 30.0
    sample_rate: float = 0.01
    disk_budget_bytes: int | None = None
    spike_factor: float = 3.0
    window_s: float = 1.0
    baseline_windows: int = 300
    keep_errors: bool = True


def parse_size_bytes(value) -> int:
    """``"2GB"``, ``"500MiB"``, ``1048576`` → bytes. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 2GB or 500MB, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match:
            return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    raise ValueError(f"expected a size such as 2GB, 500MB or 1GiB, got {value!r}")


def parse_retention(value, path: tuple, reader) -> RetentionPolicy:
    """Section parser: YAML mapping → :class:`RetentionPolicy` (located errors via ``reader``)."""
    data = reader.mapping(value, path, RETENTION_FIELDS)
    around = reader.duration(data, path, "full_records_around_spikes", 30.0)
    if around < 0:
        raise reader.fail(path + ("full_records_around_spikes",), f"must be >= 0, got {around}")
    rate = reader.number(data, path, "sample_rate", 0.01)
    if not 0.0 <= rate <= 1.0:
        raise reader.fail(path + ("sample_rate",), f"must be between 0 and 1, got {rate}")
    budget = None
    if "disk_budget" in data:
        try:
            budget = parse_size_bytes(data["disk_budget"])
        except ValueError as exc:
            raise reader.fail(path + ("disk_budget",), str(exc)) from None
        if budget < MIN_DISK_BUDGET_BYTES:
            raise reader.fail(path + ("disk_budget",), f"must be at least 32MB, got {data['disk_budget']!r}")
    factor = reader.number(data, path, "spike_factor", 3.0)
    if not factor > 1.0:
        raise reader.fail(path + ("spike_factor",), f"must be > 1, got {factor}")
    window_s = reader.duration(data, path, "window", 1.0)
    if not 0.1 <= window_s <= 3600:
        raise reader.fail(path + ("window",), f"must be between 100ms and 1h, got {data['window']!r}")
    baseline = reader.number(data, path, "baseline_windows", 300, integer=True)
    if baseline < 10:
        raise reader.fail(path + ("baseline_windows",), f"must be >= 10, got {baseline}")
    keep_errors = data.get("keep_errors", True)
    if not isinstance(keep_errors, bool):
        raise reader.fail(path + ("keep_errors",), f"expected true or false, got {keep_errors!r}")
    return RetentionPolicy(float(around), float(rate), budget, float(factor), float(window_s),
                           int(baseline), keep_errors)
