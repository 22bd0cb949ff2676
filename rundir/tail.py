"""Following tables while their writers still append: the batches added since the last look.

:class:`StreamTail` reads one Arrow IPC stream file from the byte offset where
it stopped last time, message by message through a read-only memory map, and
returns the complete record batches found there; a batch its writer has not
finished writing is left for the next call (its offset is not passed).
:class:`TableTail` does the same for every file of one logical table
(``NAME.arrow`` and ``NAME.<writer>.arrow``, :func:`~.schema.table_files`),
including files that appear later. The conductor uses it to see which spans
have arrived after the load stopped without reading the whole table again.

Cost per call: the new bytes' messages only (zero-copy views); the first call
on an existing file walks its message headers once, O(batches).
"""

from __future__ import annotations

import os

import pyarrow as pa

from tailscope.rundir.schema import table_files


class StreamTail:
    """The record batches appended to one Arrow stream file since the previous :meth:`read`."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.offset = 0  # bytes of whole messages consumed so far
        self.schema: pa.Schema | None = None

    def read(self, columns: tuple[str, ...] | None = None) -> list[pa.RecordBatch]:
        """Complete batches written since the last call (only ``columns`` when given)."""
        try:
            if os.path.getsize(self.path) <= self.offset:
                return []
            source = pa.memory_map(self.path)
        except OSError:
            return []
        batches = []
        try:
            source.seek(self.offset)
            while True:
                try:
                    message = pa.ipc.read_message(source)
                except (EOFError, OSError, pa.ArrowInvalid):
                    break  # the end of what is written, or a message still being written
                if message is None:
                    break
                if message.type == "schema":
                    self.schema = pa.ipc.read_schema(message)
                elif message.type == "record batch" and self.schema is not None:
                    batch = pa.ipc.read_record_batch(message, self.schema)
                    batches.append(batch.select(list(columns)) if columns else batch)
                self.offset = source.tell()
        finally:
            source.close()
        return batches


class TableTail:
    """:class:`StreamTail` over every file of one logical table of a run directory."""

    def __init__(self, run_dir: str | os.PathLike, name: str):
        self.run_dir = os.fspath(run_dir)
        self.name = name
        self.tails: dict[str, StreamTail] = {}

    def read(self, columns: tuple[str, ...] | None = None) -> list[pa.RecordBatch]:
        """Complete batches added to any of the table's files since the last call."""
        batches = []
        for path in table_files(self.run_dir, self.name):
            tail = self.tails.setdefault(path, StreamTail(path))
            batches.extend(tail.read(columns))
        return batches
