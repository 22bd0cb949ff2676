"""Stalls of the target seen in its spans alone: every in-flight request stopped progressing at once.

A process that stops — a stop-the-world GC pause, a lock every thread waits on, pages
swapped back in — starts no span, ends none and records no span event until it runs
again, while the requests it holds stay in flight. A service that sends no GC events
(any plain OpenTelemetry service) still shows such a pause this way.

The target's *activity* is every start, end and event time (epoch ns) of the spans of
one target process: spans grouped by (``service``, ``pid``), for each service whose
SERVER spans joined the harness's requests. A *gap* is the time between two consecutive
activity times while at least one of that process's SERVER spans is open (a request in
flight). Over the whole run the gaps' tail is modelled as exponential through their median
and upper quartile (``P(gap ≥ g) = 0.5 × exp(−(g − q50) / μ)``, ``μ = (q75 − q50) / ln 2``:
quantiles, so the incident itself — up to about a fifth of the gaps — does not widen the tail it
is judged against). Likewise the *wait* of a request sent during a gap: from the harness's send
to its SERVER span's start (normally the network and the accept delay), its tail fitted over the
requests not sent during a silence the gap test alone finds improbable (those waits are the
incident's own). A gap is a
**stall** when it lasts at least :data:`MIN_STALL_MS`, holds at least :data:`MIN_HELD`
requests (in flight through it, or sent during it) and its chance ``p`` — the larger of
``gaps × P(gap ≥ g)`` and ``requests × P(wait ≥ w)`` (Bonferroni over every in-flight gap and
every request; both must be improbable, since a silence alone is also what requests all in one
long stage look like, while a stopped process also keeps the requests sent during it waiting;
the wait's alone when no span was open as the silence began) — is at most :data:`STALL_ALPHA`.

What this tells apart: a long stage at low concurrency (one request in flight inside a
200-ms model call) makes 200-ms gaps common, so they are not improbable and not stalls;
the gaps at 10 requests in flight are short, so a 100-ms silence then is; at low rates,
where one request at a time is in flight, the requests that arrive during the silence and
wait it out are the evidence. A silence no request arrived in is not judged (slow work looks
the same from the spans), so at low rates only the stalls some request ran into are found —
those are the ones that slowed a request. One request alone in a long span is a slow request,
never a stall. A process with fewer than
:data:`MIN_GAPS` in-flight gaps is not judged (``checked`` false, with the reason).
Cost: one sort of the activity times, O(spans log spans).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analyzers.inputs.pauses import Pauses
from tailscope.analyzers.inputs.records import NS_PER_MS, int_column
from tailscope.analyzers.stages.decomposition import SPAN_KIND_SERVER

#: Shortest silence that counts as a stall, ms.
MIN_STALL_MS = 10.0
#: Largest chance (over every in-flight gap of the process in the run) at which a silence is a stall.
STALL_ALPHA = 1e-3
#: Share of the values above the point the exponential tail starts from (the median).
TAIL_SHARE = 0.5
#: Fewest requests a stall holds (in flight through it, or sent during it): one slow span alone is
#: a slow request, not a stopped process.
MIN_HELD = 2
#: Fewest in-flight gaps of a process for its silences to be judged.
MIN_GAPS = 200
#: A wait is back to normal at or below the fitted tail's (1 − DRAIN_SHARE) quantile.
DRAIN_SHARE = 0.01


@dataclass(frozen=True)
class Stalls:
    """The target's stalls found in its spans (module docstring).

    ``pauses``: the stalls as :class:`~.run_inputs.Pauses` (epoch ns, generation -1);
    ``stalls``: per stall ``{start_ns, end_ns, duration_ms, p_value, in_flight, arrivals, drained_ns,
    drain_ms, service, pid}`` (``in_flight``: the process's SERVER spans open through it; ``arrivals``:
    the harness's requests sent during it; ``drained_ns``: when the backlog it left had drained — the
    send of the first request after it that waited no longer than normal for its span to start, the
    fitted wait tail's 99th percentile; ``held``: the stalls with their backlogs, :attr:`with_backlog`);
    ``processes``: per process judged ``{service, pid, gaps, q_ms, mean_excess_ms}``;
    ``checked``: whether any process had enough gaps to be judged; ``reason``: why not."""

    pauses: Pauses
    stalls: list[dict] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    checked: bool = False
    reason: str = ""
    held: Pauses | None = None

    @property
    def with_backlog(self) -> Pauses:
        """Each stall with the backlog it left (to ``drained_ns``), as :class:`~.run_inputs.Pauses`."""
        return self.held if self.held is not None else self.pauses

    def chance_in(self, start_ns: int, end_ns: int) -> float | None:
        """The smallest chance ``p`` among the stalls overlapping [start, end) (None: no stall there)."""
        found = [s["p_value"] for s in self.stalls if s["start_ns"] < end_ns and s["end_ns"] > start_ns]
        return min(found) if found else None

    def inside(self, start_ns: int, end_ns: int) -> list[dict]:
        """The stalls overlapping [start, end), in time order."""
        return [s for s in self.stalls if s["start_ns"] < end_ns and s["end_ns"] > start_ns]


def _no_pauses() -> Pauses:
    return Pauses(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def _event_times(texts: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Every ``t_ns`` of the span events (JSON lists, null where none), epoch ns."""
    present = pc.drop_null(texts).to_pylist()
    out = []
    for text in present:
        try:
            events = json.loads(text)
        except (TypeError, ValueError):
            continue
        for event in events if isinstance(events, list) else ():
            t = event.get("t_ns") if isinstance(event, dict) else None
            if isinstance(t, int) and not isinstance(t, bool):
                out.append(t)
    return np.asarray(out, dtype=np.int64)


def tail_chance(gap_ms: np.ndarray, q_ms: float, mean_excess_ms: float, gaps: int) -> np.ndarray:
    """Chance of a gap at least ``gap_ms`` long among ``gaps`` in-flight gaps by chance (Bonferroni,
    capped at 1): ``gaps × TAIL_SHARE × exp(−(g − q)/μ)`` above ``q``, 1 at or below it."""
    excess = np.maximum(np.asarray(gap_ms, dtype=float) - q_ms, 0.0)
    scale = max(mean_excess_ms, 1e-6)
    return np.minimum(1.0, gaps * TAIL_SHARE * np.exp(-excess / scale))


def _tail_fit(values_ms: np.ndarray) -> tuple[float, float]:
    """(q, μ): the values' median and the scale of an exponential tail through their median and
    upper quartile, μ = (q75 − q50) / ln 2 — quantiles, so that the incident itself (up to about a
    fifth of the values: recurring stalls hold many of a run's waits) does not widen the tail it is
    judged against."""
    q50, q75 = (float(v) for v in np.quantile(values_ms, [0.5, 0.75]))
    return q50, (q75 - q50) / math.log(2.0)


def _process_stalls(starts: np.ndarray, ends: np.ndarray, events: np.ndarray, server_start: np.ndarray,
                    server_end: np.ndarray, server_sent: np.ndarray) -> tuple[list[tuple[int, int, float, int, int]], dict]:
    """((start, end, p, in flight, arrivals) per stall, the fits' facts) of one process.

    ``server_sent``: per SERVER span of the process, when the harness sent its request (epoch ns; -1
    where it is not the harness's). Two chances are fitted: of a gap this long with requests in
    flight, and of a request sent during the gap waiting this long for its SERVER span to start
    (``wait``: the harness's send to the span's start, whose tail is the accept delay); a gap's
    chance is the larger of the two (both must be improbable), or the wait's alone when no span
    was open when the silence began."""
    times = np.sort(np.concatenate([starts, ends, events]))
    order = np.argsort(server_start, kind="stable")
    server_start, server_sent = server_start[order], server_sent[order]
    server_end = np.sort(server_end)
    if len(times) < 2:
        return [], {"gaps": 0}
    left, right = times[:-1], times[1:]
    open_spans = np.searchsorted(server_start, left, side="right") - np.searchsorted(server_end, left, side="right")
    in_flight = (open_spans > 0) & (right > left)
    gap_ms = (right[in_flight] - left[in_flight]) / NS_PER_MS
    facts = {"gaps": int(len(gap_ms))}
    if len(gap_ms) < MIN_GAPS:
        return [], facts
    q, mean_excess = _tail_fit(gap_ms)
    facts.update({"q_ms": q, "mean_excess_ms": mean_excess})
    gap_chance = np.ones(len(left))
    gap_chance[in_flight] = tail_chance(gap_ms, q, mean_excess, len(gap_ms))
    # requests of this process sent during a gap: the first one's wait for its span to start
    ours = server_sent >= 0
    by_sent = np.argsort(server_sent[ours], kind="stable")
    sent_sorted = server_sent[ours][by_sent]
    waits = ((server_start[ours] - server_sent[ours]) / NS_PER_MS)[by_sent]
    wait_chance = np.ones(len(left))
    first = np.searchsorted(sent_sorted, left, side="right")
    arrivals = np.searchsorted(sent_sorted, right, side="left") - first
    waited = np.flatnonzero(arrivals > 0)
    normal_wait = None
    if len(waits) >= MIN_GAPS and len(waited):
        # the wait tail is the accept delay of normal times: the requests sent during a silence the gap
        # test alone already finds improbable are the incident's, not the norm they are judged against
        improbable = np.flatnonzero(gap_chance <= STALL_ALPHA)
        during = np.zeros(len(sent_sorted), bool)
        if len(improbable):
            lo = np.searchsorted(sent_sorted, left[improbable], side="right")
            hi = np.searchsorted(sent_sorted, right[improbable], side="left")
            marks = np.zeros(len(sent_sorted) + 1, np.int64)
            np.add.at(marks, lo, 1)
            np.add.at(marks, hi, -1)
            during = np.cumsum(marks)[:-1] > 0
        normal_waits = waits[~during] if (~during).sum() >= MIN_GAPS else waits
        wq, wmean = _tail_fit(normal_waits)
        normal_wait = wq + wmean * math.log(0.5 / DRAIN_SHARE)
        facts.update({"wait_q_ms": wq, "wait_mean_excess_ms": wmean})
        wait_ms = (right[waited] - sent_sorted[first[waited]]) / NS_PER_MS
        wait_chance[waited] = tail_chance(wait_ms, wq, wmean, len(waits))
    # both must be improbable (an intersection-union test: p is the larger): a silence alone is also what
    # requests all inside one long stage look like; a stopped process also keeps new arrivals waiting
    chance = np.where(open_spans > 0, np.maximum(gap_chance, wait_chance), wait_chance)
    begin = np.where(open_spans > 0, left, np.where(arrivals > 0, sent_sorted[np.minimum(first, max(len(sent_sorted) - 1, 0))]
                                                     if len(sent_sorted) else left, left))
    length_ms = (right - begin) / NS_PER_MS
    held = np.maximum(open_spans, 0) + arrivals
    chosen = np.flatnonzero((length_ms >= MIN_STALL_MS) & (chance <= STALL_ALPHA) & (held >= MIN_HELD)
                            & (arrivals > 0))
    # the backlog a stall leaves: until the first request sent after it waits no longer than normal
    drained = right[chosen].copy()
    if normal_wait is not None and len(chosen):
        ok_sent = sent_sorted[waits <= normal_wait]
        after = np.searchsorted(ok_sent, right[chosen], side="left")
        drained = np.where(after < len(ok_sent), ok_sent[np.minimum(after, max(len(ok_sent) - 1, 0))]
                           if len(ok_sent) else right[chosen], right[chosen])
        drained = np.maximum(drained, right[chosen])
    return [(int(begin[i]), int(right[i]), float(chance[i]), int(open_spans[i]), int(arrivals[i]), int(d))
            for i, d in zip(chosen, drained)], facts


def find_stalls(spans: pa.Table, span_request: np.ndarray, sent_ns: np.ndarray) -> Stalls:
    """The stalls of every target process (module docstring).

    ``span_request``: per span, the index of the harness's request of its trace (-1: none);
    ``sent_ns``: every request's send time (epoch ns) — requests sent during a stall are counted."""
    if len(spans) == 0:
        return Stalls(_no_pauses(), reason="no spans were recorded")
    kind = pc.fill_null(spans.column("kind"), 0).to_numpy(zero_copy_only=False)
    service = pc.fill_null(spans.column("service"), "").to_numpy(zero_copy_only=False).astype(str)
    pid = pc.fill_null(spans.column("pid"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    start, _ = int_column(spans, "start_ns")
    end, _ = int_column(spans, "end_ns")
    server = kind == SPAN_KIND_SERVER
    targets = sorted(set(zip(service[server & (span_request >= 0)], pid[server & (span_request >= 0)])))
    if not targets:
        return Stalls(_no_pauses(), reason="no SERVER span joined the harness's requests")
    found, processes = [], []
    for name, process in targets:
        rows = np.flatnonzero((service == name) & (pid == process))
        events = _event_times(pc.take(spans.column("events"), pa.array(rows)))
        srv = rows[server[rows]]
        request = span_request[srv]
        sent = np.where(request >= 0, sent_ns[np.clip(request, 0, None)] if len(sent_ns) else -1, -1)
        stalls, facts = _process_stalls(start[rows], end[rows], events, start[srv], end[srv], sent)
        if facts["gaps"] >= MIN_GAPS:
            processes.append({"service": name or None, "pid": int(process) if process >= 0 else None, **facts})
        found += [{"start_ns": a, "end_ns": b, "duration_ms": (b - a) / NS_PER_MS, "p_value": p,
                   "in_flight": c, "arrivals": n, "drained_ns": d, "drain_ms": (d - b) / NS_PER_MS,
                   "service": name or None, "pid": int(process) if process >= 0 else None}
                  for a, b, p, c, n, d in stalls]
    if not processes:
        return Stalls(_no_pauses(), reason=(f"fewer than {MIN_GAPS} gaps between span starts and ends "
                                            "with a request in flight"))
    found.sort(key=lambda s: s["start_ns"])
    return Stalls(_pauses(found), found, processes, True,
                  held=_pauses([{"start_ns": s["start_ns"], "end_ns": s["drained_ns"]} for s in found]))


def _pauses(stalls: list[dict]) -> Pauses:
    """The union of the stalls as :class:`~.run_inputs.Pauses` (processes' stalls may overlap)."""
    if not stalls:
        return _no_pauses()
    start = np.array([s["start_ns"] for s in stalls], np.int64)
    end = np.array([s["end_ns"] for s in stalls], np.int64)
    running = np.maximum.accumulate(end)
    new = np.r_[True, start[1:] > running[:-1]]
    group = np.cumsum(new) - 1
    merged_end = np.zeros(int(group[-1]) + 1, np.int64)
    np.maximum.at(merged_end, group, end)
    merged_start = start[new]
    lengths = merged_end - merged_start
    return Pauses(merged_start, merged_end, np.full(len(merged_start), -1, np.int64),
                  np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.float64))


def union_pauses(intervals: list[dict]) -> Pauses:
    """The union of ``{start_ns, end_ns}`` intervals (epoch ns) as :class:`~.run_inputs.Pauses`."""
    return _pauses(sorted(intervals, key=lambda s: s["start_ns"]))


def chance_words(p: float) -> str:
    """A chance in words: ``"p < 1e-12"`` below 1e-12, else ``"p = 3e-07"``."""
    if p <= 0 or (math.isfinite(p) and p < 1e-12):
        return "p < 1e-12"
    return f"p = {p:.0e}"
