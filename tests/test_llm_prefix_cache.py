"""Prefix-cache workloads: a pool of shared system prompts (``shared_prefix_tokens: {prompts: K, ...}``)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import numpy as np
import pytest
from test_llm_server import LlmServer

from tailscope.loadgen.mix import RequestMix
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
