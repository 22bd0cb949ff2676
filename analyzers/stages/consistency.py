"""Stage accounting that cannot double count: do a request's stages fit in its server span?

The stages of one request are parts of its server span laid one after another; the
decomposition sums them and calls the rest ``unaccounted``. Stages that overlap (a span
rule's span around the interval of an event rule, a child span that no rule maps around
spans a rule does, two event rules over the same time) would be summed as if sequential:
the parts then add up to more than the span and ``unaccounted`` is clipped to 0 without a
word. This check finds it per request:

* a request **exceeds** when ``Σ stages > server × (1 + SUM_TOLERANCE) + ABS_TOLERANCE_MS``
  (all in ms; NaN stages count 0);
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

import numpy as np

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


def stage_consistency(stage_ms: np.ndarray, server_ms: np.ndarray, stages: tuple[str, ...], rules: StageRules,
                      span_stages: tuple[str, ...] = ()) -> dict:
    """Facts of the check over the rows of ``stage_ms`` (requests × ``stages``, ms, NaN: none)
    against ``server_ms`` (ms per request): ``checked_requests``, ``exceeding_requests``,
    ``exceeding_share``, ``excess_p50_ms``/``excess_max_ms`` (Σ stages − server over the
    exceeding ones; None without), ``stage_sum_mean_ms``/``server_mean_ms``, ``tolerance``
    (relative) and ``abs_tolerance_ms``, ``preset`` and ``culprits``: ``[{"stage", "sources",
    "resolves_share"}]`` (the share of exceeding requests it alone brings back within the span)."""
    n = len(server_ms)
    total = np.nansum(stage_ms, axis=1) if n else np.zeros(0)
    limit = server_ms * (1.0 + SUM_TOLERANCE) + ABS_TOLERANCE_MS
    exceeding = total > limit
    k = int(np.count_nonzero(exceeding))
    excess = (total - server_ms)[exceeding]
    culprits = []
    if k:
        sources = stage_sources(rules, span_stages)
        filled = np.nan_to_num(stage_ms[exceeding])
        resolved = (total[exceeding][:, None] - filled) <= limit[exceeding][:, None]
        share = resolved.mean(axis=0)
        mean_part = filled.mean(axis=0)
        best = float(share.max()) if len(share) else 0.0
        for j in sorted(range(len(stages)), key=lambda j: (-share[j], -mean_part[j]))[:MAX_CULPRITS]:
            if mean_part[j] <= 0 or (best > 0 and share[j] < best / 2) or (best == 0 and culprits):
                continue  # only the stages that explain most of it (the largest one when none does alone)
            culprits.append({"stage": stages[j], "sources": sources.get(stages[j], []),
                             "resolves_share": float(share[j])})
    return {
        "checked_requests": n,
        "exceeding_requests": k,
        "exceeding_share": k / n if n else 0.0,
        "excess_p50_ms": float(np.median(excess)) if k else None,
        "excess_max_ms": float(excess.max()) if k else None,
        "stage_sum_mean_ms": float(total.mean()) if n else None,
        "server_mean_ms": float(np.mean(server_ms)) if n else None,
        "tolerance": SUM_TOLERANCE,
        "abs_tolerance_ms": ABS_TOLERANCE_MS,
        "preset": rules.preset,
        "culprits": culprits,
    }


def consistency_warnings(stages_section: dict) -> list[dict]:
    """The ``stage_overlap`` warning when any request's stages add up to more than its server
    span (``stages_section``: analysis.json's ``stages``); [] otherwise."""
    facts = stages_section.get("consistency") or {}
    k = facts.get("exceeding_requests") or 0
    if not k:
        return []
    blamed = "; ".join(f"'{c['stage']}' ({', '.join(c['sources']) or 'no rule'}) alone accounts for it in "
                       f"{c['resolves_share']:.0%} of them" for c in facts["culprits"])
    preset = f"preset '{facts['preset']}'" if facts.get("preset") else "the scenario's stage map"
    return [{"code": "stage_overlap", "message": (
        f"stages overlap: in {k:,} of {facts['checked_requests']:,} joined requests ({facts['exceeding_share']:.1%}) "
        f"the stages add up to more than the server span (by {facts['excess_p50_ms']:.2f} ms at the median, "
        f"{facts['excess_max_ms']:.2f} ms at most; mean stage sum {facts['stage_sum_mean_ms']:.2f} ms against a "
        f"server span of {facts['server_mean_ms']:.2f} ms), so the stage table counts some time twice and "
        f"'unaccounted' reads too low; under {preset}: {blamed or 'no single stage explains it'}. "
        "Map the overlapping span to `ignore` or drop one of the rules (docs/analyzers/stages.md)")}]
