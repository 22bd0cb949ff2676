"""JUnit XML for CI: one testcase per SLO and one per comparison check.

``render_junit(analysis)`` gives one ``<testsuite name="tailscope.slo">``;
with a ``comparison`` (docs/analyzers/compare.md) the document is a
``<testsuites>`` holding that suite and ``tailscope.compare``, one testcase
per entry of ``comparison["checks"]``. A missed SLO or a failed check is a
``<failure>`` with the observed numbers; CI systems (GitHub, GitLab, Jenkins)
count and list them. An SLO whose percentile is not claimed is not a pass: it
is ``<skipped>`` with a message saying how many samples it has and needs (a
``<failure>`` when the scenario says ``verdict: {unclaimed: fail}``). A run cut
short (the INCOMPLETE verdict) adds one testcase ``run complete`` holding an
``<error>`` with its covered span, so green SLO rows cannot hide it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tailscope.analysis_model.run import Run
from tailscope.analysis_model.verdict import SloRow, Verdict
from tailscope.reports.formatting import fmt_metric
from tailscope.reports.upgrade import comparison_of, run_of, verdict_of

SUITE_NAME = "tailscope.slo"
COMPARE_SUITE_NAME = "tailscope.compare"


def slo_suite(verdict: Verdict, run: Run) -> ET.Element:
    """The SLO ``verdict`` as one ``<testsuite>`` (its time the ``run``'s load duration, its
    properties the run's name, path and status)."""
    rows = verdict.slos
    unclaimed_fails = verdict.policy.unclaimed == "fail"
    statuses = [_status(row, unclaimed_fails) for row in rows]
    incomplete = verdict.outcome == "incomplete"
    suite = ET.Element("testsuite", {
        "name": SUITE_NAME, "tests": str(len(rows) + incomplete), "failures": str(statuses.count("fail")),
        "errors": str(int(incomplete)), "skipped": str(statuses.count("unclaimed")),
        "time": f"{run.duration_s:.3f}",
    })
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run", run.name), ("path", run.path), ("status", run.status)):
        ET.SubElement(properties, "property", {"name": name, "value": str(value)})
    if incomplete:
        case = ET.SubElement(suite, "testcase", {"classname": f"{SUITE_NAME}.run", "name": "run complete", "time": "0"})
        line = verdict.line()
        ET.SubElement(case, "error", {"message": line, "type": "incomplete"}).text = line
    for row, status in zip(rows, statuses, strict=True):
        case = ET.SubElement(suite, "testcase", {"classname": f"{SUITE_NAME}.{row.cls or 'all'}",
                                                 "name": row.slo, "time": "0"})
        observed = f"observed {fmt_metric(row.metric, row.observed)}, threshold {fmt_metric(row.metric, row.threshold)}"
        if not row.claimed:
            observed += f" ({row.unclaimed_note()})"
        if status == "pass":
            ET.SubElement(case, "system-out").text = observed
        elif status == "unclaimed":
            ET.SubElement(case, "skipped", {"message": f"{row.slo}: {observed}"}).text = observed
        else:
            failure = ET.SubElement(case, "failure", {"message": f"{row.slo}: {observed}", "type": "SLO"})
            failure.text = observed
    return suite


def _status(row: SloRow, unclaimed_fails: bool) -> str:
    """A row's JUnit status: pass, fail or unclaimed (skipped); unclaimed fails under ``unclaimed: fail``."""
    return "fail" if row.status == "unclaimed" and unclaimed_fails else row.status


def comparison_suite(comparison: dict) -> ET.Element:
    """The comparison's checks (its JSON, read through ``comparison_of``) as one ``<testsuite>``
    (a failed check is a failure)."""
    typed = comparison_of(comparison)
    checks = typed.checks
    suite = ET.Element("testsuite", {
        "name": COMPARE_SUITE_NAME, "tests": str(len(checks)),
        "failures": str(sum(1 for c in checks if not c.passed)), "errors": "0", "time": "0",
    })
    properties = ET.SubElement(suite, "properties")
    for role, side in (("baseline", typed.baseline), ("current", typed.current)):
        ET.SubElement(properties, "property", {"name": role, "value": side.path or side.name})
    for check in checks:
        name = check.name
        case = ET.SubElement(suite, "testcase", {"classname": f"{COMPARE_SUITE_NAME}.{check.cls or 'all'}",
                                                 "name": name, "time": "0"})
        message = check.message
        if check.passed:
            ET.SubElement(case, "system-out").text = message
        else:
            ET.SubElement(case, "failure", {"message": f"{name}: {message}", "type": "regression"}).text = message
    return suite


def render_junit(analysis: dict, comparison: dict | None = None) -> str:
    """The verdict (and the comparison's checks, when given) as JUnit XML text (UTF-8): the one door
    here that takes the analysis dict; its verdict and run are decoded once and handed on."""
    root = slo_suite(verdict_of(analysis), run_of(analysis))
    if comparison is not None:
        suites = ET.Element("testsuites")
        suites.extend([root, comparison_suite(comparison)])
        root = suites
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def render_comparison_junit(comparison: dict) -> str:
    """The comparison's checks alone as JUnit XML text (``tailscope compare`` without a fresh run)."""
    suite = comparison_suite(comparison)
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
