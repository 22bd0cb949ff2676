"""The LLM-server cause detectors beyond the contract (tests/test_analyzers_detectors.py runs that
over every registered detector): their evidence in numbers, and how they share a queue.

Seeded synthetic runs of an LLM server (testkit/synthetic.py ``llm``: vLLM's series under the
``vllm`` preset's metric map). A ``kv_cache`` spike fills the KV cache (99% in use, from 45%),
preempts 6 requests/s and piles the slow requests up in the queue; here it comes with a burst of
requests (twice the rate), which queue_saturation alone would take for an overload. A ``queue``
spike on the same server is an overload with the cache not full. A ``prefill`` spike sends prompts
eight times as long (prompt tokens/s ×8) and slows the running streams' decode.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tailscope.analyzers.analysis import analyze_run
from tailscope.analyzers.causes.detect_kv_cache import KvCacheDetector
from tailscope.analyzers.causes.detect_prefill import PrefillInterferenceDetector, chance_of_long_prompts
from tailscope.analyzers.causes.detect_queue import QueueSaturationDetector, own_surge_chance
from tailscope.analyzers.causes.protocol import SpikeContext, available_inputs
from tailscope.analyzers.inputs.records import request_arrays
from tailscope.analyzers.inputs.run_inputs import RunInputs
from tailscope.analyzers.spikes.detection import decompose
from tailscope.analyzers.stages.decomposition import stage_matrix
from tailscope.analyzers.stages.rules import rules_for_scenario
from tailscope.rundir import load_run
from tailscope.testkit.synthetic import LLM_PROMPT_TOKENS, PREFILL_PROMPT_FACTOR, write_synthetic_run

SPIKE = {"at_s": 18, "duration_s": 4, "extra_ms": 80}


def _spike_context(path, truth: dict, edit=None) -> SpikeContext:
    """The injected spike's context, as find_spikes builds it: slow = inside and above the run's P99.
    ``edit(run)``: changes the loaded run first."""
    run = load_run(path)
    if edit is not None:
        edit(run)
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, rules_for_scenario(run.manifest["scenario"]).rules)
    lo, hi = truth["spikes"][0]["start_ns"], truth["spikes"][0]["end_ns"]
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    threshold = float(np.quantile(req.latency_ms[req.in_latency], 0.99))
    slow = np.flatnonzero(inside & req.is_ok & (req.latency_ms > threshold))
    normal = np.flatnonzero(req.is_ok & ~inside)
    origin = int(req.scheduled_ns.min())
    inputs = RunInputs(run, req, matrix, origin, int(req.end_ns.max()), threshold, [(lo, hi)])
    return SpikeContext(run, lo, hi, (lo + hi) // 2, slow, normal, decompose(slow, normal, matrix, req.n),
                        available_inputs(run), inputs, threshold)


@pytest.fixture(scope="module")
def kv_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("kv") / "run"
    return path, write_synthetic_run(path, duration_s=40, rate=50, seed=31,
                                     spikes=[{"kind": "kv_cache", "surge": 1.0, **SPIKE}])


def test_kv_cache_pressure_gives_its_numbers(kv_run):
    path, truth = kv_run
    spike = analyze_run(path)["spikes"][0]
    top = spike["causes"][0]
    assert top["kind"] == "kv_cache_pressure" and top["confidence"] >= 0.9
    evidence = top["evidence"]
    assert evidence["kv_usage_spike"] == pytest.approx(0.99, abs=0.01)
    assert evidence["kv_usage_baseline"] == pytest.approx(0.45, abs=0.01)
    assert evidence["preemptions_per_s"] == pytest.approx(6.0, rel=0.25) and evidence["preemptions_baseline_per_s"] == 0
    assert evidence["queue_share_of_server_growth"] > 0.8
    assert evidence["series"][0].startswith("prom.vllm:kv_cache_usage_perc{")
    assert "KV cache 99% in use (baseline 45%)" in evidence["summary"]
    assert [c["kind"] for c in spike["causes"]] == ["kv_cache_pressure"]  # queue_saturation yielded


def test_queue_saturation_yields_to_a_full_kv_cache(kv_run):
    """The queue grew under a load surge, but the full KV cache explains it."""
    path, truth = kv_run
    finding = QueueSaturationDetector().score(_spike_context(path, truth))
    factors = finding.evidence["factors"]
    without_kv = (factors["queue_dominant"] * factors["capacity_held"]
                  * max(factors["load_surge"], factors["deep_queue"], factors["rejections"]))
    assert factors["load_surge"] == 1.0 and without_kv >= 0.5  # queue_saturation would have fired
    assert factors["kv_cache_not_full"] < 0.1 and finding.confidence < 0.1
    assert "waited for KV blocks" in finding.evidence["summary"]


def test_an_overload_with_the_kv_cache_not_full_is_queue_saturation(tmp_path):
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=32, llm=True, spikes=[{"kind": "queue", **SPIKE}])
    spike = analyze_run(path)["spikes"][0]
    assert [c["kind"] for c in spike["causes"]] == ["queue_saturation"]  # neither KV pressure nor prefill
    kv = KvCacheDetector().score(_spike_context(path, truth))
    assert kv.confidence < 0.1 and kv.evidence["factors"]["kv_pressure"] < 0.1
    assert kv.evidence["kv_usage_spike"] == pytest.approx(0.45, abs=0.01)


def test_no_kv_usage_series_means_no_finding(tmp_path):
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=33, spikes=[{"kind": "queue", **SPIKE}])
    assert KvCacheDetector().score(_spike_context(path, truth)) is None


def test_prefill_interference_gives_prompt_tokens_and_the_long_prompts(tmp_path):
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=34, spikes=[{"kind": "prefill", **SPIKE}])
    spike = analyze_run(path)["spikes"][0]
    assert [c["kind"] for c in spike["causes"]] == ["prefill_interference"]
    evidence = spike["causes"][0]["evidence"]
    assert evidence["tpot_ratio"] > 2 and evidence["tpot_slow_ms"] > 2 * evidence["tpot_normal_ms"]
    mean_prompt = sum(LLM_PROMPT_TOKENS) / 2
    assert evidence["prompt_tokens_per_s_baseline"] == pytest.approx(50 * mean_prompt, rel=0.2)
    assert evidence["prompt_tokens_per_s"] > 4 * evidence["prompt_tokens_per_s_baseline"]
    assert evidence["other_traffic_prompt_tokens_per_s"] is None  # all of it was ours
    long = evidence["long_prompts"]
    assert long["threshold_tokens"] == pytest.approx(0.9 * LLM_PROMPT_TOKENS[1], rel=0.1)
    assert long["count"] >= 0.5 * 50 * SPIKE["duration_s"]
    largest = long["largest"][0]
    assert largest["prompt_tokens"] > LLM_PROMPT_TOKENS[1] * PREFILL_PROMPT_FACTOR * 0.9
    assert truth["spikes"][0]["start_ns"] <= largest["sent_ns"] < truth["spikes"][0]["end_ns"] + 10**7
    assert "prompt tokens being prefilled" in evidence["summary"]


def test_prefill_interference_stays_quiet_when_kv_pressure_explains_the_slow_requests(kv_run):
    path, truth = kv_run
    finding = PrefillInterferenceDetector().score(_spike_context(path, truth))
    assert finding.confidence < 0.1
    assert finding.evidence["factors"]["kv_cache_not_full"] < 0.1


def test_other_traffics_prompts_count_as_prompt_tokens_being_prefilled(tmp_path):
    """Other traffic (spans of traces the harness did not send, with ``gen_ai.usage.prompt_tokens``)
    adds its prompts to the second they started in, beside the harness's own."""
    path = tmp_path / "run"
    write_synthetic_run(path, duration_s=40, rate=50, seed=35, llm=True)
    run = load_run(path)
    origin = int(request_arrays(run.requests).scheduled_ns.min())
    at = origin + 20 * 10**9 + 10**8  # 20.1 s into the load
    _add_other_traffic(run, at, at + 1, 10, 3000)  # ten at once
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, rules_for_scenario(run.manifest["scenario"]).rules)
    inputs = RunInputs(run, req, matrix, origin, int(req.end_ns.max()), 100.0, [])
    own, other = inputs.prompt_tokens_per_second
    assert inputs.other_traffic.requests == 10
    assert other[20] == 30_000 and other.sum() == 30_000
    assert own.sum() == pytest.approx(float(np.nansum(inputs.llm.prompt_tokens)), rel=0.01)


def test_waiting_requests_with_the_kv_cache_not_full_are_queue_saturation(tmp_path):
    """The engine's queue (``vllm:num_requests_waiting``, 1 → 30) grows while the KV cache stays at
    45%: the engine is at its concurrency limit. No load surge and no deep ``queue.depth`` here, so
    without the waiting gauge queue_saturation would not fire."""
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=36, llm=True,
                                spikes=[{"kind": "queue", "surge": 0.0, **SPIKE}])
    finding = QueueSaturationDetector().score(_spike_context(path, truth))
    factors = finding.evidence["factors"]
    assert max(factors["load_surge"], factors["deep_queue"], factors["rejections"]) < 0.5
    assert factors["waiting_grew"] == pytest.approx(1.0) and factors["kv_cache_not_full"] == pytest.approx(1.0)
    assert finding.confidence >= 0.5
    waiting = finding.evidence["server_waiting"]
    assert waiting["spike"] == pytest.approx(30, abs=0.5) and waiting["baseline"] == pytest.approx(1, abs=0.1)
    assert "30 requests waiting on the server (baseline 1)" in finding.evidence["summary"]
    spike = analyze_run(path)["spikes"][0]
    assert [c["kind"] for c in spike["causes"]] == ["queue_saturation"]


def _kv_context_with(path, truth: dict, inside_kv, preempting: bool) -> SpikeContext:
    """The kv_cache spike's context with its KV-use readings inside the spike (± 2 s) replaced by
    ``inside_kv`` in turn and, unless ``preempting``, the preemption counter held flat."""
    run = load_run(path)
    lo, hi = truth["spikes"][0]["start_ns"] - 2_000_000_000, truth["spikes"][0]["end_ns"] + 2_000_000_000
    series, t_ns = run.signals.column("series").to_pylist(), run.signals.column("t_ns").to_pylist()
    values = run.signals.column("value").to_pylist()
    turn = 0
    for i, (name, t) in enumerate(zip(series, t_ns)):
        if "kv_cache_usage_perc" in name and lo <= t <= hi:
            values[i], turn = inside_kv[turn % len(inside_kv)], turn + 1
        elif "num_preemptions_total" in name and not preempting:
            values[i] = 0.0
    run.signals = run.signals.set_column(run.signals.schema.get_field_index("value"), "value",
                                         pa.array(values, run.signals.schema.field("value").type))
    req = request_arrays(run.requests)
    matrix = stage_matrix(req, run.spans, rules_for_scenario(run.manifest["scenario"]).rules)
    lo, hi = truth["spikes"][0]["start_ns"], truth["spikes"][0]["end_ns"]
    inside = (req.scheduled_ns >= lo) & (req.scheduled_ns < hi)
    threshold = float(np.quantile(req.latency_ms[req.in_latency], 0.99))
    slow = np.flatnonzero(inside & req.is_ok & (req.latency_ms > threshold))
    normal = np.flatnonzero(req.is_ok & ~inside)
    inputs = RunInputs(run, req, matrix, int(req.scheduled_ns.min()), int(req.end_ns.max()), threshold, [(lo, hi)])
    return SpikeContext(run, lo, hi, (lo + hi) // 2, slow, normal, decompose(slow, normal, matrix, req.n),
                        available_inputs(run), inputs, threshold)


def test_a_preempting_engines_kv_peaks_count_though_its_average_stays_below_the_limit(kv_run):
    """Preempting frees blocks, so KV use averaged over the spike sits below the limit it keeps
    hitting (the real vLLM: 0.84–0.89 averaged, 1.0 at its peaks); while preemptions rise, the
    peak counts. Without preemptions the same readings are no pressure (the average is judged)."""
    path, truth = kv_run
    oscillating = [0.78, 1.0, 0.8, 0.97]
    kv = KvCacheDetector().score(_kv_context_with(path, truth, oscillating, preempting=True))
    assert kv.evidence["kv_usage_spike"] < 0.9 and kv.evidence["kv_usage_peak"] >= 0.95
    assert kv.evidence["factors"]["kv_pressure"] >= 0.7 and kv.confidence >= 0.5
    quiet = KvCacheDetector().score(_kv_context_with(path, truth, oscillating, preempting=False))
    assert quiet.evidence["factors"]["kv_pressure"] < 0.5


def test_rising_preemptions_are_kv_pressure_when_the_scrapes_missed_the_full_cache(kv_run):
    """An engine too busy to answer /metrics is scraped seconds apart, and the readings it answers
    may all be low (the real vLLM under CI load: 0.41 at most while it preempted 30 times). An
    engine preempts only when it cannot allocate a KV block, so rising preemptions alone are the
    cache at its limit; the same low readings without preemptions are no pressure."""
    path, truth = kv_run
    sparse_low = [0.41, 0.2, 0.35]
    kv = KvCacheDetector().score(_kv_context_with(path, truth, sparse_low, preempting=True))
    assert kv.evidence["kv_usage_peak"] < 0.5
    assert kv.evidence["factors"]["kv_pressure"] >= 0.7 and kv.confidence >= 0.5
    quiet = KvCacheDetector().score(_kv_context_with(path, truth, sparse_low, preempting=False))
    assert quiet.evidence["factors"]["kv_pressure"] < 0.1


def _keep_long_prompts(run, lo: int, hi: int, keep: int, seed: int) -> None:
    """The prompts of the requests scheduled in [lo, hi) drawn again from the run's own prompt mix
    (uniform ``LLM_PROMPT_TOKENS``), but the first ``keep``: a surge of ``keep`` long prompts."""
    scheduled = run.requests.column("scheduled_ns").to_numpy()
    prompts = run.requests.column("prompt_tokens").to_numpy(zero_copy_only=False).astype(float)
    inside = np.flatnonzero((scheduled >= lo) & (scheduled < hi))
    redrawn = np.random.default_rng(seed).uniform(*LLM_PROMPT_TOKENS, len(inside) - keep).round()
    prompts[inside[keep:]] = redrawn
    index = run.requests.schema.get_field_index("prompt_tokens")
    run.requests = run.requests.set_column(index, run.requests.schema.field(index),
                                           pa.array(prompts).cast(run.requests.schema.field(index).type))


def test_a_few_long_prompts_that_chance_explains_are_no_surge(tmp_path):
    """At 4 requests/s three long prompts among a spike's 16 requests make a 3x prompt-token "surge"
    (the lab's 1-req/s control named prefill_interference for three 213-433-token prompts). Under
    the baseline's mix (10 % above its P90) 5 long prompts of the 27 sent in the widened spike (the
    3 and two of chance) have a chance of 0.11: the surge does not count. All 16 long (chance
    < 1e-9) still do."""
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=60, rate=4, seed=41,
                                spikes=[{"kind": "prefill", "at_s": 30, "duration_s": 4, "extra_ms": 80}])
    lo, hi = truth["spikes"][0]["start_ns"], truth["spikes"][0]["end_ns"]
    full = PrefillInterferenceDetector().score(_spike_context(path, truth))
    assert full.confidence >= 0.9 and full.evidence["long_prompts"]["chance"] < 1e-9
    assert full.evidence["factors"]["surge_not_chance"] == 1.0
    few = PrefillInterferenceDetector().score(_spike_context(path, truth, lambda run: _keep_long_prompts(run, lo, hi, 3, 7)))
    factors, long = few.evidence["factors"], few.evidence["long_prompts"]
    assert 3 <= long["count"] <= 6 and long["requests"] >= 16
    assert long["chance"] == pytest.approx(chance_of_long_prompts(long["count"], long["requests"], long["baseline_share"]))
    assert long["chance"] > 0.01 and factors["surge_not_chance"] == 0.0
    without_chance = np.prod([v for k, v in factors.items() if k != "surge_not_chance"])
    assert factors["prompt_surge"] > 0.5 and without_chance >= 0.5  # the rule before named it
    assert few.confidence == 0.0
    assert "chance" in few.evidence["summary"]


def _add_other_traffic(run, lo: int, hi: int, count: int, prompt_tokens: int) -> None:
    """``count`` SERVER spans of traces the harness did not send, spread over [lo, hi), each with a
    ``prompt_tokens`` prompt (other traffic, as another client's requests leave it)."""
    server = run.spans.filter(pc.equal(run.spans.column("kind"), 2)).take([0] * count)
    starts = np.linspace(lo, hi, count, endpoint=False).astype(np.int64)
    foreign = server.set_column(server.schema.get_field_index("trace_id"), "trace_id",
                                pa.array([f"{i + 1:032x}" for i in range(count)]))
    for name, values in (("name", pa.array(["llm_request"] * count)),
                         ("span_id", pa.array([f"{i + 1:016x}" for i in range(count)])),
                         ("parent_span_id", pa.array([None] * count, pa.string())),
                         ("attributes", pa.array([f'{{"gen_ai.usage.prompt_tokens": {prompt_tokens}}}'] * count)),
                         ("start_ns", pa.array(starts, pa.int64())), ("end_ns", pa.array(starts + 10**8, pa.int64()))):
        index = foreign.schema.get_field_index(name)
        foreign = foreign.set_column(index, foreign.schema.field(index), values.cast(foreign.schema.field(index).type))
    run.spans = pa.concat_tables([run.spans, foreign])


def test_a_surge_of_other_traffics_short_prompts_is_no_prefill_interference(tmp_path):
    """Other traffic's prompt tokens make a surge when its prompts are long (the storm's 3,000
    tokens). The same tokens/s as many short prompts (50 chat requests/s of 64 tokens beside 3 of
    ours on the LLM reference server: the running batch 1 → 21 of 24) are more requests, not longer
    prefills; their TTFT spike had been named prefill_interference (0.60)."""
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=60, rate=4, seed=41,
                                spikes=[{"kind": "prefill", "at_s": 30, "duration_s": 4, "extra_ms": 80}])
    lo, hi = truth["spikes"][0]["start_ns"], truth["spikes"][0]["end_ns"]

    def other(count: int, tokens: int):
        def edit(run):
            _keep_long_prompts(run, lo, hi, 0, 7)  # our prompts as the baseline's
            _add_other_traffic(run, lo, hi, count, tokens)
        return PrefillInterferenceDetector().score(_spike_context(path, truth, edit))

    long = other(40, 3000)
    assert long.evidence["other_traffic_prompts"]["long"] == 1.0
    assert long.evidence["factors"]["surge_not_chance"] == 1.0 and long.confidence >= 0.5
    short = other(1875, 64)  # the same 120,000 prompt tokens
    prompts = short.evidence["other_traffic_prompts"]
    assert prompts["requests"] == 1875 and prompts["mean_tokens"] == 64 and prompts["long"] == 0.0
    assert short.evidence["other_traffic_share_of_surge"] > 0.9
    assert short.evidence["factors"]["surge_not_chance"] == 0.0 and short.confidence == 0.0
    assert "other traffic's 1,875 prompts there averaged 64 tokens" in short.evidence["summary"]


def test_the_chance_of_long_prompts_is_the_binomial_tail():
    """P(X >= k), X ~ Binomial(n, q): 3 of 5 at q 0.1 is 0.00856; none is certain."""
    assert chance_of_long_prompts(3, 5, 0.1) == pytest.approx(10 * 0.001 * 0.81 + 5 * 0.0001 * 0.9 + 1e-5)
    assert chance_of_long_prompts(0, 5, 0.1) == 1.0
    assert chance_of_long_prompts(5, 10, 0.1) == pytest.approx(0.00163, rel=0.01)


def _set_running(run, lo: int, hi: int, inside: float) -> None:
    """The running batch (``vllm:num_requests_running``) read as ``inside`` from ``lo`` to ``hi``."""
    series, t_ns = run.signals.column("series").to_pylist(), run.signals.column("t_ns").to_numpy()
    values = run.signals.column("value").to_numpy().copy()
    hit = np.array(["num_requests_running" in name for name in series]) & (t_ns >= lo) & (t_ns < hi)
    values[hit] = inside
    run.signals = run.signals.set_column(run.signals.schema.get_field_index("value"), "value",
                                         pa.array(values, run.signals.schema.field("value").type))


def test_a_surge_of_short_requests_absorbed_by_the_running_batch_is_queue_saturation(tmp_path):
    """The LLM reference server at 1 and 3/s beside 50 chat requests/s of 64 tokens from elsewhere:
    it ran them (running 1 → 21–24), queued little (queue 41–45 % of the slow requests' extra server
    time), and every step slowed. Here: our streams' decode grows 80 ms, other traffic sends 1,875
    prompts of 64 tokens in 4 s, the running batch 8 → 30, the KV cache at 45 %: the batch path
    names ``queue_saturation`` on the latency and the TPOT spike. The same prompts long are
    prefill interference; the batch flat, or no surge, is neither."""
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=60, rate=4, seed=41,
                                spikes=[{"kind": "prefill", "at_s": 30, "duration_s": 4, "extra_ms": 80}])
    lo, hi = truth["spikes"][0]["start_ns"], truth["spikes"][0]["end_ns"]

    def context(count: int, tokens: int, running: float, metric: str = "latency") -> SpikeContext:
        def edit(run):
            _keep_long_prompts(run, lo, hi, 0, 7)  # our prompts as the baseline's: no surge of ours
            if count:
                _add_other_traffic(run, lo, hi, count, tokens)
            _set_running(run, lo, hi, running)
        ctx = _spike_context(path, truth, edit)
        return ctx if metric == "latency" else dataclasses.replace(ctx, metric=metric)

    absorbed = QueueSaturationDetector().score(context(1875, 64, 30.0))
    batch = absorbed.evidence["batch_absorbed"]
    assert absorbed.evidence["queue_share_of_server_growth"] < 0.3  # the queue path cannot name it
    assert batch["factors"] == {"engine_holds_growth": 1.0, "batch_grew": 1.0, "load_surge": 1.0,
                                "surge_not_chance": 1.0, "surge_prompts_short": 1.0}
    assert batch["running"]["spike"] == pytest.approx(30, abs=0.5) and batch["running"]["baseline"] == pytest.approx(8, abs=0.5)
    assert batch["other_traffic_share_of_surge"] > 0.9 and batch["other_traffic_prompts"]["mean_tokens"] == 64
    assert absorbed.confidence == 1.0
    assert "the engine took the surge into its running batch: 30 requests running (baseline 8)" in absorbed.evidence["summary"]
    assert "of 64-token prompts" in absorbed.evidence["summary"]
    tpot = QueueSaturationDetector().score(context(1875, 64, 30.0, metric="tpot"))
    assert tpot.confidence == 1.0  # the batch slows every step: it raises TPOT, as a queue does not
    assert "tpot" in QueueSaturationDetector.raises

    storm = context(40, 3000, 30.0)
    assert QueueSaturationDetector().score(storm).evidence["batch_absorbed"]["factors"]["surge_prompts_short"] == 0.0
    assert QueueSaturationDetector().score(storm).confidence < 0.5
    assert PrefillInterferenceDetector().score(storm).confidence >= 0.5
    flat = QueueSaturationDetector().score(context(1875, 64, 8.0))
    assert flat.evidence["batch_absorbed"]["factors"]["batch_grew"] == 0.0 and flat.confidence < 0.5
    alone = QueueSaturationDetector().score(context(0, 0, 30.0))  # the batch grew, with no surge to fill it
    assert alone.evidence["batch_absorbed"]["factors"]["surge_not_chance"] == 0.0 and alone.confidence < 0.5


def test_our_own_surge_counts_for_the_batch_only_when_poisson_cannot_explain_it(tmp_path):
    """A rate step of our own (twice the rate for 4 s at 50/s: about 400 sends where 200 were due)
    is no chance; the spike's own Poisson arrivals are."""
    path = tmp_path / "run"
    truth = write_synthetic_run(path, duration_s=40, rate=50, seed=32, llm=True, spikes=[{"kind": "queue", **SPIKE}])
    surge = _spike_context(path, truth)
    assert own_surge_chance(surge) < 1e-10
    steady = write_synthetic_run(tmp_path / "steady", duration_s=40, rate=50, seed=32, llm=True,
                                 spikes=[{"kind": "queue", "surge": 0.0, **SPIKE}])
    assert own_surge_chance(_spike_context(tmp_path / "steady", steady)) > 1e-3
