"""Crash-safe columnar appends: an Arrow IPC stream written batch by batch.

Rows are buffered in per-column Python lists (one ``list.append`` per column:
no per-row allocation beyond the values) and written as one record batch on
:meth:`Appender.flush`. The stream is never rewritten, so a ``kill -9`` leaves
a file whose complete batches all read back; only the batch being written is
lost. :class:`PeriodicFlusher` flushes every appender at a fixed interval
(default 0.5 s), which bounds that loss to the last interval.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable, Sequence

import pyarrow as pa

#: Default interval between flushes. The contract is "at least once a second".
FLUSH_INTERVAL_S = 0.5


class DiskFullError(OSError):
    """Raised when a flush fails because the device has no space left."""


class Appender:
    """Buffers rows of one schema and appends them to an Arrow IPC stream file.

    Thread-safe: ``append``/``append_many`` may be called from any thread while
    another flushes. Memory is bounded by the rows appended between flushes.
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        self.path = os.fspath(path)
        self.schema = schema
        self._names = schema.names
        self._columns: list[list] = [[] for _ in self._names]
        self._lock = threading.Lock()
        self._sink = open(self.path, "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)
        self._sink.flush()
        self.rows_written = 0
        self._closed = False

    def append(self, *values) -> None:
        """Append one row, values in schema order."""
        with self._lock:
            for column, value in zip(self._columns, values):
                column.append(value)

    def append_row(self, row: dict) -> None:
        """Append one row given as a dict; missing columns are null."""
        self.append(*(row.get(name) for name in self._names))

    def append_columns(self, columns: dict[str, Sequence]) -> None:
        """Append many rows given column-wise (all sequences of equal length)."""
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of unequal length: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        with self._lock:
            for name, column in zip(self._names, self._columns):
                values = columns.get(name)
                column.extend(values if values is not None else [None] * n)

    def pending(self) -> int:
        return len(self._columns[0])

    def flush(self) -> int:
        """Write buffered rows as one record batch; return the number written."""
        with self._lock:
            if self._closed or not self._columns[0]:
                return 0
            columns, self._columns = self._columns, [[] for _ in self._names]
        batch = pa.RecordBatch.from_arrays(
            [pa.array(col, type=field.type) for col, field in zip(columns, self.schema)],
            schema=self.schema,
        )
        try:
            self._writer.write_batch(batch)
            self._sink.flush()
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC
                raise DiskFullError(28, f"disk full while writing {self.path}") from exc
            raise
        self.rows_written += batch.num_rows
        return batch.num_rows

    def close(self) -> None:
        """Flush, write the end-of-stream marker and close the file."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            self._writer.close()
            self._sink.close()


class PeriodicFlusher:
    """Flushes a set of appenders every ``interval_s`` seconds on a daemon thread.

    A flush error (e.g. disk full) is kept in :attr:`error` and stops the
    flusher; the owner checks it and stops the run rather than losing data
    silently.
    """

    def __init__(self, appenders: Iterable[Appender], interval_s: float = FLUSH_INTERVAL_S):
        self.appenders = list(appenders)
        self.interval_s = interval_s
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tailscope-flusher", daemon=True)

    def start(self) -> "PeriodicFlusher":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush_all()
            except BaseException as exc:  # surfaced to the owner through .error
                self.error = exc
                return

    def flush_all(self) -> None:
        for appender in self.appenders:
            appender.flush()

    def stop(self) -> None:
        """Stop the thread, then flush and close every appender."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for appender in self.appenders:
            appender.close()
