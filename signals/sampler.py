"""The sampler plug-in interface and the cheap file reads samplers share
(one-shot reads and line parsing of kernel files live in :mod:`tailscope.support.procfs`).

A sampler is a small object with a ``name``, a ``probe()`` that says whether
it can run here (``None``) or why not (a one-line reason), a ``series()`` map
of what it emits, and a ``read(now_ns)`` that returns ``(series, value)``
pairs for one tick. Counters are cumulative values (never deltas), gauges are
instantaneous; units are in each :class:`SeriesMeta`.

A sampler whose series are discovered while it runs (a Prometheus endpoint
that grows a new label set) also has an integer ``series_version`` that it
increments whenever ``series()`` gains entries; the runner then rewrites
``signals.json`` so every stored series stays described.

A sampler that reads off the tick (a Prometheus endpoint scraped by its own
thread, so a slow server never delays the others) returns :class:`Batch`
items from ``read()`` instead of rows: each batch's rows are written at the
batch's own ``t_ns``, the time they describe, not the tick's. A sampler that
holds threads or connections has a ``close()``, which the runner calls once
at the end (:func:`close_sampler`; samplers without one hold nothing).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from tailscope.support.procfs import READ_CHUNK, read_text

GAUGE = "gauge"
COUNTER = "counter"

#: Default sampling rate of the runner and of samplers that keep their own schedule, ticks per second.
DEFAULT_RATE_HZ = 10.0

#: /proc times are in clock ticks (USER_HZ); this converts them to seconds.
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class SeriesMeta:
    """What one series means: ``unit`` (e.g. "s", "bytes", "count"), ``kind``
    ("gauge" instantaneous or "counter" cumulative) and a one-line description."""

    unit: str
    kind: Literal["gauge", "counter"]
    description: str


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows ``(series, value)`` that describe the moment ``t_ns`` (epoch ns), read off the tick."""

    t_ns: int
    rows: list[tuple[str, float]]


@runtime_checkable
class Sampler(Protocol):
    """One source of signals (see module docstring)."""

    name: str

    def probe(self) -> str | None:
        """None if this sampler can run here, else a one-line reason why not."""

    def series(self) -> dict[str, SeriesMeta]:
        """Every series this sampler may emit, with its meaning."""

    def read(self, now_ns: int) -> Iterable[tuple[str, float]] | list[Batch]:
        """One tick's values; ``now_ns`` is the tick time in epoch ns. Either rows that
        describe ``now_ns``, or :class:`Batch` items (never both) each at its own time."""


def close_sampler(sampler: Sampler) -> None:
    """Release what ``sampler`` holds (threads, connections) by its ``close()``;
    a sampler without one holds nothing and this does nothing."""
    close = getattr(sampler, "close", None)
    if close is not None:
        close()


class OpenFiles:
    """Kernel files kept open between ticks and re-read with ``pread`` at offset 0.

    /proc, sysfs and cgroupfs regenerate a file's text on every read from
    offset 0, so keeping the descriptor saves an open and a close per read
    (about half the system calls of a tick). A file whose read fails (its
    task exited, its cgroup was removed) is closed and forgotten; the error
    is raised as by :func:`read_text`. ``close()`` releases every descriptor.
    """

    def __init__(self):
        self._fds: dict[str, int] = {}

    def read(self, path: str) -> str:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            self._fds[path] = fd
        try:
            chunks = []
            offset = 0
            while data := os.pread(fd, READ_CHUNK, offset):
                chunks.append(data)
                offset += len(data)
        except OSError:
            self.forget(path)
            raise
        return b"".join(chunks).decode("ascii", "replace")

    def forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def forget_missing(self, keep) -> None:
        """Close every file whose path is not in ``keep`` (e.g. threads that exited)."""
        for path in [p for p in self._fds if p not in keep]:
            self.forget(path)

    def close(self) -> None:
        for path in list(self._fds):
            self.forget(path)

    def __len__(self) -> int:
        return len(self._fds)

    def __del__(self):
        self.close()


def find_line_int(text: str, key: str) -> int | None:
    """The integer after ``key`` on the line that starts with ``key``; None if absent.

    Much cheaper than parsing every line when only a few keys of a long file
    (/proc/vmstat, /proc/<pid>/status) are needed.
    """
    if text.startswith(key):
        start = 0
    else:
        start = text.find("\n" + key)
        if start < 0:
            return None
        start += 1
    start += len(key)
    end = text.find("\n", start)
    value = text[start:end if end >= 0 else None].split()
    return int(value[0]) if value and value[0].lstrip("-").isdigit() else None


def probe_readable(path: str) -> str | None:
    """None if ``path`` can be read, else a one-line reason."""
    try:
        read_text(path)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return None
