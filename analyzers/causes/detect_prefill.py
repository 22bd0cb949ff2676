"""``prefill_interference``: long prompts being prefilled slowed the streams already decoding,
and the first tokens of the requests that arrived among them.

A continuous-batching LLM engine runs the prefill of new prompts in the same steps as the decode
of running streams; a surge of prompt tokens (a storm of long prompts, ours or another client's)
makes every step longer, so the running streams' time per output token grows, and a new request's
own prefill shares those steps (chunked prefill) and its API server's CPU, so its first token comes
later too: on the real vLLM CPU build, a storm of 900-token prompts at 5/s raised TTFT P99 2.6× (the
slow requests' prefill stage 10 → 31 ms on average, their API server's time 7 → 31 ms, queue
+13 ms) and TPOT 1.6×. Evidence:

- how much the metric that rose rose (``slowed``): on a TPOT or latency spike, the slow requests'
  time per output token against the normal requests' — the ``decode`` stage (vLLM's
  ``gen_ai.latency.time_in_model_decode``) ÷ (output tokens − 1), the server's TPOT; on a TTFT
  spike, the slow requests' median TTFT against the normal requests' (with the growth of the
  ``prefill`` stage where the spans give one);
- prompt tokens per second (1-s bins) — the harness's own requests' prompts at their send
  (``requests.arrow`` ``prompt_tokens``) plus the other traffic's (``gen_ai.usage.prompt_tokens``
  of spans of traces the harness did not send, :mod:`~..inputs.other_traffic`) — in the spike
  against the baseline;
- the long prompts (above the baseline's P90) sent during the widened spike: how many, the
  largest, and whether they were ours or other traffic's;
- whether the surge could be chance: of the N harness requests sent in the widened spike, k had a
  prompt above the baseline's P90, which a baseline prompt exceeds with probability q (the share of
  the baseline's prompts above it, about 0.1). Under the baseline's prompt mix k is Binomial(N, q),
  and p = P(X ≥ k) is the chance of at least that many long prompts. A surge of our own prompts
  counts fully when p ≤ 0.001 and not at all when p ≥ 0.01 (log-linear between); three long prompts
  among five requests (p = 0.0086) are no surge, five of ten (p = 0.0016) nearly one. Other
  traffic's prompt tokens are load from elsewhere, not the baseline's mix: a surge counts fully
  when at least half of its extra prompt tokens/s were other traffic's (not at all below a quarter)
  and its prompts were long — their mean over the widened spike at least the baseline's P90 of ours
  (not at all at half of it): a surge of other traffic's short prompts is more requests, a full batch
  or a queue, not longer prefills; ``surge_not_chance`` = max(other traffic's share factor × its
  prompts long, own-prompt improbability);
- neither KV pressure (:func:`~.kit.kv_pressure`) nor queue growth (the queue stage's share of
  the slow requests' server growth) explains it.

confidence = ramp(slowed ratio, 1.2, 2) × ramp(prompt surge ratio, 1.5, 3) × ramp(its robust z, 2, 6)
× surge_not_chance × (1 − KV pressure) × (1 − ramp(queue share, 0.3, 0.7)) × target side.
The server's own prompt-token rate (the preset's ``prompt_tokens`` role: vLLM's
``prompt_tokens_by_source_total{source="local_compute"}``, the tokens actually prefilled with
prefix-cache hits left out) is a series this cause reads (``reads``: the signals tied to it).
It runs where the run has spans and Prometheus series (``prom.*``: an LLM server scraped) and
says nothing without a ``decode`` stage or without token counts.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from tailscope.analyzers.causes.kit import (
    OTHER_SHARE_HIGH,
    OTHER_SHARE_LOW,
    Z_HIGH,
    Z_LOW,
    baseline_prompt_tokens,
    kv_pressure,
    latency_split,
    level_words,
    other_traffic_prompts,
    percent,
    places,
    ramp,
    server_role_prefixes,
    server_side_factor,
    unlikely,
)
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext
from tailscope.analyzers.inputs.run_inputs import margin_ns
from tailscope.analyzers.inputs.signal_index import place_words

QUEUE_STAGES = ("queue", "batch_wait")
DECODE_STAGE = "decode"
#: Most long prompts listed in the evidence.
MAX_LONG_PROMPTS = 5
#: The chance of at least the widened spike's count of long prompts under the baseline's prompt mix
#: (binomial tail): a surge of our own prompts counts fully at or below SURGE_P_FULL, not at all at or
#: above SURGE_P_NONE (module docstring).
SURGE_P_FULL, SURGE_P_NONE = 0.001, 0.01


def chance_of_long_prompts(count: int, sent: int, share: float) -> float:
    """P(X ≥ ``count``) for X ~ Binomial(``sent``, ``share``): the chance that at least ``count`` of
    ``sent`` prompts drawn from the baseline's mix exceed a threshold ``share`` of them exceed (1.0
    for ``count`` 0)."""
    if count <= 0:
        return 1.0
    return float(stats.binom.sf(count - 1, sent, min(max(share, 0.0), 1.0)))


def improbability(p_value: float) -> float:
    """0 → 1 as ``p_value`` falls from :data:`SURGE_P_NONE` to :data:`SURGE_P_FULL` (log-linear)."""
    return unlikely(p_value, SURGE_P_NONE, SURGE_P_FULL)


def _tpot_ms(ctx: SpikeContext, index: np.ndarray) -> np.ndarray:
    """Server-side time per output token (ms) of requests ``index`` with a decode stage and ≥ 2 tokens."""
    inputs = ctx.inputs
    matrix = inputs.matrix
    rows = np.full(inputs.req.n, -1, np.int64)
    rows[matrix.request_index] = np.arange(len(matrix.request_index))
    row = rows[index]
    joined = row >= 0
    decode = np.full(len(index), np.nan)
    decode[joined] = matrix.column(DECODE_STAGE)[row[joined]]
    tokens = inputs.llm.output_tokens[index]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(tokens >= 2, decode / (tokens - 1), np.nan)
    return tpot[np.isfinite(tpot)]


class PrefillInterferenceDetector(CauseDetector):
    kind = "prefill_interference"
    answers = ("prefill_interference", "llm_prompt_storm")
    reads = server_role_prefixes("prompt_tokens")
    aliases = ("prefill", "long_prompts")
    needs = ("spans", "prom.*")
    raises = ("latency", "ttft", "tpot")  # the metrics it raises (CauseDetector.raises)

    def score(self, ctx: SpikeContext) -> Finding | None:
        inputs = ctx.inputs
        if inputs.llm is None or DECODE_STAGE not in inputs.matrix.stages:
            return None
        normal_index = inputs.normal_sample(ctx.normal_request_index)
        slow_tpot = _tpot_ms(ctx, ctx.slow_request_index)
        normal_tpot = _tpot_ms(ctx, normal_index)
        if ctx.metric == "ttft":
            slowed = _first_tokens_slowed(ctx, normal_index)
        elif len(slow_tpot) and len(normal_tpot):
            slowed = _streams_slowed(slow_tpot, normal_tpot)
        else:
            slowed = None
        if slowed is None:
            return None
        own, other = inputs.prompt_tokens_per_second
        surge = inputs.contrast_values(own + other, ctx.start_ns, ctx.end_ns)
        surge_ratio = surge.spike / surge.baseline if surge is not None and surge.baseline > 0 else None
        own_surge = inputs.contrast_values(own, ctx.start_ns, ctx.end_ns)
        other_surge = inputs.contrast_values(other, ctx.start_ns, ctx.end_ns) if other.any() else None
        stages = ctx.decomposition.stages
        server_growth = stages["server"].growth_ms if "server" in stages else None
        queue_growth = sum((stages[s].growth_ms or 0.0) for s in QUEUE_STAGES if s in stages)
        queue_share = queue_growth / server_growth if server_growth else 0.0
        kv = kv_pressure(ctx)
        split = latency_split(ctx)
        long_prompts = self._long_prompts(ctx)
        excess = surge.spike - surge.baseline if surge is not None else 0.0
        other_excess = other_surge.spike - other_surge.baseline if other_surge is not None else 0.0
        other_share = other_excess / excess if excess > 0 else 0.0
        other_prompts = other_traffic_prompts(ctx, long_prompts["threshold_tokens"])
        factors = {
            slowed["factor"]: ramp(slowed["ratio"], 1.2, 2.0),
            "prompt_surge": ramp(surge_ratio, 1.5, 3.0) * ramp(surge.z if surge is not None else None, Z_LOW, Z_HIGH),
            "surge_not_chance": max(ramp(other_share, OTHER_SHARE_LOW, OTHER_SHARE_HIGH) * other_prompts["long"],
                                    improbability(long_prompts["chance"])),
            "kv_cache_not_full": 1.0 - kv.confidence,
            "queue_not_grown": 1.0 - ramp(queue_share, 0.3, 0.7),
            "target_side": server_side_factor(split),
        }
        confidence = float(np.prod(list(factors.values())))
        parts = [slowed["words"]]
        if surge is not None:
            parts.append("prompt tokens being prefilled " + level_words(surge, lambda v: f"{v:,.0f}/s")
                         + f" vs baseline {surge.baseline:,.0f}/s"
                         + (f" (other traffic {level_words(other_surge, lambda v: f'{v:,.0f}/s')})"
                            if other_surge is not None else ""))
        if other_prompts["requests"]:
            parts.append(f"other traffic's {other_prompts['requests']:,} prompts there averaged "
                         f"{other_prompts['mean_tokens']:,.0f} tokens"
                         + (f" (our long ones: > {long_prompts['threshold_tokens']:.0f})"
                            if long_prompts["threshold_tokens"] is not None else ""))
        if long_prompts["count"]:
            parts.append(f"{long_prompts['count']} long prompts (> {long_prompts['threshold_tokens']:.0f} tokens, "
                         f"largest {long_prompts['largest'][0]['prompt_tokens']:.0f}, sent {long_prompts['sent']}) "
                         f"of {long_prompts['requests']} requests overlapped the slow streams (chance "
                         f"{_chance_words(long_prompts['chance'])} under the baseline's prompts)")
        parts.append(f"queue {percent(max(queue_share, 0.0))} of the extra server time")
        return Finding(self.name, round(confidence, 4), {
            "summary": "; ".join(parts),
            "metric": ctx.metric,
            "tpot_slow_ms": float(np.median(slow_tpot)) if len(slow_tpot) else None,
            "tpot_normal_ms": float(np.median(normal_tpot)) if len(normal_tpot) else None,
            "tpot_ratio": slowed["ratio"] if ctx.metric != "ttft" else None,
            "ttft_slow_ms": slowed.get("slow_ms") if ctx.metric == "ttft" else None,
            "ttft_normal_ms": slowed.get("normal_ms") if ctx.metric == "ttft" else None,
            "ttft_ratio": slowed["ratio"] if ctx.metric == "ttft" else None,
            "prefill_growth_ms": slowed.get("prefill_growth_ms"),
            "prompt_tokens_per_s": surge.spike if surge is not None else None,
            "prompt_tokens_per_s_baseline": surge.baseline if surge is not None else None,
            "own_prompt_tokens_per_s": own_surge.spike if own_surge is not None else None,
            "other_traffic_prompt_tokens_per_s": other_surge.spike if other_surge is not None else None,
            "long_prompts": long_prompts,
            "other_traffic_share_of_surge": other_share,
            "other_traffic_prompts": other_prompts,
            "queue_share_of_server_growth": queue_share,
            "kv_pressure": kv.confidence,
            "latency_split": split.as_dict(),
            "factors": factors,
            "places": places(prompt_tokens_per_s=surge, own_prompt_tokens_per_s=own_surge,
                             other_traffic_prompt_tokens_per_s=other_surge),
        })

    @staticmethod
    def _long_prompts(ctx: SpikeContext) -> dict:
        """The harness's requests sent in the widened spike with a prompt above the baseline's P90:
        ``count`` of ``requests`` sent there, the threshold, the largest, and ``chance``, the
        probability of at least ``count`` under the baseline's prompt mix
        (:func:`chance_of_long_prompts` with ``baseline_share``, the baseline's share above it)."""
        inputs = ctx.inputs
        prompts = inputs.llm.prompt_tokens
        sent = inputs.req.sent_ns
        margin = margin_ns(ctx.start_ns, ctx.end_ns)
        inside = (sent >= ctx.start_ns - margin) & (sent < ctx.end_ns + margin) & np.isfinite(prompts)
        baseline = baseline_prompt_tokens(ctx)
        if not len(baseline):
            return {"count": 0, "requests": int(inside.sum()), "threshold_tokens": None, "baseline_share": None,
                    "chance": 1.0, "largest": [], "sent": None}
        threshold = float(np.quantile(baseline, 0.9))
        long = np.flatnonzero(inside & (prompts > threshold))
        share = float(np.mean(baseline > threshold))
        requests = int(inside.sum())
        largest = long[np.argsort(-prompts[long], kind="stable")[:MAX_LONG_PROMPTS]]
        return {"count": int(len(long)), "requests": requests, "threshold_tokens": threshold, "baseline_share": share,
                "chance": chance_of_long_prompts(len(long), requests, share),
                "sent": place_words(ctx.start_ns - margin, ctx.end_ns + margin, ctx.start_ns, ctx.end_ns),
                "largest": [{"sent_ns": int(sent[i]), "prompt_tokens": float(prompts[i])} for i in largest]}


def _streams_slowed(slow_tpot: np.ndarray, normal_tpot: np.ndarray) -> dict:
    """A TPOT or latency spike: the slow streams' median server TPOT over the normal ones'."""
    slow_ms, normal_ms = float(np.median(slow_tpot)), float(np.median(normal_tpot))
    ratio = slow_ms / max(normal_ms, 1e-9)
    return {"factor": "streams_slowed", "ratio": ratio,
            "words": f"the slow streams' time per output token {slow_ms:.1f} ms vs {normal_ms:.1f} ms normal ({ratio:.2f}×)"}


def _first_tokens_slowed(ctx: SpikeContext, normal_index: np.ndarray) -> dict | None:
    """A TTFT spike: the slow requests' median TTFT over the normal requests' (ms, the metric the
    spike was found in), with the ``prefill`` stage's growth where the spans give one; None
    without TTFTs on either side."""
    values = ctx.values_ms
    slow, normal = values[ctx.slow_request_index], values[normal_index]
    slow, normal = slow[np.isfinite(slow)], normal[np.isfinite(normal)]
    if not len(slow) or not len(normal):
        return None
    slow_ms, normal_ms = float(np.median(slow)), float(np.median(normal))
    ratio = slow_ms / max(normal_ms, 1e-9)
    prefill = ctx.decomposition.stages.get("prefill")
    growth = prefill.growth_ms if prefill is not None else None
    words = f"the slow requests' time to first token {slow_ms:.1f} ms vs {normal_ms:.1f} ms normal ({ratio:.2f}×)"
    if growth is not None and prefill.slow is not None and prefill.normal is not None:
        words += f", their prefill {prefill.normal.mean_ms:.1f} → {prefill.slow.mean_ms:.1f} ms"
    return {"factor": "first_tokens_slowed", "ratio": ratio, "slow_ms": slow_ms, "normal_ms": normal_ms,
            "prefill_growth_ms": growth, "words": words}


def _chance_words(p_value: float) -> str:
    """A probability in words that keep its size: '0.0086', '2e-07'."""
    return f"{p_value:.2g}" if p_value >= 1e-3 else f"{p_value:.1e}"
