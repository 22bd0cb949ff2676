"""Every consumer shows the outcome word, and `tailscope report` exits with its code:
INCONCLUSIVE (unclaimed SLOs) → 3, the scenario's ``verdict: {unclaimed: pass}`` → 0, INCOMPLETE
(a killed run) → 3 with its covered span, an exception inside tailscope → 4 with the bug message."""

import json
import os
import xml.etree.ElementTree as ET

import pytest

from tailscope.cli.commands.common import EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_OK
from tailscope.cli.main import INTERNAL_ERROR, main
from tailscope.testkit.synthetic import write_synthetic_run


def _edit_manifest(path, edit) -> None:
    manifest_path = os.path.join(path, "manifest.json")
    with open(manifest_path) as fh:
        manifest = json.load(fh)
    edit(manifest)
    with open(manifest_path, "w") as fh:
        json.dump(manifest, fh)


def _outputs(path):
    with open(os.path.join(path, "analysis.json")) as fh:
        analysis = json.load(fh)
    with open(os.path.join(path, "summary.md"), encoding="utf-8") as fh:
        markdown = fh.read()
    with open(os.path.join(path, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    return analysis, markdown, html, ET.parse(os.path.join(path, "junit.xml")).getroot()


@pytest.fixture
def short_run(tmp_path):
    """250 requests: too few to claim a P99 (459), and both SLOs hold at their point estimates."""
    path = tmp_path / "short"
    write_synthetic_run(path, duration_s=5, rate=50, seed=4, with_signals=False, error_rate=0.0)
    return str(path)


def test_unclaimed_slos_are_inconclusive_everywhere_and_exit_3(short_run, capsys):
    assert main(["report", short_run]) == EXIT_INCONCLUSIVE
    out = capsys.readouterr().out
    analysis, markdown, html, junit = _outputs(short_run)
    verdict = analysis["verdict"]
    assert (verdict["outcome"], verdict["passed"]) == ("inconclusive", False)
    assert verdict["unclaimed"] == ["p99 < 250ms"] and verdict["failed"] == []
    need = "latency P99 needs ≥ 459 samples (has "
    assert verdict["detail"].startswith(need) and "at this rate (" in verdict["detail"]
    # the terminal: the row says what it has and needs, the verdict line what would make it conclusive
    assert "UNCLAIMED p99 < 250ms" in out and "samples, need 459))" in out
    assert "PASS error_rate < 1%  (observed 0.00%)" in out
    assert f"INCONCLUSIVE: {need}" in out and "PASSED" not in out
    # the report's first line, summary.md and junit.xml (an unclaimed SLO is skipped, not passed)
    assert '<span class="label">INCONCLUSIVE</span>' in html and need in html
    assert "**INCONCLUSIVE**" in markdown and need in markdown
    p99 = next(c for c in junit.findall("testcase") if c.get("name") == "p99 < 250ms")
    assert p99.find("skipped") is not None and "need 459" in p99.find("skipped").get("message")
    assert (junit.get("skipped"), junit.get("failures"), junit.get("errors")) == ("1", "0", "0")


def test_the_scenario_may_let_unclaimed_slos_pass(short_run, capsys):
    _edit_manifest(short_run, lambda m: m["scenario"].update(verdict={"unclaimed": "pass"}))
    assert main(["report", short_run]) == EXIT_OK
    verdict = _outputs(short_run)[0]["verdict"]
    assert (verdict["outcome"], verdict["passed"]) == ("passed", True)
    assert "unclaimed: pass" in verdict["detail"]
    assert "PASSED" in capsys.readouterr().out


def test_a_killed_run_is_incomplete_with_its_covered_span_and_exit_3(tmp_path, capsys):
    path = str(tmp_path / "killed")
    write_synthetic_run(path, duration_s=20, rate=50, seed=5, status="running", with_signals=False, error_rate=0.0)
    _edit_manifest(path, lambda m: m["options"].update(duration_s=30.0))  # killed at 2/3 of a 30-s plan
    assert main(["report", path]) == EXIT_INCONCLUSIVE
    out = capsys.readouterr().out
    analysis, markdown, html, junit = _outputs(path)
    verdict = analysis["verdict"]
    assert verdict["outcome"] == "incomplete" and verdict["incomplete"]["span"] == "covered 0–20 s of 30 s planned"
    assert "INCOMPLETE: killed before it finished" in out and "covered 0–20 s of 30 s planned" in out
    assert '<span class="label">INCOMPLETE</span>' in html and "covered 0–20 s of 30 s planned" in html
    assert "**INCOMPLETE**" in markdown
    run_case = next(c for c in junit.findall("testcase") if c.get("name") == "run complete")
    assert "covered 0–20 s of 30 s planned" in run_case.find("error").get("message") and junit.get("errors") == "1"


def test_an_exception_inside_tailscope_exits_4_and_says_it_is_a_bug(short_run, monkeypatch, capsys):
    from tailscope.conductor import reporting

    def broken(*args, **kwargs):
        raise IndexError("index -1 is out of bounds for axis 0 with size 0")

    monkeypatch.setattr(reporting, "analyse_and_write", broken)
    assert main(["report", short_run]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith(INTERNAL_ERROR) and "Traceback (most recent call last)" in err
    assert "IndexError: index -1 is out of bounds" in err
    assert os.path.exists(os.path.join(short_run, "requests.arrow"))  # the run's records are kept
