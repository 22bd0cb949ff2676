"""The LLM reference server's engine parts, driven by hand: block pool, scheduler, decoder, sampler, engine steps.

The engine is stepped in the test's thread (``Engine.step``) so every step's
state can be checked; the HTTP server and its engine thread are tested in
test_llm_server.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.targets.llm.config import ConfigError, LlmServerConfig
from tailscope.targets.llm.engine import Engine
from tailscope.targets.llm.kv_cache import BlockPool, blocks_for
from tailscope.targets.llm.metrics import LlmMetrics
from tailscope.targets.llm.model import TinyDecoder, sample
from tailscope.targets.llm.openai_api import CHAT, COMPLETION, OpenAIError, parse_embedding, parse_generation
from tailscope.targets.llm.scheduler import Scheduler
from tailscope.targets.llm.sequence import FINISH_LENGTH, FINISH_STOP, Sequence
from tailscope.targets.llm.spans import span_attributes
from tailscope.targets.llm.tokens import EOS, VOCAB_SIZE, detokenize, tokenize

MODEL = "tailscope-llm"


def _seq(prompt_len: int, max_tokens: int, *, ignore_eos: bool = True, name: str = "r") -> Sequence:
    return Sequence(request_id=name, prompt_ids=list(range(1, prompt_len + 1)), max_tokens=max_tokens,
                    ignore_eos=ignore_eos, arrival_ns=1)


def _run_plan(plan) -> None:
    """Execute a plan without the model: advance each chunk; a completed context samples token 7."""
    for chunk in plan.chunks:
        chunk.seq.num_computed += chunk.num_tokens
        if chunk.seq.num_computed == chunk.seq.num_tokens:
            chunk.seq.output_ids.append(7)


def _metric(metrics: LlmMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"model_name": MODEL, "engine": "0", **labels})
    return 0.0 if value is None else value


# --------------------------------------------------------------------------- tokens and blocks


def test_one_token_per_word_and_generated_text_splits_into_its_tokens():
    assert tokenize("  the quick\tbrown\nfox  ") == tokenize("the quick brown fox")
    assert len(tokenize("the quick brown fox")) == 4
    assert all(1 <= t < VOCAB_SIZE for t in tokenize("a b c d e f g"))
    assert tokenize("") == []
    text = detokenize([5, 17, 4095])
    assert len(text.split()) == 3


def test_block_pool_hands_out_ceil_context_over_block_size_and_takes_them_back():
    pool = BlockPool(num_blocks=4, block_size=16)
    assert [blocks_for(n, 16) for n in (0, 1, 16, 17, 33)] == [0, 1, 1, 2, 3]
    assert pool.grow("a", 17) == [0, 1]
    assert pool.grow("a", 20) == [0, 1]  # still 2 blocks
    assert pool.usage() == 0.5
    assert pool.can_hold("b", 32) and not pool.can_hold("b", 33)
    with pytest.raises(MemoryError):
        pool.grow("b", 48)
    assert pool.free("a") == 2 and pool.num_used == 0


# --------------------------------------------------------------------------- scheduler


def test_running_sequences_are_bounded_by_max_num_seqs_and_admission_is_fifo():
    scheduler = Scheduler(BlockPool(64, 4), max_num_seqs=2, max_num_batched_tokens=64, chunked_prefill=False)
    seqs = [_seq(3, 5, name=str(i)) for i in range(5)]
    for seq in seqs:
        scheduler.add(seq)
    plan = scheduler.schedule(now_ns=100)
    assert [c.seq for c in plan.chunks] == seqs[:2]
    assert [c.num_tokens for c in plan.chunks] == [3, 3]
    assert seqs[0].scheduled_ns == 100 and seqs[2].scheduled_ns is None
    _run_plan(plan)
    plan = scheduler.schedule(now_ns=200)
    assert [(c.seq, c.num_tokens) for c in plan.chunks] == [(seqs[0], 1), (seqs[1], 1)]
    assert len(scheduler.running) == 2 and list(scheduler.waiting) == seqs[2:]


def test_without_chunked_prefill_a_prefill_is_whole_and_only_the_first_may_exceed_the_budget():
    scheduler = Scheduler(BlockPool(64, 4), max_num_seqs=8, max_num_batched_tokens=10, chunked_prefill=False)
    long, short = _seq(14, 2, name="long"), _seq(3, 2, name="short")
    scheduler.add(long)
    scheduler.add(short)
    plan = scheduler.schedule(now_ns=1)
    assert [(c.seq, c.num_tokens) for c in plan.chunks] == [(long, 14)]  # first prefill: whole, over budget
    _run_plan(plan)
    plan = scheduler.schedule(now_ns=2)
    assert [(c.seq, c.num_tokens) for c in plan.chunks] == [(long, 1), (short, 3)]


def test_chunked_prefill_splits_a_prompt_under_the_step_budget_beside_running_decodes():
    scheduler = Scheduler(BlockPool(64, 4), max_num_seqs=4, max_num_batched_tokens=8, chunked_prefill=True)
    first, long = _seq(2, 20, name="first"), _seq(20, 2, name="long")
    scheduler.add(first)
    _run_plan(scheduler.schedule(now_ns=1))
    scheduler.add(long)
    computed = []
    for step in range(4):
        plan = scheduler.schedule(now_ns=10 + step)
        assert plan.num_tokens <= 8
        assert plan.chunks[0].seq is first and plan.chunks[0].num_tokens == 1  # the decode keeps going
        computed += [c.num_tokens for c in plan.chunks if c.seq is long]
        _run_plan(plan)
    assert computed == [7, 7, 6, 1]  # 20 prompt tokens in 3 chunks, then its first decode
    assert long.output_ids


def test_a_full_kv_cache_preempts_the_youngest_running_sequence_for_recompute():
    pool = BlockPool(num_blocks=4, block_size=4)  # 16 tokens of cache
    scheduler = Scheduler(pool, max_num_seqs=4, max_num_batched_tokens=64, chunked_prefill=False)
    old, young = _seq(4, 10, name="old"), _seq(4, 10, name="young")
    scheduler.add(old)
    scheduler.add(young)
    _run_plan(scheduler.schedule(now_ns=1))  # each: 4 tokens computed, one token sampled
    preempted = []
    for step in range(12):
        plan = scheduler.schedule(now_ns=2 + step)
        preempted += plan.preempted
        assert pool.num_used <= pool.num_blocks
        _run_plan(plan)
        if preempted:
            break
    assert preempted == [young]
    assert young.num_computed == 0 and young.num_preemptions == 1 and pool.blocks_of(young) == []
    assert scheduler.waiting[0] is young and young.scheduled_ns == 1  # first scheduling time is kept
    generated = len(young.output_ids)
    scheduler.remove(old)  # the old one finishes: its blocks come back
    plan = scheduler.schedule(now_ns=100)
    recompute = [c for c in plan.chunks if c.seq is young]
    assert recompute and recompute[0].start == 0 and recompute[0].num_tokens == 4 + generated


def test_a_sequence_that_cannot_grow_alone_preempts_itself():
    pool = BlockPool(num_blocks=2, block_size=2)
    scheduler = Scheduler(pool, max_num_seqs=2, max_num_batched_tokens=64, chunked_prefill=False)
    seq = _seq(4, 10)
    scheduler.add(seq)
    _run_plan(scheduler.schedule(now_ns=1))  # 4 computed, 1 sampled; the next decode needs a 3rd block
    plan = scheduler.schedule(now_ns=2)
    assert plan.preempted == [seq] and plan.chunks == [] and list(scheduler.waiting) == [seq]


# --------------------------------------------------------------------------- decoder and sampler


def test_paged_attention_gives_the_same_state_by_prefill_chunks_or_by_decode():
    model = TinyDecoder(dim=32, num_blocks=8, block_size=4, seed=3)
    tokens = [11, 22, 33, 44, 55, 66, 77]
    blocks_a, blocks_b, blocks_c = [0, 5], [7, 2], [1, 6]  # scattered blocks: the paging is exercised
    whole = model.prefill(blocks_a, 0, tokens, sample=True)
    model.prefill(blocks_b, 0, tokens[:3], sample=False)
    chunked = model.prefill(blocks_b, 3, tokens[3:], sample=True)
    model.prefill(blocks_c, 0, tokens[:6], sample=False)
    decoded = model.decode([(blocks_c, 6, tokens[6])])[0]
    np.testing.assert_allclose(whole, chunked, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(whole, decoded, rtol=1e-5, atol=1e-6)


def test_sampling_draws_eos_only_where_allowed_at_about_its_probability():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4000, VOCAB_SIZE)).astype(np.float32)
    allowed = np.arange(4000) % 2 == 0
    tokens = np.array(sample(logits, allowed, 0.3, rng))
    assert not np.any(tokens[~allowed] == EOS)
    assert 0.25 < np.mean(tokens[allowed] == EOS) < 0.35
    assert tokens.min() >= 0 and tokens.max() < VOCAB_SIZE


# --------------------------------------------------------------------------- engine steps


def _engine(**knobs) -> tuple[Engine, LlmMetrics]:
    config = LlmServerConfig(**{"tracing": False, **knobs})
    metrics = LlmMetrics(config.served_model_name, config.max_model_len)
    return Engine(config, metrics), metrics


def _drain(engine: Engine, seqs: list[Sequence], max_steps: int = 10_000) -> list[int]:
    """Step until every sequence finished; the running count after each step."""
    for seq in seqs:
        engine.scheduler.add(seq)
    running = []
    for _ in range(max_steps):
        if all(seq.finished for seq in seqs):
            return running
        engine.step()
        running.append(engine.num_running)
    raise AssertionError("the engine did not finish every sequence")


def test_engine_honours_max_tokens_and_counts_tokens_once_under_preemption():
    engine, metrics = _engine(num_kv_blocks=12, block_size=4, max_model_len=48, max_num_batched_tokens=64,
                              max_num_seqs=6)
    seqs = [_seq(6 + i, 30, name=f"r{i}") for i in range(6)]
    running = _drain(engine, seqs)
    assert max(running) <= 6
    assert all(len(s.output_ids) == 30 and s.finish_reason == FINISH_LENGTH for s in seqs)
    assert _metric(metrics, "vllm:num_preemptions_total") == sum(s.num_preemptions for s in seqs) > 0
    assert _metric(metrics, "vllm:prompt_tokens_total") == sum(len(s.prompt_ids) for s in seqs)
    assert _metric(metrics, "vllm:generation_tokens_total") == 30 * len(seqs)
    assert engine.blocks.num_used == 0
    for seq in seqs:
        assert seq.queued_ns is None or seq.queued_ns <= seq.scheduled_ns  # queued_ns is set by submit()
        assert seq.scheduled_ns <= seq.first_token_ns <= seq.last_token_ns == seq.finished_ns


def test_without_ignore_eos_sequences_may_stop_early_at_an_eos_draw():
    engine, metrics = _engine(eos_probability=0.2, seed=5)
    seqs = [_seq(5, 60, ignore_eos=False, name=f"e{i}") for i in range(12)]
    seqs.append(_seq(5, 60, ignore_eos=True, name="ignores"))
    _drain(engine, seqs)
    stopped = [s for s in seqs if s.finish_reason == FINISH_STOP]
    assert stopped and all(1 <= len(s.output_ids) < 60 for s in stopped)
    assert seqs[-1].finish_reason == FINISH_LENGTH and len(seqs[-1].output_ids) == 60
    assert EOS not in [t for s in seqs for t in s.output_ids]
    assert _metric(metrics, "vllm:request_success_total", finished_reason="stop") == len(stopped)


def test_span_attributes_are_seconds_and_add_up():
    seq = _seq(3, 4)
    seq.output_ids = [5, 6, 7, 8]
    seq.arrival_ns, seq.queued_ns, seq.scheduled_ns = 1_000_000_000, 1_001_000_000, 1_011_000_000
    seq.first_token_ns, seq.last_token_ns, seq.finished_ns = 1_031_000_000, 1_061_000_000, 1_061_000_000
    seq.finish_reason = FINISH_LENGTH
    seq.params = {"max_tokens": 4, "temperature": None}
    attributes = span_attributes(seq)
    assert attributes["gen_ai.latency.time_in_queue"] == pytest.approx(0.010)
    assert attributes["gen_ai.latency.time_to_first_token"] == pytest.approx(0.031)
    assert attributes["gen_ai.latency.time_in_model_prefill"] == pytest.approx(0.020)
    assert attributes["gen_ai.latency.time_in_model_decode"] == pytest.approx(0.030)
    assert attributes["gen_ai.latency.time_in_model_inference"] == pytest.approx(0.050)
    assert attributes["gen_ai.latency.e2e"] == pytest.approx(0.061)
    assert attributes["gen_ai.response.finish_reasons"] == '["length"]'
    assert attributes["gen_ai.request.max_tokens"] == 4 and "gen_ai.request.temperature" not in attributes
    assert (attributes["gen_ai.usage.prompt_tokens"], attributes["gen_ai.usage.completion_tokens"]) == (3, 4)


# --------------------------------------------------------------------------- config and request parsing


@pytest.mark.parametrize("knobs, message", [
    ({"num_kv_blocks": 4, "block_size": 4, "max_model_len": 32}, "exceeds the KV cache"),
    ({"max_num_batched_tokens": 512, "max_model_len": 1024}, "without chunked prefill"),
    ({"max_num_batched_tokens": 8, "max_num_seqs": 16, "enable_chunked_prefill": True}, "max_num_seqs"),
    ({"eos_probability": 1.0}, "eos_probability"),
])
def test_inconsistent_knobs_are_refused(knobs, message):
    with pytest.raises(ConfigError, match=message):
        LlmServerConfig(**knobs)


def test_requests_are_parsed_into_word_tokens_with_openai_errors():
    config = LlmServerConfig(max_model_len=64, max_num_batched_tokens=64, default_max_tokens=16)
    chat = parse_generation(CHAT, {"messages": [{"role": "system", "content": "be brief"},
                                                {"role": "user", "content": [{"type": "text", "text": "hi you"}]}],
                                   "max_completion_tokens": 5, "stream": True,
                                   "stream_options": {"include_usage": True}, "ignore_eos": True}, config)
    assert (len(chat.prompt_ids), chat.max_tokens, chat.stream, chat.include_usage, chat.ignore_eos) == \
        (4, 5, True, True, True)
    completion = parse_generation(COMPLETION, {"prompt": ["a b c"], "model": MODEL}, config)
    assert (len(completion.prompt_ids), completion.max_tokens) == (3, 16)
    assert parse_embedding({"input": ["a b", [1, 2, 3]]}, config).inputs[1] == [1, 2, 3]
    for kind, body, status in [
        (COMPLETION, {"prompt": "a", "model": "other"}, 404),
        (COMPLETION, {"prompt": "   "}, 400),
        (COMPLETION, {"prompt": "a b", "max_tokens": 63}, 400),
        (COMPLETION, {"prompt": "a", "max_tokens": 0}, 400),
        (COMPLETION, {"prompt": "a", "stream_options": {"include_usage": True}}, 400),
        (COMPLETION, {"prompt": "a", "n": 2}, 400),
        (CHAT, {"messages": []}, 400),
        (CHAT, {"messages": [{"content": "no role"}]}, 400),
    ]:
        with pytest.raises(OpenAIError) as caught:
            parse_generation(kind, body, config)
        assert caught.value.status == status, body
