"""Causes of an LLM's TTFT and TPOT spikes: the same detectors, told which metric rose.

A TTFT or TPOT spike (:mod:`.series`, ``llm.spikes``) gets causes as a latency spike does
(:func:`~.detection.find_spikes`): its **slow** requests are the successful ones scheduled in it
whose value of that metric is above the metric's baseline P99; its **normal** requests the
successful ones with a value, outside every spike of that metric; the stage split compares the
two; the registry's detectors score a :class:`~.causes.protocol.SpikeContext` whose ``metric``
says what rose, and a cause that does not raise that metric counts as weak at most
(:attr:`~.causes.protocol.CauseDetector.raises`: queueing and KV-cache pressure raise TTFT,
other prompts' prefill raises TPOT, a stopped process raises both). ``method="baro"`` ranks as
for latency spikes. Each spike gains ``causes`` (as a latency spike's) and ``decomposition``.
Cost: that of the detectors per spike.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.causes.protocol import DetectorRegistry, SpikeContext, available_inputs
from tailscope.analyzers.inputs.queues import QueuePoints
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.spikes.detection import decompose, joined_rows, matrix_rows, stage_side
from tailscope.analyzers.stages.decomposition import StageMatrix


def token_spike_causes(spikes: dict[str, list[dict]], values: dict[str, np.ndarray], req: RequestArrays,
                       matrix: StageMatrix, run, windows: dict[str, np.ndarray] | None,
                       registry: DetectorRegistry | None = None, method: str = "detectors",
                       span_request: np.ndarray | None = None, queue: QueuePoints | None = None) -> dict[str, list[dict]]:
    """``spikes`` (metric → spike dicts, ``llm.spikes``) with ``causes`` and ``decomposition`` added to
    each (new dicts); ``values``: metric → per-request values in ms (NaN where a request has none)."""
    if not windows or not len(windows["start_ns"]) or not any(spikes.values()):
        return spikes
    if registry is None:
        from tailscope.analyzers.causes.registry import default_registry
        registry = default_registry()
    available = available_inputs(run)
    row_of = matrix_rows(matrix, req.n)
    origin, end = int(windows["start_ns"][0]), int(windows["end_ns"][-1])
    out = {}
    for metric, found in spikes.items():
        metric_values = values.get(metric)
        if not found or metric_values is None:
            out[metric] = found
            continue
        has = req.is_ok & np.isfinite(metric_values)
        bounds = [(int(s["start_ns"]), int(s["end_ns"])) for s in found]
        in_any = np.zeros(req.n, bool)
        for lo, hi in bounds:
            in_any |= (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
        normal_index = np.flatnonzero(has & ~in_any)
        normal = stage_side(joined_rows(normal_index, row_of), matrix)
        tau = float(found[0]["baseline_p99_ms"])
        inputs = RunInputs(run, req, matrix, origin, end, tau, bounds, span_request, queue)
        out[metric] = []
        for spike, (lo, hi) in zip(found, bounds):
            inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
            slow_index = np.flatnonzero(inside & has & (np.nan_to_num(metric_values, nan=-np.inf) > tau))
            decomposition = decompose(slow_index, normal_index, matrix, req.n, row_of, normal)
            ctx = SpikeContext(run, lo, hi, (lo + hi) // 2, slow_index, normal_index, decomposition, available,
                               inputs, tau, metric=metric, metric_ms=metric_values)
            if method == "baro":
                from tailscope.analyzers.causes.baro import baro_causes
                causes = baro_causes(ctx)
            else:
                causes = registry.attribute(ctx)
            # the llm section is still assembled as JSON: its spikes hold the two as they are written
            out[metric].append({**spike, "decomposition": encode(decomposition), "causes": encode(causes)})
    return out
