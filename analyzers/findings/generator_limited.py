"""The generator-limited finding: the load generator, not the target, may explain the tail.

The run is *generator-limited* when more than 1% of its sends left more than
1 ms after their scheduled time (``summary.lateness_ms.generator_limited``,
:mod:`tailscope.analyzers.stats.summary`), and that lateness is a finding only
when it *matters*: when it changes a claimed percentile (the rule of
:mod:`tailscope.analyzers.health.lateness_rule`, ``generator.lateness_rule``);
otherwise the report states it in its load-generator section. The finding names
the late share, how much of each claimed percentile is lateness, the rule, and
the generator-limited intervals that matter with their likely causes
(``generator.limited_windows``, :mod:`tailscope.analyzers.health.generator_health`).
"""

from __future__ import annotations

from tailscope.analyzers.findings.protocol import Finding, FindingCheck, FindingInputs
from tailscope.analyzers.health.load_checks import limited_windows_text

#: Late share from which the finding is ``high``.
HIGH_LATE_SHARE = 0.1


def check_generator_limited(inputs: FindingInputs) -> Finding | None:
    """``generator_limited`` when the sends kept too badly to their schedule to leave the
    claimed percentiles alone; else None."""
    lateness, generator = inputs.summary.lateness_ms, inputs.generator
    rule = generator.lateness_rule
    if not (lateness.generator_limited and rule is not None and rule.material):
        return None
    material = [w for w in generator.limited_windows if w.material]
    intervals = limited_windows_text(material, inputs.load_start_ns)
    changed = [c for c in rule.checks if c.material]
    moved = "; ".join(f"lateness adds {c.shift_ms:.1f} ms ({c.share:.0%}) to the {c.percentile}"
                      for c in changed)
    summary = (f"{lateness.late_share:.1%} of sends left more than 1 ms after their "
               f"scheduled time and it changes the claimed percentiles ({moved}; the rule: {rule.rule}); "
               "the generator, not the target, may be the bottleneck" + (f"; windows: {intervals}" if intervals else ""))
    return Finding("generator_limited", "high" if lateness.late_share >= HIGH_LATE_SHARE else "medium",
                   summary, {"late_share": lateness.late_share, "lateness_p99_ms": lateness.p99_ms,
                             "lateness_share_of": {c.percentile: c.share for c in changed},
                             "material_windows": len(material)})


GENERATOR_LIMITED = FindingCheck("generator_limited", check_generator_limited)
