"""Reading the recorded data a scenario can replay: arrival logs, sizes, bodies.

No Locust or gevent import. Each loader reads the whole file once, before
any load is sent, and rejects the first bad line with a :class:`DataFileError`
naming the file and the line (``arrivals.txt:17: ...``). Blank lines and
lines starting with ``#`` are skipped in the text formats.

- :func:`load_arrival_log`: one number per line, in ``unit`` (s, ms, us, ns):
  absolute ``timestamps`` (any origin, non-decreasing; e.g. epoch seconds from
  an access log) or inter-arrival ``gaps``. Returns int64 ns offsets from the
  first arrival. Memory: 8 bytes per arrival.
- :func:`load_sizes`: one non-negative integer (bytes) per line.
- :func:`load_bodies`: JSON lines, each a complete JSON document sent verbatim
  (its bytes as they are in the file, without the line break).
"""

from __future__ import annotations

import json
import os

import numpy as np

TIME_UNITS_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


class DataFileError(ValueError):
    """A data file that cannot be used. ``str()`` is ``path:line: message``
    (``line`` 0 when the problem is the file as a whole)."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.line = line
        self.message = message


def _lines(path: str):
    """(line number, stripped text) of every non-blank, non-comment line."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DataFileError(path, number, "not UTF-8 text") from None
            if text and not text.startswith("#"):
                yield number, text


def load_arrival_log(path: str | os.PathLike, fmt: str = "timestamps", unit: str = "s") -> np.ndarray:
    """Send offsets (int64 ns from the first arrival, non-decreasing) from an arrival log."""
    path = os.fspath(path)
    if unit not in TIME_UNITS_NS:
        raise DataFileError(path, 0, f"unknown time unit {unit!r}; expected one of {', '.join(TIME_UNITS_NS)}")
    if fmt not in ("timestamps", "gaps"):
        raise DataFileError(path, 0, f"unknown format {fmt!r}; expected timestamps or gaps")
    scale = TIME_UNITS_NS[unit]
    values: list[float] = []
    previous = None
    for number, text in _lines(path):
        try:
            value = float(text.split()[0].rstrip(","))
        except ValueError:
            raise DataFileError(path, number, f"expected a number ({unit}), got {text[:40]!r}") from None
        if not np.isfinite(value):
            raise DataFileError(path, number, f"expected a finite number, got {text[:40]!r}")
        if fmt == "gaps" and value < 0:
            raise DataFileError(path, number, f"a gap must be >= 0, got {value:g}")
        if fmt == "timestamps" and previous is not None and value < previous:
            raise DataFileError(path, number, f"timestamps must not decrease ({value:g} after {previous:g})")
        previous = value
        values.append(value)
    if not values:
        raise DataFileError(path, 0, "no arrivals in the file")
    array = np.asarray(values, dtype=np.float64)
    offsets = np.cumsum(array) - array[0] if fmt == "gaps" else array - array[0]
    return np.rint(offsets * scale).astype(np.int64)


def load_sizes(path: str | os.PathLike) -> np.ndarray:
    """Sizes in bytes (int64), one per line, for an empirical size distribution."""
    path = os.fspath(path)
    sizes = []
    for number, text in _lines(path):
        try:
            size = int(text.split()[0].rstrip(","))
        except ValueError:
            raise DataFileError(path, number, f"expected a size in bytes (an integer), got {text[:40]!r}") from None
        if size < 0:
            raise DataFileError(path, number, f"a size must be >= 0, got {size}")
        sizes.append(size)
    if not sizes:
        raise DataFileError(path, 0, "no sizes in the file")
    return np.asarray(sizes, dtype=np.int64)


def load_bodies(path: str | os.PathLike) -> tuple[bytes, ...]:
    """Request bodies from a JSON-lines file, each checked to be valid JSON."""
    path = os.fspath(path)
    bodies = []
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataFileError(path, 0, f"cannot read: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise DataFileError(path, number, f"not a JSON document: {exc}") from None
            bodies.append(bytes(line))
    if not bodies:
        raise DataFileError(path, 0, "no bodies in the file")
    return tuple(bodies)
