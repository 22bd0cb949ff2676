"""What the reader of a run must know about how its load was generated:
closed loop (coordinated omission), a generator that fell behind, dropped
requests, an aborted run. Pure functions over the typed ``generator`` section
(:class:`~tailscope.analysis_model.health.Generator`), the SLO judgement and the manifest.
"""

from __future__ import annotations

from dataclasses import replace

from tailscope.analysis_model.health import Generator, LimitedInterval
from tailscope.analyzers.inputs.records import NS_PER_S
from tailscope.analyzers.stats.slo import SloJudgement

#: Intervals named in the generator-limited warning (the analysis lists them all).
INTERVALS_IN_WARNING = 5


def _offset_s(t_ns: int, origin_ns: int | None) -> str:
    return f"{(t_ns - (origin_ns or t_ns)) / NS_PER_S:.0f} s"


def limited_windows_text(intervals: list[LimitedInterval], origin_ns: int | None) -> str:
    """``"12–14 s (cpu_contention), 30–31 s (gc)"``: generator-limited intervals (seconds from
    ``origin_ns``, epoch ns), the first :data:`INTERVALS_IN_WARNING` of them."""
    parts = [f"{_offset_s(i.start_ns, origin_ns)}–{_offset_s(i.end_ns, origin_ns)} ({i.cause})"
             for i in intervals[:INTERVALS_IN_WARNING]]
    more = len(intervals) - INTERVALS_IN_WARNING
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def load_warnings(generator: Generator, manifest: dict) -> list[dict]:
    """Warnings about the load model, the generator's health, drops and an abort."""
    warnings = []
    model = generator.load_model
    if model.get("loop") == "closed":
        warnings.append({"code": "closed_loop", "message": (
            f"closed-loop load ({model.get('users', '?')} users): each user waits for its reply before "
            "sending again, so a slow target is sent fewer requests and its stall hides from the "
            "percentiles (coordinated omission); use an open-loop arrival process to measure the tail")})
    dropped = generator.dropped
    if dropped:
        policy = generator.in_flight_policy
        why = (f"the in-flight cap of {generator.max_in_flight} was full (policy: drop)"
               if policy == "drop" else "they were due when the run was halted")
        warnings.append({"code": "dropped", "message": (
            f"{dropped:,} requests were never sent because {why}; they count as errors "
            "(error_kind dropped)")})
    for reason in manifest.get("abort_reasons") or []:
        warnings.append({"code": "aborted", "message": f"run aborted early: {reason}"})
    return warnings


def abort_verdict(judgement: SloJudgement, manifest: dict) -> SloJudgement:
    """An aborted run fails its SLO judgement, with the abort reasons listed as failures
    (``aborted: <reason>``); any other run's judgement is returned as it is."""
    reasons = manifest.get("abort_reasons") or []
    if manifest.get("status") != "aborted" or not reasons:
        return judgement
    return replace(judgement, passed=False, failed=judgement.failed + tuple(f"aborted: {r}" for r in reasons),
                   aborted=True)
