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
    try:
        batches, truncated = _read_valid_batches(path)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not batches:
        return TableRead(schema.empty_table(), truncated=truncated)
    try:
        try:
            table = pa.Table.from_batches(batches)
        except pa.ArrowInvalid:  # batches disagree on their schema: keep the first run of them
            table = pa.Table.from_batches([b for b in batches if b.schema.equals(batches[0].schema)])
            truncated = True
        return TableRead(_conform(table, schema, path), truncated=truncated)
    except UnicodeDecodeError as exc:  # a damaged schema (e.g. a flipped byte in a column name)
        raise RunDirError(f"{path}: damaged stream header ({exc.reason}); not readable") from exc


def _read_valid_batches(path: str) -> tuple[list[pa.RecordBatch], bool]:
    """Every complete, valid batch up to the first partial or corrupt one.

    Each batch is validated in full (offsets, lengths, UTF-8), so a file with
    flipped bits is cut at the damaged batch instead of crashing a reader later.
    Returns (batches, truncated)."""
    batches: list[pa.RecordBatch] = []
    with pa.memory_map(path, "r") as source:
        if source.size() == 0:
            return batches, False
        try:
            reader = pa.ipc.open_stream(source)
            _ = reader.schema.names  # a damaged header may hold names that are not UTF-8
        except (OSError, pa.ArrowException, UnicodeDecodeError):
            return batches, True
        while True:
            try:
                batch = reader.read_next_batch()
                batch.validate(full=True)
            except StopIteration:
                return batches, False
            except (OSError, pa.ArrowException):
                return batches, True
            batches.append(batch)


def _conform(table: pa.Table, schema: pa.Schema, path: str = "") -> pa.Table:
    """Add columns a newer schema has and an older run lacks (as nulls), in schema order.

    Raises :class:`RunDirError` naming the file and column when a column has a
    type that cannot be read as the schema's."""
    columns = []
    for field_ in schema:
        if field_.name in table.column_names:
            try:
                columns.append(table.column(field_.name).cast(field_.type))
            except (pa.ArrowException, ValueError) as exc:
                raise RunDirError(f"{path}: column {field_.name!r} has type "
                                  f"{table.column(field_.name).type}, expected {field_.type}") from exc
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
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON (not UTF-8 text at byte {exc.start})") from exc
    except (IsADirectoryError, PermissionError) as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror}") from exc


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
    #: Per-window histograms (windows.arrow); empty for runs written before format 1.1.
    windows: pa.Table | None = None

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
    check_manifest(manifest, os.path.join(path, fmt.MANIFEST))
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
        signals_meta=_json_object(os.path.join(path, fmt.SIGNALS_META)),
        receiver=_json_object(os.path.join(path, fmt.RECEIVER_STATS)),
        truncated=truncated,
        windows=tables[fmt.WINDOWS],
    )


def _json_object(path: str) -> dict:
    """A JSON file that must hold an object; {} when missing. Raises RunDirError otherwise."""
    value = read_json(path, {}) or {}
    if not isinstance(value, dict):
        raise RunDirError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


#: Manifest keys a reader relies on, with the JSON types each may have (None: null allowed).
_MANIFEST_TYPES = {
    "status": (str,), "name": (str, type(None)), "start_ns": (int, type(None)),
    "end_ns": (int, type(None)), "scenario": (dict, type(None)), "target": (str, type(None)),
    "host": (dict, type(None)), "options": (dict, type(None)),
}


def check_manifest(manifest, path: str) -> None:
    """Reject a manifest whose shape a reader cannot trust, naming the field."""
    if not isinstance(manifest, dict):
        raise RunDirError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    for key, types in _MANIFEST_TYPES.items():
        value = manifest.get(key)
        if key in manifest and (not isinstance(value, types) or isinstance(value, bool)):
            expected = " or ".join("null" if t is type(None) else
                                   {str: "a string", int: "an integer", dict: "an object"}[t] for t in types)
            raise RunDirError(f"{path}: {key}: expected {expected}, got {json.dumps(value)[:60]}")


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
