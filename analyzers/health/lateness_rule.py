"""When the generator's lateness matters: the rule behind the generator-limited headline.

Latency is measured from the scheduled send (DESIGN.md, decision 3), so every
late send is inside the percentiles the report claims: latency = lateness +
service time. A run is generator-limited when more than 1% of its sends left
more than 1 ms late (:mod:`.generator_health`), but a millisecond of lateness on a
16 ms P99 changes no conclusion. The rule: lateness **matters** when it moves
a claimed latency percentile (P50 or P99) by more than ``MATERIAL_SHARE``
(5%) — when that percentile of latency (from the scheduled send) exceeds the
same percentile of service time (from the actual send) by more than 5% of it.
Only then is generator-limited a headline warning; otherwise the report says
so in its load-generator section.

A generator-limited interval matters by the same measure over its own
requests: their latency P99 exceeds their service-time P99 by more than 5% of
the run's P99 latency. The report draws bands only for those. Pure functions
of the summary (a :class:`~tailscope.analysis_model.summary.RequestSummary`) and the typed
``generator`` section (and of the request arrays, for the intervals).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tailscope.analysis_model.health import Generator, LatenessCheck, LatenessRule, LimitedBand, LimitedInterval
from tailscope.analysis_model.summary import RequestSummary
from tailscope.analyzers.inputs.records import RequestArrays
from tailscope.analyzers.stats.percentiles import nearest_rank_value

#: Share of a claimed latency percentile by which lateness must move it to matter.
MATERIAL_SHARE = 0.05
#: The percentiles the rule compares: (percentile set field, lateness field, label, fraction).
COMPARED = (("p50", "p50_ms", "P50", 0.50), ("p99", "p99_ms", "P99", 0.99))
RULE_TEXT = (f"lateness matters when it moves a claimed latency percentile by more than {MATERIAL_SHARE:.0%}: "
             "when P50 or P99 latency (from the scheduled send) exceeds the same percentile of service time "
             f"(from the actual send) by more than {MATERIAL_SHARE:.0%} of it")


def lateness_judgement(summary: RequestSummary) -> LatenessRule:
    """The rule applied to the summary's latency, service-time and lateness percentiles (ms): one
    check per compared percentile; ``share`` = shift / latency."""
    checks = []
    for key, lateness_key, label, _ in COMPARED:
        entry = getattr(summary.latency_ms, key)
        value, served = entry.value_ms, getattr(summary.service_time_ms, key).value_ms
        shift = value - served if value is not None and served is not None else None
        share = shift / value if shift is not None and value > 0 else None
        claimed = entry.claimed
        checks.append(LatenessCheck(percentile=label, latency_ms=value, service_ms=served, shift_ms=shift,
                                    share=share, lateness_ms=getattr(summary.lateness_ms, lateness_key),
                                    claimed=claimed,
                                    material=bool(claimed and share is not None and share > MATERIAL_SHARE)))
    return LatenessRule(material=any(c.material for c in checks), rule=RULE_TEXT, checks=checks)


def judged(generator: Generator, summary: RequestSummary, req: RequestArrays) -> Generator:
    """``generator`` with the lateness rule applied: its ``lateness_rule`` and each limited
    interval's ``p99_shift_ms`` and ``material`` (:func:`material_intervals`)."""
    return replace(generator, limited_windows=material_intervals(generator, summary, req),
                   lateness_rule=lateness_judgement(summary))


def limited_bands(generator: Generator) -> list[LimitedBand]:
    """The ``generator_limited_windows`` section: each limited interval's span and whether it mattered."""
    return [LimitedBand(start_ns=w.start_ns, end_ns=w.end_ns, material=w.material) for w in generator.limited_windows]


def material_intervals(generator: Generator, summary: RequestSummary, req: RequestArrays) -> list[LimitedInterval]:
    """The generator's limited intervals, each with ``p99_shift_ms`` (its requests' latency P99 −
    service-time P99) and ``material`` (that shift above 5% of the run's P99 latency)."""
    p99 = summary.latency_ms.p99.value_ms
    out = []
    for interval in generator.limited_windows:
        inside = (req.in_latency & req.has_sent & (req.scheduled_ns >= interval.start_ns)
                  & (req.scheduled_ns < interval.end_ns))
        shift = None
        if inside.any():
            latency, service = req.latency_ms[inside], req.service_ms[inside]
            service = service[np.isfinite(service)]
            if len(service):
                shift = nearest_rank_value(latency, 0.99) - nearest_rank_value(service, 0.99)
        material = bool(p99 and shift is not None and shift > MATERIAL_SHARE * p99)
        out.append(replace(interval, p99_shift_ms=shift, material=material))
    return out
