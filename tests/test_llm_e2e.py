"""OpenAI-API workloads end to end with real parts: the LLM reference server
(started with the real ``tailscope target --llm``, its ``llm_request`` spans
exported over OTLP to the run's receiver) loaded by the real ``tailscope run``
of an ``openai-chat`` scenario, and the real ``tailscope demo --llm``.

The server's own timings are its spans' vLLM attributes
(``gen_ai.latency.time_to_first_token`` = first token − arrival,
``time_in_model_decode`` = last token − first token, ``gen_ai.usage.*``),
joined to the requests by trace id from spans.arrow. Client-side TTFT runs
from the scheduled send; taken from the actual send it can only exceed the
server's (causality: the request leaves before the server stamps its arrival,
the first token is made before the client reads it), by the loopback trip,
the parsing before the server's arrival stamp and the hand-over of the first
chunk. That is the correctness property, and every request must keep it: never
below −TTFT_CLOCK_MS (reading two clocks in turn). A client that took the
response head as the first token reads *below* the server (the head leaves
before the first engine step: tried, −5 ms median, −33 ms worst) and fails it.
The role-only chunk cannot be told apart by time here: this server, like vLLM,
sends it just before the first content chunk, once the first token is made
(``test_llm_loopback``'s server sends it TTFT_S earlier and checks that it does
not count; counted as a content chunk here, it would break the ITL sample count
of ``test_the_analysis_has_the_llm_section_with_the_servers_token_counts``).
How far above is the harness's overhead, bounded where the tool reports it —
the median below TTFT_MEDIAN_MS and the P90 below TTFT_P90_MS — not by the
maximum: on 2 shared cores under load a process now and then waits tens of ms
for a core, so the largest of a few dozen requests measures the scheduler, not
tailscope (130 ms once, one request of ~40, with 6 other processes on the 2
cores). TPOT (one token per chunk here, so not biased by a
multi-token first chunk) differs from the server's decode time per token only
by the delivery jitter of the first and last chunk over ``n − 1`` tokens:
median |error| < TPOT_MEDIAN_MS. The measured errors are printed (``-s``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope

from tailscope.cli.commands.common import EXIT_INCONCLUSIVE, EXIT_SLO_FAILED
from tailscope.rundir import load_run, read_stream, schema

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "analyzers", "analysis.schema.json")
STEP_MS = 4  # the server's added time per engine step
TTFT_CLOCK_MS = 0.5
TTFT_MEDIAN_MS = 10.0
TTFT_P90_MS = 50.0
TPOT_MEDIAN_MS = 0.5
MS = 1_000_000
SCENARIO = """\
name: llm-e2e
duration: 4s
seed: 3
timeout: 30s
arrival: {process: poisson, rate: 10}
classes:
  - name: chat
    api: openai-chat
    model: tailscope-llm
    prompt_tokens: {dist: lognormal, median: 60, sigma: 0.5, min: 8, max: 400}
    output_tokens: {dist: uniform, min: 8, max: 40}
slo:
  - ttft p99 < 2s
  - tpot p99 < 200ms
  - "chat: e2e p99 < 10s"
"""


def _server_rows(run_dir: str) -> tuple[list[dict], dict[str, dict]]:
    """(the run's request rows, the llm_request spans' attributes by trace id)."""
    run = load_run(run_dir)
    spans = {s["trace_id"]: json.loads(s["attributes"]) for s in run.spans.to_pylist() if s["name"] == "llm_request"}
    return run.requests.to_pylist(), spans


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm-run")
    receiver_port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver_port}", PYTHONUNBUFFERED="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "tailscope.cli.main", "target", "--llm", "--port", "0", "--tokens-per-chunk", "1",
         "--step-extra-delay-ms", str(STEP_MS), "--max-num-seqs", "32"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = server.stdout.readline()
        assert line.startswith("LISTENING"), f"the LLM server did not start: {line!r}"
        scenario = tmp / "llm.yaml"
        scenario.write_text(SCENARIO)
        done = run_tailscope("run", str(scenario), "--target", f"http://127.0.0.1:{line.split()[1]}", "--out",
                             str(tmp / "runs"), "--receiver-port", str(receiver_port), "--receiver-grpc-port", "-1",
                             timeout=240)
        print(done.stdout[-4000:], done.stderr[-2000:])
        # 40 requests cannot claim a P99: INCONCLUSIVE, exit 3, saying how long a run would
        assert done.returncode == EXIT_INCONCLUSIVE, done.stdout + done.stderr
        assert "INCONCLUSIVE: TTFT P99 needs ≥ 459 samples" in done.stdout and "at this rate (" in done.stdout
        return only_run_dir(tmp / "runs")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_analysis_has_the_llm_section_with_the_servers_token_counts(llm_run):
    analysis = load_analysis(llm_run)
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        jsonschema.validate(analysis, json.load(fh))
    rows, spans = _server_rows(llm_run)
    llm = analysis["llm"]
    assert llm["requests"] == len(rows) >= 25 and llm["errors"] == 0
    assert all(row["trace_id"] in spans for row in rows)  # every request joined its server span
    for row in rows:
        usage = spans[row["trace_id"]]
        assert row["prompt_tokens"] == usage["gen_ai.usage.prompt_tokens"]
        assert row["output_tokens"] == usage["gen_ai.usage.completion_tokens"] == usage["gen_ai.request.max_tokens"]
        assert row["token_count_source"] == "usage" and row["finish_reason"] == "length"
    assert llm["output_tokens"]["sum"] == sum(s["gen_ai.usage.completion_tokens"] for s in spans.values())
    assert llm["prompt_tokens"]["sum"] == sum(s["gen_ai.usage.prompt_tokens"] for s in spans.values())
    assert llm["token_counts_from"] == {"usage": len(rows)}
    assert llm["itl_ms"]["p50"]["n"] == sum(row["output_tokens"] - 1 for row in rows)  # one token per chunk
    assert llm["classes"]["chat"]["api"] == "openai-chat" and llm["classes"]["chat"]["model"] == "tailscope-llm"
    assert analysis["verdict"]["outcome"] == "inconclusive" and [r["metric"] for r in analysis["verdict"]["slos"]] == [
        "ttft_p99", "tpot_p99", "e2e_p99"]
    assert llm["goodput"]["share"] == 1.0
    html = open(os.path.join(llm_run, "report.html"), encoding="utf-8").read()
    assert 'id="llm"' in html and "llm-ttft-chart" in html


def test_ttft_and_tpot_agree_with_the_servers_own_timings(llm_run):
    rows, spans = _server_rows(llm_run)
    scheduled_error, ttft_error, tpot_error, server_tpot = [], [], [], []
    for row in rows:
        server = spans[row["trace_id"]]
        n, ttft = row["output_tokens"], server["gen_ai.latency.time_to_first_token"] * 1e3
        scheduled_error.append((row["first_byte_ns"] - row["scheduled_ns"]) / MS - ttft)
        ttft_error.append((row["first_byte_ns"] - row["sent_ns"]) / MS - ttft)
        server_tpot.append(server["gen_ai.latency.time_in_model_decode"] * 1e3 / (n - 1))
        tpot_error.append((row["last_token_ns"] - row["first_byte_ns"]) / MS / (n - 1) - server_tpot[-1])
    scheduled_error, ttft_error, tpot_error = np.array(scheduled_error), np.array(ttft_error), np.array(tpot_error)
    print(f"{len(rows)} requests. TTFT (from the send) - server TTFT: median {np.median(ttft_error):.3f} ms, "
          f"P90 {np.quantile(ttft_error, 0.9):.3f} ms, min {ttft_error.min():.3f} ms, max {ttft_error.max():.3f} ms; "
          f"from the scheduled send: median {np.median(scheduled_error):.3f} ms. TPOT - server TPOT: median "
          f"{np.median(tpot_error):+.4f} ms, median |error| {np.median(np.abs(tpot_error)):.4f} ms, max |error| "
          f"{np.abs(tpot_error).max():.4f} ms (server TPOT median {np.median(server_tpot):.2f} ms)")
    assert ttft_error.min() > -TTFT_CLOCK_MS and float(np.median(ttft_error)) < TTFT_MEDIAN_MS
    assert float(np.quantile(ttft_error, 0.9)) < TTFT_P90_MS and (scheduled_error >= ttft_error).all()
    assert float(np.median(np.abs(tpot_error))) < TPOT_MEDIAN_MS
    # the analysis's TPOT is the same per-request value: its P50 is the client's, not a different definition
    analysis = load_analysis(llm_run)
    client_tpot = [(r["last_token_ns"] - r["first_byte_ns"]) / MS / (r["output_tokens"] - 1) for r in rows]
    assert analysis["llm"]["tpot_ms"]["p50"]["value_ms"] == pytest.approx(
        float(np.sort(client_tpot)[int(np.ceil(len(client_tpot) * 0.5)) - 1]), rel=1e-9)


def test_demo_llm_runs_the_llm_server_and_reports(tmp_path):
    proc = run_tailscope("demo", "--llm", "--duration", "5s", "--out", str(tmp_path), timeout=240)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    run_dir = only_run_dir(tmp_path)
    # every P99 SLO of the demo is "not claimed" in 5 s: the demo said PASSED; it is INCONCLUSIVE (exit 3)
    # unless a breach is claimed even so (FAILED, exit 1, on a loaded machine)
    verdict = load_analysis(run_dir)["verdict"]
    assert verdict["outcome"] in ("inconclusive", "failed") and "PASSED" not in proc.stdout
    assert proc.returncode == {"inconclusive": EXIT_INCONCLUSIVE, "failed": EXIT_SLO_FAILED}[verdict["outcome"]]
    assert "UNCLAIMED ttft p99 < 500ms" in proc.stdout or "FAIL ttft p99 < 500ms" in proc.stdout
    assert os.path.join(run_dir, "report.html") in proc.stdout.replace("\n", "")
    assert "TTFT" in proc.stdout and "TPOT" in proc.stdout and "goodput" in proc.stdout
    analysis = load_analysis(run_dir)
    llm = analysis["llm"]
    assert set(llm["classes"]) == {"chat", "summarise"} and llm["requests"] >= 10
    # the demo's server sends 2 tokens a chunk: counts still equal the server's usage
    rows, spans = _server_rows(run_dir)
    assert llm["output_tokens"]["sum"] == sum(s["gen_ai.usage.completion_tokens"] for s in spans.values())
    assert {row["trace_id"] for row in rows} == set(spans)
    chunks = read_stream(os.path.join(run_dir, schema.CHUNKS), schema.CHUNKS_SCHEMA).table.to_pylist()
    first = {c["trace_id"]: c["tokens"] for c in chunks if c["index"] == 0}
    assert sum(c["tokens"] for c in chunks) == llm["output_tokens"]["sum"] and max(first.values()) >= 2
    # per-token ITL: every token after the first chunk's is one sample
    assert llm["itl_ms"]["p50"]["n"] == sum(row["output_tokens"] - first[row["trace_id"]] for row in rows)
    series = set(load_run(run_dir).signals.column("series").to_pylist())
    assert any(s.startswith("prom.vllm:num_requests_running") for s in series)  # /metrics scraped
    assert any(s.startswith("prom.vllm:kv_cache_usage_perc") for s in series)


@pytest.mark.parametrize("args, message", [
    (("--llm", "--max-batch-size", "4"), "--max-batch-size: a knob of the reference target (without --llm)"),
    (("--max-num-seqs", "4"), "--max-num-seqs: a knob of the LLM server (--llm)"),
    (("--llm", "--max-num-seqs", "0"), "max_num_seqs must be >= 1"),
])
def test_target_rejects_the_other_servers_knobs(args, message):
    proc = run_tailscope("target", *args, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
