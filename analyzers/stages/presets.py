"""Stage presets: for one kind of server, which spans are which stages and which metrics mean what.

A :class:`StagePreset` is selected with ``stages: {preset: NAME}`` in a scenario
(docs/scenario-format.md "stages"). It declares

* ``rules`` — the :class:`~.rule_model.StageRules` that decompose a request's server time
  (span, event and attribute rules; the scenario's own rules are tried first), and the
  span attributes that carry the server's token counts;
* ``metrics`` — a :class:`MetricMap`: for each *role* in :data:`ROLES` (``waiting``,
  ``running``, ``kv_usage``, ``preemptions``, ``prompt_tokens``, …) the Prometheus metric
  names that play it on this server, newest name first. :mod:`.server_metrics` resolves
  the map against a run's signals (``server_series``);
* ``checked_against`` — the upstream files the names were read from. Nothing beyond
  those is claimed (docs/analyzers/stages.md "Server presets").

Every preset is registered in :data:`STAGE_PRESETS`, one registration each, in this
file (tailscope.support.registry). Adding a server is adding one preset here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tailscope.analyzers.stages.rule_model import (
    STAGE_IGNORE,
    AttributeRule,
    AttributeStage,
    EventRule,
    SpanMatch,
    SpanRule,
    StageRules,
    TokenAttributes,
    exact_name,
)
from tailscope.support.registry import Registry


@dataclass(frozen=True)
class Role:
    """A meaning a server metric can have: how it is read and how label sets combine.

    ``kind``: ``gauge`` (read as the mean per bin) or ``counter`` (cumulative; read as a rate
    per second); ``unit``: the role's unit after the metric's ``scale`` (for a counter, per
    second); ``combine``: ``sum`` (several label sets — models, engines, instances — add up)
    or ``max`` (the fullest one counts, e.g. the KV cache of the busiest engine)."""

    name: str
    kind: str
    unit: str
    combine: str
    description: str


#: Every role a metric map may give, in the order they are listed.
ROLES: dict[str, Role] = {role.name: role for role in (
    Role("waiting", "gauge", "requests", "sum", "requests waiting to be scheduled (queued, incl. preempted)"),
    Role("running", "gauge", "requests", "sum", "requests in the running batch"),
    Role("kv_usage", "gauge", "ratio", "max", "fraction of the KV cache in use, 0..1"),
    Role("preemptions", "counter", "preemptions/s", "sum", "requests preempted (their KV cache given up)"),
    Role("prompt_tokens", "counter", "tokens/s", "sum", "prompt tokens processed (prefilled)"),
    Role("generation_tokens", "counter", "tokens/s", "sum", "output tokens generated"),
    Role("queue_time", "counter", "s/s", "sum",
         "time requests spent queued, cumulative: its rate is the mean number of requests queued"),
    Role("compute_time", "counter", "s/s", "sum",
         "time requests spent executing, cumulative: its rate is the mean number of requests computing"),
    Role("finished", "counter", "requests/s", "sum", "requests finished (every finish reason)"),
    Role("prefix_cache_queries", "counter", "tokens/s", "sum", "prompt tokens looked up in the prefix cache"),
    Role("prefix_cache_hits", "counter", "tokens/s", "sum", "prompt tokens found in the prefix cache (not computed)"),
    Role("prefix_cache_hit_rate", "gauge", "ratio", "max",
         "the server's own prefix-cache hit rate, 0..1 (where it exposes no counters)"),
)}


@dataclass(frozen=True)
class MetricSource:
    """The metric names that play one role on a server, newest first: the first name a run holds
    is used (with all its label sets); ``scale`` converts its values to the role's unit.

    A name may carry a label selector, ``metric{label="value",...}``: then only the label sets
    with those labels play the role (vLLM's ``prompt_tokens_by_source_total{source="local_compute"}``:
    the prompt tokens actually computed, prefix-cache hits left out). :func:`split_selector`
    reads it."""

    names: tuple[str, ...]
    scale: float = 1.0


_SELECTOR_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def split_selector(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``'m{a="x",b="y"}'`` → ``('m', (('a', 'x'), ('b', 'y')))``; a bare name → ``(name, ())``.
    Also reads a signal series' own labels (``prom.`` prefix not included)."""
    metric, brace, rest = name.partition("{")
    return metric, (tuple(_SELECTOR_LABEL.findall(rest)) if brace else ())


@dataclass(frozen=True)
class MetricMap:
    """``role → MetricSource`` of one server (roles from :data:`ROLES`)."""

    sources: tuple[tuple[str, MetricSource], ...] = ()

    def __post_init__(self) -> None:
        for role, _ in self.sources:
            if role not in ROLES:
                raise ValueError(f"unknown metric role {role!r}; known: {', '.join(ROLES)}")

    def get(self, role: str) -> MetricSource | None:
        return dict(self.sources).get(role)

    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in self.sources)


def metric_map(**roles: tuple[str, ...] | MetricSource) -> MetricMap:
    """``metric_map(waiting=("a", "b"), queue_time=MetricSource(("c",), 1e-6))``."""
    return MetricMap(tuple((role, source if isinstance(source, MetricSource) else MetricSource(tuple(source)))
                           for role, source in roles.items()))


@dataclass(frozen=True)
class StagePreset:
    """One server's stage rules, metric map and the upstream sources its names were checked against."""

    name: str
    rules: StageRules
    metrics: MetricMap = MetricMap()
    checked_against: tuple[str, ...] = ()


#: Reference target / instrumentation kit span names (docs/architecture.md).
REFERENCE_SPAN_NAMES = (
    ("preprocess", "preprocess"),
    ("queue_wait", "queue"),
    ("batch_wait", "batch_wait"),
    ("inference", "inference"),
    ("postprocess", "postprocess"),
)

#: Triton's span-event timestamps, in the order an HTTP request passes them inside its
#: ``InferRequest`` span (checked on Triton 2.51 from PyTriton 0.7: tests/real_servers). The
#: server span starts after ``HTTP_RECV_END`` (receiving the body is outside it, in
#: ``outside_server``), so ``request_parse`` is clipped to the span's start like every event stage
#: (:func:`~.span_match.event_stage_ms`). ``COMPUTE_END`` and ``REQUEST_END`` are not on the
#: response's path: the core releases the request while the HTTP frontend already serialises and
#: sends the response (they fall before or after ``HTTP_SEND_START``), so the stages follow
#: ``INFER_RESPONSE_COMPLETE`` instead and never overlap. The span ends once both are done: where
#: ``REQUEST_END`` comes after ``HTTP_SEND_END`` the span's tail is ``request_release`` (server
#: time the client no longer waits for; absent where the release came first). For spans imported from gRPC clients add
#: ``between: [GRPC_WAITREAD_START, GRPC_WAITREAD_END]`` and ``[GRPC_SEND_START, GRPC_SEND_END]`` rules.
TRITON_EVENT_STAGES = (
    ("HTTP_RECV_END", "REQUEST_START", "request_parse"),
    ("REQUEST_START", "QUEUE_START", "enqueue"),
    ("QUEUE_START", "COMPUTE_START", "queue"),
    ("COMPUTE_START", "COMPUTE_INPUT_END", "compute_input"),
    ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "inference"),
    ("COMPUTE_OUTPUT_START", "INFER_RESPONSE_COMPLETE", "compute_output"),
    ("INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "response_serialize"),
    ("HTTP_SEND_START", "HTTP_SEND_END", "http_send"),
    ("HTTP_SEND_END", "REQUEST_END", "request_release"),
)
#: The attribute Triton sets on the model span (beside ``triton.model_version``,
#: ``triton.trace_id`` and ``triton.trace_parent_id``); the span is named after the model.
TRITON_MODEL_ATTRIBUTE = "triton.model_name"

#: vLLM's ``llm_request`` latency attributes (seconds) laid end to end from the span's start (the
#: request's arrival at the API server): ``api_server`` — the time to first token less the engine's
#: queue and prefill: the API server's work before the engine queued the request (parsing, chat
#: template, tokenising, the hand-over to the engine core) and the first token's way back —, then
#: queue, prefill, decode. ``(stage, attribute, attributes subtracted)``; vllm/v1/engine/
#: output_processor.py ``do_tracing`` defines them (0.32: queue = scheduled − queued, prefill =
#: first token − scheduled, decode = last token − first token, all on the engine's clock).
VLLM_ATTRIBUTE_STAGES = (
    ("api_server", "gen_ai.latency.time_to_first_token",
     ("gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill")),
    ("queue", "gen_ai.latency.time_in_queue", ()),
    ("prefill", "gen_ai.latency.time_in_model_prefill", ()),
    ("decode", "gen_ai.latency.time_in_model_decode", ()),
)
#: TGI's handler-span fields (Rust ``Duration`` debug text), in the order the request spends them.
TGI_HANDLER_FIELDS = (
    ("validation", "validation_time"),
    ("queue", "queue_time"),
    ("inference", "inference_time"),
)
#: TGI handler functions whose spans carry those fields (``#[instrument]`` names the span after them).
TGI_HANDLERS = ("generate", "generate_stream", "chat_completions")
#: Spans between the handler and the queue entry's spans: the streaming wrapper (router/src/server.rs)
#: and the backend's ``schedule`` (backends/v3/src/backend.rs), the parent of ``queued``/``infer``/``waiting``.
TGI_CONTAINERS = ("async_stream", "schedule")
#: SGLang's request-stage slice names → stages.
SGLANG_SLICES = (
    ("tokenize", "tokenize"),
    ("dispatch", "dispatch"),
    ("request_process", "request_process"),
    ("prefill_waiting", "queue"),
    ("prefill_forward", "prefill"),
    ("chunked_prefill", "prefill"),
    ("decode_loop", "decode"),
)


def _names(*names: str) -> SpanMatch:
    return SpanMatch(name=re.compile("^(?:" + "|".join(re.escape(n) for n in names) + ")$"))


STAGE_PRESETS: Registry[StagePreset] = Registry("stage preset", key=lambda preset: preset.name)

STAGE_PRESETS.register(StagePreset(
    "reference",
    StageRules(span_rules=tuple(SpanRule(exact_name(name), stage) for name, stage in REFERENCE_SPAN_NAMES),
               preset="reference"),
    checked_against=("docs/architecture.md (the reference target and the instrumentation kit)",),
))

STAGE_PRESETS.register(StagePreset(
    "triton",
    StageRules(
        # The model span (named after the model, attribute triton.model_name) and the "compute"
        # span carry the events; their own durations overlap the event stages, so they are ignored
        # rather than counted twice (with everything under them: PyTriton's proxy spans).
        span_rules=(
            SpanRule(exact_name("compute"), STAGE_IGNORE),
            SpanRule(SpanMatch(attributes=((TRITON_MODEL_ATTRIBUTE, re.compile("")),)), STAGE_IGNORE),
        ),
        event_rules=tuple(EventRule(start, end, stage) for start, end, stage in TRITON_EVENT_STAGES),
        server=exact_name("InferRequest"),
        preset="triton",
    ),
    metric_map(
        waiting=("nv_inference_pending_request_count",),
        queue_time=MetricSource(("nv_inference_queue_duration_us",), 1e-6),
        compute_time=MetricSource(("nv_inference_compute_infer_duration_us",), 1e-6),
        finished=("nv_inference_request_success",),
    ),
    checked_against=("triton-inference-server/server docs/user_guide/trace.md (OpenTelemetry mode)",
                     "Triton 2.51 as PyTriton 0.7.0 ships it (tests/real_servers/test_triton.py)",
                     "triton-inference-server/server docs/user_guide/metrics.md"),
))

STAGE_PRESETS.register(StagePreset(
    "vllm",
    StageRules(
        attribute_rules=(AttributeRule(exact_name("llm_request"), tuple(
            AttributeStage(stage, key, "s", minus) for stage, key, minus in VLLM_ATTRIBUTE_STAGES)),),
        tokens=TokenAttributes(exact_name("llm_request"), "gen_ai.usage.prompt_tokens",
                               "gen_ai.usage.completion_tokens"),
        preset="vllm",
    ),
    metric_map(
        # waiting for scheduling capacity (0.32+; "deferred" ones wait on LoRA / KV transfer, not on
        # capacity), else every waiting request
        waiting=('vllm:num_requests_waiting_by_reason{reason="capacity"}', "vllm:num_requests_waiting"),
        running=("vllm:num_requests_running",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # the old name before 0.10
        preemptions=("vllm:num_preemptions_total",),
        # the prompt tokens the engine computed (prefix-cache hits and KV transfers left out), else all
        prompt_tokens=('vllm:prompt_tokens_by_source_total{source="local_compute"}', "vllm:prompt_tokens_total"),
        generation_tokens=("vllm:generation_tokens_total",),
        queue_time=("vllm:request_queue_time_seconds_sum",),
        compute_time=("vllm:request_inference_time_seconds_sum",),
        finished=("vllm:request_success_total",),
        # tokens; gpu_prefix_cache_* are the names before vLLM 0.10
        prefix_cache_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        prefix_cache_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    ),
    checked_against=("vllm-project/vllm vllm/v1/engine/output_processor.py (do_tracing)",
                     "vllm-project/vllm vllm/tracing.py (SpanAttributes)",
                     "vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger)",
                     "vllm-project/vllm docs/design/metrics.md"),
))

STAGE_PRESETS.register(StagePreset(
    "tgi",
    StageRules(
        span_rules=(
            SpanRule(exact_name("queued"), "queue"),
            SpanRule(exact_name("infer"), "inference"),
            SpanRule(exact_name("waiting"), "prefill_wait"),
            # the handler span and the spans that hold the queue entry: their time is the stages
            # above (and the handler's fields below), not a stage of their own
            SpanRule(_names(*TGI_HANDLERS, *TGI_CONTAINERS), STAGE_IGNORE),
        ),
        attribute_rules=(AttributeRule(_names(*TGI_HANDLERS), tuple(
            AttributeStage(stage, key, "s") for stage, key in TGI_HANDLER_FIELDS)),),
        preset="tgi",
    ),
    metric_map(
        waiting=("tgi_queue_size",),
        running=("tgi_batch_current_size",),
        prompt_tokens=("tgi_request_input_length_sum",),
        generation_tokens=("tgi_request_generated_tokens_sum",),
        queue_time=("tgi_request_queue_duration_sum",),
        compute_time=("tgi_request_inference_duration_sum",),
        finished=("tgi_request_success", "tgi_request_success_total"),
    ),
    checked_against=("huggingface/text-generation-inference router/src/server.rs (handler fields, "
                     "request metrics)",
                     "huggingface/text-generation-inference backends/v3/src/queue.rs (queued, infer; "
                     "tgi_queue_size)",
                     "huggingface/text-generation-inference backends/v3/src/backend.rs (infer, waiting; "
                     "tgi_batch_current_size)",
                     "huggingface/text-generation-inference router/src/validation.rs (tgi_request_input_length)"),
))

STAGE_PRESETS.register(StagePreset(
    "sglang",
    StageRules(
        span_rules=tuple(SpanRule(exact_name(name), stage) for name, stage in SGLANG_SLICES) + (
            # the request span and the per-thread spans hold the slices; they are no stage themselves
            SpanRule(SpanMatch(name=re.compile(r"(?:^|\s)Req \S+$")), STAGE_IGNORE),
            SpanRule(SpanMatch(name=re.compile(r"\(host:\S* \| pid:\d+\)$")), STAGE_IGNORE),
        ),
        server=SpanMatch(name=re.compile(r"^Bootstrap Room ")),
        preset="sglang",
    ),
    metric_map(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        kv_usage=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        prefix_cache_hit_rate=("sglang:cache_hit_rate",),
    ),
    checked_against=("sgl-project/sglang docs/references/production_request_trace.md",
                     "sgl-project/sglang python/sglang/srt/tracing/trace.py (span structure and names)",
                     "sgl-project/sglang python/sglang/srt/managers/schedule_batch.py (RequestStage slice names)",
                     "sgl-project/sglang docs/references/production_metrics.md"),
))

STAGE_PRESETS.register(StagePreset("none", StageRules(preset="none")))

DEFAULT_PRESET = "reference"
