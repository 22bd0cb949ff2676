"""Prefix-cache workloads: a pool of shared system prompts (``shared_prefix_tokens: {prompts: K, ...}``)."""

from __future__ import annotations

import json
import os
import textwrap
from collections import Counter

import jsonschema
import numpy as np
import pytest
from cli_helpers import load_analysis, only_run_dir, run_tailscope
from test_llm_server import LlmServer
from test_server_presets import scraped_run

from tailscope.analysis_model.codec import encode
from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.stages.server_metrics import ServerSeries
from tailscope.analyzers.stats.llm_prefix_cache import counter_increase, prefix_cache_section, run_prefix_cache
from tailscope.loadgen.mix import RequestMix
from tailscope.loadgen.trace_files import load_trace, slice_trace
from tailscope.reports.llm_view import llm_headline
from tailscope.reports.upgrade import llm_of, run_of
from tailscope.rundir import load_run
from tailscope.scenario_model.scenario import ScenarioError, load_scenario
from tailscope.targets.llm.kv_cache import BlockPool, block_hashes
from tailscope.targets.llm.model import TinyDecoder


def _scenario(tmp_path, prefix: str, extra: str = "") -> str:
    path = tmp_path / "pool.yaml"
    path.write_text(textwrap.dedent(f"""\
        target: http://127.0.0.1:9
        duration: 10s
        arrival: {{process: poisson, rate: 5}}
        classes:
          - name: chat
            api: openai-chat
            model: tailscope-llm
            prompt_tokens: {{dist: uniform, min: 5, max: 20}}
            shared_prefix_tokens: {prefix}
        {extra}"""))
    return str(path)


def _prompts(classes, seed: int, n: int, share=(0, 1)) -> list[tuple[str, int]]:
    mix = RequestMix(classes, seed, share=share)
    out = []
    for _ in range(n):
        request = mix.prepare(0)
        out.append((json.loads(request.body)["messages"][0]["content"], request.llm.prompt_tokens))
    return out


def test_a_prefix_pool_sends_k_system_prompts_chosen_by_zipf(tmp_path):
    scenario = load_scenario(_scenario(
        tmp_path, "{prompts: 6, tokens: {dist: uniform, min: 50, max: 400}, choice: zipf, zipf_s: 1.5}"))
    llm = scenario.classes[0].llm
    assert llm.describe()["prefix_pool"] == {"prompts": 6, "tokens": {"dist": "uniform", "min": 50, "max": 400},
                                             "choice": "zipf", "zipf_s": 1.5}
    sent = _prompts(scenario.classes, 1, 3000)
    # a prompt is one of the pool's prefixes (50..400 words), then 5..20 drawn words
    assert all(len(text.split()) == tokens and 55 <= tokens <= 420 for text, tokens in sent)
    starts = Counter(" ".join(text.split()[:8]) for text, _ in sent)
    assert len(starts) == 6
    counts = [c for _, c in starts.most_common()]
    weights = 1 / np.arange(1, 7) ** 1.5
    expected = weights / weights.sum() * len(sent)
    assert np.all(np.abs(np.array(counts) - expected) < 5 * np.sqrt(expected) + 5)
    # the pool is the class's: another seed (another worker) sends the same prefixes
    assert {" ".join(t.split()[:8]) for t, _ in _prompts(scenario.classes, 99, 400, (1, 2))} == set(starts)


def test_a_uniform_pool_of_fixed_length_prefixes(tmp_path):
    scenario = load_scenario(_scenario(tmp_path, "{prompts: 4, tokens: 64}"))
    sent = _prompts(scenario.classes, 3, 800)
    starts = Counter(" ".join(t.split()[:64]) for t, _ in sent)
    assert len(starts) == 4 and min(starts.values()) > 150
    assert all(69 <= tokens <= 84 for _, tokens in sent)


@pytest.mark.parametrize("prefix, message", [
    ("{prompts: 4}", "shared_prefix_tokens.tokens: missing"),
    ("{prompts: 0, tokens: 8}", "shared_prefix_tokens.prompts: must be an integer between 1"),
    ("{prompts: 2, tokens: 8, zipf_s: 2}", "shared_prefix_tokens.zipf_s: only with `choice: zipf`"),
    ("{prompts: 2, tokens: 8, choice: hot}", "shared_prefix_tokens.choice: expected one of uniform, zipf"),
    ("{prompts: 2, tokens: 8, size: 3}", "shared_prefix_tokens.size: unknown field"),
    ("-3", "shared_prefix_tokens: expected an integer >= 0 (tokens) or a pool"),
])
def test_prefix_pool_errors_name_the_field(tmp_path, prefix, message):
    with pytest.raises(ScenarioError) as caught:
        load_scenario(_scenario(tmp_path, prefix))
    assert message in str(caught.value)


# -- the LLM reference server's prefix cache ---------------------------------------------------------

def test_the_block_pool_shares_cached_prefix_blocks_and_evicts_the_oldest_released():
    pool = BlockPool(6, 4, prefix_caching=True)
    prompt = list(range(100, 111))  # 11 tokens: 2 full blocks of 4
    hashes = block_hashes(prompt, 4)
    assert len(hashes) == 2 and block_hashes(prompt[:8] + [7, 7, 7], 4) == hashes
    assert block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)[1] != block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4)[1]  # chained
    first = pool.grow("a", 11)
    pool.register("a", hashes, 11)
    assert pool.take_prefix("b", hashes) == 2 and pool.blocks_of("b") == first[:2]
    pool.grow("b", 12)
    assert pool.num_used == 4  # 3 of a (2 shared with b) + b's own third block
    pool.free("a")
    pool.free("b")
    assert pool.num_free == 6 and pool.num_cached == 2  # cached blocks count as free
    assert pool.take_prefix("c", hashes) == 2  # still cached after every owner left
    pool.free("c")
    pool.grow("d", 24)  # all six blocks: the two cached ones are evicted (their hashes forgotten)
    assert pool.num_cached == 0 and pool.num_free == 0
    pool.free("d")
    assert pool.take_prefix("e", hashes) == 0


def test_a_shared_prefix_block_holds_what_a_recompute_would_write():
    model = TinyDecoder(16, 8, 4, seed=3)
    prompt = [5, 9, 2, 7, 1, 3, 3, 8, 4, 6]
    whole = model.prefill([0, 1, 2], 0, prompt, sample=True)
    # a second sequence shares blocks 0-1 (8 cached tokens) and computes only tokens 8-9 into block 3
    shared = model.prefill([0, 1, 3], 8, prompt[8:], sample=True)
    assert np.allclose(whole, shared)


@pytest.fixture(scope="module")
def caching_server():
    server = LlmServer(["--enable-prefix-caching", "--block-size", "16", "--max-model-len", "1024",
                        "--max-num-batched-tokens", "1024"])
    try:
        yield server
    finally:
        server.close()


def _chat(server: LlmServer, text: str) -> dict:
    status, _, body = server.request("POST", "/v1/chat/completions", {
        "model": "tailscope-llm", "messages": [{"role": "user", "content": text}], "max_tokens": 3,
        "ignore_eos": True})
    assert status == 200, body
    return json.loads(body)


def test_the_reference_server_counts_prefix_cache_queries_and_hits(caching_server):
    before = {name: caching_server.metric(name) for name in (
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")}
    shared = " ".join(f"w{i}" for i in range(100))
    prompts = [_chat(caching_server, shared + " tail" + str(k))["usage"]["prompt_tokens"] for k in range(3)]
    queries = caching_server.metric("vllm:prefix_cache_queries_total") - before["vllm:prefix_cache_queries_total"]
    hits = caching_server.metric("vllm:prefix_cache_hits_total") - before["vllm:prefix_cache_hits_total"]
    assert queries == sum(prompts)
    # the first request computes everything; the next two take the 6 full 16-token blocks of the shared 100 words
    assert hits == 2 * 96
    assert caching_server.metric("vllm:prompt_tokens_by_source_total", source="local_cache_hit") >= 2 * 96


def test_without_prefix_caching_the_counters_stay_at_zero():
    server = LlmServer([])
    try:
        text = " ".join(f"w{i}" for i in range(40))
        for _ in range(2):
            _chat(server, text)
        assert server.metric("vllm:prefix_cache_hits_total") == 0
        assert server.metric("vllm:prefix_cache_queries_total") == 0
        assert server.metric("vllm:prompt_tokens_by_source_total", source="local_compute") >= 80
    finally:
        server.close()


# -- a Mooncake replay against the caching reference server: analysis, report, compare --------------

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "analyzers", "analysis.schema.json"),
          encoding="utf-8") as _fh:
    SCHEMA = jsonschema.Draft202012Validator(json.load(_fh))

TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "scenarios", "traces",
                     "mooncake-sample.jsonl")


@pytest.fixture(scope="module")
def trace_server():
    # 5 ms per step without the GIL (an accelerator's step): /metrics answers within the scrape timeout
    server = LlmServer(["--enable-prefix-caching", "--max-model-len", "4096", "--max-num-batched-tokens", "4096",
                        "--num-kv-blocks", "8192", "--max-num-seqs", "32", "--tokens-per-chunk", "4",
                        "--step-extra-delay-ms", "5"])
    try:
        yield server
    finally:
        server.close()


LEAD_IN_MS = 60_000  # trace time before the shared-prefix rows: 6 s at speed 10


def _lead_in_trace(tmp_path) -> tuple[str, int, int]:
    """The Mooncake sample's first 40 s, 60 s later, after one 1-token row at 0: the signal samplers start
    a second or two after the load (their process starts with it), so the counters' first reading must come
    before the rows that matter. (path, their prompt tokens, the most of them a prefix cache can hold)."""
    offsets, rows = slice_trace(*load_trace(TRACE, "mooncake"), 0, 40 * 10**9)
    lines = [json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [10**9]})]
    seen, cached = set(), 0
    for offset, length, output, ids in zip(offsets.tolist(), rows.input_tokens.tolist(), rows.output_tokens.tolist(),
                                           rows.hash_ids):
        lines.append(json.dumps({"timestamp": LEAD_IN_MS + offset // 10**6, "input_length": length,
                                 "output_length": output, "hash_ids": list(ids)}))
        full = ids[: length // 512]  # Mooncake ids are chained: a seen id is a seen prefix
        cached += next((i for i, h in enumerate(full) if h not in seen), len(full)) * 512
        seen.update(full)
    path = tmp_path / "lead-in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path), int(rows.input_tokens.sum()), cached


def _replay(tmp_path, server: LlmServer, name: str, trace: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        duration: 12s
        timeout: 30s
        arrival: {{process: replay, file: {trace}, format: mooncake, speed: 10}}
        classes: [{{name: chat, api: openai-chat, model: tailscope-llm}}]
        stages: {{preset: vllm}}
        signals: {{prometheus: /metrics}}
        """))
    out = tmp_path / name
    proc = run_tailscope("run", str(path), "--target", f"http://127.0.0.1:{server.port}", "--out", str(out),
                         "--receiver-port", "0", timeout=180)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    return only_run_dir(out)


def test_a_trace_replay_reports_the_servers_prefix_cache_hit_rate_and_compare_shows_it(tmp_path, trace_server):
    trace, prompt_tokens, most_cached = _lead_in_trace(tmp_path)
    cold = _replay(tmp_path, trace_server, "cold", trace)
    analysis = load_analysis(cold)
    SCHEMA.validate(analysis)
    cache = analysis["llm"]["prefix_cache"]
    assert cache["source"] == "counters" and cache["metrics"] == {
        "queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total"}
    # every replayed prompt after the lead-in, counted by the server (the 1-token row too when the
    # first reading came before it)
    assert cache["query_tokens"] in (prompt_tokens, prompt_tokens + 1)
    # readings that bracket the load counted every row; the converse does not hold: a busy host's last
    # scrape may come before the load's end after the last prompt was already counted (one CI run)
    assert not cache["covers_load"] or cache["query_tokens"] == prompt_tokens + 1
    # the server found the trace's shared blocks (fewer when a sharer was still in prefill at admission)
    assert 0.6 * most_cached <= cache["hit_tokens"] <= most_cached
    assert cache["hit_rate"] == pytest.approx(cache["hit_tokens"] / cache["query_tokens"])
    with open(os.path.join(cold, "report.html"), encoding="utf-8") as fh:
        html = fh.read()
    assert f"server prefix-cache hit rate {100 * cache['hit_rate']:.2f}%" in html
    assert ("the scrapes did not cover the whole load" in html) is (not cache["covers_load"])
    assert "prefix-cache hit rate" in " ".join(h["label"] for h in llm_headline(llm_of(analysis), run_of(analysis).load_origin_ns))
    # the same replay again: the cache is warm, the hit rate higher; compare shows it, unjudged
    warm = _replay(tmp_path, trace_server, "warm", trace)
    assert load_analysis(warm)["llm"]["prefix_cache"]["hit_rate"] > cache["hit_rate"] + 0.2
    out = tmp_path / "cmp"
    run_tailscope("compare", warm, cold, "--out", str(out), timeout=180)
    with open(out / "comparison.json", encoding="utf-8") as fh:
        rows = json.load(fh)["llm"]["rows"]
    (row,) = [r for r in rows if r["metric"] == "prefix_cache_hit_rate"]
    assert row["current"] > row["baseline"] > 0
    assert row["judged"] is False and row["check"] is False and not row["regressed"]
    with open(out / "comparison.html", encoding="utf-8") as fh:
        assert "server prefix-cache hit rate" in fh.read()


# -- llm.prefix_cache from recorded scrapes ----------------------------------------------------------

class _Readings:
    """A SignalIndex stand-in: ``readings(name)`` of fixed series."""

    def __init__(self, series: dict):
        self.series = {name: (np.asarray(t, dtype=np.int64), np.asarray(v, dtype=float)) for name, (t, v) in series.items()}

    def readings(self, name):
        return self.series[name]


def test_counter_increases_read_a_reset_as_a_restart():
    assert counter_increase(np.array([5.0, 9.0, 9.0, 2.0, 6.0])) == 4 + 2 + 4
    assert counter_increase(np.array([3.0])) == 0


def test_the_section_from_counters_pools_label_sets_and_says_what_it_covers():
    servers = ServerSeries("vllm", {"prefix_cache_queries": "q", "prefix_cache_hits": "h"},
                           {"prefix_cache_queries": ("q{a}", "q{b}"), "prefix_cache_hits": ("h{a}", "h{b}")})
    signals = _Readings({"q{a}": ([10, 20, 30], [0, 100, 300]), "q{b}": ([10, 30], [50, 150]),
                         "h{a}": ([10, 20, 30], [0, 40, 90]), "h{b}": ([10, 30], [0, 60])})
    section = prefix_cache_section(servers, signals, (15, 30))
    assert section.query_tokens == 400 and section.hit_tokens == 150 and section.hit_rate == 150 / 400
    assert section.series == 2 and section.first_reading_ns == 10 and section.last_reading_ns == 30
    assert section.covers_load is True
    assert prefix_cache_section(servers, signals, (5, 30)).covers_load is False


def test_the_section_from_a_hit_rate_gauge_is_its_mean_over_the_load():
    servers = ServerSeries("sglang", {"prefix_cache_hit_rate": "sglang:cache_hit_rate"},
                           {"prefix_cache_hit_rate": ("g",)})
    signals = _Readings({"g": ([0, 10, 20, 30], [0.9, 0.2, 0.4, 0.9])})
    assert encode(prefix_cache_section(servers, signals, (10, 20))) == {
        "source": "gauge", "hit_rate": pytest.approx(0.3), "metric": "sglang:cache_hit_rate", "readings": 2}
    assert prefix_cache_section(ServerSeries("sglang"), signals, (10, 20)) is None


def test_the_real_vllm_cpu_builds_scrapes_give_a_zero_hit_rate_over_three_new_prompts(tmp_path):
    run_dir = scraped_run(tmp_path / "run", "vllm_0_32", "vllm")
    assert analyze_run(run_dir)["llm"] is None  # no OpenAI-API request in this run: no llm section
    section = run_prefix_cache(load_run(run_dir))
    assert section.source == "counters" and section.query_tokens == 291 and section.hit_tokens == 0
    assert section.hit_rate == 0.0


def test_a_prefix_pool_against_the_caching_server_hits_every_reuse_of_a_prompt(tmp_path, trace_server):
    """4 system prompts of 160 tokens (10 blocks of 16) before 4..12 drawn tokens: every request after the
    first of its prefix finds the prefix's 160 tokens cached (requests 1 s apart: no sharer in prefill)."""
    path = tmp_path / "pool.yaml"
    path.write_text(textwrap.dedent("""\
        name: pool
        duration: 8s
        timeout: 30s
        arrival: {process: constant, rate: 3}
        classes:
          - name: chat
            api: openai-chat
            model: tailscope-llm
            prompt_tokens: {dist: uniform, min: 4, max: 12}
            output_tokens: 2
            shared_prefix_tokens: {prompts: 4, tokens: 160, choice: zipf}
        stages: {preset: vllm}
        signals: {prometheus: /metrics}
        """))
    before = {name: trace_server.metric(name) for name in ("vllm:prefix_cache_queries_total",
                                                           "vllm:prefix_cache_hits_total")}
    out = tmp_path / "runs"
    proc = run_tailscope("run", str(path), "--target", f"http://127.0.0.1:{trace_server.port}", "--out", str(out),
                         "--receiver-port", "0", timeout=180)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(out)
    table = load_run(run_dir).requests
    prompts = sum(table.column("prompt_tokens").to_pylist())
    hits = trace_server.metric("vllm:prefix_cache_hits_total") - before["vllm:prefix_cache_hits_total"]
    assert trace_server.metric("vllm:prefix_cache_queries_total") - before["vllm:prefix_cache_queries_total"] == prompts
    # the prefixes the run used, each missed once (the server had not seen these prompts before)
    mix = RequestMix(load_scenario(str(path), target_override="http://127.0.0.1:1").classes, 1)
    used = {json.loads(mix.prepare(0).body)["messages"][0]["content"][:60] for _ in range(table.num_rows)}
    assert hits == (table.num_rows - len(used)) * 160
    cache = load_analysis(run_dir)["llm"]["prefix_cache"]
    assert cache["hit_tokens"] <= hits and cache["hit_rate"] > 0.5


def test_each_session_opens_with_one_prompt_of_the_pool(tmp_path):
    scenario = load_scenario(_scenario(tmp_path, "{prompts: 3, tokens: 40}"))
    mix = RequestMix(scenario.classes, 5)
    systems = Counter()
    for _ in range(300):
        conversation = mix.start_session(0, 2)
        assert conversation.messages[0]["role"] == "system" and conversation.prompt_tokens == 40
        systems[conversation.messages[0]["content"]] += 1
        body = json.loads(mix.prepare_turn(0, conversation).body)
        assert body["messages"][0] == conversation.messages[0]  # every turn carries the session's system prompt
    assert len(systems) == 3 and min(systems.values()) > 60
