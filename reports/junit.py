"""JUnit XML for CI: one testcase per SLO, a failure element when it is missed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .data import fmt_observed, fmt_threshold

SUITE_NAME = "tailscope.slo"


def render_junit(analysis: dict) -> str:
    """The verdict as a JUnit ``<testsuite>`` document (UTF-8 XML text)."""
    rows = analysis["verdict"]["slos"]
    failures = sum(1 for row in rows if not row["passed"])
    suite = ET.Element("testsuite", {
        "name": SUITE_NAME, "tests": str(len(rows)), "failures": str(failures), "errors": "0",
        "time": f"{analysis['run']['duration_s']:.3f}",
    })
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run", analysis["run"]["name"]), ("path", analysis["run"]["path"]),
                        ("status", analysis["run"]["status"])):
        ET.SubElement(properties, "property", {"name": name, "value": str(value)})
    for row in rows:
        case = ET.SubElement(suite, "testcase", {"classname": f"{SUITE_NAME}.{row.get('cls') or 'all'}",
                                                 "name": row["slo"], "time": "0"})
        observed = f"observed {fmt_observed(row)}, threshold {fmt_threshold(row)}"
        if not row["claimed"]:
            observed += " (not claimed: too few samples)"
        if row["passed"]:
            ET.SubElement(case, "system-out").text = observed
        else:
            failure = ET.SubElement(case, "failure", {"message": f"{row['slo']}: {observed}", "type": "SLO"})
            failure.text = observed
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
