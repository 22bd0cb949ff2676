"""``kv_cache_pressure``: an LLM server's KV cache ran full, so requests waited or were preempted.

A continuous-batching engine admits a request only when the KV cache has blocks for it; when
the cache is near its limit new requests wait in the queue, and running ones are preempted
(their blocks given up, their work redone later). Evidence, from the run's stage preset
(``stages: {preset: vllm}``: ``vllm:kv_cache_usage_perc``, ``vllm:num_preemptions_total``;
the roles ``kv_usage`` and ``preemptions`` of analyzers/stages/presets.py):

- KV pressure (:func:`~.kit.kv_pressure`): KV use near its limit (ramp 0.85 → 0.95 of the
  cache) and either risen over the baseline (0.1 → 0.3 of the cache) or with preemptions
  rising (robust z 2 → 6, material 1 preemption/s);
- the slow requests waited or were preempted: the queue stage's share of their server-time
  growth (``queue``, ``batch_wait``; vLLM's ``time_in_queue``), or — with preemptions — the
  decode stage's share (a preempted request's decode is redone);
- the latency is the server's (only send lateness counts against it).

confidence = KV pressure × max(ramp(queue share, 0.3, 0.7), ramp(decode share, 0.3, 0.7) ×
preempting) × target side. It runs where the run has spans and Prometheus series (``prom.*``);
without a ``kv_usage`` series among them it has nothing to say.
"""

from __future__ import annotations

from tailscope.analysis_model.spikes import StageGrowth
from tailscope.analyzers.causes.kit import (
    kv_pressure,
    latency_split,
    percent,
    ramp,
    server_role_prefixes,
    server_side_factor,
)
from tailscope.analyzers.causes.protocol import CauseDetector, Finding, SpikeContext

QUEUE_STAGES = ("queue", "batch_wait")
DECODE_STAGES = ("decode",)


def _growth(stages: dict[str, StageGrowth], names: tuple[str, ...]) -> float:
    """Sum of the named stages' mean growth (ms) over those present."""
    return sum((stages[s].growth_ms or 0.0) for s in names if s in stages)


def _at(pressure, key: str) -> str:
    """" in the 2 s after the spike" when that level was measured outside the spike, else ""."""
    place = (pressure.places or {}).get(key)
    return f" {place}" if place else ""


class KvCacheDetector(CauseDetector):
    kind = "kv_cache_pressure"
    answers = ("kv_cache_pressure", "llm_long_generations")
    reads = server_role_prefixes("kv_usage", "preemptions")
    aliases = ("kv_cache", "preemption")
    needs = ("spans", "prom.*")
    raises = ("latency", "ttft", "tpot")  # the metrics it raises (CauseDetector.raises): preempted streams stall

    def score(self, ctx: SpikeContext) -> Finding | None:
        pressure = kv_pressure(ctx)
        if not pressure.watched:
            return None
        stages = ctx.decomposition.stages
        server_growth = stages["server"].growth_ms if "server" in stages else None
        queue_growth, decode_growth = _growth(stages, QUEUE_STAGES), _growth(stages, DECODE_STAGES)
        positive = server_growth is not None and server_growth > 0
        queue_share = queue_growth / server_growth if positive else None
        decode_share = (decode_growth / server_growth if positive and any(s in stages for s in DECODE_STAGES)
                        else None)
        split = latency_split(ctx)
        preempting = (pressure.factors or {}).get("preempting", 0.0)
        factors = {
            "kv_pressure": pressure.confidence,
            "slow_waited": ramp(queue_share, 0.3, 0.7),
            "slow_preempted": ramp(decode_share, 0.3, 0.7) * preempting,
            "target_side": server_side_factor(split),
        }
        confidence = (factors["kv_pressure"] * max(factors["slow_waited"], factors["slow_preempted"])
                      * factors["target_side"])
        parts = []
        if pressure.kv_spike is not None:
            parts.append(f"KV cache {percent(pressure.kv_spike)} in use{_at(pressure, 'kv_usage_spike')} "
                         f"(baseline {percent(pressure.kv_baseline)})")
        if pressure.preemptions_per_s is not None:
            parts.append(f"{pressure.preemptions_per_s:.1f} preemptions/s{_at(pressure, 'preemptions_per_s')} "
                         f"(baseline {pressure.preemptions_baseline_per_s:.1f})")
        if queue_share is not None:
            parts.append(f"queue wait is {percent(max(queue_share, 0.0))} of the slow requests' extra server "
                         f"time ({queue_growth:+.1f} ms)")
        if decode_share is not None and preempting > 0:
            parts.append(f"decode {percent(max(decode_share, 0.0))} ({decode_growth:+.1f} ms)")
        return Finding(self.name, round(float(confidence), 4), {
            "summary": "; ".join(parts) if parts else "no KV-cache use in the spike",
            **pressure.as_dict(),
            "queue_share_of_server_growth": queue_share, "queue_growth_ms": queue_growth,
            "decode_share_of_server_growth": decode_share, "decode_growth_ms": decode_growth,
            "latency_split": split.as_dict(),
            "factors": factors,
        })
