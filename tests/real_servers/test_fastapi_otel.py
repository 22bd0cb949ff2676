"""A plain FastAPI service with OpenTelemetry's own instrumentation, a real component: one start per module.

``tests/fastapi_otel_service.py`` imports nothing from tailscope: ``opentelemetry-instrumentation-fastapi``
makes each request's SERVER span (continuing the ``traceparent`` tailscope sends), the service makes
its own ``preprocess`` / ``model`` / ``postprocess`` spans with the OpenTelemetry API, and the SDK's
batch exporter (5 s) sends them where the ``OTEL_*`` variables say — nothing else configures it. One
10 s ``tailscope run`` with no stage rules; what it must show:

- every request joins (≥ 0.99), the last second's included;
- the service's own spans are stages (``preprocess``/``postprocess`` by the reference preset's
  names, ``model`` under its own name), one of each per request;
- the stage table adds up to the server span within 2% — the stages plus ``unaccounted``, which
  here is FastAPI's own time outside every span (routing, reading the body, serialising and
  sending the response: about a quarter of a 4 ms request) — and no request's stages overlap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope

from tailscope.rundir import read_json

pytestmark = pytest.mark.real_server
pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install -e '.[test]')")
pytest.importorskip("opentelemetry.instrumentation.fastapi",
                    reason="opentelemetry-instrumentation-fastapi is not installed (pip install -e '.[test]')")

SERVICE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fastapi_otel_service.py")
SCENARIO = """\
name: fastapi-otel
duration: 10s
arrival: {process: poisson, rate: 40}
classes:
  - {name: predict, weight: 1, path: /predict, payload: {kind: fixed, body: "a b c d e f"}}
"""


@pytest.fixture(scope="module")
def fastapi_run(tmp_path_factory) -> str:
    began = time.monotonic()
    receiver_port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver_port}"
    env["OTEL_SERVICE_NAME"] = "fastapi-otel-service"
    proc = subprocess.Popen([sys.executable, SERVICE, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("LISTENING"), f"service did not start: {line!r}"
        started = time.monotonic() - began
        tmp = tmp_path_factory.mktemp("fastapi")
        scenario = tmp / "fastapi.yaml"
        scenario.write_text(SCENARIO)
        done = run_tailscope("run", str(scenario), "--target", f"http://127.0.0.1:{line.split()[1]}", "--out",
                             str(tmp / "runs"), "--receiver-port", str(receiver_port), "--receiver-grpc-port", "-1",
                             timeout=180)
        assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    print(f"fastapi: listening in {started:.1f} s, start + run + stop {time.monotonic() - began:.1f} s")
    return only_run_dir(tmp / "runs")


def test_every_request_joins_and_the_services_own_spans_are_the_stages(fastapi_run):
    stages = load_analysis(fastapi_run)["stages"]
    wait = read_json(os.path.join(fastapi_run, "manifest.json"))["late_spans"]
    print(f"fastapi: joined {stages['joined_fraction']:.4f} of {stages['joined_requests']}; wait {wait}")
    assert stages["joined_fraction"] >= 0.99 and stages["joined_requests"] >= 300
    assert stages["missing_spans"]["end_of_run"] == 0 and wait["ended"] == "complete"
    by_stage = stages["by_stage"]
    joined = stages["joined_requests"]
    assert by_stage["preprocess"]["count"] == by_stage["postprocess"]["count"] == joined
    assert "model" in stages["span_stages"] and by_stage["model"]["count"] == joined
    assert by_stage["model"]["p50_ms"] >= 1.8  # its 2 ms of busy work


def test_the_stage_table_adds_up_to_the_server_span(fastapi_run):
    analysis = load_analysis(fastapi_run)
    stages = analysis["stages"]
    facts = stages["consistency"]
    total, server = facts["stage_sum_mean_ms"], facts["server_mean_ms"]
    unaccounted = stages["by_stage"]["unaccounted"]["mean_ms"]
    shown = {name: round(s["p50_ms"], 3) for name, s in stages["by_stage"].items() if s["p50_ms"] is not None}
    print(f"fastapi: stages {total:.3f} ms + unaccounted {unaccounted:.3f} ms against the server span's "
          f"{server:.3f} ms (stage gap {(server - total) / server:.2%}); P50 {shown}")
    assert abs(server - (total + unaccounted)) <= 0.02 * server
    assert facts["exceeding_requests"] == facts["overlapping_requests"] == 0
    assert total >= 3.0  # the service's own spans: 3 ms of busy work (wall clock) in each request
    assert "stage_overlap" not in {w["code"] for w in analysis["warnings"]}
