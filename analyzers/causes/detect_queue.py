"""``queue_saturation``: more work arrived than the service could take, and it queued.

Evidence:

- the queue's share of the slow requests' server-time growth (``queue`` +
  ``batch_wait`` stages in the decomposition);
- offered load per second in the spike vs the baseline: the harness's
  *scheduled* sends (the load it offered, whatever the target admitted — a
  stalled target admits a backlog in bursts, which server-side arrival times
  would mistake for a surge) plus SERVER spans of traces the harness did not
  send (load from elsewhere);
- queue depth: the ``queue.depth`` attribute of the slow requests' ``queue_wait``
  spans vs the normal requests' P99 depth, and vs ``queue.capacity``;
- rejections: the share of HTTP 429 answers in the spike vs the baseline.

A service that merely slowed down (throttled, starved, paging) also builds
a queue and rejects, but it is the *symptom* there: the work it completed
per second fell. Saturation as a cause means demand rose above a capacity
that held, so every piece of evidence is weighed by the throughput the
target sustained during the spike (useful completions per second, SERVER
spans answered below 400, vs the baseline), and deep-queue evidence is also
discounted by the compute stages' relative growth.

A flood far above the baseline rate (three times or more) can itself cut the
throughput (the target spends its CPU parsing and rejecting), so a strong
surge stands in for a held capacity:

confidence = ramp(queue share, 0.3, 0.7)
           × max(ramp(throughput ratio, 0.6, 0.9), ramp(load ratio, 1.5, 3.0))
           × max(ramp(load ratio, 1.1, 1.4),
                 ramp(depth ratio, 2, 5) × (1 − ramp(compute growth, 0.3, 1.0)),
                 ramp(429 share − baseline 429 share, 0.005, 0.03),
                 waiting grew)
           × (1 − KV pressure)

On an LLM server the engine's own queue is a Prometheus gauge (the preset's ``waiting`` role:
``vllm:num_requests_waiting_by_reason{reason="capacity"}`` — requests waiting for scheduling
capacity, not those deferred by LoRA or KV transfer — else ``vllm:num_requests_waiting``,
``tgi_queue_size``, ``sglang:num_queue_reqs``, …): *waiting
grew* is its signal evidence (robust z 2 → 6, material 4 requests) — requests waiting while the
KV cache is not full mean the engine is at its concurrency or compute limit.

On an LLM server a queue also grows when the KV cache is full (requests wait for blocks):
that is ``kv_cache_pressure``, so the finding yields by the KV pressure the kit measures
(:func:`~.kit.kv_pressure`; 1 − 0 where the run has no KV-use series).

**Load absorbed by batching** (the *batch path*). A continuous-batching engine with room in its
batch does not queue a surge of short requests: it runs them, and every engine step takes longer —
our requests' decode grows, their TTFT and TPOT with it, and the queue holds only part of the
growth (the LLM reference server at 1 and 3/s beside 50 chat requests/s of 64 tokens from
elsewhere: running 1 → 21–24, 2.9 waiting on average, queue 41–45 % of the slow requests' extra
server time, decode the rest). Its evidence:

- the running batch grew (the preset's ``running`` role, ``vllm:num_requests_running``): robust
  z 2 → 6, and a rise of a quarter to all of max(:data:`RUNNING_MATERIAL`, its baseline) — the
  batch at least doubled;
- the engine holds the growth: ramp(share of the slow requests' extra server time in the queue
  and the engine's stages (``prefill``, ``decode``), 0.3, 0.7);
- the offered load surged, ramp(load ratio, 1.5, 3.0), and not by chance: other traffic's share
  of the extra requests/s (0 → 1 from a quarter to half), or our own sends improbable under the
  baseline's rate (Poisson tail over the widened spike, counted from p = 10⁻³, fully at 10⁻⁵: a
  burst of our own Poisson arrivals at capacity is the run's own variation, a rate step is not);
- the surge's prompts were short: 1 − ``long`` of other traffic's prompts
  (:func:`~.kit.other_traffic_prompts`; a storm of long prompts is ``prefill_interference``),
  and the KV cache not full.

batch path = engine holds × batch grew × ramp(load ratio, 1.5, 3) × not chance × short × (1 − KV
pressure); confidence = max(queue path, batch path). The queue path does not raise the time per
output token (a queued request's decode is not slower), the batch path does: on a TPOT spike only
the batch path counts.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from tailscope.analysis_model.spikes import StageGrowth
from tailscope.analyzers.causes.kit import (
    OTHER_SHARE_HIGH,
    OTHER_SHARE_LOW,
    Z_HIGH,
    Z_LOW,
    SignalEvidence,
    baseline_prompt_tokens,
    kv_pressure,
    latency_split,
    level_words,
    load_contrast,
    other_traffic_prompts,
    percent,
    places,
    ramp,
    server_role_prefixes,
    signal_evidence,
    unlikely,
)
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext
from tailscope.analyzers.inputs.records import NS_PER_S
from tailscope.analyzers.inputs.run_inputs import margin_ns
from tailscope.analyzers.inputs.signal_index import Contrast

QUEUE_STAGES = ("queue", "batch_wait")
COMPUTE_STAGES = ("preprocess", "inference", "postprocess")
#: An LLM engine's stages: the batch path's growth is theirs and the queue's.
ENGINE_STAGES = ("prefill", "decode")
#: Material rise of an LLM server's waiting requests (the preset's ``waiting`` role), requests.
WAITING_MATERIAL = 4.0
#: Least material rise of an LLM server's running batch (the ``running`` role), requests; a larger
#: baseline batch must at least double.
RUNNING_MATERIAL = 4.0
#: Our own sends in the widened spike count as a surge from this Poisson tail probability, fully at the second.
OWN_SURGE_P_NONE, OWN_SURGE_P_FULL = 1e-3, 1e-5


def _growth(stages: dict[str, StageGrowth], names) -> tuple[float, float]:
    """(sum of mean growth, sum of normal means) over the named stages present (ms)."""
    growth = sum((stages[s].growth_ms or 0.0) for s in names if s in stages)
    normal = sum((stages[s].normal.mean_ms or 0.0) for s in names if s in stages)
    return growth, normal


def throughput_ratio(ctx: SpikeContext) -> float | None:
    """Useful completions per second in the spike / at baseline (None without data)."""
    inputs = ctx.inputs
    found = inputs.contrast_values(inputs.per_second(inputs.completions_ns), ctx.start_ns, ctx.end_ns)
    if found is None or found.baseline <= 0:
        return None
    in_spike = inputs.bins_between(ctx.start_ns, ctx.end_ns)
    rates = inputs.per_second(inputs.completions_ns)[in_spike]
    return float(np.mean(rates)) / found.baseline if len(rates) else None


def rejection_excess(ctx: SpikeContext) -> tuple[float, float]:
    """(429 share inside the spike, 429 share outside every spike)."""
    req = ctx.inputs.req
    status = ctx.inputs.status
    inside = (req.scheduled_ns >= ctx.start_ns) & (req.scheduled_ns < ctx.end_ns)
    rejected = status == 429
    outside = ~inside
    spike_share = float(rejected[inside].mean()) if inside.any() else 0.0
    base_share = float(rejected[outside].mean()) if outside.any() else 0.0
    return spike_share, base_share


class QueueSaturationDetector(CauseDetector):
    kind = "queue_saturation"
    answers = ("overload", "llm_overload")
    reads = ("derived.queue_depth", "derived.server_arrivals_per_s", *server_role_prefixes("waiting", "running"))
    aliases = ("queueing", "queue", "saturation", "retry_storm")
    needs = ("spans",)
    raises = ("latency", "ttft", "tpot")  # the metrics it raises (CauseDetector.raises): TPOT by the batch path

    def score(self, ctx: SpikeContext) -> Finding | None:
        stages = ctx.decomposition.stages
        server_growth = stages["server"].growth_ms if "server" in stages else None
        if not stages or server_growth is None:
            return None
        queue_growth, _ = _growth(stages, QUEUE_STAGES)
        compute_growth, compute_normal = _growth(stages, COMPUTE_STAGES)
        queue_share = queue_growth / server_growth if server_growth > 0 else 0.0
        compute_ratio = compute_growth / compute_normal if compute_normal > 0 else 0.0
        offered, load_label = load_contrast(ctx)
        ratio = offered.spike / offered.baseline if offered is not None and offered.baseline > 0 else None
        slow_depth = ctx.inputs.queue_depth_of(ctx.slow_request_index)
        slow_depth = slow_depth[np.isfinite(slow_depth)]
        normal = ctx.inputs.normal_sample(ctx.normal_request_index)
        normal_depth = ctx.inputs.queue_depth_of(normal)
        normal_depth = normal_depth[np.isfinite(normal_depth)]
        median_depth = float(np.median(slow_depth)) if len(slow_depth) else None
        normal_p99 = float(np.quantile(normal_depth, 0.99, method="inverted_cdf")) if len(normal_depth) else None
        capacity = ctx.inputs.queue_capacity
        depth_ratio = (median_depth / max(normal_p99, 1.0)) if median_depth is not None and normal_p99 is not None else None
        spike_429, base_429 = rejection_excess(ctx)
        held = throughput_ratio(ctx)
        factors = {
            "queue_dominant": ramp(queue_share, 0.3, 0.7),
            "capacity_held": 1.0 if held is None else max(ramp(held, 0.6, 0.9), ramp(ratio, 1.5, 3.0)),
            "load_surge": ramp(ratio, 1.1, 1.4),
            "deep_queue": ramp(depth_ratio, 2.0, 5.0) * (1.0 - ramp(compute_ratio, 0.3, 1.0)),
            "rejections": ramp(spike_429 - base_429, 0.005, 0.03),
        }
        waiting_values = ctx.inputs.server_role("waiting")
        waiting = (signal_evidence(ctx, "waiting", WAITING_MATERIAL, floor=0.5, values=np.nan_to_num(waiting_values))
                   if waiting_values is not None else None)
        if waiting is not None:
            factors["waiting_grew"] = waiting.confidence
        kv = kv_pressure(ctx)
        if kv.watched:
            factors["kv_cache_not_full"] = 1.0 - kv.confidence
        queue_path = (0.0 if ctx.metric == "tpot" else
                      factors["queue_dominant"] * factors["capacity_held"]
                      * max(factors["load_surge"], factors["deep_queue"], factors["rejections"],
                            factors.get("waiting_grew", 0.0))
                      * factors.get("kv_cache_not_full", 1.0))
        batch = _batch_absorbed(ctx, queue_growth, server_growth, offered, ratio)
        if batch is not None:
            factors["batch_path"] = batch["confidence"]
        confidence = max(queue_path, batch["confidence"] * factors.get("kv_cache_not_full", 1.0)
                         if batch is not None else 0.0)
        parts = [f"queue wait is {percent(max(queue_share, 0.0))} of the slow requests' extra server time "
                 f"(+{queue_growth:.1f} ms)"]
        if ratio is not None:
            parts.append(f"{load_label} vs the baseline rate: " + level_words(offered, lambda v: f"{v / offered.baseline:.2f}×"))
        if median_depth is not None:
            parts.append(f"median queue depth {median_depth:.0f} vs normal P99 {normal_p99:.0f}"
                         + (f" (capacity {capacity:.0f})" if capacity else ""))
        if spike_429 > 0:
            parts.append(f"{percent(spike_429)} answered 429 (baseline {percent(base_429)})")
        if held is not None:
            parts.append(f"throughput {held:.2f}× the baseline's"
                         + (" (the service slowed: the queue is a symptom)" if held < 0.75 else ""))
        if waiting is not None:
            parts.append(level_words(waiting.contrast, lambda v: f"{v:.0f} requests waiting on the server") + " "
                         f"(baseline {waiting.contrast.baseline:.0f})")
        if batch is not None and batch["confidence"] > 0:  # first where it is what named the cause
            parts.insert(0 if batch["confidence"] > queue_path else len(parts), batch["words"])
        if kv.watched and kv.confidence > 0:
            parts.append(f"KV cache {percent(kv.kv_spike)} in use"
                         + (f" {kv.places['kv_usage_spike']}" if (kv.places or {}).get("kv_usage_spike") else "")
                         + " (the queue waited for KV blocks)")
        return Finding(self.name, round(float(confidence), 4), {
            "summary": "; ".join(parts),
            "queue_share_of_server_growth": queue_share,
            "queue_growth_ms": queue_growth,
            "compute_growth_ratio": compute_ratio,
            "load_ratio": ratio, "load_measured_by": load_label,
            "median_slow_queue_depth": median_depth, "normal_p99_queue_depth": normal_p99,
            "queue_capacity": capacity,
            "server_waiting": waiting.as_dict() if waiting is not None else None,
            "batch_absorbed": {k: v for k, v in batch.items() if k != "words"} if batch is not None else None,
            "rejected_429_share": spike_429, "baseline_429_share": base_429, "throughput_ratio": held,
            "latency_split": latency_split(ctx).as_dict(),
            "factors": factors, "places": places(load_ratio=offered),
        })


def own_surge_chance(ctx: SpikeContext) -> float:
    """P(X ≥ k) for X ~ Poisson(baseline rate × widened spike length): the chance of at least the
    harness's k scheduled sends in the spike widened by its margin at the baseline's mean rate
    (1.0 without a baseline rate)."""
    inputs = ctx.inputs
    margin = margin_ns(ctx.start_ns, ctx.end_ns)
    scheduled = inputs.req.scheduled_ns
    sent = int(((scheduled >= ctx.start_ns - margin) & (scheduled < ctx.end_ns + margin)).sum())
    rates = inputs.per_second(scheduled)[inputs.baseline_bins]
    expected = float(rates.mean()) * (ctx.end_ns - ctx.start_ns + 2 * margin) / NS_PER_S if len(rates) else 0.0
    if expected <= 0 or sent <= 0:
        return 1.0
    return float(stats.poisson.sf(sent - 1, expected))


def _batch_absorbed(ctx: SpikeContext, queue_growth: float, server_growth: float,
                    offered: Contrast | None, load_ratio: float | None) -> dict | None:
    """The batch path (module docstring): the running batch grew through a surge of short requests
    that was no chance, and the queue and the engine's stages hold the slow requests' growth.
    ``confidence`` (without the KV factor), its factors, the figures and ``words``; None on a server
    without a ``running`` series. ``offered``: the offered load's contrast
    (:func:`~.kit.load_contrast`), ``load_ratio`` its spike over its baseline."""
    inputs = ctx.inputs
    running = inputs.server_role("running")
    if running is None:
        return None
    found = inputs.contrast_values(np.nan_to_num(running), ctx.start_ns, ctx.end_ns, floor=0.5)
    if found is None:
        return None
    material = max(RUNNING_MATERIAL, found.baseline)
    grew = SignalEvidence("running", found, material,
                          ramp(found.z, Z_LOW, Z_HIGH) * ramp(found.excess, 0.25 * material, material))
    engine_growth, _ = _growth(ctx.decomposition.stages, ENGINE_STAGES)
    held_share = (queue_growth + engine_growth) / server_growth if server_growth > 0 else 0.0
    external = inputs.per_second(inputs.external_arrivals_ns)
    other = inputs.contrast_values(external, ctx.start_ns, ctx.end_ns) if external.any() else None
    excess = offered.spike - offered.baseline if offered is not None else 0.0
    other_share = (other.spike - other.baseline) / excess if other is not None and excess > 0 else 0.0
    chance = own_surge_chance(ctx)
    baseline_prompts = baseline_prompt_tokens(ctx)
    long_tokens = float(np.quantile(baseline_prompts, 0.9)) if len(baseline_prompts) else None
    prompts = other_traffic_prompts(ctx, long_tokens)
    factors = {
        "engine_holds_growth": ramp(held_share, 0.3, 0.7),
        "batch_grew": grew.confidence,
        "load_surge": ramp(load_ratio, 1.5, 3.0),
        "surge_not_chance": max(ramp(other_share, OTHER_SHARE_LOW, OTHER_SHARE_HIGH),
                                unlikely(chance, OWN_SURGE_P_NONE, OWN_SURGE_P_FULL)),
        "surge_prompts_short": 1.0 - prompts["long"] if prompts["requests"] else 1.0,
    }
    words = ("the engine took the surge into its running batch: "
             + level_words(found, lambda v: f"{v:.0f} requests running") + f" (baseline {found.baseline:.0f})"
             + (f", other traffic {level_words(other, lambda v: f'{v:.0f} requests/s')}"
                if other is not None else "")
             + (f" of {prompts['mean_tokens']:.0f}-token prompts" if prompts["mean_tokens"] is not None else "")
             + f"; queue and engine {percent(max(held_share, 0.0))} of the extra server time"
             f" (engine {engine_growth:+.1f} ms)")
    return {"confidence": float(np.prod(list(factors.values()))), "factors": factors,
            "running": grew.as_dict(), "engine_growth_ms": engine_growth, "engine_and_queue_share": held_share,
            "other_traffic_share_of_surge": other_share, "own_surge_chance": chance,
            "other_traffic_prompts": prompts, "words": words}
