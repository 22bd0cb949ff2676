"""Seeded synthetic runs with named, injected jitter: the analyzers' fixtures.

``write_synthetic_run`` writes a complete run directory in the real format, as
the real processes would: requests (harness), spans and ``gc_pause`` events
(receiver files), signals under their real names and ``signals.json``
(sampler; docs/signals.md), ``receiver.json``, and the injected jitter as
``fault`` events (ground truth). Arrivals are Poisson at ``rate`` requests/s.

Each request's server time is the sum of five stages (preprocess, queue_wait,
batch_wait, inference, postprocess; lognormal durations per class) plus
0.1–0.3 ms of unaccounted server overhead; the network adds about 0.15 ms each
way. ``stage_spans`` chooses which stages get a span (the others are then
unaccounted server time), so a benchmark can write 3 spans per request.

A spike ``{"kind", "at_s", "duration_s", "extra_ms"}`` injects one named
cause in ``[at_s, at_s + duration_s)``, with the footprint the real cause
leaves (:data:`SPIKE_FAULTS`, :data:`SIGNAL_FOOTPRINTS`): the stages it slows
(``extra_ms × U(0.75, 1.25)`` per affected request) and the signals or events it
moves. The expected cause (:data:`SPIKE_KINDS`) is the kind of the detector that
declares it answers the spike's fault kind (analyzers/causes/registry.py):

======== ============== ================ ===============================================
kind     lab fault      expected cause   footprint
======== ============== ================ ===============================================
gc       gc_pressure    gc               gen-2 pauses of ``extra_ms`` every 2×; requests
                                         overlapping one wait out its remaining time
throttle cpu_throttle   cpu_throttling   inference/preprocess; cgroup throttled time and
                                         periods; some run-queue wait
cpu      cpu_contention cpu_contention   preprocess/inference; other processes' CPU,
                                         run-queue wait, involuntary switches, PSI cpu
swap     memory_swap    swap             preprocess/inference; swap-ins, major faults
                                         (host and target), PSI memory, blocked threads,
                                         disk reads
io       io_stall       io_stall         preprocess; threads blocked on I/O, PSI io,
                                         the target's write bytes, disk busy and flushes
queue    overload       queue_saturation arrivals ×(1 + ``surge``); queue wait, deep
                                         queue (``queue.depth``), a few 429s; in an LLM
                                         run 30 requests waiting on the engine
gpu      gpu_throttle   gpu_throttling   inference; SM clock drop, thermal clocks-event
generator generator     generator        send lateness and client-side time
stall    process_pause  process_stall    the target's process stops ``extra_ms`` every 2×
                                         ``extra_ms`` (a stop-the-world pause with no GC
                                         event): no span starts, ends or records an event
                                         inside a stall; a request arriving in one waits
                                         outside the server's spans until it ends
network  network        unexplained      outside-server time only
postprocess postprocess unexplained      postprocess stage only
kv_cache kv_cache_pressure kv_cache_pressure queue wait, deep queue; the KV cache 99% in use
                                         (from 45%), 6 preemptions/s (``llm``)
prefill  prefill_interference prefill_interference decode (``inference`` → ``decode`` in an LLM
                                         run); prompts ×8 in the spike, prompt tokens/s (``llm``)
cotenant_cpu cpu_contention cpu_contention preprocess/inference; co-tenants inside the target's
                                         cgroup (its CPU use 1 core above the target's own),
                                         run-queue wait, involuntary switches, PSI cpu —
                                         *confounded*: with a ``neighbour_swap`` distraction
======== ============== ================ ===============================================

``"stage"`` in a spike overrides the stage it slows (as ``extra_ms``); ``"surge"`` adds that many
times the rate in extra arrivals during it (default 1 for ``queue``, 0 for the others; a
``kv_cache`` spike with a surge is a burst of requests that fills the cache).

A *confounded* spike has two things happen at once: its own cause, on the
target, and a *distraction* elsewhere on the host (:data:`DISTRACTIONS`:
another process's signal footprint, which slows no request; the fault kind it
imitates must not be named). ``"distraction": NAME`` in a spike adds one (or
``None`` removes it); :data:`SPIKE_DISTRACTIONS` gives the confounded kinds
theirs by default. Its ground truth is a second ``fault`` event with ``role``
``distraction`` (the spike's own has ``role`` ``cause``), so the scorer and the
contract tests know the expected cause: still the one the detectors'
declarations give the spike's own fault.

Everything is numpy-vectorised and columns go to Arrow without Python
objects (ids are built as Arrow string buffers): about 4 s per million
requests with three spans each on the 2-core CI machine (22 s before).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.causes.registry import cause_of_fault
from tailscope.rundir import schema as fmt
from tailscope.rundir.manifest import RunWriter, write_json_atomic
from tailscope.rundir.retention_policy import trace_sampled
from tailscope.support.units import NS_PER_MS, NS_PER_S

#: 2026-01-01T00:00:00Z in epoch ns: synthetic runs are reproducible to the ns.
SYNTHETIC_START_NS = 1_767_225_600 * 1_000_000_000

#: Stage spans in trace order: (span name, stage).
STAGE_SPANS = (("preprocess", "preprocess"), ("queue_wait", "queue"), ("batch_wait", "batch_wait"),
               ("inference", "inference"), ("postprocess", "postprocess"))
STAGE_NAMES = tuple(stage for _, stage in STAGE_SPANS)
#: Median stage durations in ms per class (other class names use "short").
STAGE_MEDIANS_MS = {
    "short": (1.5, 1.0, 0.5, 8.0, 0.8),
    "long": (4.0, 1.0, 0.5, 30.0, 2.0),
}
#: Log-space sigma of each stage's lognormal duration.
STAGE_SIGMAS = (0.25, 0.5, 0.3, 0.2, 0.25)
#: spike kind → (the fault kind it imitates, {stage: share of extra_ms}); its signal footprint is
#: :data:`SIGNAL_FOOTPRINTS`. Every cause detector answers the fault of one spike kind here
#: (tests/test_analyzers_detectors.py); "network" and "postprocess" imitate faults no detector answers.
SPIKE_FAULTS = {
    "gc": ("gc_pressure", {"inference": 1.0}),
    "stall": ("process_pause", {"inference": 1.0}),
    "throttle": ("cpu_throttle", {"preprocess": 0.2, "inference": 0.8}),
    "cpu": ("cpu_contention", {"preprocess": 0.3, "inference": 0.7}),
    "swap": ("memory_swap", {"preprocess": 0.5, "inference": 0.5}),
    "io": ("io_stall", {"preprocess": 1.0}),
    "queue": ("overload", {"queue": 1.0}),
    "gpu": ("gpu_throttle", {"inference": 1.0}),
    "generator": ("generator", {"lateness": 1.0, "outside_server": 0.3}),
    "network": ("network", {"outside_server": 1.0}),
    "postprocess": ("postprocess", {"postprocess": 1.0}),
    "cotenant_cpu": ("cpu_contention", {"preprocess": 0.3, "inference": 0.7}),
    "kv_cache": ("kv_cache_pressure", {"queue": 1.0}),
    "prefill": ("prefill_interference", {"inference": 1.0}),
}
#: Spike kinds of an LLM server: their runs get the vLLM series (:data:`LLM_SERIES`) and the ``vllm``
#: preset's metric map (the spans keep the reference names, mapped by the scenario's own rules).
LLM_SPIKE_KINDS = frozenset({"kv_cache", "prefill"})
#: An LLM run's prompt tokens (uniform) and output tokens (uniform); a ``prefill`` spike multiplies
#: the prompts of the requests scheduled in it by PREFILL_PROMPT_FACTOR.
LLM_PROMPT_TOKENS, LLM_OUTPUT_TOKENS, PREFILL_PROMPT_FACTOR = (16, 512), (8, 64), 8
#: kind → (fault kind, cause a detector should name, {stage: share of extra_ms}); the cause is the
#: kind of the detector that declares it answers the fault (``unexplained`` when none does).
SPIKE_KINDS = {kind: (fault, cause_of_fault(fault), effects) for kind, (fault, effects) in SPIKE_FAULTS.items()}
#: Kept for callers of the first version: which stage each kind slows most.
SPIKE_STAGE = {kind: max(effects, key=effects.get) if "lateness" not in effects else "outside_server"
               for kind, (_, _, effects) in SPIKE_KINDS.items()}
SERVER_SPAN_NAME = "POST /v1/infer/text"
QUEUE_CAPACITY = 256
ROWS_PER_BATCH = 1_000_000
HOST_CPUS = 2


def hex_ids(rng: np.random.Generator, n: int, nbytes: int) -> pa.StringArray:
    """n random lowercase hex ids of ``nbytes`` bytes, built as one Arrow string buffer."""
    data = rng.bytes(n * nbytes).hex().encode("ascii")
    width = 2 * nbytes
    offsets = np.arange(0, n * width + 1, width, dtype=np.int64)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)).cast(pa.string())


def constant_strings(values: Sequence[str], index: np.ndarray) -> pa.Array:
    """``values[index]`` as an Arrow string array (via a dictionary: no Python objects)."""
    return pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), pa.array(list(values), pa.string())
                                          ).cast(pa.string())


def json_int_attributes(parts: Sequence) -> pa.Array:
    """Join literal strings and integer arrays into JSON texts, element-wise (vectorised)."""
    pieces = [pa.scalar(p, pa.string()) if isinstance(p, str) else pa.array(p).cast(pa.string()) for p in parts]
    return pc.binary_join_element_wise(*pieces, "")


class StreamFile:
    """One Arrow IPC stream written in bulk record batches (closed with an end-of-stream marker)."""

    def __init__(self, path: str, schema: pa.Schema):
        self.schema = schema
        self._sink = open(path, "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)

    def write(self, columns: Mapping[str, object]) -> None:
        n = len(next(iter(columns.values())))
        arrays = []
        for field in self.schema:
            value = columns.get(field.name)
            if value is None:
                arrays.append(pa.nulls(n, field.type))
            elif isinstance(value, (pa.Array, pa.ChunkedArray)):
                arrays.append(value.cast(field.type))
            else:
                arrays.append(pa.array(value, type=field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        for batch in table.to_batches(max_chunksize=ROWS_PER_BATCH):
            self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def _normalise_spikes(spikes: Iterable[Mapping], start_ns: int) -> list[dict]:
    out = []
    for spike in spikes:
        kind = spike["kind"]
        if kind not in SPIKE_KINDS and "stage" not in spike:
            raise ValueError(f"unknown spike kind {kind!r}; expected one of {', '.join(SPIKE_KINDS)} "
                             "or an explicit 'stage'")
        fault, cause, effects = SPIKE_KINDS.get(kind, (kind, "unexplained", {}))
        if "stage" in spike:
            effects = {spike["stage"]: 1.0}
        distraction = spike.get("distraction", SPIKE_DISTRACTIONS.get(kind))
        if distraction is not None and distraction not in DISTRACTIONS:
            raise ValueError(f"unknown distraction {distraction!r}; expected one of {', '.join(DISTRACTIONS)}")
        begin = start_ns + int(float(spike["at_s"]) * NS_PER_S)
        out.append({"kind": kind, "fault": fault, "expected_cause": cause, "effects": dict(effects),
                    "distraction": distraction,
                    "stage": max(effects, key=effects.get) if "lateness" not in effects else "outside_server",
                    "start_ns": begin, "end_ns": begin + int(float(spike["duration_s"]) * NS_PER_S),
                    "extra_ms": float(spike["extra_ms"]),
                    "surge": float(spike.get("surge", 1.0 if kind == "queue" else 0.0))})
    return out


def _arrivals(rng, rate: float, duration_s: float, start_ns: int, spikes: list[dict]) -> np.ndarray:
    """Poisson arrival times (epoch ns, sorted), with extra arrivals (``surge`` × rate) during spikes
    that have a surge (``queue`` spikes: 1 unless given; others: 0 unless given)."""
    count = rng.poisson(rate * duration_s)
    times = [rng.uniform(0.0, duration_s, size=count)]
    for spike in spikes:
        if spike["surge"] > 0:
            length_s = (spike["end_ns"] - spike["start_ns"]) / NS_PER_S
            extra = rng.poisson(rate * spike["surge"] * length_s)
            times.append((spike["start_ns"] - start_ns) / NS_PER_S + rng.uniform(0.0, length_s, size=extra))
    offsets = np.sort(np.concatenate(times))
    return start_ns + (offsets * NS_PER_S).astype(np.int64)


def gc_pauses(spike: dict) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) epoch ns of a gc spike's gen-2 pauses: ``extra_ms`` long, one every 2 × extra_ms."""
    length = int(spike["extra_ms"] * NS_PER_MS)
    starts = np.arange(spike["start_ns"], spike["end_ns"], max(2 * length, NS_PER_MS), dtype=np.int64)
    return starts, starts + length


def stall_warp(arrival_ns: np.ndarray, times_ns: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Server-side times (epoch ns, one row per request) of a process that stops during the
    disjoint sorted pauses [starts, ends): each time ``t`` of a request that reached the server
    at ``arrival`` happens once the process has run ``t − arrival`` after the arrival; nothing
    happens inside a pause (a time that would falls at the pause's end)."""
    lengths = ends - starts
    before = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    run_at_start = starts - before  # the process's running time at each pause start

    def running(t):  # running time at t: t minus the pause time before it
        i = np.searchsorted(starts, t, side="right") - 1
        safe = np.clip(i, 0, None)
        within = np.clip(t - starts[safe], 0, lengths[safe])
        return t - np.where(i >= 0, before[safe] + within, 0)

    def real(r):  # the latest real time with running time r (after every pause that starts there)
        count = np.searchsorted(run_at_start, r, side="right")
        total = np.concatenate(([0], np.cumsum(lengths)))[count]
        return r + total

    base = running(arrival_ns)
    return real(base[:, None] + (times_ns - arrival_ns[:, None]))


def _pause_delay_ms(arrival_ns: np.ndarray, base_ms: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Wait caused by disjoint sorted pauses: the remaining pause met during [arrival, arrival + base]."""
    first = np.searchsorted(ends, arrival_ns, side="right")
    valid = first < len(starts)
    delay = np.zeros(len(arrival_ns))
    idx = first[valid]
    begin = np.maximum(arrival_ns[valid], starts[idx])
    meets = starts[idx] < arrival_ns[valid] + (base_ms[valid] * NS_PER_MS).astype(np.int64)
    delay[np.flatnonzero(valid)[meets]] = (ends[idx][meets] - begin[meets]) / NS_PER_MS
    return delay


def write_synthetic_run(path, *, duration_s: float = 60, rate: float = 50, seed: int = 0,
                        spikes: Iterable[Mapping] = (), with_spans: bool = True, with_signals: bool = True,
                        classes: Sequence[str] = ("short", "long"), span_loss: float = 0.0,
                        error_rate: float = 0.002, error_message: str = "HTTP 503: queue full",
                        lateness_ms: float = 0.05, name: str = "synthetic", status: str = "complete",
                        stage_spans: Sequence[str] = tuple(n for n, _ in STAGE_SPANS),
                        signal_rate_hz: float = 2.0, gpu: bool = False, rss_growth_bytes_per_s: float = 0.0,
                        latency_drift_per_s: float = 0.0, timeouts: int = 0, timeout_s: float = 10.0,
                        trace_sample_rate: float = 1.0, llm: bool = False, gc_events: bool = True,
                        stream: bool = False) -> dict:
    """Write a seeded synthetic run to ``path``; return its ground truth.

    ``span_loss`` drops the whole trace of that share of requests (receiver
    loss); ``lateness_ms`` is the mean (exponential) send lateness; ``status``
    ``"running"`` leaves the manifest as a killed harness would. ``gpu`` adds
    GPU series (always added when a ``gpu`` spike is injected); ``llm`` makes the target an LLM
    server: vLLM's Prometheus series (:data:`LLM_SERIES`) and ``stages: {preset: vllm}`` with the
    reference span names as the scenario's own rules (``inference`` as ``decode``), and token
    counts per request (always when an :data:`LLM_SPIKE_KINDS` spike is injected);
    ``rss_growth_bytes_per_s`` makes the target's RSS leak; ``gc_events`` False: the target sends no
    GC pauses (a plain OpenTelemetry service: no ``gc_pause`` events, not even a gc spike's);
    ``stream`` (an LLM run): each successful request streams its answer in two chunks, the first
    token as its decode stage starts (TTFT: everything before decode — queue and batch wait
    included), the rest at its end (TPOT: decode time over the output tokens after the first);
    ``latency_drift_per_s`` multiplies every stage by ``1 + drift·t``;
    ``timeouts`` requests (at random) time out after ``timeout_s``;
    ``trace_sample_rate`` < 1 head-samples: only the traces the rule of
    :func:`~.retention.trace_sampled` picks have spans (the manifest records the rate).
    Ground truth: ``{"path", "start_ns", "end_ns", "requests", "errors",
    "spans", "spikes": [{"kind", "fault", "expected_cause", "distraction", "stage",
    "start_ns", "end_ns", "extra_ms", "requests_affected"}]}``.
    """
    rng = np.random.default_rng(seed)
    path = os.fspath(path)
    start_ns = SYNTHETIC_START_NS
    injected = _normalise_spikes(spikes, start_ns)
    llm = llm or any(spike["kind"] in LLM_SPIKE_KINDS for spike in injected)
    scheduled = _arrivals(rng, rate, duration_s, start_ns, injected)
    n = len(scheduled)
    weights = np.array([0.7, 0.3]) if tuple(classes) == ("short", "long") else np.ones(len(classes))
    cls_index = rng.choice(len(classes), size=n, p=weights / weights.sum())

    medians = np.array([STAGE_MEDIANS_MS.get(c, STAGE_MEDIANS_MS["short"]) for c in classes])[cls_index]
    stage_ms = medians * np.exp(rng.standard_normal((n, len(STAGE_SPANS))) * np.array(STAGE_SIGMAS))
    if latency_drift_per_s:
        stage_ms *= (1.0 + latency_drift_per_s * (scheduled - start_ns) / NS_PER_S)[:, None]
    net_in_ms = 0.15 * np.exp(0.2 * rng.standard_normal(n))
    net_out_ms = 0.15 * np.exp(0.2 * rng.standard_normal(n))
    lateness = rng.exponential(lateness_ms, size=n)
    queue_depth = rng.poisson(max(rate * 0.002, 0.2), size=n) + 1
    status_code = np.full(n, 200, np.int32)
    is_error = rng.random(n) < error_rate
    gc_pause_sets = []
    for spike in injected:
        hit = (scheduled >= spike["start_ns"]) & (scheduled < spike["end_ns"])
        count = int(hit.sum())
        if spike["kind"] == "stall":
            continue  # applied to the span times below (stall_warp)
        if spike["kind"] == "gc":
            starts, ends = gc_pauses(spike)
            gc_pause_sets.append((starts, ends))
            extra = _pause_delay_ms(scheduled[hit], stage_ms[hit].sum(axis=1), starts, ends)
            affected = extra > 0
            stage_ms[np.flatnonzero(hit), STAGE_NAMES.index(spike["stage"])] += extra
            spike["requests_affected"] = int(affected.sum())
            continue
        for target, share in spike["effects"].items():
            extra = share * spike["extra_ms"] * rng.uniform(0.75, 1.25, size=count)
            if target == "outside_server":
                net_out_ms[hit] += extra
            elif target == "lateness":
                lateness[hit] += extra
            else:
                stage_ms[hit, STAGE_NAMES.index(target)] += extra
        if spike["kind"] in ("queue", "kv_cache"):  # requests pile up in the queue (waiting for KV blocks)
            queue_depth[hit] += (rate * (1 + spike["surge"]) * spike["extra_ms"] / 1000.0
                                 * rng.uniform(0.75, 1.25, size=count)).astype(np.int64)
        if spike["kind"] == "queue":
            rejected = np.flatnonzero(hit)[rng.random(count) < 0.03]
            is_error[rejected] = True
            status_code[rejected] = 429
        spike["requests_affected"] = count
    queue_depth = np.minimum(queue_depth, QUEUE_CAPACITY)

    status_code[is_error & (status_code == 200)] = 503
    timed_out = np.zeros(n, dtype=bool)
    if timeouts:
        timed_out[rng.choice(n, size=min(timeouts, n), replace=False)] = True
        is_error |= timed_out
    stage_ms[is_error] = 0.0
    sent = scheduled + (lateness * NS_PER_MS).astype(np.int64)
    server_start = sent + (net_in_ms * NS_PER_MS).astype(np.int64)
    overhead_in = (rng.uniform(0.05, 0.15, size=n) * NS_PER_MS).astype(np.int64)
    overhead_out = (rng.uniform(0.05, 0.15, size=n) * NS_PER_MS).astype(np.int64)
    bounds = server_start[:, None] + overhead_in[:, None] + np.concatenate(
        [np.zeros((n, 1), np.int64), np.cumsum((stage_ms * NS_PER_MS).astype(np.int64), axis=1)], axis=1)
    server_end = bounds[:, -1] + overhead_out
    for spike in injected:
        if spike["kind"] == "stall":  # a stop-the-world process: every server-side time moves past the stalls
            starts, ends = gc_pauses(spike)
            times = stall_warp(server_start, np.column_stack([server_start, bounds, server_end]), starts, ends)
            spike["requests_affected"] = int(np.sum(times[:, -1] != server_end))
            server_start, bounds, server_end = times[:, 0], times[:, 1:-1], times[:, -1]
    end = server_end + (net_out_ms * NS_PER_MS).astype(np.int64)
    end[timed_out] = sent[timed_out] + int(timeout_s * NS_PER_S)
    status_code[timed_out] = 0
    trace_ids = hex_ids(rng, n, 16)

    manifest = {
        "name": name, "start_ns": start_ns, "target": "http://127.0.0.1:8000", "seed": seed,
        "synthetic": True,
        "options": {"duration_s": duration_s, "timeout_s": timeout_s, "signal_rate_hz": signal_rate_hz,
                    "trace_sample_rate": trace_sample_rate},
        "scenario": {
            "name": name, "duration_s": duration_s,
            "arrival": {"process": "poisson", "rate": rate},
            "classes": [{"name": c, "path": "/v1/infer/text"} for c in classes],
            "slo": ["p99 < 250ms", "error_rate < 1%"],
            **({"stages": LLM_STAGES} if llm else {}),
        },
    }
    tokens = _token_columns(seed, scheduled, injected, is_error | timed_out) if llm else {}
    streamed = np.zeros(n, bool)
    first_token = server_end + (net_out_ms * NS_PER_MS / 2).astype(np.int64)
    if stream and llm:
        output = tokens["output_tokens"].to_numpy(zero_copy_only=False)
        streamed = ~(is_error | timed_out) & (np.nan_to_num(output) >= 2)
        decode_start = bounds[:, STAGE_NAMES.index("inference")]
        first_token = np.where(streamed, decode_start + (net_out_ms * NS_PER_MS).astype(np.int64), first_token)
    writer = RunWriter(path, manifest)
    try:
        writer.requests.close()  # an empty stream; the bulk writer below replaces it
        error_kind = np.where(timed_out, 1, np.where(is_error, 0, 2))
        requests = StreamFile(os.path.join(path, fmt.REQUESTS), fmt.REQUESTS_SCHEMA)
        try:
            requests.write({
                "scheduled_ns": scheduled, "sent_ns": sent, "end_ns": end,
                "first_byte_ns": np.where(timed_out, end, first_token),
                "cls": constant_strings(list(classes), cls_index), "status": status_code,
                "bytes_out": rng.integers(200, 4000, size=n), "bytes_in": rng.integers(100, 800, size=n),
                "trace_id": trace_ids,
                "error_kind": pa.DictionaryArray.from_arrays(
                    pa.array(error_kind, pa.int32()), pa.array(["http", "timeout", None], pa.string())
                ).cast(pa.string()),
                "error": pa.DictionaryArray.from_arrays(
                    pa.array(error_kind, pa.int32()),
                    pa.array([error_message, f"no complete response within {timeout_s:g} s", None], pa.string()),
                ).cast(pa.string()),
                "chunks": np.where(streamed, 2, 0).astype(np.int32), "worker": np.zeros(n, np.int32),
                **({"last_token_ns": pa.array(end, pa.int64(), mask=~streamed)} if streamed.any() else {}),
                **tokens,
            })
        finally:
            requests.close()
        if streamed.any():
            _write_chunks(path, trace_ids, np.flatnonzero(streamed), first_token, end,
                          tokens["output_tokens"].to_numpy(zero_copy_only=False))
        for spike in injected:
            writer.add_event("fault", spike["start_ns"], spike["end_ns"], "synthetic",
                             {"fault": spike["fault"], "role": "cause", "name": spike["kind"], "stage": spike["stage"],
                              "extra_ms": spike["extra_ms"], "expected_cause": spike["expected_cause"],
                              "params": {"extra_ms": spike["extra_ms"]}})
            if spike["distraction"] is not None:
                writer.add_event("fault", spike["start_ns"], spike["end_ns"], "synthetic",
                                 {"fault": DISTRACTIONS[spike["distraction"]][0], "role": "distraction",
                                  "name": spike["distraction"], "expected_cause": None, "params": {}})
        spans_written = 0
        if with_spans:
            kept = rng.random(n) >= span_loss
            if trace_sample_rate < 1.0:
                kept &= np.array([trace_sampled(t, trace_sample_rate) for t in trace_ids.to_pylist()], dtype=bool)
            spans_written = _write_spans(path, rng, kept, is_error, trace_ids, server_start, server_end, bounds,
                                         queue_depth, tuple(stage_spans))
            if gc_events:
                _write_gc_events(path, rng, start_ns, duration_s, gc_pause_sets)
            write_json_atomic(os.path.join(path, fmt.RECEIVER_STATS), {
                "spans_received": spans_written, "spans_stored": spans_written, "spans_dropped": 0,
                "export_requests": max(1, spans_written // 512), "decode_errors": 0,
            })
        if with_signals:
            _write_signals(path, rng, start_ns, duration_s, rate, injected, signal_rate_hz,
                           gpu or any(s["kind"] == "gpu" for s in injected), rss_growth_bytes_per_s, llm)
    finally:
        if status == "running":
            writer.flusher.stop()
        else:
            writer.close(status=status)
    writer.update(end_ns=int(end.max()) if n else start_ns)
    for spike in injected:
        spike.pop("effects")
        spike.pop("surge")
    return {
        "path": path, "start_ns": start_ns, "end_ns": int(end.max()) if n else start_ns,
        "requests": n, "errors": int(is_error.sum()), "spans": spans_written, "spikes": injected,
    }


def _token_columns(seed: int, scheduled: np.ndarray, injected: list[dict], failed: np.ndarray) -> dict:
    """An LLM run's token columns: prompt and output tokens per request (uniform in LLM_PROMPT_TOKENS,
    LLM_OUTPUT_TOKENS; prompts × PREFILL_PROMPT_FACTOR when scheduled in a ``prefill`` spike), counts
    from the response's usage; failed requests have no output. Drawn from a generator of their own,
    so the run's other columns are those of the same run without tokens."""
    rng = np.random.default_rng(seed + 7919)
    n = len(scheduled)
    prompts = rng.integers(LLM_PROMPT_TOKENS[0], LLM_PROMPT_TOKENS[1] + 1, size=n)
    outputs = rng.integers(LLM_OUTPUT_TOKENS[0], LLM_OUTPUT_TOKENS[1] + 1, size=n)
    for spike in injected:
        if spike["kind"] == "prefill":
            hit = (scheduled >= spike["start_ns"]) & (scheduled < spike["end_ns"])
            prompts[hit] *= PREFILL_PROMPT_FACTOR
    return {"prompt_tokens": pa.array(prompts, pa.int32()),
            "output_tokens": pa.array(outputs, pa.int32(), mask=failed),
            "token_count_source": pa.array(np.where(failed, None, "usage"), pa.string())}


def _write_chunks(path, trace_ids: pa.Array, rows: np.ndarray, first_ns: np.ndarray, end_ns: np.ndarray,
                  output_tokens: np.ndarray) -> None:
    """Two chunks per streamed request: its first token at ``first_ns``, the rest at ``end_ns``."""
    ids = pc.take(trace_ids, pa.array(np.repeat(rows, 2)))
    out = StreamFile(os.path.join(path, fmt.CHUNKS), fmt.CHUNKS_SCHEMA)
    try:
        out.write({"trace_id": ids, "index": np.tile(np.array([0, 1], np.int32), len(rows)),
                   "t_ns": np.column_stack([first_ns[rows], end_ns[rows]]).ravel(),
                   "tokens": np.column_stack([np.ones(len(rows)), output_tokens[rows] - 1]).ravel().astype(np.int32)})
    finally:
        out.close()


def _write_spans(path, rng, kept, is_error, trace_ids, server_start, server_end, bounds, queue_depth,
                 stage_spans: tuple[str, ...]) -> int:
    """Server span plus the chosen stage spans per kept request (server span only for errors).

    Written in chunks of requests so memory stays bounded at tens of millions of spans.
    """
    names = [SERVER_SPAN_NAME] + [name for name, _ in STAGE_SPANS if name in stage_spans]
    columns_of = [None] + [i for i, (name, _) in enumerate(STAGE_SPANS) if name in stage_spans]
    per = len(names)
    out = StreamFile(os.path.join(path, fmt.SPANS), fmt.SPANS_SCHEMA)
    written = 0
    rows_all = np.flatnonzero(kept)
    chunk = max(1, ROWS_PER_BATCH // per)
    try:
        for lo in range(0, len(rows_all), chunk):
            rows = rows_all[lo:lo + chunk]
            m = len(rows)
            keep = np.ones((m, per), dtype=bool)
            keep[is_error[rows], 1:] = False
            flat = keep.ravel()
            total = int(flat.sum())
            span_ids = hex_ids(rng, m * per, 8)
            parent = hex_ids(rng, m, 8)
            server_ids = pc.take(span_ids, pa.array(np.arange(m) * per))
            parent_idx = np.repeat(np.arange(m), per)
            is_root = np.tile(np.arange(per) == 0, m)
            parents = pc.if_else(pa.array(is_root), pc.take(parent, pa.array(parent_idx)),
                                 pc.take(server_ids, pa.array(parent_idx)))
            starts = np.column_stack([server_start[rows]] + [bounds[rows, j] for j in columns_of[1:]])
            ends = np.column_stack([server_end[rows]] + [bounds[rows, j + 1] for j in columns_of[1:]])
            kind = np.ones((m, per), np.int8)
            kind[:, 0] = 2
            status = np.zeros((m, per), np.int8)
            status[is_error[rows], 0] = 2
            attributes_array = pa.array(np.full(m * per, "{}"))
            if "queue_wait" in names:
                column = names.index("queue_wait")
                text = json_int_attributes(['{"queue.depth": ', queue_depth[rows],
                                            f', "queue.capacity": {QUEUE_CAPACITY}}}'])
                position = np.arange(m) * per + column
                attributes_array = _scatter_strings(attributes_array, position, text)
            if "inference" in names:
                column = names.index("inference")
                text = json_int_attributes(['{"batch.size": ', rng.integers(1, 9, size=m),
                                            ', "batch.id": "b', rows // 4, '"}'])
                attributes_array = _scatter_strings(attributes_array, np.arange(m) * per + column, text)
            selector = pa.array(flat)
            out.write({
                "trace_id": pc.take(trace_ids, pa.array(np.repeat(rows, per)[flat])),
                "span_id": span_ids.filter(selector), "parent_span_id": parents.filter(selector),
                "name": constant_strings(names, np.tile(np.arange(per), m)[flat]),
                "service": constant_strings(["reference-target"], np.zeros(total, np.int32)),
                "kind": kind.ravel()[flat], "start_ns": starts.ravel()[flat], "end_ns": ends.ravel()[flat],
                "status_code": status.ravel()[flat], "attributes": attributes_array.filter(selector),
                "pid": np.full(total, 4242, np.int64),
            })
            written += total
    finally:
        out.close()
    return written


def _scatter_strings(base: pa.Array, positions: np.ndarray, values: pa.Array) -> pa.Array:
    """``base`` with ``base[positions[i]] = values[i]`` (vectorised through a take)."""
    index = np.arange(len(base))
    index[positions] = len(base) + np.arange(len(positions))
    return pc.take(pa.concat_arrays([base, values.cast(base.type)]), pa.array(index))


def _write_gc_events(path, rng, start_ns, duration_s, pause_sets) -> None:
    """Background gen-0 pauses (1–3 ms, every ~2 s) and the gen-2 pauses of gc spikes."""
    background = start_ns + (np.arange(0.7, duration_s, 2.0) * NS_PER_S).astype(np.int64)
    length = (rng.uniform(1.0, 3.0, size=len(background)) * NS_PER_MS).astype(np.int64)
    starts, ends, generation = [background], [background + length], [np.zeros(len(background), np.int64)]
    for pause_start, pause_end in pause_sets:
        starts.append(pause_start)
        ends.append(pause_end)
        generation.append(np.full(len(pause_start), 2))
    start_all, end_all, gen_all = map(np.concatenate, (starts, ends, generation))
    order = np.argsort(start_all, kind="stable")
    gen = gen_all[order]
    out = StreamFile(os.path.join(path, fmt.writer_file(fmt.EVENTS, "receiver")), fmt.EVENTS_SCHEMA)
    try:
        out.write({
            "kind": constant_strings(["gc_pause"], np.zeros(len(order), np.int32)),
            "start_ns": start_all[order], "end_ns": end_all[order],
            "source": constant_strings(["reference-target"], np.zeros(len(order), np.int32)),
            "attributes": json_int_attributes(['{"generation": ', gen, ', "collected": ', 100 * (gen + 1),
                                               ', "uncollectable": 0, "pid": 4242}']),
        })
    finally:
        out.close()


#: Synthetic series: name → (unit, kind, source, description, baseline level).
#: Counters' levels are rates per second (cumulated when written); gauges' are values.
SIGNAL_SERIES = {
    "host.cpu.user_s": ("s", "counter", "host_cpu", "CPU time in user mode, all CPUs", 0.55),
    "host.cpu.system_s": ("s", "counter", "host_cpu", "CPU time in kernel mode, all CPUs", 0.15),
    "host.cpu.idle_s": ("s", "counter", "host_cpu", "CPU time idle, all CPUs", 1.3),
    "proc.cpu.user_s": ("s", "counter", "process", "target CPU time in user mode", 0.35),
    "proc.cpu.system_s": ("s", "counter", "process", "target CPU time in kernel mode", 0.05),
    "proc.runqueue_wait_ns": ("ns", "counter", "process", "target time waiting on a run queue", 2e6),
    "proc.ctxt.nonvoluntary": ("count", "counter", "process", "involuntary context switches", 50.0),
    "proc.ctxt.voluntary": ("count", "counter", "process", "voluntary context switches", 400.0),
    "proc.major_faults": ("count", "counter", "process", "target major page faults", 0.0),
    "proc.rss_bytes": ("bytes", "gauge", "process", "target resident set size", 200e6),
    "psi.cpu.some_us": ("µs", "counter", "psi", "time some task stalled on CPU", 5000.0),
    "psi.memory.some_us": ("µs", "counter", "psi", "time some task stalled on memory", 50.0),
    "psi.io.some_us": ("µs", "counter", "psi", "time some task stalled on I/O", 1000.0),
    "host.vm.pswpin": ("pages", "counter", "host_vmstat", "pages swapped in", 0.0),
    "host.vm.pswpout": ("pages", "counter", "host_vmstat", "pages swapped out", 0.0),
    "host.vm.pgmajfault": ("count", "counter", "host_vmstat", "major page faults", 0.5),
    "host.cpu.iowait_s": ("s", "counter", "host_cpu", "CPU time idle waiting for I/O", 0.02),
    "proc.threads_blocked": ("tasks", "gauge", "process", "target threads in state D (I/O)", 0.0),
    "proc.io.write_bytes": ("bytes", "counter", "process", "target bytes written towards storage", 2e4),
    "host.disk.busy_s": ("s", "counter", "host_disk", "time the disks had I/O in flight", 0.01),
    "host.disk.flushes": ("count", "counter", "host_disk", "disk cache flushes", 1.0),
    "cgroup.cpu.usage_ns": ("ns", "counter", "cgroup", "CPU time used by the cgroup", 4e8),
    "cgroup.cpu.nr_periods": ("count", "counter", "cgroup", "CFS periods elapsed", 10.0),
    "cgroup.cpu.nr_throttled": ("count", "counter", "cgroup", "CFS periods throttled", 0.0),
    "cgroup.cpu.throttled_ns": ("ns", "counter", "cgroup", "time throttled", 0.0),
}
GPU_SERIES = {
    "gpu0.util_pct": ("%", "gauge", "gpu", "GPU utilisation", 60.0),
    "gpu0.sm_clock_mhz": ("MHz", "gauge", "gpu", "SM clock", 1980.0),
    "gpu0.clocks_event_reasons": ("bitmask", "gauge", "gpu", "clocks-event reasons bitmask", 0.0),
    "gpu0.clocks_event.hw_thermal_slowdown": ("bool", "gauge", "gpu", "HW thermal slowdown", 0.0),
    "gpu0.clocks_event.sw_power_cap": ("bool", "gauge", "gpu", "SW power cap", 0.0),
}
#: An LLM server's series (``llm``): vLLM's /metrics names as the Prometheus sampler records them.
LLM_LABELS = '{engine="0",model_name="synthetic-llm"}'
LLM_SERIES = {
    f"prom.vllm:kv_cache_usage_perc{LLM_LABELS}": ("ratio", "gauge", "prometheus", "KV-cache use", 0.45),
    f"prom.vllm:num_preemptions_total{LLM_LABELS}": ("count", "counter", "prometheus", "preemptions", 0.0),
    f"prom.vllm:num_requests_waiting{LLM_LABELS}": ("requests", "gauge", "prometheus", "waiting", 1.0),
    f"prom.vllm:num_requests_running{LLM_LABELS}": ("requests", "gauge", "prometheus", "running", 8.0),
    f"prom.vllm:prompt_tokens_total{LLM_LABELS}": ("tokens", "counter", "prometheus", "prompt tokens", 13000.0),
}
#: The ``stages`` section of an LLM run: the vLLM preset (its metric map), the reference span names.
LLM_STAGES = {"preset": "vllm", "rules": [{"match": {"name": f"^{name}$"},
                                            "stage": "decode" if stage == "inference" else stage}
                                           for name, stage in STAGE_SPANS]}
#: kind → {series: change during the spike}: counters add to the rate, gauges are set.
SIGNAL_FOOTPRINTS = {
    "cpu": {"host.cpu.user_s": 1.0, "host.cpu.idle_s": -1.0, "proc.runqueue_wait_ns": 3e8,
            "proc.ctxt.nonvoluntary": 800.0, "psi.cpu.some_us": 4e5},
    "throttle": {"cgroup.cpu.throttled_ns": 4e8, "cgroup.cpu.nr_throttled": 8.0,
                 "proc.runqueue_wait_ns": 3e7, "psi.cpu.some_us": 3e4, "host.cpu.idle_s": 0.2},
    "swap": {"host.vm.pswpin": 3000.0, "host.vm.pswpout": 2000.0, "host.vm.pgmajfault": 800.0,
             "proc.major_faults": 700.0, "psi.memory.some_us": 3e5, "psi.io.some_us": 2e5,
             "proc.threads_blocked": 0.5, "host.disk.busy_s": 0.3},
    "io": {"proc.threads_blocked": 0.4, "psi.io.some_us": 4e5, "proc.io.write_bytes": 5e7,
           "host.disk.busy_s": 0.5, "host.disk.flushes": 50.0, "host.cpu.iowait_s": 0.3, "host.cpu.idle_s": -0.3},
    "queue": {"proc.cpu.user_s": 0.3, "host.cpu.user_s": 0.3, "host.cpu.idle_s": -0.3,
              f"prom.vllm:num_requests_waiting{LLM_LABELS}": 30.0},  # an LLM server's engine queue
    "gc": {"proc.cpu.user_s": 0.2, "host.cpu.user_s": 0.2, "host.cpu.idle_s": -0.2},
    "stall": {"proc.cpu.user_s": 0.2, "host.cpu.user_s": 0.2, "host.cpu.idle_s": -0.2},
    "generator": {"host.cpu.user_s": 0.1, "host.cpu.idle_s": -0.1},
    "gpu": {"gpu0.sm_clock_mhz": 1100.0, "gpu0.clocks_event_reasons": 64.0,
            "gpu0.clocks_event.hw_thermal_slowdown": 1.0},
    "kv_cache": {f"prom.vllm:kv_cache_usage_perc{LLM_LABELS}": 0.99,
                 f"prom.vllm:num_preemptions_total{LLM_LABELS}": 6.0},
    "prefill": {f"prom.vllm:prompt_tokens_total{LLM_LABELS}": 90000.0},
    # busy processes inside the target's own cgroup: its CPU use rises a core above the target's own
    "cotenant_cpu": {"cgroup.cpu.usage_ns": 1e9, "host.cpu.user_s": 1.0, "host.cpu.idle_s": -1.0,
                     "proc.runqueue_wait_ns": 3e8, "proc.ctxt.nonvoluntary": 800.0, "psi.cpu.some_us": 4e5},
}
#: Distractions: name → (the fault kind it imitates, {series: change}): trouble of *another* process on
#: the host, moving only host-wide signals (none of the target's process or cgroup) and slowing no request.
#: ``neighbour_swap``: a neighbour paging through swap (memory_swap's ``victim: neighbour``): swap-ins and
#: major faults of the host, memory and I/O pressure, iowait, a busy disk, the kernel's CPU for the faults.
DISTRACTIONS = {
    "neighbour_swap": ("memory_swap", {
        "host.vm.pswpin": 8000.0, "host.vm.pswpout": 3000.0, "host.vm.pgmajfault": 8000.0,
        "psi.memory.some_us": 5e5, "psi.io.some_us": 6e5, "host.cpu.iowait_s": 0.3, "host.disk.busy_s": 0.6,
        "host.cpu.system_s": 0.15, "host.cpu.idle_s": -0.45}),
}
#: The confounded spike kinds and the distraction each comes with by default.
SPIKE_DISTRACTIONS = {"cotenant_cpu": "neighbour_swap"}


def _write_signals(path, rng, start_ns, duration_s, rate, injected, rate_hz, with_gpu, rss_growth,
                   with_llm=False) -> None:
    """Every series at ``rate_hz`` (counters cumulative with noise, gauges as read) and signals.json."""
    interval = 1.0 / rate_hz
    t = start_ns + (np.arange(0.0, duration_s + interval, interval) * NS_PER_S).astype(np.int64)
    k = len(t)
    series = dict(SIGNAL_SERIES, **(GPU_SERIES if with_gpu else {}), **(LLM_SERIES if with_llm else {}))
    values = {}
    for name, (_, kind, _, _, level) in series.items():
        if kind == "counter":
            level_t = level * np.exp(0.2 * rng.standard_normal(k)) if level > 0 else np.zeros(k)
            if name in ("host.vm.pgmajfault",):
                level_t = rng.poisson(level * interval, size=k) / interval
        else:
            level_t = np.full(k, level) + (0.005 * level * rng.standard_normal(k) if level else 0.0)
        values[name] = level_t
    values["proc.rss_bytes"] = values["proc.rss_bytes"] + rss_growth * (t - start_ns) / NS_PER_S
    for spike in injected:
        hit = (t >= spike["start_ns"]) & (t < spike["end_ns"])
        footprints = [SIGNAL_FOOTPRINTS.get(spike["kind"], {})]
        if spike["distraction"] is not None:
            footprints.append(DISTRACTIONS[spike["distraction"]][1])
        for name, change in (item for footprint in footprints for item in footprint.items()):
            if name not in values:
                continue
            if series[name][1] == "counter":
                values[name][hit] = np.maximum(values[name][hit] + change * np.exp(0.1 * rng.standard_normal(int(hit.sum()))), 0)
            else:
                values[name][hit] = change
    names = list(series)
    columns = []
    for name in names:
        if series[name][1] == "counter":
            columns.append(np.cumsum(values[name] * interval))
        else:
            columns.append(values[name])
    out = StreamFile(os.path.join(path, fmt.SIGNALS), fmt.SIGNALS_SCHEMA)
    try:
        out.write({"t_ns": np.tile(t, len(names)),
                   "series": constant_strings(names, np.repeat(np.arange(len(names)), k)),
                   "value": np.concatenate(columns)})
    finally:
        out.close()
    sources = {source for _, _, source, _, _ in series.values()}
    write_json_atomic(os.path.join(path, fmt.SIGNALS_META), {
        "rate_hz": rate_hz, "pid": 4242,
        "series": {name: {"unit": unit, "kind": kind, "source": source, "description": text}
                   for name, (unit, kind, source, text, _) in series.items()},
        "sources": {**{source: {"available": True, "reason": None} for source in sorted(sources)},
                    **({} if with_gpu else {"gpu": {"available": False,
                                                     "reason": "no NVIDIA driver (synthetic run)"}})},
    })
