"""Reading a run directory, including one left behind by a killed harness.

A stream whose writer died mid-batch reads back every complete batch; the
partial last one is dropped and reported through ``truncated``. A stream
whose bytes are wrong (not cut short: overwritten, flipped, not Arrow at all)
reads back every batch before the first bad one and is reported through
``damaged`` (:class:`Damage`: which batch, and why) — a different story for
the user: nothing was killed, the file was damaged.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from tailscope.rundir import schema as fmt


class RunDirError(Exception):
    """A run directory that cannot be read: missing, not a run, or a newer format."""


@dataclass(frozen=True)
class Damage:
    """Where a stream file stops being readable although its bytes go on: the batch
    (0-based; None when the stream's header, its schema, is bad) and why."""

    batch: int | None
    reason: str

    def describe(self, name: str) -> str:
        """One sentence naming the file and the batch, e.g. for a warning."""
        if self.batch is None:
            return f"{name} is damaged: its header is not a readable Arrow stream ({self.reason}); none of it was read"
        return (f"{name} is damaged at batch {self.batch} ({self.reason}): the {self.batch} batches before it "
                "were read, the rest of the file was not")


@dataclass
class TableRead:
    """A table read from one stream file, with how the read went."""

    table: pa.Table
    truncated: bool = False  # the file ended inside a batch (writer killed)
    missing: bool = False  # the file does not exist
    damaged: Damage | None = None  # bad bytes (not a cut): the batches before them were read
    #: The read-only memory map the table's buffers point into (None: nothing mapped).
    mapped: mmap.mmap | None = field(default=None, repr=False, compare=False)


def read_stream(path: str | os.PathLike, schema: pa.Schema) -> TableRead:
    """Read every complete record batch of an Arrow IPC stream file.

    Returns an empty table of ``schema`` when the file is missing or empty.
    Cost: O(file size) to validate; memory: the table is a zero-copy view of a read-only
    memory map, resident only while its pages are read (:func:`release_pages`).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return TableRead(schema.empty_table(), missing=True)
    try:
        mapped = _map_read_only(path)
        batches, truncated, damaged = _read_valid_batches(mapped) if mapped is not None else ([], False, None)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not batches:
        return TableRead(schema.empty_table(), truncated=truncated, damaged=damaged)
    try:
        differs = [i for i, b in enumerate(batches) if not b.schema.equals(batches[0].schema)]
        if differs:  # batches disagree on their schema: keep the ones before the first that differs
            batches = batches[:differs[0]]
            damaged = Damage(differs[0], "its schema differs from the stream's")
        table = pa.Table.from_batches(batches)
        return TableRead(_conform(table, schema, path), truncated=truncated, mapped=mapped, damaged=damaged)
    except UnicodeDecodeError as exc:  # a damaged schema (e.g. a flipped byte in a column name)
        raise RunDirError(f"{path}: damaged stream header ({exc.reason}); not readable") from exc


def _read_valid_batches(mapped: mmap.mmap) -> tuple[list[pa.RecordBatch], bool, Damage | None]:
    """Every complete, valid batch up to the first partial or corrupt one.

    Each batch is validated in full (offsets, lengths, UTF-8), so a file with
    flipped bits is cut at the damaged batch instead of crashing a reader later.
    Validation runs on :data:`VALIDATION_THREADS` threads (Arrow releases the GIL
    while it validates). The batches are zero-copy views of a read-only memory map;
    after each batch is validated the map's pages are dropped from the process (they
    stay in the page cache and come back on first use), so validating a file costs
    little more resident memory than the batches being validated, and columns the
    analysis never reads are never resident. Returns (batches, truncated, damage): the
    stream ended inside a message (:func:`_cut_short`), or its bytes are bad from
    ``damage.batch`` on."""
    batches: list[pa.RecordBatch] = []
    source = pa.BufferReader(pa.py_buffer(mapped))
    try:
        reader = pa.ipc.open_stream(source)
        _ = reader.schema.names  # a damaged header may hold names that are not UTF-8
    except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:
        if _cut_short(mapped, 0, exc):
            return batches, True, None
        return batches, False, Damage(None, _damage_reason(mapped, 0, exc))
    truncated, damage = False, None
    while True:  # framing only: cheap, and a partial last batch ends the stream
        offset = source.tell()
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            if source.tell() < len(mapped):  # an end marker with bytes after it: written over
                damage = Damage(len(batches), f"an end-of-stream marker with {len(mapped) - source.tell():,} "
                                              "bytes after it")
            break
        except (OSError, pa.ArrowException) as exc:
            if _cut_short(mapped, offset, exc):
                truncated = True
            else:
                damage = Damage(len(batches), _damage_reason(mapped, offset, exc))
            break
    valid = _validated_prefix(batches, mapped)
    if valid < len(batches):
        return batches[:valid], False, Damage(valid, "its contents do not validate")
    return batches, truncated, damage


#: Arrow IPC's continuation marker, which starts every message of a stream we write.
_CONTINUATION = b"\xff\xff\xff\xff"
_BODY_SHORT = re.compile(r"read (\d+) bytes for message body")


def _cut_short(mapped: mmap.mmap, offset: int, error: Exception) -> bool:
    """Whether the message starting at ``offset`` failed because the file ends inside it
    (its framing is intact and it extends past the end: a writer killed while writing)
    rather than because its bytes are bad."""
    size = len(mapped)
    head = mapped[offset:offset + 8]
    if head[:4] != _CONTINUATION[:len(head[:4])]:
        return False  # not the start of a message: bad bytes
    if len(head) < 8:
        return True  # the file ends inside the message's prefix
    metadata_end = offset + 8 + int.from_bytes(head[4:], "little", signed=True)
    if metadata_end <= offset + 8:
        return False
    if metadata_end > size:
        return metadata_end - size < 1 << 24  # a plausible length, cut short (random bytes claim gigabytes)
    body = _BODY_SHORT.search(str(error))
    return body is not None and metadata_end + int(body.group(1)) > size


def _damage_reason(mapped: mmap.mmap, offset: int, error: Exception) -> str:
    """Why the message at ``offset`` cannot be read: no message marker there (bytes that are not
    an Arrow stream's), else Arrow's own message on one line (at most 120 characters)."""
    if mapped[offset:offset + 4] != _CONTINUATION:
        return f"byte {offset:,} holds no Arrow message marker: not the bytes an Arrow stream has there"
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 120 else text[:117] + "..."


#: Threads that validate the batches of one file.
VALIDATION_THREADS = max(1, min(2, os.cpu_count() or 1))


def _validated_prefix(batches: list[pa.RecordBatch], mapped: mmap.mmap) -> int:
    """How many leading batches pass full validation (all of them when none fails)."""
    def valid(batch: pa.RecordBatch) -> bool:
        try:
            batch.validate(full=True)
            return True
        except (OSError, pa.ArrowException):
            return False
        finally:
            _release_pages(mapped)

    if VALIDATION_THREADS == 1 or len(batches) < 2:
        verdicts = map(valid, batches)
    else:
        with ThreadPoolExecutor(VALIDATION_THREADS, thread_name_prefix="tailscope-validate") as pool:
            verdicts = list(pool.map(valid, batches))
    for index, ok in enumerate(verdicts):
        if not ok:
            return index
    return len(batches)


def _map_read_only(path: str) -> mmap.mmap | None:
    """A read-only shared memory map of the whole file; None for an empty file."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _release_pages(mapped: mmap.mmap) -> None:
    """Drop the map's resident pages (clean, file-backed: later reads fault them back in)."""
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_DONTNEED") and not mapped.closed:
        mapped.madvise(mmap.MADV_DONTNEED)


def release_pages(run: Run) -> None:
    """Hand back the resident pages of the run's memory-mapped tables.

    The pages are clean copies of the files (the kernel could drop them under pressure
    anyway); a later read of a column faults its pages in again from the page cache, at
    the cost of a minor fault per page. A long analysis calls this between phases so that
    columns read once (trace ids for the join, names, attributes) stop counting in its
    resident memory. The tables stay valid."""
    for mapped in run.mapped:
        _release_pages(mapped)


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
        # json's own messages may end in "at" ("Invalid control character at"): the position follows once
        raise RunDirError(f"{path}: not valid JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno}, "
                          f"column {exc.colno})") from exc
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
    #: Stream files (by file name, e.g. ``requests.arrow``) whose bytes are bad, and where.
    damaged: dict[str, Damage] = field(default_factory=dict)
    #: Per-window histograms (windows.arrow); empty for runs written before format 1.1.
    windows: pa.Table | None = None
    #: The read-only memory maps the tables point into (see :func:`release_pages`).
    mapped: list = field(default_factory=list, repr=False, compare=False)

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
    damaged = {}
    mapped = []
    for name, schema in fmt.SCHEMAS.items():
        files = fmt.table_files(path, name)
        reads = [read_stream(p, schema) for p in files]
        mapped += [r.mapped for r in reads if r.mapped is not None]
        damaged.update({os.path.basename(p): r.damaged for p, r in zip(files, reads) if r.damaged is not None})
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
        damaged=damaged,
        windows=tables[fmt.WINDOWS],
        mapped=mapped,
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
