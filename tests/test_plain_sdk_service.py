"""A user's own service, first run: a plain OpenTelemetry-SDK service over loopback, real `tailscope run`.

The service (tests/plain_sdk_service.py) imports nothing from tailscope: the SDK's
default batch exporter (5 s schedule) sends its spans to the URL in
OTEL_EXPORTER_OTLP_ENDPOINT, its own child spans are decode/model/encode. Two
services: http.server as it comes (head and body in two sends, Nagle on: the
delayed-ACK stall) and the same with TCP_NODELAY. Each is loaded for 10 s by the
real command; what the user must get with nothing configured:

- every successful request joined to its server span, the last second included
  (the harness waits for the exporter's last batch and no longer than that);
- the service's own span names as stages;
- ``tcp_delayed_ack`` (and ``outside_server``) for the first service only;
- the error bodies of /broken (HTML with a script) in the error samples, and in
  the report as text that runs nothing (headless Chromium).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope

from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.rundir import load_run, read_json

SERVICE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plain_sdk_service.py")
SCENARIO = """\
name: plain-sdk
duration: 10s
arrival: {process: poisson, rate: 40}
classes:
  - {name: predict, weight: 19, path: /predict, payload: {kind: fixed, body: "a b c d"}}
  - {name: broken, weight: 1, path: /broken, payload: {kind: fixed, body: "x"}}
"""
CHROMIUM = "/usr/bin/chromium"


def _start_service(receiver_port: int, *flags: str) -> tuple[subprocess.Popen, int]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver_port}"
    proc = subprocess.Popen([sys.executable, SERVICE, "--port", "0", *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    line = proc.stdout.readline()
    assert line.startswith("LISTENING"), f"service did not start: {line!r}"
    return proc, int(line.split()[1])


def _run(tmp_path, *flags: str) -> str:
    """A 10 s `tailscope run` against a fresh service; the run directory."""
    receiver_port = free_port()
    proc, port = _start_service(receiver_port, *flags)
    try:
        scenario = tmp_path / "plain.yaml"
        scenario.write_text(SCENARIO)
        done = run_tailscope("run", str(scenario), "--target", f"http://127.0.0.1:{port}", "--out",
                             str(tmp_path / "runs"), "--receiver-port", str(receiver_port),
                             "--receiver-grpc-port", "-1", timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        return only_run_dir(tmp_path / "runs")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def nagle_run(tmp_path_factory) -> str:
    return _run(tmp_path_factory.mktemp("nagle"))


@pytest.fixture(scope="module")
def nodelay_run(tmp_path_factory) -> str:
    return _run(tmp_path_factory.mktemp("nodelay"), "--nodelay")


def _joined_in_last_second(run_dir: str) -> tuple[int, int]:
    """(successful requests that ended in the load's last second, how many of them joined)."""
    run = load_run(run_dir)
    req = request_arrays(run.requests)
    joined = np.zeros(req.n, dtype=bool)
    joined[stage_matrix(req, run.spans).request_index] = True
    last = req.is_ok & (req.end_ns >= req.end_ns[req.is_ok].max() - 1_000_000_000)
    return int(last.sum()), int((last & joined).sum())


@pytest.mark.parametrize("fixture", ["nagle_run", "nodelay_run"])
def test_every_request_joins_including_the_last_second_and_the_wait_ends_when_complete(fixture, request):
    run_dir = request.getfixturevalue(fixture)
    analysis = load_analysis(run_dir)
    stages = analysis["stages"]
    last, joined_last = _joined_in_last_second(run_dir)
    print(f"{fixture}: joined_fraction {stages['joined_fraction']:.4f} of {stages['joined_requests']} "
          f"(last second: {joined_last} of {last}); wait {stages['missing_spans']['wait']}")
    assert stages["joined_fraction"] >= 0.99
    assert last >= 10 and joined_last == last
    assert stages["missing_spans"]["end_of_run"] == 0
    wait = read_json(os.path.join(run_dir, "manifest.json"))["late_spans"]
    assert wait["ended"] == "complete" and wait["missing"] == 0
    # the server spans within one export interval, then one more for the exporter's other batches; never the cap
    assert wait["waited_s"] < 2 * 5.0 + 2.0 and wait["waited_s"] >= 5.0


@pytest.mark.parametrize("fixture", ["nagle_run", "nodelay_run"])
def test_the_services_own_span_names_are_the_stages(fixture, request):
    stages = load_analysis(request.getfixturevalue(fixture))["stages"]
    assert stages["span_stages"] == ["decode", "model", "encode"]  # matmul rolls up into model
    by_stage = stages["by_stage"]
    assert by_stage["model"]["p50_ms"] >= 1.5  # model's own 1 ms and matmul's 1 ms of busy work
    assert by_stage["decode"]["count"] == by_stage["encode"]["count"] == stages["joined_requests"]


def test_the_delayed_ack_stall_is_found_only_where_it_happens(nagle_run, nodelay_run):
    stalled = {f["kind"]: f for f in load_analysis(nagle_run)["findings"]}
    clean = {f["kind"] for f in load_analysis(nodelay_run)["findings"]}
    assert "tcp_delayed_ack" in stalled and "outside_server" in stalled
    evidence = stalled["tcp_delayed_ack"]["evidence"]
    assert 37 <= evidence["read_gap_p50_ms"] <= 52 and evidence["stalled_share"] >= 0.2
    assert "TCP_NODELAY" in stalled["tcp_delayed_ack"]["summary"]
    assert "tcp_delayed_ack" not in clean and "outside_server" not in clean


def test_error_samples_keep_what_the_service_answered(nagle_run):
    from plain_sdk_service import HOSTILE_BODY

    samples = load_analysis(nagle_run)["error_samples"]
    assert samples["available"]
    broken = samples["classes"]["broken"]
    assert len(broken["samples"]) == 1 and broken["unsampled"] == 0
    sample = broken["samples"][0]
    assert (sample["status"], sample["error_kind"], sample["message"]) == (500, "http", "HTTP 500")
    assert sample["body"] == HOSTILE_BODY.decode() and sample["count"] == broken["errors"] >= 3
    assert "predict" not in samples["classes"]


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing: no headless browser")
def test_the_error_body_is_text_in_the_report_and_nothing_runs(nagle_run):
    from plain_sdk_service import HOSTILE_BODY
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto("file://" + os.path.join(os.path.abspath(nagle_run), "report.html"))
            page.wait_for_function("document.body.dataset.charts === 'ready'", timeout=30_000)
            shown = page.evaluate("() => Array.from(document.querySelectorAll('#error-samples .error-body'))"
                                  ".map(e => e.textContent)")
            assert shown == [HOSTILE_BODY.decode()]
            assert page.evaluate("() => window.__pwned") is None
            assert page.title() != "pwned"
            assert page.evaluate("() => document.querySelectorAll('#error-samples img, #error-samples script')"
                                 ".length") == 0
            findings = page.evaluate("() => Array.from(document.querySelectorAll('#findings li'))"
                                     ".map(e => e.dataset.kind)")
            assert "tcp_delayed_ack" in findings
        finally:
            browser.close()
