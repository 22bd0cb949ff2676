"""Per-request stage decomposition: join spans to requests by W3C trace id.

For each successful request whose trace has a SERVER span:

- ``server``: duration of the SERVER-kind span (the longest, if several);
- one column per mapped stage: the summed durations of the trace's spans whose
  name maps to that stage (default map: preprocess→preprocess, queue_wait→queue,
  batch_wait→batch_wait, inference→inference, postprocess→postprocess); NaN when
  the trace has no span of that stage;
- ``unaccounted`` = server − sum(stages), clipped at 0;
- ``client_network`` = service time − server (generator, network, HTTP parsing).

All in ms. The join is hash-based (``pyarrow.compute.index_in``) and the
per-stage sums use ``np.bincount``: O(requests + spans), no per-span Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .records import NS_PER_MS, RequestArrays, int_column

#: OTLP SpanKind of a server span.
SPAN_KIND_SERVER = 2

#: Default stage-mapping rules: span name → stage (docs/architecture.md).
DEFAULT_STAGE_MAP: Mapping[str, str] = {
    "preprocess": "preprocess",
    "queue_wait": "queue",
    "batch_wait": "batch_wait",
    "inference": "inference",
    "postprocess": "postprocess",
}
#: Derived columns appended after the mapped stages.
DERIVED_STAGES = ("server", "unaccounted", "client_network")
#: Most unmapped span names listed.
TOP_UNMAPPED = 20


@dataclass(frozen=True)
class StageMatrix:
    """Stage durations of the joined requests.

    ``request_index[i]`` is the position in the :class:`RequestArrays` of row i;
    ``ms[i, j]`` is the duration in ms of ``stages[j]`` (NaN: no such span).
    """

    request_index: np.ndarray
    stages: tuple[str, ...]
    ms: np.ndarray
    ok_requests: int
    unmapped: list[dict]

    def column(self, stage: str) -> np.ndarray:
        return self.ms[:, self.stages.index(stage)]


def mapped_stage_names(stage_map: Mapping[str, str]) -> tuple[str, ...]:
    """Stage names in first-appearance order of the map's values."""
    return tuple(dict.fromkeys(stage_map.values()))


def stage_matrix(req: RequestArrays, spans: pa.Table,
                 stage_map: Mapping[str, str] = DEFAULT_STAGE_MAP) -> StageMatrix:
    """Join ``spans`` to the successful requests and build the :class:`StageMatrix`."""
    mapped = mapped_stage_names(stage_map)
    stages = mapped + DERIVED_STAGES
    ok_index = np.flatnonzero(req.is_ok & np.array([t is not None for t in req.trace_id], dtype=bool))
    ok_ids = pa.array(req.trace_id[ok_index], type=pa.string())
    n_ok, n_mapped = len(ok_index), len(mapped)
    if len(spans) == 0 or n_ok == 0:
        return StageMatrix(np.zeros(0, np.int64), stages, np.zeros((0, len(stages))), int(req.is_ok.sum()), [])

    position = pc.fill_null(pc.index_in(spans.column("trace_id"), value_set=ok_ids), -1).to_numpy()
    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    duration_ms = (end - start) / NS_PER_MS
    kind = pc.fill_null(spans.column("kind"), 0).to_numpy()
    joined = position >= 0
    is_server = joined & (kind == SPAN_KIND_SERVER)

    server_ms = np.full(n_ok, np.nan)
    server_rows = position[is_server]
    np.fmax.at(server_ms, server_rows, duration_ms[is_server])

    names = list(stage_map.keys())
    name_to_stage = np.array([mapped.index(stage_map[n]) for n in names], dtype=np.int64)
    name_pos = pc.fill_null(pc.index_in(spans.column("name"), value_set=pa.array(names, pa.string())), -1).to_numpy()
    is_stage = joined & ~is_server & (name_pos >= 0)
    key = position[is_stage] * n_mapped + name_to_stage[name_pos[is_stage]]
    sums = np.bincount(key, weights=duration_ms[is_stage], minlength=n_ok * n_mapped).reshape(n_ok, n_mapped)
    present = np.bincount(key, minlength=n_ok * n_mapped).reshape(n_ok, n_mapped) > 0
    stage_ms = np.where(present, sums, np.nan)

    has_server = ~np.isnan(server_ms)
    rows = np.flatnonzero(has_server)
    stage_ms, server_ms = stage_ms[rows], server_ms[rows]
    unaccounted = np.clip(server_ms - np.nansum(stage_ms, axis=1), 0.0, None)
    client_network = req.service_ms[ok_index[rows]] - server_ms
    matrix = np.column_stack([stage_ms, server_ms, unaccounted, client_network])
    unmapped_mask = joined & ~is_server & (name_pos < 0)
    return StageMatrix(ok_index[rows], stages, matrix, int(req.is_ok.sum()),
                       unmapped_names(spans.filter(pa.array(unmapped_mask))))


def unmapped_names(spans: pa.Table) -> list[dict]:
    """[{"name", "count"}] of the most frequent span names no stage rule maps."""
    if len(spans) == 0:
        return []
    counts = pc.value_counts(spans.column("name")).to_pylist()
    counts.sort(key=lambda item: (-item["counts"], str(item["values"])))
    return [{"name": item["values"], "count": item["counts"]} for item in counts[:TOP_UNMAPPED]]


def stage_stats(values_ms: np.ndarray) -> dict:
    """{"p50_ms", "p99_ms", "mean_ms", "count"} of one stage column (NaN ignored)."""
    values = np.sort(values_ms[~np.isnan(values_ms)])
    if len(values) == 0:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None, "count": 0}
    return {
        "p50_ms": float(np.quantile(values, 0.5, method="inverted_cdf")),
        "p99_ms": float(np.quantile(values, 0.99, method="inverted_cdf")),
        "mean_ms": float(values.mean()),
        "count": int(len(values)),
    }


def summarize_stages(matrix: StageMatrix) -> dict:
    """The ``stages`` section: joined fraction, joined count, per-stage statistics."""
    joined = len(matrix.request_index)
    return {
        "joined_fraction": joined / matrix.ok_requests if matrix.ok_requests else 0.0,
        "joined_requests": joined,
        "by_stage": {stage: stage_stats(matrix.ms[:, j]) for j, stage in enumerate(matrix.stages)},
        "unmapped_span_names": matrix.unmapped,
    }
