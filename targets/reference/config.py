"""Knobs of the reference target, one source of truth for the CLI, YAML config files and docs.

Precedence: command-line flag > ``--config`` YAML file > default. YAML keys are
the knob names with ``-`` or ``_`` (``max-batch-size`` or ``max_batch_size``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A knob has an invalid value, or a config file is unreadable or has unknown keys."""


def knob(default: Any, help_text: str) -> Any:
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class TargetConfig:
    """Every knob of the reference target; times in ms unless the name says otherwise."""

    host: str = knob("127.0.0.1", "address to listen on")
    port: int = knob(8000, "TCP port; 0 picks a free port. Once bound, 'LISTENING <port>' is printed on stdout")
    max_batch_size: int = knob(8, "largest batch the dynamic batcher forms")
    max_queue_delay_ms: float = knob(
        5.0, "longest time the oldest waiting request waits for a batch to fill before a smaller batch runs (ms)"
    )
    preferred_batch_sizes: tuple[int, ...] = knob(
        (),
        "batch sizes the batcher prefers (each <= max batch size): a batch of the largest one runs at once, "
        "and when the delay expires the batch is cut to the largest preferred size available",
    )
    max_queue_size: int = knob(256, "requests allowed to wait for a batch, per model; beyond it: HTTP 429")
    model_workers: int = knob(1, "batches that may execute at once, per model (threads; numpy releases the GIL)")
    model_dim: int = knob(128, "embedding width of the model; the hidden layer is 4x wider. Cost grows ~ dim^2")
    model_extra_delay_ms: float = knob(
        0.0, "extra time added to every batch after the model ran, without holding the GIL, like an accelerator (ms)"
    )
    max_tokens: int = knob(512, "text is truncated to this many tokens (incl. the leading [CLS] token)")
    generate_max_tokens: int = knob(256, "largest max_tokens a /v1/generate request may ask for")
    decode_max_streams: int = knob(
        16, "generation streams decoded together in one step (continuous batching); others wait in the queue"
    )
    decode_extra_delay_ms: float = knob(
        0.0, "extra time added to every decode step, without holding the GIL, like an accelerator (ms)"
    )
    resident_mb: int = knob(
        0,
        "memory kept resident (allocated and touched at start, a feature store); every inference request "
        "reads a slice of it, so when it is swapped out requests wait for page-ins (MB, 0: none)",
    )
    resident_touch_kb: int = knob(2048, "bytes of the resident memory each request reads, one byte per 4 KiB page (KB)")
    preprocess_garbage: int = knob(
        0,
        "reference cycles (dict<->list pairs, like parsed JSON trees) each request's preprocessing creates and "
        "drops, so the cycle collector runs as in real Python services (count per request)",
    )
    gc_pressure_mb_per_s: float = knob(
        0.0,
        "cyclic garbage a background thread allocates, kept alive ~2 s so it reaches generation 2 and only "
        "full collections free it (MB/s; 0: off; switchable at run time: POST /admin/gc_pressure)",
    )
    gc_retained_mb: float = knob(
        128.0, "live, GC-tracked heap kept while GC pressure is on; every gen-2 collection traverses it (MB)"
    )
    io_stall_kb: int = knob(
        0,
        "bytes each request's preprocessing writes and fsyncs to a file in --io-dir (KB; 0: off; "
        "switchable at run time: POST /admin/io_stall)",
    )
    io_dir: str = knob("", "directory of the io-stall file (default: the system temp directory)")
    admin: bool = knob(True, "serve the fault-injection switches POST /admin/gc_pressure, /admin/io_stall, GET /admin/state")
    metrics: bool = knob(False, "serve Prometheus metrics at GET /metrics (queue depth, batch sizes, stage latencies)")
    max_body_bytes: int = knob(8 * 1024 * 1024, "largest request body accepted; larger: HTTP 413")
    top_k: int = knob(5, "classes returned per prediction")
    seed: int = knob(0, "seed of the model's weights")
    service_name: str = knob("tailscope-target", "OpenTelemetry service.name of the spans")
    tracing: bool = knob(
        True, "export spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4318)"
    )
    gc_freeze: bool = knob(
        False, "after start-up, collect once and move every object alive to the permanent generation "
        "(gc.freeze), so full collections no longer traverse the imported modules and the model, as "
        "long-running Python services do")
    gc_min_pause_ms: float = knob(0.0, "GC pauses shorter than this are not reported as gc.pause spans (ms)")
    graceful_shutdown_s: float = knob(5.0, "on SIGTERM/SIGINT, time given to in-flight requests to finish (s)")
    access_log: bool = knob(False, "log every request (uvicorn access log, on stdout after the LISTENING line)")
    log_level: str = knob("warning", "uvicorn log level: critical, error, warning, info, debug")

    def __post_init__(self) -> None:
        require(self.port >= 0 and self.port <= 65535, f"port must be in 0..65535, got {self.port}")
        require(self.max_batch_size >= 1, f"max_batch_size must be >= 1, got {self.max_batch_size}")
        require(self.max_queue_delay_ms >= 0, f"max_queue_delay_ms must be >= 0, got {self.max_queue_delay_ms}")
        for size in self.preferred_batch_sizes:
            require(
                1 <= size <= self.max_batch_size,
                f"preferred batch size {size} is outside 1..max_batch_size ({self.max_batch_size})",
            )
        require(self.max_queue_size >= 1, f"max_queue_size must be >= 1, got {self.max_queue_size}")
        require(self.model_workers >= 1, f"model_workers must be >= 1, got {self.model_workers}")
        require(self.model_dim >= 1, f"model_dim must be >= 1, got {self.model_dim}")
        require(self.model_extra_delay_ms >= 0, f"model_extra_delay_ms must be >= 0, got {self.model_extra_delay_ms}")
        require(self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}")
        require(self.generate_max_tokens >= 1, f"generate_max_tokens must be >= 1, got {self.generate_max_tokens}")
        require(self.decode_max_streams >= 1, f"decode_max_streams must be >= 1, got {self.decode_max_streams}")
        require(self.decode_extra_delay_ms >= 0, f"decode_extra_delay_ms must be >= 0, got {self.decode_extra_delay_ms}")
        require(self.resident_mb >= 0, f"resident_mb must be >= 0, got {self.resident_mb}")
        require(self.resident_touch_kb >= 4, f"resident_touch_kb must be >= 4, got {self.resident_touch_kb}")
        require(self.preprocess_garbage >= 0, f"preprocess_garbage must be >= 0, got {self.preprocess_garbage}")
        require(self.gc_pressure_mb_per_s >= 0, f"gc_pressure_mb_per_s must be >= 0, got {self.gc_pressure_mb_per_s}")
        require(self.gc_retained_mb >= 0, f"gc_retained_mb must be >= 0, got {self.gc_retained_mb}")
        require(self.io_stall_kb >= 0, f"io_stall_kb must be >= 0, got {self.io_stall_kb}")
        require(self.max_body_bytes >= 1, f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        require(self.top_k >= 1, f"top_k must be >= 1, got {self.top_k}")
        require(self.gc_min_pause_ms >= 0, f"gc_min_pause_ms must be >= 0, got {self.gc_min_pause_ms}")
        require(self.graceful_shutdown_s >= 0, f"graceful_shutdown_s must be >= 0, got {self.graceful_shutdown_s}")
        require(
            self.log_level in ("critical", "error", "warning", "info", "debug", "trace"),
            f"unknown log_level {self.log_level!r}",
        )


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def knob_fields() -> tuple[dataclasses.Field, ...]:
    """The knobs, in declaration order (each field's ``metadata["help"]`` describes it)."""
    return dataclasses.fields(TargetConfig)


def _normalise_key(key: str) -> str:
    return key.replace("-", "_")


def _coerce(name: str, value: Any) -> Any:
    """Convert a YAML value to the knob's type (lists → tuple for preferred_batch_sizes)."""
    if name == "preferred_batch_sizes":
        if isinstance(value, int):
            return (value,)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
            raise ConfigError(f"preferred_batch_sizes must be a list of integers, got {value!r}")
        return tuple(value)
    return value


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of knobs; raise ConfigError on a missing file, bad YAML or unknown key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of knobs, got {type(data).__name__}")
    known = {f.name for f in knob_fields()}
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = _normalise_key(str(key))
        if name not in known:
            raise ConfigError(f"config file {path}: unknown knob {key!r} (known: {', '.join(sorted(known))})")
        values[name] = _coerce(name, value)
    return values


def build_config(file_values: Mapping[str, Any], explicit_values: Mapping[str, Any]) -> TargetConfig:
    """Merge defaults, then ``file_values``, then ``explicit_values`` (command line) into a validated config."""
    merged = {**file_values, **explicit_values}
    try:
        return TargetConfig(**merged)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
