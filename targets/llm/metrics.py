"""Prometheus metrics of the LLM reference server under vLLM's names (``GET /metrics``).

Names, types, label names (``model_name``, ``engine``) and bucket bounds follow
vLLM's ``PrometheusStatLogger`` (vllm/v1/metrics/loggers.py) and its metrics
design doc (docs/design/metrics.md); see docs/llm-server.md for what was
checked. prometheus_client appends ``_total`` to counters, so the counter
``vllm:num_preemptions`` is exposed as ``vllm:num_preemptions_total``, as vLLM's is.

| metric | type | unit / meaning |
| --- | --- | --- |
| ``vllm:num_requests_running`` | gauge | sequences in the running batch |
| ``vllm:num_requests_waiting`` | gauge | sequences waiting (new and preempted) |
| ``vllm:kv_cache_usage_perc`` | gauge | fraction of KV blocks in use, 0..1 |
| ``vllm:num_preemptions_total`` | counter | preemptions (recompute) |
| ``vllm:prompt_tokens_total`` | counter | prompt tokens of requests whose prefill completed (once per request) |
| ``vllm:generation_tokens_total`` | counter | generated tokens (EOS not counted) |
| ``vllm:prefix_cache_queries_total`` | counter | prompt tokens looked up in the prefix cache (``--enable-prefix-caching``) |
| ``vllm:prefix_cache_hits_total`` | counter | of those, tokens taken from the cache (both counted at the first token) |
| ``vllm:prompt_tokens_by_source_total`` | counter | prompt tokens by ``source``: ``local_compute``, ``local_cache_hit`` |
| ``vllm:request_success_total`` | counter | finished requests, label ``finished_reason`` (stop, length, abort) |
| ``vllm:iteration_tokens_total`` | histogram | tokens computed per engine step |
| ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` | histogram | per finished request |
| ``vllm:request_params_max_tokens`` | histogram | the request's max_tokens |
| ``vllm:time_to_first_token_seconds`` | histogram | arrival → first token (s) |
| ``vllm:inter_token_latency_seconds`` | histogram | between successive tokens of a request (s) |
| ``vllm:e2e_request_latency_seconds`` | histogram | arrival → finish (s) |
| ``vllm:request_queue_time_seconds`` | histogram | queued → first scheduled (s) |
| ``vllm:request_prefill_time_seconds`` | histogram | first scheduled → first token (s) |
| ``vllm:request_decode_time_seconds`` | histogram | first → last token (s) |
| ``vllm:request_inference_time_seconds`` | histogram | first scheduled → last token (s) |

Every metric lives in the instance's own ``CollectorRegistry``. Counters and
histograms are updated from the engine thread (prometheus_client is thread-safe);
gauges are read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tailscope.targets.llm.sequence import FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, Sequence

CONTENT_TYPE = CONTENT_TYPE_LATEST
LABELS = ("model_name", "engine")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def buckets_1_2_5(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's ``build_1_2_5_buckets``)."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > limit:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


def _seconds(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return max(0, end_ns - start_ns) / 1e9


class LlmMetrics:
    """The server's metrics for one served model, and their text exposition."""

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.registry = CollectorRegistry()
        labels = (model_name, "0")
        registry = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry).labels(*labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry).labels(*labels)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry).labels(*labels)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.prefix_cache_queries = counter("vllm:prefix_cache_queries",
                                            "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = counter("vllm:prefix_cache_hits",
                                         "Prefix cache hits, in terms of number of cached tokens.")
        by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                            (*LABELS, "source"), registry=registry)
        self._prompt_by_source = {source: by_source.labels(*labels, source)
                                  for source in ("local_compute", "local_cache_hit")}
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          (*LABELS, "finished_reason"), registry=registry)
        self._success = {reason: success.labels(*labels, reason)
                         for reason in (FINISH_STOP, FINISH_LENGTH, FINISH_ABORT)}
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS)
        size_buckets = buckets_1_2_5(max_model_len)
        self._request_prompt = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                         size_buckets)
        self._request_generation = histogram("vllm:request_generation_tokens",
                                             "Number of generation tokens processed.", size_buckets)
        self._max_tokens = histogram("vllm:request_params_max_tokens",
                                     "Histogram of the max_tokens request parameter.", size_buckets)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             ITL_BUCKETS)
        self._e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                              REQUEST_LATENCY_BUCKETS)
        self._queue = histogram("vllm:request_queue_time_seconds",
                                "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self._prefill = histogram("vllm:request_prefill_time_seconds",
                                  "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self._decode = histogram("vllm:request_decode_time_seconds",
                                 "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        self._inference = histogram("vllm:request_inference_time_seconds",
                                    "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS)

    def watch(self, running: Callable[[], float], waiting: Callable[[], float],
              kv_cache_usage: Callable[[], float]) -> None:
        """Read the three gauges from these functions at every scrape."""
        self.running.set_function(running)
        self.waiting.set_function(waiting)
        self.kv_cache_usage.set_function(kv_cache_usage)

    def count_prefix_cache(self, prompt_tokens: int, cached_tokens: int, enabled: bool) -> None:
        """A request's prompt, once (at its first token): queried and hit tokens when prefix caching is on,
        and its tokens by source (computed here or taken from the cache)."""
        if enabled:
            self.prefix_cache_queries.inc(prompt_tokens)
            self.prefix_cache_hits.inc(cached_tokens)
        self._prompt_by_source["local_compute"].inc(prompt_tokens - cached_tokens)
        self._prompt_by_source["local_cache_hit"].inc(cached_tokens)

    def observe_finished(self, seq: Sequence) -> None:
        """Record a finished request's counts and intervals (those it reached)."""
        self._success[seq.finish_reason or FINISH_ABORT].inc()
        if seq.pooling:
            return
        self._request_prompt.observe(len(seq.prompt_ids))
        self._request_generation.observe(len(seq.output_ids))
        self._max_tokens.observe(seq.max_tokens)
        for histogram, value in (
            (self._e2e, _seconds(seq.arrival_ns, seq.finished_ns)),
            (self._queue, _seconds(seq.queued_ns, seq.scheduled_ns)),
            (self._prefill, _seconds(seq.scheduled_ns, seq.first_token_ns)),
            (self._decode, _seconds(seq.first_token_ns, seq.last_token_ns)),
            (self._inference, _seconds(seq.scheduled_ns, seq.last_token_ns)),
        ):
            if value is not None:
                histogram.observe(value)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
