"""The real vLLM (CPU build, tests/real_servers/vllm_server.py) loaded by the real ``tailscope run``.

One server per module (a tiny random-weight Llama, ``max_model_len`` 1024), exporting its spans
over OTLP/gRPC to the receiver of each run, and two short runs against it:

* ``chat_run``: streamed ``openai-chat`` requests whose prompts are sized with the model's own
  tokenizer, ``stages: {preset: vllm}``, /metrics scraped. Checked against the server: every
  span attribute and metric name the ``vllm`` preset reads exists (the conformance that fails
  when vLLM renames something); every request joins its ``llm_request`` span; the stages
  (api_server, queue, prefill, decode) add up to the span within 2%; token counts equal
  ``usage``; the span's PID is the API server's; the report renders its LLM section.
* ``fault_run``: the same load without a tokenizer, with an ``llm_long_generations`` fault of
  200-token prompts: the fault's traffic sizes its prompts in the server's tokens (calibrated
  from ``usage``) and runs without a 4xx loop.
* a multi-turn session run (``arrival.sessions``, 2 at a time, 3 turns): each later turn carries
  vLLM's own answers, and vLLM's prefix-cache hits equal the previous prompts' full KV blocks
  (measured: 2,944 of 2,944 tokens over 46 later turns, 128-token blocks).

While the server starts, a receiver listens on the runs' gRPC port and keeps vLLM's start-up
spans (``Overall Loading``, ``Warmup (CPU)``, …): they carry the PID and are no other traffic.

Measured figures are printed (``-s``): install and start times, join ratio, stage-sum gap.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request

import numpy as np
import pytest
from cli_helpers import free_port, load_analysis, only_run_dir, run_tailscope
from receiver_helpers import running_receiver

from real_servers.venvs import InstallFailed
from real_servers.vllm_server import SERVED_MODEL, VllmServer, tiny_model, vllm_venv
from tailscope.analyzers.inputs.other_traffic import other_traffic
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.analyzers.stages.presets import STAGE_PRESETS, VLLM_ATTRIBUTE_STAGES, split_selector
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.rundir import load_run
from tailscope.rundir.reader import read_stream
from tailscope.rundir.schema import SPANS, SPANS_SCHEMA

pytestmark = pytest.mark.real_server

#: Most the stages of a request may fall short of its server span (the stage table's gap), as a share.
STAGE_SUM_TOLERANCE = 0.02
CHAT_SCENARIO = """\
name: vllm-real
duration: {duration}s
seed: 27
timeout: 60s
arrival: {{process: poisson, rate: 3}}
classes:
  - name: chat
    api: openai-chat
    model: {model}
    {tokenizer}
    prompt_tokens: {{dist: lognormal, median: 120, sigma: 0.5, min: 16, max: 600}}
    output_tokens: {{dist: uniform, min: 4, max: 48}}
stages: {{preset: vllm}}
signals: {{rate: 4, prometheus: /metrics}}
{faults}
"""
FAULT = "faults: [{kind: llm_long_generations, at: 2s, duration: 8s, params: {streams: 2, prompt_tokens: 200, " \
        "max_tokens: 400}}]"


#: Seconds the start-up receiver listens after /health: vLLM's batch span exporter sends every 5 s.
STARTUP_EXPORT_WAIT_S = 6.0


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """The server, started once; its start-up spans (received by a receiver that listens on the
    runs' gRPC port while it starts) are in ``server.startup_dir``'s spans.arrow."""
    started = time.monotonic()
    try:
        venv = vllm_venv()
        model_dir = tiny_model(venv)
    except InstallFailed as exc:
        pytest.skip(str(exc))
    prepared_s = time.monotonic() - started
    tmp = tmp_path_factory.mktemp("vllm")
    server = VllmServer(venv.python, model_dir, free_port(), free_port(), str(tmp / "vllm.log"))
    server.startup_dir = str(tmp / "startup")
    os.makedirs(server.startup_dir)
    try:
        with running_receiver(server.startup_dir, port=0, grpc_port=server.grpc_port):
            server.start()
            time.sleep(STARTUP_EXPORT_WAIT_S)
        print(f"\nvLLM {SERVED_MODEL}: venv+model {prepared_s:.1f} s (install {venv.install_s:.0f} s), "
              f"ready in {server.ready_s:.1f} s, pid {server.pid}")
        yield server
    finally:
        server.stop()


def _run(vllm: VllmServer, tmp, duration: int, tokenizer: bool, faults: str = "") -> str:
    scenario = tmp / "vllm.yaml"
    scenario.write_text(CHAT_SCENARIO.format(
        duration=duration, model=SERVED_MODEL, faults=faults,
        tokenizer=f"tokenizer: {os.path.join(vllm.model_dir, 'tokenizer.json')}" if tokenizer else ""))
    started = time.monotonic()
    done = run_tailscope("run", str(scenario), "--target", vllm.url, "--out", str(tmp / "runs"),
                         "--receiver-port", "0", "--receiver-grpc-port", str(vllm.grpc_port), timeout=300)
    print(f"tailscope run ({duration} s of load): {time.monotonic() - started:.1f} s, exit {done.returncode}")
    # 0 passed, 3 inconclusive (a short run's tail percentiles are not claimed); anything else is wrong
    assert done.returncode in (0, 3), done.stdout[-4000:] + done.stderr[-4000:] + vllm.log_tail()
    return only_run_dir(tmp / "runs")


@pytest.fixture(scope="module")
def chat_run(vllm, tmp_path_factory) -> str:
    return _run(vllm, tmp_path_factory.mktemp("chat"), 15, tokenizer=True)


@pytest.fixture(scope="module")
def fault_run(vllm, tmp_path_factory) -> str:
    return _run(vllm, tmp_path_factory.mktemp("fault"), 12, tokenizer=False, faults=FAULT)


def _llm_request_spans(run) -> list[dict]:
    spans = run.spans.to_pylist()
    return [dict(s, attributes=json.loads(s["attributes"] or "{}")) for s in spans if s["name"] == "llm_request"]


def test_every_span_attribute_and_metric_the_vllm_preset_reads_exists_on_the_server(vllm, chat_run):
    preset = STAGE_PRESETS["vllm"]
    spans = _llm_request_spans(load_run(chat_run))
    assert spans, "vLLM sent no llm_request span"
    read = {key for _, key, minus in VLLM_ATTRIBUTE_STAGES for key in (key, *minus)}
    read |= {preset.rules.tokens.prompt, preset.rules.tokens.output}
    for span in spans:
        assert read <= set(span["attributes"]), sorted(read - set(span["attributes"]))
        assert span["kind"] == 2  # SERVER
    with urllib.request.urlopen(f"{vllm.url}/metrics", timeout=10) as answer:
        page = answer.read().decode()
    exposed = {line.split(" ")[0] for line in page.splitlines() if line and not line.startswith("#")}
    for role in preset.metrics.roles():
        newest = preset.metrics.get(role).names[0]  # the current name must be there, not only a fallback
        metric, labels = split_selector(newest)
        assert any(split_selector(series)[0] == metric and set(labels) <= set(split_selector(series)[1])
                   for series in exposed), f"{role}: {newest} is not on vLLM {vllm.python}'s /metrics"
    server_metrics = load_analysis(chat_run)["stages"]["server_metrics"]
    assert server_metrics["missing"] == []
    assert {role: entry["metric"] for role, entry in server_metrics["roles"].items()} == {
        role: preset.metrics.get(role).names[0] for role in preset.metrics.roles()}


def test_every_request_joins_and_the_stages_add_up_to_the_server_span(chat_run):
    run = load_run(chat_run)
    req = request_arrays(run.requests)
    analysis = load_analysis(chat_run)
    stages = analysis["stages"]
    rules = rules_for_scenario(run.manifest["scenario"]).rules
    matrix = stage_matrix(req, run.spans, rules)
    ok = int(req.is_ok.sum())
    named = [stage for stage, _, _ in VLLM_ATTRIBUTE_STAGES]
    parts = matrix.ms[:, [matrix.stages.index(s) for s in named]]
    server = matrix.column("server")
    gap = 1.0 - parts.sum(axis=1) / server  # per request: the time after the last token, unaccounted
    table_gap = 1.0 - sum(stages["by_stage"][s]["mean_ms"] for s in named) / stages["by_stage"]["server"]["mean_ms"]
    print(f"joined {stages['joined_fraction']:.4f} of {ok} ok requests; stage table {table_gap:.3%} short of the "
          f"server span (per request: median {np.median(gap):.3%}, max {gap.max():.3%}); api_server P50 "
          f"{np.median(matrix.column('api_server')):.2f} ms, unaccounted P50 {np.median(matrix.column('unaccounted')):.2f}"
          f" ms of server P50 {np.median(server):.1f} ms")
    assert ok >= 20 and stages["joined_fraction"] >= 0.99
    assert not np.isnan(parts).any()
    assert np.all(gap >= -1e-9)  # never more than the span (attribute stages are clipped at its end)
    assert 0.0 <= table_gap <= STAGE_SUM_TOLERANCE
    assert (stages["by_stage"]["api_server"]["count"] == stages["by_stage"]["decode"]["count"]
            == stages["joined_requests"])


def test_token_counts_equal_usage_and_the_prompts_are_the_tokenizers(chat_run):
    run = load_run(chat_run)
    requests = run.requests.to_pylist()
    by_trace = {s["trace_id"]: s["attributes"] for s in _llm_request_spans(run)}
    ok = [r for r in requests if r["status"] == 200]
    assert ok and all(r["token_count_source"] == "usage" for r in ok)
    for r in ok:
        attributes = by_trace[r["trace_id"]]
        assert r["prompt_tokens"] == attributes["gen_ai.usage.prompt_tokens"]
        assert r["output_tokens"] == attributes["gen_ai.usage.completion_tokens"]
    analysis = load_analysis(chat_run)
    assert analysis["stages"]["server_tokens"]["prompt_tokens"] == sum(r["prompt_tokens"] for r in ok)


def test_the_spans_pid_is_the_api_servers_from_vllm_process_id(vllm, chat_run):
    pids = {s["pid"] for s in load_run(chat_run).spans.to_pylist() if s["name"] == "llm_request"}
    assert pids == {vllm.pid}


def test_the_llm_report_renders(chat_run):
    with open(os.path.join(chat_run, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    analysis = load_analysis(chat_run)
    assert analysis["llm"]
    for marker in ('id="llm"', "TTFT", "api_server", "prefill", "decode"):
        assert marker in html, marker


def test_llm_long_generations_runs_without_a_4xx_loop(fault_run):
    faults = load_analysis(fault_run)["events"]["faults"]
    assert len(faults) == 1
    attributes = faults[0]["attributes"]
    observed = attributes["observed"]
    print(f"llm_long_generations against vLLM: {observed}")
    other = load_analysis(fault_run)["other_traffic"]
    assert 1 <= other["requests"] <= observed["sent"]  # the fault's requests, as the server saw them
    assert attributes["error"] is None and observed["failure"] is None
    assert observed["prompt_sizing"] == "calibrated" and observed["tokens_per_word"] > 1.5
    assert observed["rejected_4xx"] == 0 and observed["other_status"] == 0 and observed["ok"] >= 1
    assert observed["sent"] <= observed["ok"] + observed["cancelled"] + 1
    answered = observed["ok"]
    mean_prompt = observed["prompt_tokens"] / answered
    assert 150 <= mean_prompt <= 260, mean_prompt  # 200 of the server's tokens (the first: calibration)
    with open(os.path.join(fault_run, "report.html"), encoding="utf-8") as fh:
        assert f"sent {observed['sent']:,}" in fh.read()


def test_vllms_start_up_spans_carry_its_pid_and_are_not_other_traffic(vllm, chat_run):
    spans = read_stream(os.path.join(vllm.startup_dir, SPANS), SPANS_SCHEMA).table
    names = set(spans.column("name").to_pylist())
    print(f"start-up spans: {sorted(names)}")
    assert {"Overall Loading", "Warmup (CPU)"} <= names  # INTERNAL spans of its own traces (@instrument)
    assert set(spans.column("kind").to_pylist()) == {1}
    assert None not in spans.column("pid").to_pylist()  # from vllm.process_id (API server and engine core)
    assert vllm.pid in spans.column("pid").to_pylist()
    traffic = other_traffic(spans, np.ones(len(spans), dtype=bool), STAGE_PRESETS["vllm"].rules.tokens)
    assert traffic.requests == 0
    # and in a run: the server's spans that are not our requests' are no other traffic either
    assert load_analysis(chat_run)["other_traffic"]["requests"] == 0


def test_the_manifest_records_the_servers_kind_version_and_model(vllm, chat_run):
    with urllib.request.urlopen(vllm.url + "/version", timeout=10) as response:
        version = json.load(response)["version"]
    with open(os.path.join(chat_run, "manifest.json"), encoding="utf-8") as fh:
        server = json.load(fh)["server"]
    assert server["kind"] == "vllm" and server["probed"] is True and server["version"] == version
    assert server["model"] == SERVED_MODEL and server["max_model_len"] == 1024
    assert server["endpoints"] == {"/version": "200", "/v1/models": "200"}
    env = load_analysis(chat_run)["run"]["environment"]
    assert (env["server_kind"], env["model"], env["max_model_len"]) == ("vllm", SERVED_MODEL, 1024)


def test_the_analysis_reads_vllms_prefix_cache_hit_rate(vllm, chat_run):
    """vLLM caches prefixes by default: the run's llm.prefix_cache comes from its counters (tokens)."""
    cache = load_analysis(chat_run)["llm"]["prefix_cache"]
    assert cache["source"] == "counters" and cache["metrics"] == {
        "queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total"}
    assert cache["query_tokens"] > 0 and 0 <= cache["hit_rate"] <= 1
    with urllib.request.urlopen(f"{vllm.url}/metrics", timeout=10) as answer:
        exposed = answer.read().decode()
    total = sum(float(line.rsplit(" ", 1)[1]) for line in exposed.splitlines()
                if line.startswith("vllm:prefix_cache_queries_total"))
    assert cache["query_tokens"] <= total  # the run's scrape saw part of the server's lifetime count


SESSION_SCENARIO = """\
name: vllm-sessions
duration: 10s
seed: 29
timeout: 60s
arrival:
  sessions: {{concurrency: 2, turns: 3, think_time: 100ms}}
classes:
  - name: chat
    api: openai-chat
    model: {model}
    tokenizer: {tokenizer}
    prompt_tokens: {{dist: uniform, min: 40, max: 80}}
    output_tokens: {{dist: uniform, min: 8, max: 24}}
"""


def _prefix_cache(url: str) -> tuple[float, int | None]:
    """vLLM's ``vllm:prefix_cache_hits_total`` (tokens, summed over its label sets) and its KV block size
    (``vllm:cache_config_info``'s ``block_size`` label; None when absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as reply:
        lines = reply.read().decode().splitlines()
    hits = sum(float(line.split()[-1]) for line in lines if line.startswith("vllm:prefix_cache_hits_total"))
    info = next((line for line in lines if line.startswith("vllm:cache_config_info{")), "")
    found = re.search(r'block_size="(\d+)"', info)
    return hits, int(found.group(1)) if found else None


def test_sessions_send_vllms_own_answers_back_into_its_prefix_cache(vllm, tmp_path):
    """Multi-turn sessions against the real vLLM: each later turn's prompt (vLLM's count, chat template
    included) holds the previous prompt and vLLM's own answer to it, and vLLM's prefix cache finds the
    earlier turns in the later ones: its hit counter grows by at least 90% of the previous prompts' full
    KV blocks (exactly those when the template keeps each prompt a prefix of the next and nothing was
    evicted); the analysis gives TTFT by turn."""
    scenario = tmp_path / "sessions.yaml"
    scenario.write_text(SESSION_SCENARIO.format(model=SERVED_MODEL,
                                                tokenizer=os.path.join(vllm.model_dir, "tokenizer.json")))
    hits_before, block = _prefix_cache(vllm.url)
    assert block, "vllm:cache_config_info gives no block_size"
    done = run_tailscope("run", str(scenario), "--target", vllm.url, "--out", str(tmp_path / "runs"),
                         "--receiver-port", "0", "--receiver-grpc-port", str(vllm.grpc_port), timeout=300)
    assert done.returncode in (0, 3), done.stdout[-4000:] + done.stderr[-4000:] + vllm.log_tail()
    hits = _prefix_cache(vllm.url)[0] - hits_before
    run_dir = only_run_dir(tmp_path / "runs")
    rows = [r for r in load_run(run_dir).requests.to_pylist() if r["error_kind"] is None]
    by_session: dict = {}
    for row in rows:
        by_session.setdefault(row["session_id"], {})[row["turn"]] = row
    later = [(turns[k - 1], turns[k]) for turns in by_session.values() for k in turns if k > 1 and k - 1 in turns]
    assert len(later) >= 2, f"{len(rows)} turns in {len(by_session)} sessions"
    for previous, row in later:
        assert row["prompt_tokens"] > previous["prompt_tokens"] + previous["output_tokens"]
    blocks = sum(previous["prompt_tokens"] // block * block for previous, _ in later)
    print(f"\nsessions: {len(by_session)}, later turns {len(later)}, prefix-cache hits {hits:.0f} tokens "
          f"(the previous prompts' full {block}-token blocks: {blocks})")
    assert hits >= 0.9 * blocks > 0
    figures = load_analysis(run_dir)["llm"]["sessions"]
    assert figures["sessions"] == len(by_session) and figures["by_turn"][1]["requests"] >= len(later) // 2


POOL_SCENARIO = """\
name: vllm-prefix-pool
duration: 10s
seed: 3
timeout: 60s
arrival: {{process: constant, rate: 2}}
classes:
  - name: chat
    api: openai-chat
    model: {model}
    tokenizer: {tokenizer}
    prompt_tokens: {{dist: uniform, min: 8, max: 24}}
    output_tokens: 4
    shared_prefix_tokens: {{prompts: 3, tokens: 300}}
stages: {{preset: vllm}}
signals: {{rate: 4, prometheus: /metrics}}
"""


def test_a_prefix_pool_is_found_in_vllms_prefix_cache(vllm, tmp_path):
    """Three 300-token system prompts: vLLM (prefix caching on by default) finds each again after its
    first use — at least its whole blocks — and the analysis reads the hit rate from its counters."""
    def counters() -> dict[str, float]:
        with urllib.request.urlopen(f"{vllm.url}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return {name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))
                for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")}

    scenario = tmp_path / "pool.yaml"
    scenario.write_text(POOL_SCENARIO.format(model=SERVED_MODEL, tokenizer=os.path.join(vllm.model_dir, "tokenizer.json")))
    before = counters()
    done = run_tailscope("run", str(scenario), "--target", vllm.url, "--out", str(tmp_path / "runs"),
                         "--receiver-port", "0", "--receiver-grpc-port", str(vllm.grpc_port), timeout=300)
    assert done.returncode in (0, 3), done.stdout[-4000:] + done.stderr[-4000:] + vllm.log_tail()
    after = counters()
    run_dir = only_run_dir(tmp_path / "runs")
    requests = load_run(run_dir).requests.num_rows
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    print(f"vLLM prefix cache over the pool run: {hits:.0f} of {queries:.0f} prompt tokens hit ({requests} requests)")
    assert hits >= (requests - 3) * 256  # every later use of a prompt finds at least its full 256 tokens of blocks
    cache = load_analysis(run_dir)["llm"]["prefix_cache"]
    assert cache["source"] == "counters" and cache["hit_rate"] > 0.5 and cache["hit_tokens"] <= hits
