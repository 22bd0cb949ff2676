"""Knobs of the LLM reference server: one dataclass, the single source of truth for flags and docs.

Every field of :class:`LlmServerConfig` is a command-line flag
(``max_num_seqs`` → ``--max-num-seqs``, see :mod:`.command`); its
``metadata["help"]`` is the flag's help text. Units are in the name or the
help: tokens, blocks, milliseconds (``_ms``), seconds (``_s``).
Validation happens in ``__post_init__`` and raises :class:`ConfigError`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tailscope.targets.reference.config import ConfigError, knob, require

__all__ = ["ConfigError", "LlmServerConfig", "knob_fields"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


@dataclass(frozen=True)
class LlmServerConfig:
    """Every knob of the LLM reference server."""

    host: str = knob("127.0.0.1", "address to listen on (loopback by default)")
    port: int = knob(8000, "TCP port; 0 picks a free port. Once bound, 'LISTENING <port>' is printed on stdout")
    served_model_name: str = knob("tailscope-llm", "model name answered by /v1/models and accepted in 'model'")
    max_num_seqs: int = knob(16, "most sequences running at once (in the batch); others wait")
    num_kv_blocks: int = knob(1024, "KV-cache blocks; a sequence holds ceil(context / block size) of them")
    block_size: int = knob(16, "tokens per KV-cache block")
    max_num_batched_tokens: int = knob(
        2048, "token budget of one engine step (decodes count 1 each, prefills their prompt or chunk)"
    )
    enable_chunked_prefill: bool = knob(
        False, "split prefills into chunks that fit the step's token budget, beside the running decodes"
    )
    enable_prefix_caching: bool = knob(
        False, "keep computed full prompt blocks and give a new request the blocks of its longest cached "
        "prefix, computing only the rest (vLLM's automatic prefix caching; counters vllm:prefix_cache_*)"
    )
    max_model_len: int = knob(2048, "largest prompt + max_tokens of one request (tokens); larger: HTTP 400")
    max_waiting: int = knob(1024, "requests allowed to wait for the engine; beyond it: HTTP 429")
    default_max_tokens: int = knob(256, "max_tokens of a request that gives none (capped by max_model_len)")
    model_dim: int = knob(64, "width of the numpy decoder (embedding and attention); the MLP is 4x wider")
    eos_probability: float = knob(
        0.02, "chance that a sampled token (after the first) is EOS, ending the sequence early unless ignore_eos"
    )
    seed: int = knob(0, "seed of the model's weights and of token sampling")
    step_extra_delay_ms: float = knob(
        0.0, "time added to every engine step without holding the GIL, like an accelerator (ms)"
    )
    reasoning_share: float = knob(
        0.0, "share of a chat request's max_tokens streamed as reasoning_content before the answer when the "
        "request gives no reasoning_effort (low 0.25, medium 0.5, high 0.75 of max_tokens)"
    )
    tokens_per_chunk: int = knob(
        1, "tokens gathered into one streamed SSE chunk (more go out together when the writer is behind)"
    )
    max_body_bytes: int = knob(8 * 1024 * 1024, "largest request body accepted; larger: HTTP 413")
    tracing: bool = knob(True, "export one llm_request span per request over OTLP")
    otlp_traces_endpoint: str = knob(
        "", "OTLP endpoint of the spans (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else http://127.0.0.1:4318)"
    )
    service_name: str = knob("tailscope-llm", "OpenTelemetry service.name of the spans")
    gc_min_pause_ms: float = knob(0.0, "GC pauses shorter than this are not reported as gc.pause spans (ms)")
    graceful_shutdown_s: float = knob(5.0, "on SIGTERM/SIGINT, time given to in-flight requests to finish (s)")
    access_log: bool = knob(False, "log every request (uvicorn access log, on stdout after the LISTENING line)")
    log_level: str = knob("warning", "uvicorn log level: critical, error, warning, info, debug")

    def __post_init__(self) -> None:
        require(0 <= self.port <= 65535, f"port must be in 0..65535, got {self.port}")
        require(bool(self.served_model_name), "served_model_name must not be empty")
        for name in ("max_num_seqs", "num_kv_blocks", "block_size", "max_num_batched_tokens", "max_model_len",
                     "max_waiting", "default_max_tokens", "model_dim", "tokens_per_chunk", "max_body_bytes"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        require(0.0 <= self.eos_probability < 1.0, f"eos_probability must be in [0, 1), got {self.eos_probability}")
        require(0.0 <= self.reasoning_share < 1.0, f"reasoning_share must be in [0, 1), got {self.reasoning_share}")
        require(self.step_extra_delay_ms >= 0, f"step_extra_delay_ms must be >= 0, got {self.step_extra_delay_ms}")
        require(self.gc_min_pause_ms >= 0, f"gc_min_pause_ms must be >= 0, got {self.gc_min_pause_ms}")
        require(self.graceful_shutdown_s >= 0, f"graceful_shutdown_s must be >= 0, got {self.graceful_shutdown_s}")
        require(self.log_level in LOG_LEVELS, f"unknown log_level {self.log_level!r}")
        cache_tokens = self.num_kv_blocks * self.block_size
        require(
            self.max_model_len <= cache_tokens,
            f"max_model_len ({self.max_model_len}) exceeds the KV cache "
            f"({self.num_kv_blocks} blocks x {self.block_size} tokens = {cache_tokens}): one sequence could never fit",
        )
        require(
            self.max_num_batched_tokens >= self.max_num_seqs,
            f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs ({self.max_num_seqs})",
        )
        require(
            self.enable_chunked_prefill or self.max_num_batched_tokens >= self.max_model_len,
            f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
            f"max_model_len ({self.max_model_len}) so that any prefill fits one step",
        )

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens the whole KV cache holds (``num_kv_blocks * block_size``)."""
        return self.num_kv_blocks * self.block_size


def knob_fields() -> tuple[dataclasses.Field, ...]:
    """The knobs, in declaration order (each field's ``metadata["help"]`` describes it)."""
    return dataclasses.fields(LlmServerConfig)
