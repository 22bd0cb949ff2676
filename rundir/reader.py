"""Reading a run directory, including one left behind by a killed harness.

A stream whose writer died mid-batch reads back every complete batch; the
partial last one is dropped and reported through ``truncated``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pyarrow as pa

from . import schema as fmt


class RunDirError(Exception):
    """A run directory that cannot be read: missing, not a run, or a newer format."""


@dataclass
class TableRead:
    """A table read from one stream file, with how the read went."""

    table: pa.Table
    truncated: bool = False  # the file ended inside a batch (writer killed)
    missing: bool = False  # the file does not exist


def read_stream(path: str | os.PathLike, schema: pa.Schema) -> TableRead:
    """Read every complete record batch of an Arrow IPC stream file.

    Returns an empty table of ``schema`` when the file is missing or empty.
    Cost: O(file size); memory: the table itself.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return TableRead(schema.empty_table(), missing=True)
    batches: list[pa.RecordBatch] = []
    truncated = False
    with pa.memory_map(path, "r") as source:
        if source.size() == 0:
            return TableRead(schema.empty_table(), truncated=False)
        try:
            reader = pa.ipc.open_stream(source)
        except (OSError, pa.ArrowInvalid):
            return TableRead(schema.empty_table(), truncated=True)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (OSError, pa.ArrowInvalid):
                truncated = True
                break
            batches.append(batch)
    if not batches:
        return TableRead(schema.empty_table(), truncated=truncated)
    table = pa.Table.from_batches(batches)
    return TableRead(_conform(table, schema), truncated=truncated)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Add columns a newer schema has and an older run lacks (as nulls), in schema order."""
    columns = []
    for field_ in schema:
        if field_.name in table.column_names:
            columns.append(table.column(field_.name).cast(field_.type))
        else:
            columns.append(pa.nulls(table.num_rows, type=field_.type))
    return pa.Table.from_arrays(columns, schema=schema)


def read_json(path: str | os.PathLike, default=None):
    """Read a JSON file; ``default`` when it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc


@dataclass
class Run:
    """Everything in a run directory, loaded. Tables are Arrow; convert as needed."""

    path: str
    manifest: dict
    requests: pa.Table
    spans: pa.Table
    signals: pa.Table
    events: pa.Table
    signals_meta: dict
    receiver: dict
    truncated: dict[str, bool] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when the harness finished the run and closed the directory."""
        return self.manifest.get("status") in ("complete", "aborted", "interrupted")


def load_run(path: str | os.PathLike) -> Run:
    """Load a run directory. Raises :class:`RunDirError` with a clear message."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise RunDirError(f"{path}: no such run directory")
    manifest = read_json(os.path.join(path, fmt.MANIFEST))
    if manifest is None:
        raise RunDirError(f"{path}: not a tailscope run directory (no {fmt.MANIFEST})")
    check_version(manifest.get("format_version"), path)
    tables = {}
    truncated = {}
    for name, schema in fmt.SCHEMAS.items():
        reads = [read_stream(p, schema) for p in fmt.table_files(path, name)]
        tables[name] = (
            pa.concat_tables([r.table for r in reads]) if reads else schema.empty_table()
        )
        truncated[name] = any(r.truncated for r in reads)
    return Run(
        path=path,
        manifest=manifest,
        requests=tables[fmt.REQUESTS],
        spans=tables[fmt.SPANS],
        signals=tables[fmt.SIGNALS],
        events=tables[fmt.EVENTS],
        signals_meta=read_json(os.path.join(path, fmt.SIGNALS_META), {}) or {},
        receiver=read_json(os.path.join(path, fmt.RECEIVER_STATS), {}) or {},
        truncated=truncated,
    )


def check_version(version, path: str) -> None:
    """Reject a run written by a newer, incompatible tailscope."""
    if not isinstance(version, str) or not version.split(".")[0].isdigit():
        raise RunDirError(f"{path}: manifest has no valid format_version (got {version!r})")
    major = int(version.split(".")[0])
    if major > fmt.FORMAT_MAJOR:
        raise RunDirError(
            f"{path}: run format {version} is newer than this tailscope reads "
            f"({fmt.FORMAT_VERSION}); upgrade tailscope"
        )
