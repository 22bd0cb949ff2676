"""Closed and open loop through `tailscope run` against the reference target
(a real process on loopback): the load model is recorded in the manifest,
labelled in analysis.json and the report, and the generator's per-window
health follows a ramp profile."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope
from test_target_service import TargetProcess


@pytest.fixture(scope="module")
def target():
    # 3 ms per decode step: without it the reference decoder makes 12 tokens in well under a
    # millisecond, a loaded host delivers them in one read, and the decode rate is rightly unmeasurable
    process = TargetProcess(["--decode-extra-delay-ms", "3"], otlp_url=None)
    try:
        yield f"http://127.0.0.1:{process.port}"
    finally:
        process.close()


def run_scenario(tmp_path, target: str, text: str) -> tuple[str, dict, dict]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    proc = run_tailscope("run", str(path), "--target", target, "--out", str(tmp_path / "runs"),
                         "--receiver-port", "0", timeout=120)
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr  # a verdict: passed, failed, inconclusive or incomplete
    run_dir = only_run_dir(tmp_path / "runs")
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    return proc.stdout, manifest, load_analysis(run_dir)


CLASSES = """\
classes:
  - name: text
    path: /v1/infer/text
    payload: {kind: template, body: '{"text": "{{text:20:200}}", "user": {{int:1:50}}}'}
"""


def test_closed_loop_is_labelled_as_subject_to_coordinated_omission(tmp_path, target):
    stdout, manifest, analysis = run_scenario(tmp_path, target, f"""\
name: closed
duration: 3s
arrival: {{process: closed, users: 3, think_time: 20ms}}
{CLASSES}""")
    assert manifest["arrival"] == {"loop": "closed", "process": "closed", "users": 3, "think_time_s": 0.02}
    assert analysis["summary"]["load_model"] == "closed"
    assert analysis["summary"]["requests"] > 20 and analysis["summary"]["errors"] == 0
    warning = next(w for w in analysis["warnings"] if w["code"] == "closed_loop")
    assert "coordinated omission" in warning["message"] and "coordinated omission" in stdout
    with open(os.path.join(analysis["run"]["path"], "report.html"), encoding="utf-8") as handle:
        html = handle.read()
    assert 'id="loop-label"' in html and "closed loop: 3 users" in html


def test_open_loop_ramp_is_followed_window_by_window(tmp_path, target):
    _, manifest, analysis = run_scenario(tmp_path, target, f"""\
name: ramp
duration: 4s
seed: 3
arrival:
  process: constant
  profile: {{kind: ramp, from: 10, to: 70, over: 4s}}
slo: ["p99 < 2s", "text: p99 < 2s"]
{CLASSES}""")
    assert manifest["arrival"]["loop"] == "open" and manifest["arrival"]["profile"]["kind"] == "ramp"
    assert analysis["summary"]["load_model"] == "open"
    assert not any(w["code"] == "closed_loop" for w in analysis["warnings"])
    offered = [w["offered_rps"] for w in analysis["generator"]["windows"]][:4]
    assert offered == pytest.approx([17.5, 32.5, 47.5, 62.5], abs=1.5)  # ∫ of the ramp per second
    assert np.all(np.diff(offered) > 0)
    sent = sum(w["sent"] for w in analysis["generator"]["windows"])
    assert sent == analysis["summary"]["requests"] == 160
    assert analysis["generator"]["cpu"]["mean_percent"] is not None
    # per-class SLO end to end: judged on the class, shown beside it
    row = next(r for r in analysis["verdict"]["slos"] if r["slo"] == "text: p99 < 2s")
    assert row["cls"] == "text" and row["observed"] == analysis["classes"]["text"]["latency_ms"]["p99"]["value_ms"]
    assert analysis["summary"]["goodput"]["by_class"]["text"]["total"] == 160


def test_streamed_generation_reports_ttft_itl_and_goodput(tmp_path, target):
    """The reference target's POST /v1/generate streams one SSE event per token."""
    stdout, manifest, analysis = run_scenario(tmp_path, target, """\
name: generate
duration: 3s
seed: 5
arrival: {process: constant, rate: 4}
classes:
  - name: gen
    path: /v1/generate
    stream: true
    payload: {kind: template, body: '{"prompt": "{{text:20:80}}", "max_tokens": 12}'}
slo: ["gen: ttft p99 < 10s", "gen: itl p99 < 5s", "goodput >= 90%"]
""")
    gen = analysis["streaming"]["classes"]["gen"]
    assert gen["requests"] == analysis["summary"]["completed"] == 12
    assert gen["chunks_per_request"] == 12  # [DONE] is not a token
    assert gen["itl_ms"]["p50"]["n"] == 12 * 11
    ttft, latency = gen["ttft_ms"]["p50"]["value_ms"], analysis["summary"]["latency_ms"]["p50"]["value_ms"]
    assert 0 < ttft < latency  # the first token arrives before the stream ends
    assert gen["decode_tokens_per_s_p50"] > 0 and gen["tokens_per_s"] > 0
    # 12 requests claim no P99: the TTFT and ITL objectives are not claimed, goodput (a share) holds
    assert [row["status"] for row in analysis["verdict"]["slos"]] == ["unclaimed", "unclaimed", "pass"]
    assert analysis["verdict"]["outcome"] == "inconclusive", analysis["verdict"]
    assert analysis["summary"]["goodput"]["criteria"] == ["gen: ttft p99 < 10s", "gen: itl p99 < 5s"]
    assert analysis["summary"]["goodput"]["share"] == 1.0
    with open(os.path.join(analysis["run"]["path"], "report.html"), encoding="utf-8") as handle:
        html = handle.read()
    assert 'id="streaming"' in html and "time to first token" in html and 'id="stream-rates"' in html
