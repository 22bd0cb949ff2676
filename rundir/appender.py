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
from collections.abc import Iterable, Sequence

import pyarrow as pa

#: Default interval between flushes. The contract is "at least once a second".
FLUSH_INTERVAL_S = 0.5


class DiskFullError(OSError):
    """Raised when a flush fails because the device has no space left."""


#: Exit status of a writing child process (receiver, sampler) that stopped
#: because its disk filled up (28 is ENOSPC); the conductor maps it to
#: "disk full" without needing to read anything from the full disk.
EXIT_DISK_FULL = 28


class Appender:
    """Buffers rows of one schema and appends them to an Arrow IPC stream file.

    Thread-safe: ``append``/``append_many`` may be called from any thread while
    another flushes. Memory is bounded by the rows appended between flushes.
    After a failed flush (:attr:`error` set, e.g. disk full) further rows are
    counted in :attr:`rows_lost` and discarded, so memory stays bounded.
    ``compression`` ("zstd", "lz4" or None) compresses each batch's buffers.
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema, compression: str | None = None):
        self.path = os.fspath(path)
        self.schema = schema
        self._names = schema.names
        self._columns: list[list] = [[] for _ in self._names]
        self._lock = threading.Lock()
        self._sink = open(self.path, "wb")
        options = pa.ipc.IpcWriteOptions(compression=compression) if compression else None
        self._writer = pa.ipc.new_stream(self._sink, schema, options=options)
        self._sink.flush()
        self.rows_written = 0
        self.rows_lost = 0
        self.error: OSError | None = None
        self._closed = False

    def append(self, *values) -> None:
        """Append one row, values in schema order; trailing columns left out are
        null (so a writer that predates columns added at a schema's end still fits)."""
        with self._lock:
            if self.error is not None:
                self.rows_lost += 1
                return
            for column, value in zip(self._columns, values):
                column.append(value)
            if len(values) < len(self._columns):
                for column in self._columns[len(values):]:
                    column.append(None)

    def append_record(self, record: tuple) -> None:
        """Append one row given as a tuple of every column in schema order (a
        :class:`~tailscope.rundir.request_record.RequestRecord` for ``REQUESTS_SCHEMA``)."""
        with self._lock:
            if self.error is not None:
                self.rows_lost += 1
                return
            for column, value in zip(self._columns, record):
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
            if self.error is not None:
                self.rows_lost += n
                return
            for name, column in zip(self._names, self._columns):
                values = columns.get(name)
                column.extend(values if values is not None else [None] * n)

    def pending(self) -> int:
        return len(self._columns[0])

    def flush(self) -> int:
        """Write buffered rows as one record batch; return the number written."""
        with self._lock:
            if self._closed or self.error is not None or not self._columns[0]:
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
            self.rows_lost += batch.num_rows
            if exc.errno == 28:  # ENOSPC
                self.error = DiskFullError(28, f"disk full while writing {self.path}")
                raise self.error from exc
            self.error = exc
            raise
        self.rows_written += batch.num_rows
        return batch.num_rows

    def bytes_written(self) -> int:
        """Size of the stream file so far, bytes (0 when it cannot be read)."""
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def close(self) -> None:
        """Flush, write the end-of-stream marker and close the file.

        Raises the flush's error (e.g. :class:`DiskFullError`) after closing the
        file; an appender that already failed closes without raising again."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
                try:
                    if self.error is None:
                        self._writer.close()
                    self._sink.close()
                except OSError as exc:  # the end-of-stream marker did not fit
                    if self.error is None:
                        self.error = DiskFullError(28, f"disk full while closing {self.path}") \
                            if exc.errno == 28 else exc
                        raise self.error from exc


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

    def start(self) -> PeriodicFlusher:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush_all()
            except BaseException as exc:  # noqa: BLE001 — surfaced to the owner through .error
                self.error = exc
                return

    def flush_all(self) -> None:
        for appender in self.appenders:
            appender.flush()

    def stop(self) -> None:
        """Stop the thread, then flush and close every appender.

        Never raises for a write error: every appender gets closed and the
        first error is kept in :attr:`error` for the owner to report."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for appender in self.appenders:
            try:
                appender.close()
            except OSError as exc:
                self.error = self.error or exc
