"""Per-request columns as numpy arrays, with the derived latencies in ms.

Time columns stay int64 epoch ns (float64 would lose ~256 ns of precision at
today's epoch); nulls are replaced by 0 and tracked by masks. Derived
durations are float64 ms with NaN where a timestamp is missing.

Definitions (DESIGN.md, decision 3), one home each in
:mod:`tailscope.rundir.request_record` (the generator uses the same functions):
``latency = end − scheduled`` (:func:`latency_ns`), ``service_time = end − sent``
(:func:`service_ns`), ``lateness = sent − scheduled`` (:func:`lateness_ns`). A request is an *error* when its
``error_kind`` is set; it is *ok* when it has no error and an ``end_ns``.

Which requests count in latency percentiles (``in_latency``): every request
the service answered or failed to answer in time — successes, HTTP errors
(``http``: status >= 400, at their response time) and timeouts (``timeout``,
at ``sent + timeout``: a lower bound of their true latency). Leaving timeouts
out would hide exactly the requests that make the tail (the same mistake as
coordinated omission). Connection failures (``refused``, ``reset``), requests
the generator never sent (``dropped``) and ``other`` failures have no service
latency: they are counted as errors (and outages), never as latencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.rundir.request_record import latency_ns, lateness_ns, service_ns
from tailscope.support.units import NS_PER_MS, NS_PER_S  # noqa: F401 (re-exported to the analyzers)

#: Error kinds whose requests still count in latency percentiles (see module docstring).
LATENCY_ERROR_KINDS = ("http", "timeout")


def int_column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values int64 with nulls as 0, present mask) of an integer column."""
    column = table.column(name)
    values = pc.fill_null(column, 0).to_numpy().astype(np.int64, copy=False)
    present = pc.is_valid(column).to_numpy(zero_copy_only=False)
    return values, present


def take_rows(data: pa.Table | pa.ChunkedArray | pa.Array, rows: np.ndarray) -> pa.Table | pa.ChunkedArray | pa.Array:
    """``data.take(rows)``, chunk by chunk: Arrow's take on a chunked string column first
    concatenates every chunk (a copy of the whole column); this copies only the rows taken.
    O(len(rows) log chunks) plus the rows' bytes; rows in any order, repeats allowed."""
    rows = np.asarray(rows, dtype=np.int64)
    if isinstance(data, pa.Array):
        return data.take(pa.array(rows))
    chunks = data.to_batches() if isinstance(data, pa.Table) else data.chunks
    if len(chunks) <= 1:
        return data.take(pa.array(rows))
    starts = np.cumsum([0] + [len(chunk) for chunk in chunks])
    chunk_of = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(chunk_of, kind="stable")
    grouped, pieces = chunk_of[order], []
    bounds = np.searchsorted(grouped, np.arange(len(chunks) + 1))
    for c in range(len(chunks)):
        if bounds[c + 1] > bounds[c]:
            local = rows[order[bounds[c]:bounds[c + 1]]] - starts[c]
            pieces.append(chunks[c].take(pa.array(local)))
    if isinstance(data, pa.Table):
        taken = pa.Table.from_batches(pieces, schema=data.schema).combine_chunks()
    else:
        taken = pa.chunked_array(pieces, type=data.type).combine_chunks()
    if len(rows) and np.any(np.diff(order) < 0):  # rows were not grouped by chunk: restore their order
        taken = taken.take(pa.array(np.argsort(order, kind="stable")))
    return taken if isinstance(data, pa.Table) else pa.chunked_array([taken], type=data.type)


def string_column(table: pa.Table, name: str) -> np.ndarray:
    """An object array of str (None for null) of a string column."""
    return table.column(name).to_numpy(zero_copy_only=False)


def category_codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    """(code per row (int64, -1 for null), distinct non-null values) of a string column with
    few distinct values: row i holds ``values[codes[i]]``. O(n) hash pass."""
    column = table.column(name)
    distinct = pc.drop_null(pc.unique(column)) if len(column) else pa.array([], pa.string())
    codes = pc.fill_null(pc.index_in(column, value_set=distinct), -1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64, copy=False), distinct.to_pylist()


def category_column(table: pa.Table, name: str) -> np.ndarray:
    """Like :func:`string_column`, with one shared str object per distinct value: for
    columns with few distinct values (class names, error kinds), n pointers instead of
    n string objects. O(n) hash pass."""
    return _category_objects(*category_codes(table, name))


def _category_objects(codes: np.ndarray, values: list) -> np.ndarray:
    names = np.empty(len(values) + 1, dtype=object)
    names[:len(values)] = values  # code -1 picks the last entry: None
    return names[codes]


def _duration_ms(duration_ns, first: np.ndarray, second: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``duration_ns(first, second)`` (one of request_record's durations) in ms where ``valid``, NaN elsewhere."""
    out = np.full(len(first), np.nan)
    out[valid] = duration_ns(first[valid], second[valid]) / NS_PER_MS
    return out


@dataclass(frozen=True)
class RequestArrays:
    """The request table as arrays (length n, one entry per scheduled request)."""

    scheduled_ns: np.ndarray  # int64 epoch ns
    sent_ns: np.ndarray  # int64 epoch ns (0 when not sent)
    end_ns: np.ndarray  # int64 epoch ns (0 when missing)
    has_sent: np.ndarray  # bool
    has_end: np.ndarray  # bool
    cls: np.ndarray  # object: class name
    cls_code: np.ndarray  # int64: index into cls_values (-1: no class)
    cls_values: tuple  # the distinct class names, in first-seen order
    error_kind: np.ndarray  # object: None or kind
    error: np.ndarray  # object: None or message
    trace_ids: pa.ChunkedArray  # Arrow strings: 32 hex or null (``trace_id`` as Python objects)
    is_error: np.ndarray  # bool
    is_ok: np.ndarray  # bool: no error and an end time
    in_latency: np.ndarray  # bool: counts in latency percentiles (ok, http error or timeout, with an end)
    latency_ms: np.ndarray  # float64, end − scheduled, NaN when no end
    service_ms: np.ndarray  # float64, end − sent
    lateness_ms: np.ndarray  # float64, sent − scheduled

    @property
    def n(self) -> int:
        return len(self.scheduled_ns)

    @cached_property
    def trace_id(self) -> np.ndarray:
        """Object array of str (None for null) of the trace ids, built on first use: n Python
        strings (~90 bytes each), so large-run code paths read :attr:`trace_ids` instead."""
        return self.trace_ids.to_numpy(zero_copy_only=False)

    @cached_property
    def latency_order(self) -> np.ndarray:
        """Indices of every request by ascending ``latency_ms`` (NaN last): one sort, shared by
        every grouped latency quantile of the analysis (:meth:`latency_rows`)."""
        return np.argsort(self.latency_ms)

    def latency_rows(self, mask: np.ndarray) -> np.ndarray:
        """Indices of the requests a boolean ``mask`` selects, by ascending latency. O(n)."""
        order = self.latency_order
        return order[mask[order]]

    def class_names(self, where: np.ndarray | None = None) -> list[str]:
        """The class names of the requests (those ``where`` selects), sorted."""
        codes = self.cls_code if where is None else self.cls_code[where]
        present = np.flatnonzero(np.bincount(codes + 1, minlength=len(self.cls_values) + 1)[1:])
        return sorted(self.cls_values[i] for i in present)

    def class_mask(self, name: str) -> np.ndarray:
        """Boolean per request: its class is ``name`` (an integer comparison, not n string ones)."""
        try:
            return self.cls_code == self.cls_values.index(name)
        except ValueError:
            return np.zeros(self.n, dtype=bool)


def request_arrays(requests: pa.Table) -> RequestArrays:
    """Convert a requests table (schema REQUESTS_SCHEMA) to :class:`RequestArrays`. O(n)."""
    scheduled, _ = int_column(requests, "scheduled_ns")
    sent, has_sent = int_column(requests, "sent_ns")
    end, has_end = int_column(requests, "end_ns")
    is_error = pc.is_valid(requests.column("error_kind")).to_numpy(zero_copy_only=False)
    latency_error = pc.fill_null(pc.is_in(requests.column("error_kind"),
                                          value_set=pa.array(LATENCY_ERROR_KINDS, pa.string())),
                                 False).to_numpy(zero_copy_only=False)
    cls_code, cls_values = category_codes(requests, "cls")
    return RequestArrays(
        scheduled_ns=scheduled,
        sent_ns=sent,
        end_ns=end,
        has_sent=has_sent,
        has_end=has_end,
        cls=_category_objects(cls_code, cls_values),
        cls_code=cls_code,
        cls_values=tuple(cls_values),
        error_kind=category_column(requests, "error_kind"),
        error=category_column(requests, "error"),
        trace_ids=requests.column("trace_id"),
        is_error=is_error,
        is_ok=~is_error & has_end,
        in_latency=has_end & (~is_error | latency_error),
        latency_ms=_duration_ms(latency_ns, scheduled, end, has_end),
        service_ms=_duration_ms(service_ns, sent, end, has_end & has_sent),
        lateness_ms=_duration_ms(lateness_ns, scheduled, sent, has_sent),
    )
