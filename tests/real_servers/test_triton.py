"""Triton Inference Server as PyTriton ships it (2.51), a real component: one start per module.

Triton is installed into a cached venv (``real_servers.triton_server``; a failed install skips
with pip's error), serves a numpy model whose cost grows with its input, and sends its
OpenTelemetry spans (``level=TIMESTAMPS``) to the run's receiver; PyTriton's proxy sends its own
spans from the Python process, in batches of its own. One 12 s ``tailscope run`` with the
``triton`` preset and Triton's metrics port scraped; what it must show:

- the names the preset reads exist on the real server: the ``InferRequest`` server span, the
  model span's ``triton.*`` attributes, every event of every event rule, every metric it maps;
- every request joins (≥ 0.99) and its stages add up to the server span within 2%, none named
  after the model or overlapping the event stages, no ``stage_overlap`` warning;
- the late-span wait took PyTriton's later batch in (its proxy span for every request);
- the sampled target is the PyTriton process (the model's code), above the ``tritonserver``
  that listens.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope

from real_servers.triton_server import MODEL, start_triton
from real_servers.venvs import InstallFailed
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.analyzers.stages.presets import STAGE_PRESETS, TRITON_EVENT_STAGES, TRITON_MODEL_ATTRIBUTE
from tailscope.rundir import load_run, read_json

pytestmark = pytest.mark.real_server

SMALL, LARGE = 16, 4096  # input lengths: the model's cost grows with them
SCENARIO = """\
name: pytriton
duration: 12s
arrival: {{process: poisson, rate: 25}}
stages: {{preset: triton}}
signals: {{prometheus: ["{metrics}"]}}
classes:
  - {{name: small, weight: 1, path: /v2/models/{model}/infer, payload: {{kind: fixed, body: '{small}'}}}}
  - {{name: large, weight: 1, path: /v2/models/{model}/infer, payload: {{kind: fixed, body: '{large}'}}}}
"""
#: Triton's model-span attributes besides the one the preset matches on.
MODEL_SPAN_ATTRIBUTES = (TRITON_MODEL_ATTRIBUTE, "triton.model_version", "triton.trace_id", "triton.trace_parent_id")


@pytest.fixture(scope="module")
def triton_run(tmp_path_factory):
    """(run directory, the server's facts, the module's timings in s)."""
    began = time.monotonic()
    try:
        context = start_triton()
        server = context.__enter__()
    except InstallFailed as exc:
        pytest.skip(str(exc))
    try:
        tmp = tmp_path_factory.mktemp("triton")
        scenario = tmp / "triton.yaml"
        scenario.write_text(SCENARIO.format(metrics=server.metrics_url, model=MODEL,
                                            small=server.infer_body(SMALL), large=server.infer_body(LARGE)))
        done = run_tailscope("run", str(scenario), "--target", server.url, "--out", str(tmp / "runs"),
                             "--receiver-port", str(server.receiver_port), "--receiver-grpc-port", "-1", timeout=240)
        assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
        run_dir = only_run_dir(tmp / "runs")
        facts = {"pid": server.pid, "start_s": server.start_s, "install_s": server.venv.install_s}
    finally:
        context.__exit__(None, None, None)
    print(f"pytriton: install {facts['install_s']:.1f} s (0: cached), ready in {facts['start_s']:.1f} s, "
          f"start + run + stop {time.monotonic() - began:.1f} s")
    return run_dir, facts


def _spans(run_dir: str) -> list[dict]:
    return load_run(run_dir).spans.to_pylist()


def test_the_names_the_triton_preset_reads_exist_on_the_real_server(triton_run):
    run_dir, _ = triton_run
    spans = _spans(run_dir)
    names = {s["name"] for s in spans}
    assert {"InferRequest", MODEL, "compute"} <= names
    model_spans = [s for s in spans if s["name"] == MODEL]
    for span in model_spans:
        attributes = json.loads(span["attributes"])
        assert set(MODEL_SPAN_ATTRIBUTES) <= set(attributes) and attributes[TRITON_MODEL_ATTRIBUTE] == MODEL
    events: dict[str, set[str]] = {}
    for span in spans:
        for event in json.loads(span["events"] or "[]"):
            events.setdefault(span["trace_id"], set()).add(event["name"])
    wanted = {name for start, end, _ in TRITON_EVENT_STAGES for name in (start, end)}
    assert len(events) == len(model_spans) and all(wanted <= got for got in events.values())
    servers = load_analysis(run_dir)["stages"]["server_metrics"]
    assert set(servers["roles"]) == set(STAGE_PRESETS["triton"].metrics.roles()) and servers["missing"] == []


def test_every_request_joins_and_its_stages_add_up_to_the_server_span(triton_run):
    run_dir, _ = triton_run
    analysis = load_analysis(run_dir)
    stages = analysis["stages"]
    by_stage = stages["by_stage"]
    mapped = [name for name in by_stage if name not in ("server", "unaccounted", "outside_server")]
    total, server = stages["consistency"]["stage_sum_mean_ms"], stages["consistency"]["server_mean_ms"]
    assert server == pytest.approx(by_stage["server"]["mean_ms"])
    print(f"pytriton: joined {stages['joined_fraction']:.4f} of {stages['joined_requests']}; stages "
          f"{total:.3f} ms against the server span's {server:.3f} ms (gap {(server - total) / server:.2%}); "
          f"P50 { {name: round(by_stage[name]['p50_ms'] or 0.0, 3) for name in mapped} }")
    assert stages["joined_fraction"] >= 0.99 and stages["joined_requests"] >= 200
    assert abs(server - total) <= 0.02 * server
    assert stages["span_stages"] == [] and MODEL not in by_stage  # no stage named after the model
    assert stages["consistency"]["exceeding_requests"] == stages["consistency"]["overlapping_requests"] == 0
    assert "stage_overlap" not in {w["code"] for w in analysis["warnings"]}
    assert by_stage["request_parse"]["count"] == by_stage["response_serialize"]["count"] == stages["joined_requests"]


def test_the_inference_stage_grows_with_the_input(triton_run):
    run = load_run(triton_run[0])
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, STAGE_PRESETS["triton"].rules)
    cls = req.cls[matrix.request_index]
    inference = matrix.column("inference")
    small, large = (float(np.median(inference[cls == name])) for name in ("small", "large"))
    print(f"pytriton: inference P50 {small:.3f} ms at {SMALL} values, {large:.3f} ms at {LARGE}")
    assert large > 1.5 * small  # 2.4-4.2x measured here


def test_the_late_span_wait_took_pytritons_later_batch_in(triton_run):
    run_dir, _ = triton_run
    wait = read_json(os.path.join(run_dir, "manifest.json"))["late_spans"]
    spans = _spans(run_dir)
    requests = load_analysis(run_dir)["stages"]["joined_requests"]
    proxy = {s["trace_id"] for s in spans if s["name"] == "python_backend_execute"}
    print(f"pytriton: late-span wait {wait}; proxy spans of {len(proxy)} of {requests} requests")
    assert wait["ended"] == "complete" and wait["missing"] == 0
    assert len(proxy) == requests  # the proxy's last batch came in (it met a closed port before)
    receiver = read_json(os.path.join(run_dir, "receiver.json"))
    assert receiver["spans_refused_after_close"] == 0


def test_the_sampled_target_is_the_pytriton_process_above_the_listening_tritonserver(triton_run):
    run_dir, facts = triton_run
    target = read_json(os.path.join(run_dir, "manifest.json"))["target_process"]
    assert target["pid"] == facts["pid"] and target["listener"]["name"] == "tritonserver"
    assert "the top of its process group" in target["found_by"]
