"""Building retained run directories (a ``retention`` policy's output) for the tests, in the real format.

:func:`retain_in_place` turns a full run directory (e.g. :func:`tailscope.testkit.synthetic.write_synthetic_run`)
into what the harness would have left under a retention policy with the given keep intervals and
sample rate: ``windows.arrow`` histograms counting every request (through the harness's own
:class:`~tailscope.loadgen.window_stats.WindowAggregator`), ``requests.arrow`` holding only every
error, the trace-id sample and the records scheduled in a keep interval, the spans of the same
traces (the receiver's rule), and ``retention.json``. :func:`simulate_kill` then makes it look like
a harness killed with ``kill -9``: streams cut at a byte, manifest still ``running``, a reserve file
of a process that no longer exists.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.loadgen.window_stats import WindowAggregator
from tailscope.rundir import read_stream, schema
from tailscope.rundir.manifest import RESERVE_BYTES, RESERVE_FILE, reserve_space
from tailscope.rundir.retention_policy import RetentionState, save_retention, trace_sampled


class _Rows:
    """An append(*values) sink collecting the WindowAggregator's rows."""

    def __init__(self):
        self.rows = []

    def append(self, *values):
        self.rows.append(values)


def _write_stream(path: str, table: pa.Table, schema_: pa.Schema, rows_per_batch: int = 8) -> None:
    """An Arrow IPC stream of small batches, as the harness's periodic flushes write."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema_) as writer:
        for batch in table.to_batches(max_chunksize=rows_per_batch):
            writer.write_batch(batch)


def retain_in_place(path: str, keep_ns: list[tuple[int, int]], sample_rate: float, *,
                    around_s: float = 10.0, window_s: float = 1.0) -> dict:
    """Rewrite the full run at ``path`` as a retained one (module docstring). ``keep_ns``: sorted,
    disjoint keep intervals (epoch ns). Returns ``{"requests", "kept"}``."""
    requests = read_stream(os.path.join(path, schema.REQUESTS), schema.REQUESTS_SCHEMA).table
    scheduled = requests.column("scheduled_ns").to_numpy(zero_copy_only=False)
    trace = requests.column("trace_id").to_pylist()
    error = requests.column("error_kind").to_pylist()
    in_keep = np.zeros(len(scheduled), dtype=bool)
    for lo, hi in keep_ns:
        in_keep |= (scheduled >= lo) & (scheduled <= hi)
    kept = np.array([e is not None or trace_sampled(t, sample_rate) for t, e in zip(trace, error)],
                    dtype=bool) | in_keep
    sink = _Rows()
    aggregator = WindowAggregator(sink, window_s)
    sent = requests.column("sent_ns").to_pylist()
    end = requests.column("end_ns").to_pylist()
    cls = requests.column("cls").to_pylist()
    for i in range(len(scheduled)):
        aggregator.add(int(scheduled[i]), sent[i], end[i], cls[i], error[i], bool(kept[i]))
        if i % 500 == 499:
            aggregator.emit()
    aggregator.emit()
    windows = pa.Table.from_pylist([dict(zip(schema.WINDOWS_SCHEMA.names, row)) for row in sink.rows],
                                   schema=schema.WINDOWS_SCHEMA)
    _write_stream(os.path.join(path, schema.WINDOWS), windows, schema.WINDOWS_SCHEMA)
    _write_stream(os.path.join(path, schema.REQUESTS), requests.filter(pa.array(kept)), schema.REQUESTS_SCHEMA)
    kept_traces = pa.array(sorted({t for t, k in zip(trace, kept) if k and t}), pa.string())
    for span_file in schema.table_files(path, schema.SPANS):
        spans = read_stream(span_file, schema.SPANS_SCHEMA).table
        _write_stream(span_file, spans.filter(pc.is_in(spans.column("trace_id"), kept_traces)),
                      schema.SPANS_SCHEMA)
    save_retention(path, RetentionState(sample_rate=sample_rate, configured_sample_rate=sample_rate,
                                        keep=[(int(lo), int(hi)) for lo, hi in keep_ns],
                                        full_records_around_spikes_s=around_s, hold_s=around_s + 3.0,
                                        disk_budget_bytes=200 * 10**6))
    return {"requests": int(len(scheduled)), "kept": int(kept.sum())}


def dead_pid() -> int:
    """A process id no process holds: above the kernel's pid_max."""
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
            return int(fh.read()) + 1
    except OSError:
        return 2**22 + 1


def simulate_kill(path: str, cut_share: float) -> str:
    """Leave ``path`` as a ``kill -9`` of the harness would: requests.arrow and windows.arrow cut at
    ``cut_share`` of their bytes (mid-batch, no end-of-stream), the manifest ``running`` with no end,
    and an 8 MiB ``.reserve-<pid>`` of a process that no longer exists. Returns the reserve's path."""
    for name in (schema.REQUESTS, schema.WINDOWS):
        file = os.path.join(path, name)
        size = os.path.getsize(file)
        with open(file, "r+b") as fh:
            fh.truncate(max(int(size * cut_share), 0))
    manifest_path = os.path.join(path, schema.MANIFEST)
    with open(manifest_path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    manifest.update(status="running", end_ns=None)
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh)
    reserve = os.path.join(path, f"{RESERVE_FILE}-{dead_pid()}")
    reserve_space(reserve, RESERVE_BYTES)
    return reserve


def reserves_left(path: str) -> list[str]:
    """The ``.reserve-*`` files in a run directory."""
    return [name for name in os.listdir(path) if name.startswith(RESERVE_FILE)]
