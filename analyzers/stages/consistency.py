"""Stage accounting that cannot double count: do a request's stages fit in its server span?

The stages of one request are parts of its server span laid one after another; the
decomposition sums them and calls the rest ``unaccounted``. Stages that overlap (a span
rule's span around the interval of an event rule, a child span that no rule maps around
spans a rule does, two event rules over the same time) would be summed as if sequential:
the parts then add up to more than the span and ``unaccounted`` is clipped to 0 without a
word. This check finds it per request:

* a request **exceeds** when ``Σ stages > server × (1 + SUM_TOLERANCE) + ABS_TOLERANCE_MS``
  (all in ms; NaN stages count 0);
* a request **overlaps** when the intervals of its span-rule and event-rule stages (clipped to
  its server span) cover the same time by more than the same tolerance — which the sum test
  misses where gaps (``unaccounted``) hide it; :func:`interval_overlap` measures it, per request,
  as Σ interval lengths − the length of their union, and counts the stage pairs involved
  (a stage named after an unmapped child span has its rule-mapped descendants' time taken out
  of it, so its interval is not compared: the sum test covers it);
* the **culprits** are the stages whose removal alone brings the most exceeding requests back
  within the span (those doing it for at least half as many as the best one; the largest stage
  when none does), each with the rule that made it (``source``: the span/event/attribute rule
  as ``stages.rules`` describes it, or "child span of the server span that no rule maps") and
  the preset in force.

:func:`stage_consistency` returns the facts (``stages.consistency`` in analysis.json);
:func:`consistency_warnings` turns them into the ``stage_overlap`` warning, which the
terminal, report.html and summary.md show beside the stage table. Cost: O(requests × stages)
numpy, once per analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis_model.stages import Consistency, Culprit, OverlappingStages
from tailscope.analyzers.inputs.records import NS_PER_MS
from tailscope.analyzers.stages.rule_model import StageRules

#: Relative slack of the server span a stage sum may exceed it by (rounding of event times,
#: spans ended a few µs after the server span).
SUM_TOLERANCE = 0.02
#: Absolute slack in ms, for server spans of a few µs.
ABS_TOLERANCE_MS = 0.01
#: Most culprit stages named.
MAX_CULPRITS = 3
#: Source of a stage named after an unmapped child span (:mod:`.span_tree`).
CHILD_SPAN_SOURCE = "child span of the server span that no rule maps (a stage named after itself)"


def stage_sources(rules: StageRules, span_stages: tuple[str, ...]) -> dict[str, list[str]]:
    """``{stage: [the rules that produce it, described]}`` (span-name stages included)."""
    out: dict[str, list[str]] = {}
    for rule in rules.span_rules:
        out.setdefault(rule.stage, []).append(f"span rule {rule.match.describe()}")
    for rule in rules.event_rules:
        out.setdefault(rule.stage, []).append(f"event rule between {rule.start} and {rule.end}")
    for rule in rules.attribute_rules:
        for item in rule.stages:
            out.setdefault(item.stage, []).append(f"attribute {item.attribute} of spans {rule.match.describe()}")
    for name in span_stages:
        out.setdefault(name, []).append(CHILD_SPAN_SOURCE)
    return out


@dataclass(frozen=True)
class IntervalOverlap:
    """Per request position, how much of its stage intervals covers time twice (``ms``) and, of
    the requests whose overlap exceeds the tolerance, how many involve each stage pair
    (``pairs``: ``{(earlier-starting stage column, later one): requests}``)."""

    ms: np.ndarray
    pairs: dict[tuple[int, int], int]


def interval_overlap(position: np.ndarray, column: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
                     server_start_ns: np.ndarray, server_end_ns: np.ndarray) -> IntervalOverlap:
    """The :class:`IntervalOverlap` of stage intervals ``[start_ns, end_ns)`` of request
    ``position`` (index into ``server_start_ns``/``server_end_ns``: each request's server span,
    on the intervals' clock) and stage ``column``. Intervals are clipped to the server span.
    O(n log n) for n intervals: one sort, one running maximum, one ``np.bincount``."""
    n_positions = len(server_start_ns)
    out = np.zeros(n_positions)
    if len(position) == 0:
        return IntervalOverlap(out, {})
    base = server_start_ns[position]
    length = np.maximum(server_end_ns[position] - base, 0)
    rel_start = np.clip(start_ns - base, 0, length)
    rel_end = np.clip(end_ns - base, 0, length)
    unit = 1  # ns; coarser where the one sorted axis below would not fit in int64
    while (int(length.max()) // unit + 1) * (n_positions + 1) > 2 ** 62:
        unit *= 1000
    rel_start, rel_end, length = rel_start // unit, rel_end // unit, length // unit
    span = int(length.max()) + 1
    # one sorted axis: request p's times live in [p·span, (p+1)·span) (a request's times are < span)
    order = np.lexsort((rel_start, position))
    pos, col = position[order], column[order]
    key_start = pos * span + rel_start[order]
    key_end = pos * span + rel_end[order]
    running = np.maximum.accumulate(key_end)
    previous = np.concatenate(([-1], running[:-1]))
    first = np.concatenate(([True], pos[1:] != pos[:-1]))
    previous[first] = key_start[first]  # nothing before the first interval of a request
    covered = np.clip(np.minimum(key_end, previous) - key_start, 0, None)
    out += np.bincount(pos, weights=covered * (unit / NS_PER_MS), minlength=n_positions)
    # the stage whose interval reached furthest before each one: the one it overlaps
    reached = np.maximum.accumulate(np.where(key_end == running, np.arange(len(pos)), 0))
    holder = np.concatenate(([0], reached[:-1]))
    limit = server_ms_limit((server_end_ns - server_start_ns) / NS_PER_MS)
    flagged = covered > 0
    flagged &= (out > limit)[pos]
    columns = int(col.max()) + 1
    pair = col[holder[flagged]] * columns + col[flagged]
    pair_request = np.unique(pair * n_positions + pos[flagged])  # each request once per pair
    counts = np.bincount(pair_request // n_positions, minlength=columns * columns)
    return IntervalOverlap(out, {(int(k) // columns, int(k) % columns): int(counts[k]) for k in np.flatnonzero(counts)})


def server_ms_limit(server_ms: np.ndarray) -> np.ndarray:
    """The slack a request of ``server_ms`` is allowed before its stages count as overlapping or
    exceeding: ``server × SUM_TOLERANCE + ABS_TOLERANCE_MS`` (ms)."""
    return server_ms * SUM_TOLERANCE + ABS_TOLERANCE_MS


def stage_consistency(stage_ms: np.ndarray, server_ms: np.ndarray, stages: tuple[str, ...], rules: StageRules,
                      span_stages: tuple[str, ...] = (), overlap: IntervalOverlap | None = None) -> Consistency:
    """Facts of the check over the rows of ``stage_ms`` (requests × ``stages``, ms, NaN: none)
    against ``server_ms`` (ms per request) and the rows' :func:`interval_overlap` (``overlap``,
    its ``ms`` in the same rows, its pair columns indexing ``stages``): ``overlapping_requests``,
    ``overlap_p50_ms`` (over those; None without), ``overlapping_stages``: ``[{"stages": [a, b],
    "sources": {stage: [rules]}, "requests"}]`` (most requests first), ``checked_requests``, ``exceeding_requests``,
    ``exceeding_share``, ``excess_p50_ms``/``excess_max_ms`` (Σ stages − server over the
    exceeding ones; None without), ``stage_sum_mean_ms``/``server_mean_ms``, ``tolerance``
    (relative) and ``abs_tolerance_ms``, ``preset`` and ``culprits``: ``[{"stage", "sources",
    "resolves_share"}]`` (the share of exceeding requests it alone brings back within the span)."""
    n = len(server_ms)
    total = np.nansum(stage_ms, axis=1) if n else np.zeros(0)
    limit = server_ms + server_ms_limit(server_ms)
    exceeding = total > limit
    k = int(np.count_nonzero(exceeding))
    excess = (total - server_ms)[exceeding]
    culprits = []
    sources = stage_sources(rules, span_stages)
    overlap_ms = overlap.ms if overlap is not None else np.zeros(n)
    overlapping = overlap_ms > server_ms_limit(server_ms)
    m = int(np.count_nonzero(overlapping))
    pairs = sorted((overlap.pairs if overlap is not None else {}).items(), key=lambda item: -item[1])
    overlapping_stages = [OverlappingStages(stages=[stages[a], stages[b]],
                                            sources={stages[a]: sources.get(stages[a], []),
                                                     stages[b]: sources.get(stages[b], [])},
                                            requests=count) for (a, b), count in pairs[:MAX_CULPRITS]]
    if k:
        filled = np.nan_to_num(stage_ms[exceeding])
        resolved = (total[exceeding][:, None] - filled) <= limit[exceeding][:, None]
        share = resolved.mean(axis=0)
        mean_part = filled.mean(axis=0)
        best = float(share.max()) if len(share) else 0.0
        for j in sorted(range(len(stages)), key=lambda j: (-share[j], -mean_part[j]))[:MAX_CULPRITS]:
            if mean_part[j] <= 0 or (best > 0 and share[j] < best / 2) or (best == 0 and culprits):
                continue  # only the stages that explain most of it (the largest one when none does alone)
            culprits.append(Culprit(stages[j], sources.get(stages[j], []), float(share[j])))
    return Consistency(
        overlapping_requests=m,
        overlap_p50_ms=float(np.median(overlap_ms[overlapping])) if m else None,
        overlapping_stages=overlapping_stages,
        checked_requests=n,
        exceeding_requests=k,
        exceeding_share=k / n if n else 0.0,
        excess_p50_ms=float(np.median(excess)) if k else None,
        excess_max_ms=float(excess.max()) if k else None,
        stage_sum_mean_ms=float(total.mean()) if n else None,
        server_mean_ms=float(np.mean(server_ms)) if n else None,
        tolerance=SUM_TOLERANCE,
        abs_tolerance_ms=ABS_TOLERANCE_MS,
        preset=rules.preset,
        culprits=culprits,
    )


def consistency_warnings(facts: Consistency | None) -> list[dict]:
    """The ``stage_overlap`` warning when any request's stages add up to more than its server
    span or overlap in time (``facts``: :func:`stage_consistency`; None: not checked); [] otherwise."""
    if facts is None:
        return []
    k, m = facts.exceeding_requests, facts.overlapping_requests
    if not k and not m:
        return []
    preset = f"preset '{facts.preset}'" if facts.preset else "the scenario's stage map"
    if not k:
        pairs = "; ".join(
            f"'{a}' and '{b}' in {item.requests:,} ({'; '.join(', '.join(item.sources[s]) or 'no rule' for s in (a, b))})"
            for item in facts.overlapping_stages for a, b in [item.stages])
        return [{"code": "stage_overlap", "message": (
            f"stages overlap: in {m:,} of {facts.checked_requests:,} joined requests two stages cover the same "
            f"time ({facts.overlap_p50_ms:.2f} ms at the median), summed as if one followed the other, so "
            f"'unaccounted' reads too low; under {preset}: {pairs}. Map the overlapping span to `ignore` or drop "
            "one of the rules (docs/analyzers/stages.md)")}]
    blamed = "; ".join(f"'{c.stage}' ({', '.join(c.sources) or 'no rule'}) alone accounts for it in "
                       f"{c.resolves_share:.0%} of them" for c in facts.culprits)
    return [{"code": "stage_overlap", "message": (
        f"stages overlap: in {k:,} of {facts.checked_requests:,} joined requests ({facts.exceeding_share:.1%}) "
        f"the stages add up to more than the server span (by {facts.excess_p50_ms:.2f} ms at the median, "
        f"{facts.excess_max_ms:.2f} ms at most; mean stage sum {facts.stage_sum_mean_ms:.2f} ms against a "
        f"server span of {facts.server_mean_ms:.2f} ms), so the stage table counts some time twice and "
        f"'unaccounted' reads too low; under {preset}: {blamed or 'no single stage explains it'}. "
        "Map the overlapping span to `ignore` or drop one of the rules (docs/analyzers/stages.md)")}]
