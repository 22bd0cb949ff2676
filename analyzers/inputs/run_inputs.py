"""What cause detectors read, prepared once per run and shared by every detector.

:class:`RunInputs` holds the request arrays, the stage matrix, the spikes'
bounds and the baseline threshold, and derives (lazily, once) what several
detectors need: the signal index, a 1-s grid over the load period with a
spike mask and a baseline mask, the target's GC pauses as a cumulative
pause-time function, the ``queue.depth`` of every ``queue_wait`` span, and the
server-side arrival times (SERVER spans of every trace, joined or not, so
load from outside the harness counts), and the other traffic — requests of traces
the harness did not send, with their tokens (:mod:`.other_traffic`).

Spike boundaries are imprecise (they are whole detection windows and a cause
can start before its effect): every detector looks at a spike widened by a
*margin* (``max(2 s, duration / 2)``) and compares it with a baseline that
excludes every spike widened by the same margin (by less — half, one second,
none — when that would leave too few baseline seconds in a short run,
:meth:`RunInputs.baseline_bins`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.other_traffic import OtherTraffic, foreign_spans, other_traffic
from tailscope.analyzers.inputs.pauses import Pauses, pauses_of
from tailscope.analyzers.inputs.queues import QueuePoints, queue_points
from tailscope.analyzers.inputs.records import NS_PER_S, RequestArrays, int_column, take_rows
from tailscope.analyzers.inputs.runtime_gc import RuntimeGc, runtime_gc
from tailscope.analyzers.inputs.signal_index import Contrast, SignalIndex, contrast, place_words
from tailscope.analyzers.inputs.span_stalls import Stalls, find_stalls
from tailscope.analyzers.inputs.trace_join import trace_positions
from tailscope.analyzers.stages.decomposition import SPAN_KIND_SERVER, StageMatrix
from tailscope.analyzers.stages.server_metrics import ServerSeries, run_server_series
from tailscope.analyzers.stats.llm import LlmArrays, llm_arrays
from tailscope.rundir import Run

#: Grid step of the signals detectors compare (ns).
GRID_NS = NS_PER_S
#: Smallest margin around a spike (ns).
MIN_MARGIN_NS = 2 * NS_PER_S
#: Widest rolling window (bins) a spike's level is averaged over: short, so that even a
#: short run's baseline holds several such windows.
MAX_LEVEL_BINS = 3
#: Fewest baseline bins a contrast needs.
MIN_BASELINE_BINS = 8
#: Most normal requests sampled for per-request comparisons (seeded).
MAX_NORMAL_SAMPLE = 200_000


def margin_ns(start_ns: int, end_ns: int) -> int:
    """The margin added on each side of a spike: max(2 s, half its duration)."""
    return max(MIN_MARGIN_NS, (end_ns - start_ns) // 2)


@dataclass
class RunInputs:
    """Shared, lazily derived inputs of the cause detectors for one run."""

    run: Run
    req: RequestArrays
    matrix: StageMatrix
    origin_ns: int
    end_ns: int
    threshold_ms: float
    spike_bounds: list[tuple[int, int]] = field(default_factory=list)
    #: :func:`~.stages.request_of_span` of ``run.spans`` when known (the analysis' shared join):
    #: every span↔request question is then answered from it instead of a join of its own.
    span_request: np.ndarray | None = None
    #: :func:`~.queues.queue_points` of ``run.spans`` when the analysis read them already.
    queue_points: QueuePoints | None = None

    # ------------------------------------------------------------------ signals
    @cached_property
    def signals(self) -> SignalIndex:
        return SignalIndex(self.run.signals, self.run.signals_meta)

    @cached_property
    def edges(self) -> np.ndarray:
        """Grid edges (epoch ns) covering the load period, GRID_NS apart."""
        bins = max(1, int(-(-(self.end_ns - self.origin_ns) // GRID_NS)))
        return self.origin_ns + np.arange(bins + 1, dtype=np.int64) * GRID_NS

    def bins_between(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Boolean mask of grid bins overlapping [start_ns, end_ns)."""
        edges = self.edges
        return (edges[1:] > start_ns) & (edges[:-1] < end_ns)

    def spike_bins(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Bins of a spike widened by its margin."""
        margin = margin_ns(start_ns, end_ns)
        return self.bins_between(start_ns - margin, end_ns + margin)

    @cached_property
    def baseline_bins(self) -> np.ndarray:
        """Bins outside every spike widened by its margin. In a short run, where that leaves
        fewer than MIN_BASELINE_BINS, the margin shrinks to half, then to one grid bin (a spike's
        bounds are whole detection windows, and effects such as a draining queue outlast their
        cause: a baseline next to the spike would hold its tail) with half as many bins
        required, then to none; all bins as a last resort."""
        for margin_of, needed in ((margin_ns, MIN_BASELINE_BINS),
                                  (lambda start, end: margin_ns(start, end) // 2, MIN_BASELINE_BINS),
                                  (lambda start, end: GRID_NS, MIN_BASELINE_BINS // 2),
                                  (lambda start, end: 0, MIN_BASELINE_BINS // 2)):
            excluded = np.zeros(len(self.edges) - 1, dtype=bool)
            for start, end in self.spike_bounds:
                margin = margin_of(start, end)
                excluded |= self.bins_between(start - margin, end + margin)
            if (~excluded).sum() >= needed:
                return ~excluded
        return np.ones(len(self.edges) - 1, dtype=bool)

    @cached_property
    def server_series(self) -> ServerSeries:
        """The run's preset metric map resolved against its signals (:mod:`~..stages.server_metrics`)."""
        return run_server_series(self.run, self.signals)

    def server_role(self, role: str) -> np.ndarray | None:
        """One server role (``kv_usage``, ``preemptions``, ``waiting``, …) per grid bin in the role's
        unit (counters as rates per second); None when the run has no series for it."""
        series = self.server_series
        return series.binned(role, self.signals, self.edges) if series.has(role) else None

    def binned(self, name: str) -> np.ndarray:
        return self.signals.binned(name, self.edges)

    def contrast_values(self, values: np.ndarray, start_ns: int, end_ns: int, floor: float = 0.0) -> Contrast | None:
        """Contrast of per-bin values: the spike's best rolling mean (its own length, at most
        MAX_LEVEL_BINS bins) inside the widened spike, against rolling means of the baseline
        (single bins when a short run's baseline holds too few whole rolling windows)."""
        width = int(min(MAX_LEVEL_BINS, max(1, round((end_ns - start_ns) / GRID_NS))))
        while True:
            base_ok = windows_inside(self.baseline_bins, width)
            if width == 1 or base_ok.sum() >= MIN_BASELINE_BINS // 2:
                break
            width -= 1
        rolled = rolling_mean(values, width)
        spike_ok = windows_inside(self.spike_bins(start_ns, end_ns), width)
        found = contrast(rolled, spike_ok, base_ok, floor=floor, level=1.0)
        if found is None:
            return None
        return replace(found, inside=self._level_inside(values, start_ns, end_ns, width),
                       place=self._level_place(rolled, spike_ok, width, start_ns, end_ns))

    def _level_inside(self, values: np.ndarray, start_ns: int, end_ns: int, width: int) -> float | None:
        """The best rolling mean (``width`` bins, fewer when the spike holds fewer) over the spike's own
        bins, not widened; None when none of them has a reading."""
        own = self.bins_between(start_ns, end_ns)
        width = max(1, min(width, int(own.sum())))
        rolled = rolling_mean(values, width)[windows_inside(own, width)]
        rolled = rolled[np.isfinite(rolled)]
        return float(rolled.max()) if len(rolled) else None

    def _level_place(self, rolled: np.ndarray, spike_ok: np.ndarray, width: int, start_ns: int, end_ns: int) -> str:
        """Where the widened spike's best rolling window lies against the spike's own bins
        (:func:`~.signal_index.place_words`, on grid bins: a spike that starts mid-bin owns that bin)."""
        candidates = np.flatnonzero(spike_ok & np.isfinite(rolled))
        if len(candidates) == 0:
            return "in the spike"
        first = int(candidates[np.argmax(rolled[candidates])])
        own = np.flatnonzero(self.bins_between(start_ns, end_ns))
        if len(own) == 0:
            return "in the spike"
        edges = self.edges
        return place_words(int(edges[first]), int(edges[first + width]), int(edges[own[0]]), int(edges[own[-1] + 1]))

    def contrast(self, name: str, start_ns: int, end_ns: int, floor: float = 0.0) -> Contrast | None:
        """Contrast of one signal series for a spike; None when the series is absent."""
        if not self.signals.has(name):
            return None
        return self.contrast_values(self.binned(name), start_ns, end_ns, floor)

    # ------------------------------------------------------------------ events
    @cached_property
    def gc_pauses(self) -> Pauses:
        return pauses_of(self.run.events, "gc_pause")

    @cached_property
    def generator_pauses(self) -> Pauses:
        return pauses_of(self.run.events, "generator_gc")

    @cached_property
    def runtime_gc(self) -> RuntimeGc:
        """The target's GC from its runtime metrics, per export interval (:mod:`~.runtime_gc`)."""
        return runtime_gc(self.run, self.signals)

    @cached_property
    def span_stalls(self) -> Stalls:
        """The target's stalls seen in its spans alone (:func:`~.span_stalls.find_stalls`)."""
        spans = self.run.spans
        span_request = self.span_request
        if span_request is None and len(spans):
            joined = pc.fill_null(pc.is_in(spans.column("trace_id"), value_set=self.trace_ids), False)
            span_request = np.where(joined.to_numpy(zero_copy_only=False), 0, -1)
        sent = np.where(self.req.has_sent, self.req.sent_ns, self.req.scheduled_ns)
        return find_stalls(spans, span_request if span_request is not None else np.zeros(0, np.int64), sent)

    # ------------------------------------------------------------------ spans
    @cached_property
    def queue(self) -> QueuePoints:
        """The run's ``queue_wait`` spans with a depth (:func:`~.queues.queue_points`), unless given."""
        return self.queue_points if self.queue_points is not None else queue_points(self.run.spans)

    @cached_property
    def _queue_request(self) -> np.ndarray:
        """Request index of each queue point (-1: none); one join per run."""
        rows = self.queue.rows
        if self.span_request is not None:
            return self.span_request[rows]
        return trace_positions(take_rows(self.run.spans.column("trace_id"), rows), self.trace_ids)

    def queue_spans(self, limit: int | None = MAX_NORMAL_SAMPLE) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(request index or -1, start_ns, depth, capacity) of ``queue_wait`` spans with a depth.

        At most ``limit`` spans, evenly spaced (a mean per second needs no more); None for all.
        """
        queue = self.queue
        picked = slice(None)
        if limit is not None and len(queue) > limit:
            picked = np.linspace(0, len(queue) - 1, limit).astype(np.int64)
        return self._queue_request[picked], queue.t_ns[picked], queue.depth[picked], queue.capacity[picked]

    @cached_property
    def _queue_point_of_request(self) -> np.ndarray:
        """Queue point of each request's span (-1: none)."""
        points = np.full(self.req.n, -1, np.int64)
        position = self._queue_request
        joined = np.flatnonzero(position >= 0)
        points[position[joined]] = joined
        return points

    def queue_depth_of(self, request_index: np.ndarray) -> np.ndarray:
        """``queue.depth`` seen by each of these requests (NaN without a queue_wait span with one)."""
        out = np.full(len(request_index), np.nan)
        if len(self.queue) == 0 or len(request_index) == 0:
            return out
        points = self._queue_point_of_request[request_index]
        has = points >= 0
        out[has] = self.queue.depth[points[has]]
        return out

    @cached_property
    def status(self) -> np.ndarray:
        """HTTP status of every request (0 when no response)."""
        values, _ = int_column(self.run.requests, "status")
        return values

    @cached_property
    def queue_capacity(self) -> float | None:
        """The batcher queue's capacity (median ``queue.capacity`` of up to 1,000 spans), None when not reported."""
        capacity = self.queue_spans(limit=1000)[3]
        capacity = capacity[np.isfinite(capacity)]
        return float(np.median(capacity)) if len(capacity) else None

    @cached_property
    def trace_ids(self) -> pa.Array:
        """Every request's trace id as Arrow strings."""
        return self.req.trace_ids.combine_chunks()

    @cached_property
    def _server_rows(self) -> np.ndarray:
        """Rows of SERVER-kind spans in the spans table."""
        kind = pc.fill_null(self.run.spans.column("kind"), 0).to_numpy(zero_copy_only=False)
        return np.flatnonzero(kind == SPAN_KIND_SERVER)

    @cached_property
    def _server_spans(self) -> pa.Table | None:
        spans = self.run.spans
        if len(spans) == 0:
            return None
        columns = ["start_ns", "end_ns", "status_code", "attributes"]
        needed = spans.select(columns + (["trace_id"] if self.span_request is None else []))
        return take_rows(needed, self._server_rows)

    @cached_property
    def server_starts_ns(self) -> np.ndarray:
        """Start times (epoch ns, sorted) of every SERVER span: the load the target saw."""
        if self._server_spans is None:
            return np.zeros(0, np.int64)
        start, _ = int_column(self._server_spans, "start_ns")
        return np.sort(start)

    @cached_property
    def external_arrivals_ns(self) -> np.ndarray:
        """Start times (sorted) of SERVER spans of traces the harness did not send: load from elsewhere."""
        server = self._server_spans
        if server is None or len(server) == 0:
            return np.zeros(0, np.int64)
        if self.span_request is not None:
            foreign = self.span_request[self._server_rows] < 0
        else:
            foreign = pc.invert(pc.is_in(server.column("trace_id"), value_set=self.trace_ids)).to_numpy(
                zero_copy_only=False)
        start, _ = int_column(server, "start_ns")
        return np.sort(start[foreign])

    @cached_property
    def other_traffic(self) -> OtherTraffic:
        """Requests the target served that the harness did not send, with their tokens where the
        preset's token attributes carry them (:mod:`.other_traffic`)."""
        tokens = self.matrix.server_tokens.attributes if self.matrix.server_tokens is not None else None
        spans = self.run.spans
        return other_traffic(spans, foreign_spans(spans, self.span_request, self.trace_ids), tokens)

    @cached_property
    def other_traffic_per_second(self) -> dict[str, np.ndarray]:
        """Per grid bin: other traffic's ``requests``, ``prompt_tokens`` and ``output_tokens`` per second."""
        return self.other_traffic.per_second(self.edges)

    @cached_property
    def completions_ns(self) -> np.ndarray:
        """When the target finished useful work (epoch ns): ends of SERVER spans that answered
        below 400 (``http.response.status_code`` or ``http.status_code``; spans without either
        count unless their status is error), or successful requests' ends in a run without
        spans. Its rate is the throughput the target sustained, external load included."""
        server = self._server_spans
        if server is None or len(server) == 0:
            return np.sort(self.req.end_ns[self.req.is_ok])
        attributes = pc.fill_null(server.column("attributes"), "")
        answered = pc.match_substring_regex(attributes, r'"http\.(response\.)?status_code"\s*:').to_numpy(
            zero_copy_only=False)
        rejected = pc.match_substring_regex(attributes, r'"http\.(response\.)?status_code"\s*:\s*[45]').to_numpy(
            zero_copy_only=False)
        failed = pc.fill_null(server.column("status_code"), 0).to_numpy() == 2
        useful = np.where(answered, ~rejected, ~failed)
        end, _ = int_column(server, "end_ns")
        return np.sort(end[useful])

    def per_second(self, times_ns: np.ndarray) -> np.ndarray:
        """Counts per grid bin of event times, per second."""
        bins = len(self.edges) - 1
        index = np.floor_divide(np.asarray(times_ns, dtype=np.int64) - self.origin_ns, GRID_NS)  # edges are uniform
        inside = (index >= 0) & (index < bins)
        return np.bincount(index[inside], minlength=bins) / (GRID_NS / NS_PER_S)

    @cached_property
    def llm(self) -> LlmArrays | None:
        """The OpenAI-API columns of the requests (token counts), None in a run without them."""
        return llm_arrays(self.run.requests)

    @cached_property
    def prompt_tokens_per_second(self) -> tuple[np.ndarray, np.ndarray]:
        """(own, other) per grid bin: prompt tokens per second the harness's requests sent (each
        request's prompt at its send) and the other traffic's (:attr:`other_traffic_per_second`);
        zeros where the run has none."""
        bins = len(self.edges) - 1
        own = np.zeros(bins)
        if self.llm is not None:
            index = np.floor_divide(self.req.sent_ns - self.origin_ns, GRID_NS)
            counted = (index >= 0) & (index < bins) & ~np.isnan(self.llm.prompt_tokens)
            own = np.bincount(index[counted], weights=self.llm.prompt_tokens[counted], minlength=bins) / (
                GRID_NS / NS_PER_S)
        return own, self.other_traffic_per_second["prompt_tokens"]

    # ------------------------------------------------------------------ requests
    def normal_sample(self, normal_index: np.ndarray) -> np.ndarray:
        """At most MAX_NORMAL_SAMPLE normal requests (seeded, sorted), for per-request comparisons.

        Every spike of a run shares one normal set, so the sample is drawn once and reused."""
        if len(normal_index) <= MAX_NORMAL_SAMPLE:
            return normal_index
        key = (len(normal_index), int(normal_index[0]), int(normal_index[-1]))
        cached = self.__dict__.get("_normal_sample")
        if cached is None or cached[0] != key:
            rng = np.random.default_rng(0)
            chosen = np.sort(rng.choice(len(normal_index), size=MAX_NORMAL_SAMPLE, replace=False))
            cached = (key, normal_index[chosen])
            self.__dict__["_normal_sample"] = cached
        return cached[1]

    def request_interval(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sent or scheduled, end) epoch ns of requests: the time they were in the service's hands."""
        begin = np.where(self.req.has_sent[index], self.req.sent_ns[index], self.req.scheduled_ns[index])
        return begin, self.req.end_ns[index]


def rolling_mean(values: np.ndarray, width: int) -> np.ndarray:
    """Mean of values[i:i+width] ignoring NaN (NaN where all are NaN); length len − width + 1."""
    if width <= 1:
        return values.astype(np.float64)
    if len(values) < width:
        return np.zeros(0)
    finite = np.isfinite(values)
    sums = np.concatenate(([0.0], np.cumsum(np.where(finite, values, 0.0))))
    counts = np.concatenate(([0], np.cumsum(finite)))
    total = sums[width:] - sums[:-width]
    count = counts[width:] - counts[:-width]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def windows_inside(mask: np.ndarray, width: int) -> np.ndarray:
    """For each rolling window start, whether all ``width`` bins are in ``mask``."""
    if width <= 1:
        return mask
    if len(mask) < width:
        return np.zeros(0, dtype=bool)
    counts = np.concatenate(([0], np.cumsum(mask)))
    return (counts[width:] - counts[:-width]) == width
