"""Seeded synthetic runs with named, injected jitter: the analyzers' fixtures.

``write_synthetic_run`` writes a complete run directory in the real format
(through :class:`RunWriter` and :class:`Appender`) as the real processes would:
requests (harness), spans and ``gc_pause`` events (receiver files), signals and
``signals.json`` (sampler), ``receiver.json``, and the injected jitter as
``fault`` events (ground truth). Arrivals are Poisson at ``rate`` requests/s.

Each request's server time is the sum of five stage spans (preprocess,
queue_wait, batch_wait, inference, postprocess; lognormal durations per
class) plus 0.1–0.3 ms of unaccounted server overhead; the network adds about
0.15 ms each way. A spike ``{"kind", "at_s", "duration_s", "extra_ms"}`` adds
``extra_ms × U(0.75, 1.25)`` to the matching stage of every request scheduled
in ``[at_s, at_s + duration_s)``: gc→inference (and gc_pause events),
queue→queue (and a deep queue), cpu→preprocess (and busy CPU, run-queue wait),
throttle→inference (and CFS throttled time), postprocess→postprocess,
network→client/network time. ``"stage"`` in a spike overrides the mapping.

Everything is numpy-vectorised: ~1 M requests (6 M spans) take tens of
seconds, dominated by Arrow conversion of the string columns.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping, Sequence

import numpy as np

from . import schema as fmt
from .appender import Appender
from .manifest import RunWriter, write_json_atomic

#: 2026-01-01T00:00:00Z in epoch ns: synthetic runs are reproducible to the ns.
SYNTHETIC_START_NS = 1_767_225_600 * 1_000_000_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

#: Stage spans in trace order: (span name, stage).
STAGE_SPANS = (("preprocess", "preprocess"), ("queue_wait", "queue"), ("batch_wait", "batch_wait"),
               ("inference", "inference"), ("postprocess", "postprocess"))
#: Median stage durations in ms per class (other class names use "short").
STAGE_MEDIANS_MS = {
    "short": (1.5, 1.0, 0.5, 8.0, 0.8),
    "long": (4.0, 1.0, 0.5, 30.0, 2.0),
}
#: Log-space sigma of each stage's lognormal duration.
STAGE_SIGMAS = (0.25, 0.5, 0.3, 0.2, 0.25)
#: Which stage each named kind of jitter slows.
SPIKE_STAGE = {"gc": "inference", "queue": "queue", "cpu": "preprocess", "throttle": "inference",
               "postprocess": "postprocess", "network": "client_network"}
SIGNAL_INTERVAL_S = 0.5
SERVER_SPAN_NAME = "POST /v1/infer/text"
ROWS_PER_BATCH = 200_000

SIGNAL_META = {
    "host.cpu.busy": {"unit": "%", "kind": "gauge", "source": "host", "description": "CPU busy, all cores"},
    "target.runq_wait_ns": {"unit": "ns", "kind": "counter", "source": "process",
                            "description": "target's time waiting on a run queue (/proc/<pid>/schedstat)"},
    "target.queue_depth": {"unit": "requests", "kind": "gauge", "source": "target",
                           "description": "requests waiting in the batcher queue"},
    "cgroup.cpu.throttled_ns": {"unit": "ns", "kind": "counter", "source": "cgroup",
                                "description": "CFS throttled time of the target's cgroup"},
}


def _hex_ids(rng: np.random.Generator, n: int, nbytes: int) -> np.ndarray:
    """n random lowercase hex ids of ``nbytes`` bytes each (numpy str array)."""
    raw = rng.bytes(n * nbytes).hex().encode("ascii")
    return np.frombuffer(raw, dtype=f"S{2 * nbytes}").astype(str)


def _append(appender: Appender, columns: Mapping[str, Sequence]) -> None:
    """Append column-wise in batches of ROWS_PER_BATCH rows, flushing each."""
    n = len(next(iter(columns.values()))) if columns else 0
    for lo in range(0, n, ROWS_PER_BATCH):
        chunk = {k: (v[lo:lo + ROWS_PER_BATCH].tolist() if isinstance(v, np.ndarray)
                     else list(v[lo:lo + ROWS_PER_BATCH])) for k, v in columns.items()}
        appender.append_columns(chunk)
        appender.flush()


def _normalise_spikes(spikes: Iterable[Mapping], start_ns: int) -> list[dict]:
    out = []
    for spike in spikes:
        kind = spike["kind"]
        stage = spike.get("stage", SPIKE_STAGE.get(kind))
        if stage is None:
            raise ValueError(f"unknown spike kind {kind!r}; expected one of {', '.join(SPIKE_STAGE)} "
                             "or an explicit 'stage'")
        begin = start_ns + int(float(spike["at_s"]) * NS_PER_S)
        out.append({"kind": kind, "stage": stage, "start_ns": begin,
                    "end_ns": begin + int(float(spike["duration_s"]) * NS_PER_S),
                    "extra_ms": float(spike["extra_ms"])})
    return out


def write_synthetic_run(path, *, duration_s: float = 60, rate: float = 50, seed: int = 0,
                        spikes: Iterable[Mapping] = (), with_spans: bool = True, with_signals: bool = True,
                        classes: Sequence[str] = ("short", "long"), span_loss: float = 0.0,
                        error_rate: float = 0.002, error_message: str = "HTTP 503: queue full",
                        lateness_ms: float = 0.05, name: str = "synthetic",
                        status: str = "complete") -> dict:
    """Write a seeded synthetic run to ``path``; return its ground truth.

    ``span_loss`` drops the whole trace of that share of requests (receiver
    loss); ``lateness_ms`` is the mean (exponential) send lateness; ``status``
    ``"running"`` leaves the manifest as a killed harness would.
    Ground truth: ``{"path", "start_ns", "end_ns", "requests", "errors",
    "spans", "spikes": [{"kind", "stage", "start_ns", "end_ns", "extra_ms",
    "requests_affected"}]}``.
    """
    rng = np.random.default_rng(seed)
    path = os.fspath(path)
    start_ns = SYNTHETIC_START_NS
    gaps = rng.exponential(1.0 / rate, size=int(rate * duration_s * 1.2) + 16)
    offsets_s = np.cumsum(gaps) - gaps[0]
    scheduled = start_ns + (offsets_s[offsets_s < duration_s] * NS_PER_S).astype(np.int64)
    n = len(scheduled)
    weights = np.array([0.7, 0.3]) if tuple(classes) == ("short", "long") else np.ones(len(classes))
    cls_index = rng.choice(len(classes), size=n, p=weights / weights.sum())
    cls = np.asarray(classes, dtype=object)[cls_index]
    injected = _normalise_spikes(spikes, start_ns)

    medians = np.array([STAGE_MEDIANS_MS.get(c, STAGE_MEDIANS_MS["short"]) for c in classes])[cls_index]
    stage_ms = medians * np.exp(rng.standard_normal((n, len(STAGE_SPANS))) * np.array(STAGE_SIGMAS))
    net_in_ms = 0.15 * np.exp(0.2 * rng.standard_normal(n))
    net_out_ms = 0.15 * np.exp(0.2 * rng.standard_normal(n))
    stage_names = [stage for _, stage in STAGE_SPANS]
    for spike in injected:
        hit = (scheduled >= spike["start_ns"]) & (scheduled < spike["end_ns"])
        extra = spike["extra_ms"] * rng.uniform(0.75, 1.25, size=int(hit.sum()))
        if spike["stage"] == "client_network":
            net_out_ms[hit] += extra
        else:
            stage_ms[hit, stage_names.index(spike["stage"])] += extra
        spike["requests_affected"] = int(hit.sum())

    is_error = rng.random(n) < error_rate
    stage_ms[is_error] = 0.0
    lateness = rng.exponential(lateness_ms, size=n)
    sent = scheduled + (lateness * NS_PER_MS).astype(np.int64)
    server_start = sent + (net_in_ms * NS_PER_MS).astype(np.int64)
    overhead_in = (rng.uniform(0.05, 0.15, size=n) * NS_PER_MS).astype(np.int64)
    overhead_out = (rng.uniform(0.05, 0.15, size=n) * NS_PER_MS).astype(np.int64)
    bounds = server_start[:, None] + overhead_in[:, None] + np.concatenate(
        [np.zeros((n, 1), np.int64), np.cumsum((stage_ms * NS_PER_MS).astype(np.int64), axis=1)], axis=1)
    server_end = bounds[:, -1] + overhead_out
    end = server_end + (net_out_ms * NS_PER_MS).astype(np.int64)
    trace_ids = _hex_ids(rng, n, 16)

    manifest = {
        "name": name,
        "start_ns": start_ns,
        "target": "http://127.0.0.1:8000",
        "seed": seed,
        "synthetic": True,
        "scenario": {
            "name": name,
            "duration_s": duration_s,
            "arrival": {"process": "poisson", "rate": rate},
            "classes": [{"name": c, "path": "/v1/infer/text"} for c in classes],
            "slo": ["p99 < 250ms", "error_rate < 1%"],
        },
    }
    writer = RunWriter(path, manifest)
    try:
        _append(writer.requests, {
            "scheduled_ns": scheduled, "sent_ns": sent, "end_ns": end,
            "first_byte_ns": server_end + (net_out_ms * NS_PER_MS / 2).astype(np.int64),
            "cls": cls, "status": np.where(is_error, 503, 200).astype(np.int32),
            "bytes_out": rng.integers(200, 4000, size=n), "bytes_in": rng.integers(100, 800, size=n),
            "trace_id": trace_ids,
            "error_kind": np.where(is_error, "http", None).astype(object),
            "error": np.where(is_error, error_message, None).astype(object),
            "chunks": np.zeros(n, np.int32), "worker": np.zeros(n, np.int32),
        })
        for spike in injected:
            writer.add_event("fault", spike["start_ns"], spike["end_ns"], "synthetic",
                             {"name": spike["kind"], "stage": spike["stage"], "extra_ms": spike["extra_ms"]})
        spans_written = 0
        if with_spans:
            kept = rng.random(n) >= span_loss
            spans_written = _write_spans(path, rng, kept, is_error, trace_ids, server_start, server_end, bounds)
            _write_gc_events(path, rng, start_ns, duration_s, injected)
            write_json_atomic(os.path.join(path, fmt.RECEIVER_STATS), {
                "spans_received": spans_written, "spans_stored": spans_written, "spans_dropped": 0,
                "export_requests": max(1, spans_written // 512), "decode_errors": 0,
            })
        if with_signals:
            _write_signals(path, rng, start_ns, duration_s, rate, injected)
    finally:
        if status == "running":
            writer.flusher.stop()
        else:
            writer.close(status=status)
    writer.update(end_ns=int(end.max()) if n else start_ns)
    return {
        "path": path, "start_ns": start_ns, "end_ns": int(end.max()) if n else start_ns,
        "requests": n, "errors": int(is_error.sum()), "spans": spans_written, "spikes": injected,
    }


def _write_spans(path, rng, kept, is_error, trace_ids, server_start, server_end, bounds) -> int:
    """Server span + five stage spans per kept request (server span only for errors)."""
    rows = np.flatnonzero(kept)
    m = len(rows)
    per = len(STAGE_SPANS) + 1
    span_ids = _hex_ids(rng, m * per, 8).reshape(m, per)
    parent_of_server = _hex_ids(rng, m, 8)
    starts = np.column_stack([server_start[rows], bounds[rows, :-1]])
    ends = np.column_stack([server_end[rows], bounds[rows, 1:]])
    names = np.array([SERVER_SPAN_NAME] + [name for name, _ in STAGE_SPANS], dtype=object)
    batch_size = rng.integers(1, 9, size=m)
    attributes = np.full((m, per), "{}", dtype=object)
    attributes[:, 1 + 3] = [f'{{"batch.size": {int(b)}, "batch.id": "b{int(r) // 4}"}}'
                            for b, r in zip(batch_size, rows)]
    parents = np.column_stack([parent_of_server] + [span_ids[:, 0]] * len(STAGE_SPANS))
    keep = np.ones((m, per), dtype=bool)
    keep[is_error[rows], 1:] = False
    status = np.zeros((m, per), np.int8)
    status[is_error[rows], 0] = 2
    kind = np.ones((m, per), np.int8)
    kind[:, 0] = 2
    columns = {
        "trace_id": np.repeat(trace_ids[rows][:, None], per, axis=1)[keep],
        "span_id": span_ids[keep], "parent_span_id": parents[keep],
        "name": np.broadcast_to(names, (m, per))[keep], "service": np.full(int(keep.sum()), "reference-target"),
        "kind": kind[keep], "start_ns": starts[keep], "end_ns": ends[keep], "status_code": status[keep],
        "attributes": attributes[keep], "pid": np.full(int(keep.sum()), 4242, np.int64),
    }
    appender = Appender(os.path.join(path, fmt.SPANS), fmt.SPANS_SCHEMA)  # the receiver writes spans.arrow
    try:
        _append(appender, columns)
    finally:
        appender.close()
    return int(keep.sum())


def _write_gc_events(path, rng, start_ns, duration_s, injected) -> None:
    """Background gen-0 pauses (1–3 ms, every ~2 s) and gen-2 pauses through gc spikes."""
    background = start_ns + (np.arange(0.7, duration_s, 2.0) * NS_PER_S).astype(np.int64)
    length = (rng.uniform(1.0, 3.0, size=len(background)) * NS_PER_MS).astype(np.int64)
    starts, ends, generation = [background], [background + length], [np.zeros(len(background), np.int64)]
    for spike in (s for s in injected if s["kind"] == "gc"):
        step = max(int(spike["extra_ms"] * NS_PER_MS * 2), NS_PER_MS)
        pauses = np.arange(spike["start_ns"], spike["end_ns"], step, dtype=np.int64)
        starts.append(pauses)
        ends.append(pauses + int(spike["extra_ms"] * NS_PER_MS))
        generation.append(np.full(len(pauses), 2))
    start_all, end_all, gen_all = map(np.concatenate, (starts, ends, generation))
    order = np.argsort(start_all, kind="stable")
    appender = Appender(os.path.join(path, fmt.writer_file(fmt.EVENTS, "receiver")), fmt.EVENTS_SCHEMA)
    try:
        _append(appender, {
            "kind": np.full(len(order), "gc_pause"), "start_ns": start_all[order], "end_ns": end_all[order],
            "source": np.full(len(order), "target"),
            "attributes": [json.dumps({"gc.generation": int(g), "gc.collected": 100 * (int(g) + 1),
                                       "gc.uncollectable": 0}) for g in gen_all[order]],
        })
    finally:
        appender.close()


def _write_signals(path, rng, start_ns, duration_s, rate, injected) -> None:
    """Four series every 0.5 s (gauges as read, counters cumulative) and signals.json."""
    t = start_ns + (np.arange(0.0, duration_s + SIGNAL_INTERVAL_S, SIGNAL_INTERVAL_S) * NS_PER_S).astype(np.int64)
    k = len(t)
    cpu = np.clip(35 + 5 * rng.standard_normal(k), 0, 100)
    runq_rate = 2e6 * np.exp(0.2 * rng.standard_normal(k))  # ns/s
    queue = rng.poisson(rate * 0.001, size=k).astype(float)
    throttle_rate = np.zeros(k)
    for spike in injected:
        hit = (t >= spike["start_ns"]) & (t < spike["end_ns"])
        if spike["kind"] == "cpu":
            cpu[hit] = np.clip(95 + 2 * rng.standard_normal(int(hit.sum())), 0, 100)
            runq_rate[hit] = 4e8
        elif spike["kind"] == "queue":
            queue[hit] += rate * spike["extra_ms"] / 1000.0
        elif spike["kind"] == "throttle":
            throttle_rate[hit] = 3e8
    interval = SIGNAL_INTERVAL_S
    series = {
        "host.cpu.busy": cpu,
        "target.runq_wait_ns": np.cumsum(runq_rate * interval),
        "target.queue_depth": queue,
        "cgroup.cpu.throttled_ns": np.cumsum(throttle_rate * interval),
    }
    names = list(series)
    appender = Appender(os.path.join(path, fmt.SIGNALS), fmt.SIGNALS_SCHEMA)
    try:
        _append(appender, {
            "t_ns": np.tile(t, len(names)), "series": np.repeat(np.array(names, dtype=object), k),
            "value": np.concatenate([series[name] for name in names]),
        })
    finally:
        appender.close()
    write_json_atomic(os.path.join(path, fmt.SIGNALS_META), {
        "series": SIGNAL_META,
        "sources": {
            "host": {"available": True, "reason": None},
            "process": {"available": True, "reason": None},
            "target": {"available": True, "reason": None},
            "cgroup": {"available": True, "reason": None},
            "gpu": {"available": False, "reason": "no NVIDIA driver (synthetic run)"},
        },
    })
