"""Importing spans captured elsewhere into a run directory.

Two formats:

* ``otlp-json`` — what the OpenTelemetry Collector's ``file`` exporter writes:
  one OTLP/JSON ``ExportTraceServiceRequest`` per line. Lines holding metrics
  or logs (``resourceMetrics``, ``resourceLogs``) and blank lines are skipped
  and counted. Decoded by the receiver's own JSON decoder, so a span reads the
  same whether it was received or imported (events included).
* ``jaeger`` — Jaeger's JSON export (``{"data": [trace, ...]}``, as the UI's
  "Download" and the query API return it; a bare trace or a list of traces is
  accepted too): ``traceID``/``spanID`` (hex; 64-bit ids are left-padded to
  128), ``references`` (first ``CHILD_OF`` → parent; the rest → links),
  ``startTime`` and ``duration`` in µs, ``tags`` (→ attributes; ``span.kind``
  → kind; ``error``/``otel.status_code`` → status), ``logs`` (→ span events,
  named by their ``event`` field), ``processID`` → ``processes`` (service name,
  ``process.pid``/``pid`` tag).

Files ending in ``.gz`` (or starting with the gzip magic) are inflated.
Spans named ``gc.pause`` become ``gc_pause`` events, as in the receiver.

:func:`import_spans` writes ``spans.import.arrow`` (then ``spans.import-2.arrow``,
…) and ``events.import.arrow`` — new writer files that the run reader unions
with the receiver's. Spans whose (trace id, span id) the run already holds are
skipped, and so are GC pauses it already holds (importing a file twice adds nothing). All files are read and checked
before anything is visible: the streams are written under temporary names and
renamed at the end, so a bad file leaves the run directory as it was.
A problem raises :class:`SpanImportError` naming the file and line.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tailscope.rundir import Appender, load_run, schema
from tailscope.tracing.ingest.otlp_decode import GC_PAUSE_EVENT, GC_PAUSE_SPAN, MalformedPayload, SpanColumns, decode_traces_json

FORMATS = ("otlp-json", "jaeger")
IMPORT_WRITER = "import"
#: Rows buffered before a record batch is written (bounds memory on large files).
FLUSH_ROWS = 50_000
_GZIP_MAGIC = b"\x1f\x8b"
_US = 1_000  # ns per µs

_JAEGER_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_INT64_MAX = 2**63 - 1


class SpanImportError(ValueError):
    """A file that cannot be imported; ``str()`` is ``FILE:LINE: message``."""

    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = file, line, message


@dataclass
class FileImport:
    """What one file contributed."""

    file: str
    format: str
    spans: int = 0
    gc_events: int = 0
    duplicates: int = 0
    skipped_lines: int = 0


def read_text(path: str) -> str:
    """The file's text (gunzipped when compressed). Raises SpanImportError."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (OSError, EOFError) as exc:
        raise SpanImportError(path, 0, f"cannot read: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SpanImportError(path, 1, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def detect_format(text: str, path: str) -> str:
    """``otlp-json`` or ``jaeger`` from the content; raises SpanImportError when neither."""
    head = text.lstrip()[:4096]
    if '"resourceSpans"' in head or '"resourceMetrics"' in head or '"resourceLogs"' in head:
        return "otlp-json"
    if '"traceID"' in head or '"data"' in head:
        return "jaeger"
    raise SpanImportError(path, 1, "neither OTLP JSON lines (resourceSpans) nor a Jaeger JSON export "
                          "(data/traceID); give --format")


# --------------------------------------------------------------------------- OTLP JSON lines


def read_otlp_json_lines(text: str, path: str, result: FileImport) -> Iterator[SpanColumns]:
    """One SpanColumns per trace line of a Collector file-exporter file."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            raise SpanImportError(path, number, f"not a JSON object: {exc}") from None
        if not isinstance(data, dict):
            raise SpanImportError(path, number, "expected one OTLP JSON export request per line")
        if "resourceSpans" not in data:
            if data.keys() & {"resourceMetrics", "resourceLogs"} or not data:
                result.skipped_lines += 1
                continue
            raise SpanImportError(path, number, "no resourceSpans: not an OTLP JSON trace export line")
        try:
            yield decode_traces_json(stripped.encode("utf-8"))
        except MalformedPayload as exc:
            raise SpanImportError(path, number, str(exc)) from None


# --------------------------------------------------------------------------- Jaeger JSON


def _hex_id(value, digits: int, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > digits:
        raise MalformedPayload(f"{what} must be up to {digits} hex digits, got {value!r}")
    try:
        int(value, 16)
    except ValueError:
        raise MalformedPayload(f"{what} is not hex: {value!r}") from None
    return value.lower().rjust(digits, "0")


def _tag_value(tag: dict):
    value, kind = tag.get("value"), str(tag.get("type", "")).lower()
    if kind == "int64" and isinstance(value, str):
        return int(value)
    if kind == "float64" and isinstance(value, str):
        return float(value)
    if kind == "bool" and isinstance(value, str):
        return value.lower() == "true"
    return value


def _tags(tags) -> dict:
    if tags is None:
        return {}
    if not isinstance(tags, list) or not all(isinstance(t, dict) and isinstance(t.get("key"), str) for t in tags):
        raise MalformedPayload("tags must be a list of {key, type, value}")
    return {t["key"]: _tag_value(t) for t in tags}


def _jaeger_status(attrs: dict) -> int:
    status = str(attrs.pop("otel.status_code", "")).upper()
    if attrs.get("error") is True or status == "ERROR":
        return 2
    return 1 if status == "OK" else 0


def _jaeger_events(logs) -> str | None:
    if not logs:
        return None
    if not isinstance(logs, list):
        raise MalformedPayload("logs must be a list")
    events = []
    for log in logs:
        if not isinstance(log, dict) or not isinstance(log.get("timestamp"), int):
            raise MalformedPayload("each log needs an integer timestamp (µs)")
        fields = _tags(log.get("fields"))
        name = fields.pop("event", "log")
        events.append({"name": str(name), "t_ns": log["timestamp"] * _US, "attributes": fields})
    return json.dumps(events)


def _jaeger_process(span: dict, processes: dict) -> tuple[str | None, int | None]:
    process = span.get("process")
    if process is None and span.get("processID") is not None:
        process = processes.get(span["processID"])
    if not isinstance(process, dict):
        return None, None
    tags = _tags(process.get("tags"))
    pid = tags.get("process.pid", tags.get("pid"))
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 <= pid <= _INT64_MAX else None
    service = process.get("serviceName")
    return (str(service) if service is not None else None), pid


def _jaeger_span(out: SpanColumns, span: dict, processes: dict) -> None:
    if not isinstance(span, dict):
        raise MalformedPayload("span must be an object")
    trace_id = _hex_id(span.get("traceID"), 32, "traceID")
    span_id = _hex_id(span.get("spanID"), 16, "spanID")
    start_us, duration_us = span.get("startTime"), span.get("duration", 0)
    if not isinstance(start_us, int) or isinstance(start_us, bool) or start_us < 0:
        raise MalformedPayload(f"startTime must be a non-negative integer (µs), got {start_us!r}")
    if not isinstance(duration_us, int) or isinstance(duration_us, bool) or duration_us < 0:
        raise MalformedPayload(f"duration must be a non-negative integer (µs), got {duration_us!r}")
    start_ns, end_ns = start_us * _US, (start_us + duration_us) * _US
    if end_ns > _INT64_MAX:
        raise MalformedPayload("span times must fit in int64 epoch nanoseconds")
    parent, links = None, []
    references = span.get("references") or []
    if not isinstance(references, list):
        raise MalformedPayload("references must be a list")
    for ref in references:
        if not isinstance(ref, dict):
            raise MalformedPayload("each reference must be an object")
        ref_ids = (_hex_id(ref.get("traceID"), 32, "reference traceID"), _hex_id(ref.get("spanID"), 16, "reference spanID"))
        if ref.get("refType", "CHILD_OF") == "CHILD_OF" and parent is None and ref_ids[0] == trace_id:
            parent = ref_ids[1]
        else:
            links.append({"trace_id": ref_ids[0], "span_id": ref_ids[1]})
    attrs = _tags(span.get("tags"))
    kind = _JAEGER_KINDS.get(str(attrs.pop("span.kind", "")).lower(), 0)
    status = _jaeger_status(attrs)
    name = span.get("operationName", "")
    if not isinstance(name, str):
        raise MalformedPayload("operationName must be a string")
    service, pid = _jaeger_process(span, processes)
    if name == GC_PAUSE_SPAN:
        out.add_gc_pause(start_ns, end_ns, service, pid, attrs)
        return
    for column, value in (("trace_id", trace_id), ("span_id", span_id), ("parent_span_id", parent),
                          ("name", name), ("service", service), ("kind", kind), ("start_ns", start_ns),
                          ("end_ns", end_ns), ("status_code", status), ("attributes", json.dumps(attrs)),
                          ("links", json.dumps(links) if links else None), ("pid", pid),
                          ("events", _jaeger_events(span.get("logs")))):
        getattr(out, column).append(value)


def _jaeger_traces(document) -> list:
    if isinstance(document, dict) and "data" in document:
        traces = document["data"]
    elif isinstance(document, dict) and "spans" in document:
        traces = [document]
    else:
        traces = document
    if not isinstance(traces, list):
        raise MalformedPayload("expected {\"data\": [traces]}, a trace, or a list of traces")
    return traces


def _line_of(text: str, needle: str | None) -> int:
    """1-based line of ``needle``'s first occurrence in ``text`` (1 when absent)."""
    if not needle:
        return 1
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def read_jaeger(text: str, path: str, result: FileImport) -> Iterator[SpanColumns]:
    """One SpanColumns per trace of a Jaeger JSON export."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", 1)
        raise SpanImportError(path, line, f"not valid JSON: {getattr(exc, 'msg', exc)}") from None
    try:
        traces = _jaeger_traces(document)
    except MalformedPayload as exc:
        raise SpanImportError(path, 1, str(exc)) from None
    for t_index, trace in enumerate(traces):
        if not isinstance(trace, dict) or not isinstance(trace.get("spans", []), list):
            raise SpanImportError(path, 1, f"data[{t_index}]: a trace must be an object with a spans list")
        processes = trace.get("processes") or {}
        out = SpanColumns()
        for s_index, span in enumerate(trace.get("spans", [])):
            try:
                _jaeger_span(out, span, processes if isinstance(processes, dict) else {})
            except (MalformedPayload, TypeError, ValueError, AttributeError) as exc:
                span_id = span.get("spanID") if isinstance(span, dict) else None
                line = _line_of(text, f'"{span_id}"' if isinstance(span_id, str) else None)
                raise SpanImportError(path, line, f"data[{t_index}].spans[{s_index}]: {exc}") from None
        yield out


# --------------------------------------------------------------------------- writing

READERS: dict[str, Callable[[str, str, FileImport], Iterator[SpanColumns]]] = {
    "otlp-json": read_otlp_json_lines,
    "jaeger": read_jaeger,
}


def free_writer_name(run_dir: str) -> str:
    """``import``, or ``import-2``, ``import-3``, … : the first writer with no spans/events file yet."""
    n = 1
    while True:
        writer = IMPORT_WRITER if n == 1 else f"{IMPORT_WRITER}-{n}"
        if not any(os.path.exists(os.path.join(run_dir, schema.writer_file(name, writer)))
                   for name in (schema.SPANS, schema.EVENTS)):
            return writer
        n += 1


def _span_keys(trace_ids, span_ids) -> pa.Array:
    return pc.binary_join_element_wise(pa.array(trace_ids, pa.string()), pa.array(span_ids, pa.string()), "/")


class _ImportWriter:
    """Temporary span/event streams, renamed into place by ``commit``; ``discard`` removes them."""

    def __init__(self, run_dir: str, writer: str, known_keys: pa.Array, known_events: set):
        self.final = {name: os.path.join(run_dir, schema.writer_file(name, writer))
                      for name in (schema.SPANS, schema.EVENTS)}
        self.temp = {name: os.path.join(run_dir, "." + os.path.basename(path) + ".partial")
                     for name, path in self.final.items()}
        self.spans = Appender(self.temp[schema.SPANS], schema.SPANS_SCHEMA)
        self.events = Appender(self.temp[schema.EVENTS], schema.EVENTS_SCHEMA)
        self.known = known_keys
        self.known_events = known_events

    def add(self, columns: SpanColumns, result: FileImport) -> None:
        for row in columns.event_rows:
            key = _event_key(*row[:4])
            if key in self.known_events:
                result.duplicates += 1
                continue
            self.known_events.add(key)
            self.events.append(*row)
            result.gc_events += 1
        if not columns.span_count:
            return
        table = pa.table(columns.span_dict(), schema=schema.SPANS_SCHEMA)
        keys = _span_keys(columns.trace_id, columns.span_id)
        fresh = pc.invert(pc.is_in(keys, value_set=self.known))
        table, keys = table.filter(fresh), keys.filter(fresh)
        # Within the batch too: keep each key's first row.
        unique = pc.unique(keys)
        if len(unique) != len(keys):
            first = pc.index_in(unique, value_set=keys)
            table, keys = table.take(first), keys.take(first)
        result.duplicates += columns.span_count - len(table)
        result.spans += len(table)
        self.known = pa.concat_arrays([self.known, keys])
        self.spans.append_columns(table.to_pydict())
        if self.spans.pending() >= FLUSH_ROWS:
            self.spans.flush()

    def commit(self) -> list[str]:
        """Close the streams and rename the non-empty ones into place; return their paths."""
        self.spans.close()
        self.events.close()
        written = []
        for name, temp in self.temp.items():
            appender = self.spans if name == schema.SPANS else self.events
            if appender.rows_written:
                os.replace(temp, self.final[name])
                written.append(self.final[name])
            else:
                os.unlink(temp)
        return written

    def discard(self) -> None:
        for appender in (self.spans, self.events):
            try:
                appender.close()
            except OSError:
                pass
        for temp in self.temp.values():
            if os.path.exists(temp):
                os.unlink(temp)


def _event_key(kind, start_ns, end_ns, source) -> tuple:
    return (kind, int(start_ns), int(end_ns), source)


def _existing_keys(run_dir: str) -> tuple[pa.Array, set]:
    """(span keys "trace/span", GC-pause event keys) the run already holds."""
    run = load_run(run_dir)
    events = run.events.filter(pc.equal(run.events.column("kind"), GC_PAUSE_EVENT)).to_pylist()
    event_keys = {_event_key(e["kind"], e["start_ns"], e["end_ns"], e["source"]) for e in events}
    spans = run.spans
    if len(spans) == 0:
        return pa.array([], pa.string()), event_keys
    return _span_keys(spans.column("trace_id").combine_chunks(), spans.column("span_id").combine_chunks()), event_keys


def import_spans(run_dir: str, files: list[str], fmt: str = "auto") -> tuple[list[FileImport], list[str]]:
    """Import ``files`` into ``run_dir``; return (per-file results, files written).

    ``fmt`` is ``auto`` (detected per file), ``otlp-json`` or ``jaeger``. Raises
    SpanImportError (nothing is written), or RunDirError for a bad run directory."""
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    writer = _ImportWriter(run_dir, free_writer_name(run_dir), *_existing_keys(run_dir))
    results = []
    try:
        for path in files:
            text = read_text(path)
            file_fmt = detect_format(text, path) if fmt == "auto" else fmt
            result = FileImport(file=path, format=file_fmt)
            for columns in READERS[file_fmt](text, path, result):
                writer.add(columns, result)
            results.append(result)
    except BaseException:
        writer.discard()
        raise
    return results, writer.commit()
