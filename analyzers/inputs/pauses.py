"""Pause intervals — GC pauses, a generator's pauses, a target's stalls — as a cumulative pause-time function.

:class:`Pauses` holds disjoint intervals (epoch ns, the union of overlapping ones), sorted, and
answers in O(log pauses) per request how much pause time lies inside any interval;
:func:`pauses_of` builds one from the run's events of a kind (``gc_pause``, ``generator_gc``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.records import NS_PER_MS, int_column


@dataclass(frozen=True)
class Pauses:
    """Disjoint pause intervals (union of overlapping ones), sorted, with a cumulative pause time."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    generation: np.ndarray  # highest generation among the merged pauses (-1 unknown)
    cumulative_ns: np.ndarray  # total pause time before each pause starts

    def __len__(self) -> int:
        return len(self.start_ns)

    def paused_before(self, t_ns: np.ndarray) -> np.ndarray:
        """Total pause time (ns) before each time (vectorised, O(log pauses) each)."""
        if len(self) == 0:
            return np.zeros(len(t_ns))
        i = np.searchsorted(self.start_ns, t_ns, side="right") - 1
        safe = np.clip(i, 0, None)
        within = np.clip(t_ns - self.start_ns[safe], 0, self.end_ns[safe] - self.start_ns[safe])
        return np.where(i >= 0, self.cumulative_ns[safe] + within, 0).astype(np.float64)

    def overlap_ms(self, begin_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
        """Pause time (ms) inside each interval [begin, end)."""
        return (self.paused_before(end_ns) - self.paused_before(begin_ns)) / NS_PER_MS

    def longest_overlapping(self, begin_ns: np.ndarray, end_ns: np.ndarray) -> tuple[float, int]:
        """(longest pause in ms, its generation) among pauses overlapping any of the intervals."""
        if len(self) == 0 or len(begin_ns) == 0:
            return 0.0, -1
        first = np.searchsorted(self.end_ns, begin_ns, side="right")
        last = np.searchsorted(self.start_ns, end_ns, side="left")
        hit = np.zeros(len(self) + 1, np.int64)
        np.add.at(hit, first, 1)
        np.add.at(hit, last, -1)
        overlapping = np.cumsum(hit)[:-1] > 0
        if not overlapping.any():
            return 0.0, -1
        lengths = (self.end_ns - self.start_ns) / NS_PER_MS
        best = int(np.argmax(np.where(overlapping, lengths, -1)))
        return float(lengths[best]), int(self.generation[best])


def pauses_of(events: pa.Table, kind: str) -> Pauses:
    """The union of the events of ``kind`` as :class:`Pauses` (generation parsed from attributes)."""
    if len(events) == 0:
        return Pauses(*(np.zeros(0, np.int64),) * 3, np.zeros(0))
    chosen = events.filter(pc.equal(events.column("kind"), kind))
    start, _ = int_column(chosen, "start_ns")
    end, _ = int_column(chosen, "end_ns")
    attributes = pc.fill_null(chosen.column("attributes"), "")
    generation = np.nan_to_num(np.fmax(_json_number(attributes, "generation"),
                                       _json_number(attributes, "gc.generation")), nan=-1).astype(np.int64)
    order = np.argsort(start, kind="stable")
    start, end, generation = start[order], np.maximum(end[order], start[order]), generation[order]
    if len(start) == 0:
        return Pauses(start, end, generation, np.zeros(0))
    running_end = np.maximum.accumulate(end)
    new_group = np.r_[True, start[1:] > running_end[:-1]]
    group = np.cumsum(new_group) - 1
    groups = int(group[-1]) + 1
    merged_start = start[new_group]
    merged_end = np.zeros(groups, np.int64)
    np.maximum.at(merged_end, group, end)
    merged_gen = np.full(groups, -1, np.int64)
    np.maximum.at(merged_gen, group, generation)
    lengths = merged_end - merged_start
    cumulative = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.float64)
    return Pauses(merged_start, merged_end, merged_gen, cumulative)


def _json_number(texts: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """The number after ``"key":`` in each JSON text (NaN where absent), without parsing the JSON."""
    pattern = '"' + key.replace(".", r"\.") + r'"\s*:\s*(?P<v>-?[0-9]+(?:\.[0-9]+)?)'
    found = pc.struct_field(pc.extract_regex(texts, pattern), [0])
    return pc.cast(found, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
