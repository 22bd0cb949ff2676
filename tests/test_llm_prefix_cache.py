"""Prefix-cache workloads: a pool of shared system prompts (``shared_prefix_tokens: {prompts: K, ...}``)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import numpy as np
import pytest

from tailscope.loadgen.mix import RequestMix
from tailscope.scenario_model.scenario import ScenarioError, load_scenario


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
