"""The run's outcome word: passed, failed, inconclusive or incomplete (one meaning each).

:func:`outcome_verdict` turns the SLO verdict (:func:`tailscope.analyzers.stats.slo.evaluate`,
with an abort already folded in by :func:`.load_checks.abort_verdict`) into the verdict every
consumer shows and the CLI maps to an exit code (README "Exit codes"). Precedence:

1. ``failed`` — an SLO breach (a claimed one, :func:`~tailscope.analyzers.stats.slo.judge`) or an
   abort rule that fired;
2. ``incomplete`` — the run was cut short: killed (the manifest still says ``running``),
   interrupted (Ctrl-C or SIGTERM), failed part-way (disk full, a child died) or stopped for any
   other reason than its planned duration or request count; the verdict names the covered span;
3. otherwise an SLO whose percentile is not claimed decides by the scenario's
   ``verdict: {unclaimed: pass | inconclusive | fail}`` (default ``inconclusive``); an
   inconclusive verdict says what would make it conclusive (samples needed, and how long a run
   at the run's own rate collects them);
4. ``passed``.

``passed`` stays a boolean, true only for the outcome ``passed``, so readers of older analyses
stay right. Pure functions over the SLO judgement
(:class:`~tailscope.analyzers.stats.slo.SloJudgement`), the load period's length and the manifest;
the verdict is a :class:`~tailscope.analysis_model.verdict.Verdict`.
"""

from __future__ import annotations

import math
from typing import get_args

from tailscope.analysis_model.verdict import (
    DEFAULT_UNCLAIMED,
    Incomplete,
    Outcome,
    SloRow,
    UnclaimedPolicy,
    Verdict,
    VerdictPolicy,
)
from tailscope.analyzers.stats.slo import SloJudgement
from tailscope.support.units import percentile_label

#: Every outcome word, in the order of the exit codes' severity (README "Exit codes").
OUTCOMES = get_args(Outcome)
#: What a scenario's ``verdict.unclaimed`` may say.
UNCLAIMED_POLICIES = get_args(UnclaimedPolicy)
#: The ``verdict:`` section's fields and their defaults.
VERDICT_DEFAULTS = {"unclaimed": DEFAULT_UNCLAIMED}
#: How a run's stop reason is named when it was not the plan (loadgen/local_runner.py ``stop_reason``).
PLANNED_STOPS = ("duration", "max_requests")

_STATUS_REASONS = {
    "running": "killed before it finished (the manifest still says running)",
    "interrupted": "interrupted (Ctrl-C or SIGTERM)",
    "failed": "failed part-way",
}
_METRIC_NAMES = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}
_PER_REQUEST_KINDS = ("ttft", "tpot", "e2e")


def policy_from(raw_section) -> dict:
    """The verdict policy of a scenario's raw ``verdict:`` section (None: the defaults).

    Raises ValueError naming the field when the section is malformed."""
    if raw_section is None:
        return dict(VERDICT_DEFAULTS)
    if not isinstance(raw_section, dict):
        raise ValueError(f"expected a mapping like {{unclaimed: inconclusive}}, got {raw_section!r}")
    unknown = sorted(set(raw_section) - set(VERDICT_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; expected one of {', '.join(sorted(VERDICT_DEFAULTS))}")
    unclaimed = raw_section.get("unclaimed", DEFAULT_UNCLAIMED)
    if unclaimed not in UNCLAIMED_POLICIES:
        raise ValueError(f"unclaimed: expected one of {', '.join(UNCLAIMED_POLICIES)}, got {unclaimed!r}")
    return {"unclaimed": unclaimed}


def scenario_policy(scenario: dict) -> tuple[dict, list[dict]]:
    """(policy, warnings) from a run's scenario (the manifest's raw YAML): a malformed ``verdict:``
    section (only a hand-edited manifest has one) gives the defaults and an ``invalid_verdict``
    warning."""
    try:
        return policy_from(scenario.get("verdict")), []
    except ValueError as exc:
        return dict(VERDICT_DEFAULTS), [{"code": "invalid_verdict", "message": f"verdict: {exc}; "
                                         f"using unclaimed: {DEFAULT_UNCLAIMED}"}]


def parse_verdict_section(value, path: tuple, reader) -> dict:
    """Scenario section parser for ``verdict`` (tailscope.scenario_model.sections): errors name
    the file, line and field through ``reader.fail``."""
    if not isinstance(value, dict):
        raise reader.fail(path, f"expected a mapping like {{unclaimed: inconclusive}}, got {value!r}")
    for key in value:
        if key not in VERDICT_DEFAULTS:
            raise reader.fail(path + (key,), f"unknown field {key!r}; expected one of "
                              f"{', '.join(sorted(VERDICT_DEFAULTS))}")
    if "unclaimed" in value and value["unclaimed"] not in UNCLAIMED_POLICIES:
        raise reader.fail(path + ("unclaimed",), f"expected one of {', '.join(UNCLAIMED_POLICIES)}, "
                          f"got {value['unclaimed']!r}")
    return policy_from(value)


def cut_short(load_s: float, manifest: dict) -> Incomplete | None:
    """How the run was cut short, or None when it ran as planned (or was aborted: a failure).

    ``load_s`` is the load period in s (the ``run`` section's ``duration_s``: from the first send
    to the last record). The :class:`~tailscope.analysis_model.verdict.Incomplete` holds the
    reason, seconds of load covered and planned (None when the plan was a request count or
    unknown), and ``span``, the words ``"covered 0–40 s of 60 s planned"``."""
    status = manifest.get("status")
    load = manifest.get("load") or {}
    stop = load.get("stop_reason")
    if status in _STATUS_REASONS:
        reason = _STATUS_REASONS[status]
        if status == "failed" and manifest.get("failure"):
            reason = f"failed part-way: {manifest['failure']}"
    elif status == "complete" and stop is not None and stop not in PLANNED_STOPS:
        reason = f"stopped early (stop reason: {stop})"
    else:
        return None
    covered = float(load_s or 0.0)
    planned = (manifest.get("options") or {}).get("duration_s")
    planned = float(planned) if isinstance(planned, (int, float)) and planned > 0 else None
    span = f"covered 0–{covered:.0f} s" + (f" of {planned:.0f} s planned" if planned is not None else "")
    return Incomplete(reason=reason, covered_s=covered, planned_s=planned, span=span)


def metric_label(metric: str) -> str:
    """The metric of an SLO row in words with its percentile: ``latency P99``, ``TTFT P99``."""
    kind, _, percentile = metric.rpartition("_")
    name = _METRIC_NAMES.get(kind, "latency") if kind else "latency"
    return f"{name} {percentile_label(percentile)}"


def _duration_words(seconds: float) -> str:
    if seconds < 120:
        return f"{math.ceil(seconds)} s"
    if seconds < 2 * 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def conclusive_hint(row: SloRow, load_s: float) -> str:
    """What would make an unclaimed SLO row conclusive, computed from its sample:
    ``"TTFT P99 needs ≥ 459 samples (has 52): run ≥ 9 min at this rate (0.9 req/s)"``.

    ``load_s``: seconds of load the sample came from (the sample's rate is ``samples / load_s``)."""
    label = metric_label(row.metric) + (f" of {row.cls}" if row.cls else "")
    needed, samples = row.needed_samples, row.samples or 0
    if not needed:
        return f"{label} is not claimed"
    text = f"{label} needs ≥ {needed:,} samples (has {samples:,})"
    if samples <= 0 or load_s <= 0:
        return text + ": run long enough to collect them"
    rate = samples / load_s
    unit = "ITL samples/s" if row.metric.startswith("itl_") else "req/s"
    return text + f": run ≥ {_duration_words(needed / rate)} at this rate ({rate:.1f} {unit})"


def outcome_verdict(judgement: SloJudgement, load_s: float, manifest: dict, policy: dict | None = None) -> Verdict:
    """The verdict with its outcome word (see the module docstring for the precedence).

    ``judgement``: :func:`~tailscope.analyzers.stats.slo.evaluate`'s (abort folded in by
    :func:`.load_checks.abort_verdict`); ``load_s``: the load period in s (the ``run`` section's
    ``duration_s``); ``policy``: :func:`policy_from`'s (None: the defaults). The :class:`Verdict` adds ``outcome`` (one of
    :data:`OUTCOMES`), ``label`` (the word in capitals), ``detail`` (one line: what failed, the
    covered span, or what would make it conclusive; "" when passed), ``incomplete``
    (:func:`cut_short`'s, or None), ``needs`` (one hint per unclaimed SLO), ``policy``; ``passed``
    is true only for ``passed``; with ``unclaimed: fail`` the unclaimed SLOs are listed in
    ``failed`` too, with " (not claimed)"."""
    policy = policy or dict(VERDICT_DEFAULTS)
    failed = list(judgement.failed)
    unclaimed_rows = [row for row in judgement.slos if row.status == "unclaimed"]
    load_s = float(load_s or 0.0)
    needs = [conclusive_hint(row, load_s) for row in unclaimed_rows]
    short = cut_short(load_s, manifest)
    if not failed and short is None and unclaimed_rows and policy["unclaimed"] == "fail":
        failed = [f"{row.slo} (not claimed)" for row in unclaimed_rows]
    if failed:
        outcome, detail = "failed", "failed: " + ", ".join(failed)
    elif short is not None:
        outcome, detail = "incomplete", f"{short.reason}; {short.span}"
    elif unclaimed_rows and policy["unclaimed"] == "inconclusive":
        outcome, detail = "inconclusive", "; ".join(needs)
    else:
        outcome = "passed"
        detail = ("passed by the scenario's verdict policy (unclaimed: pass); not claimed: "
                  + ", ".join(row.slo for row in unclaimed_rows)) if unclaimed_rows else ""
    return Verdict(passed=outcome == "passed", slos=judgement.slos, failed=tuple(failed),
                   unclaimed=judgement.unclaimed, aborted=True if judgement.aborted else None, outcome=outcome,
                   label=outcome.upper(), detail=detail, incomplete=short, needs=tuple(needs),
                   policy=VerdictPolicy(**policy))
