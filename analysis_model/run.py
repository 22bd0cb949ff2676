"""The run itself: ``run`` (manifest facts, completeness, load period) and ``error_samples``.

``properties.run`` and ``properties.error_samples`` of analyzers/analysis.schema.json; built by
analyzers/analysis.py (``run_facts``, with analyzers/inputs/environment.py) and
analyzers/inputs/error_samples.py; read by the report's header, timeline, error tables and JUnit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailscope.analysis_model.codec import written_when_set


@dataclass(frozen=True, slots=True)
class Environment:
    """What the run ran against and on, from the manifest (None wherever it does not say):
    the server's kind, version, model and context length, whether the server was probed at all,
    the GPUs (names counted, e.g. ``2 x NVIDIA H100``), their driver or NVML's reason none was read
    (``gpu_absent``), the CPU model, the kernel, the harness version and the scenario's SHA-256."""

    server_kind: str | None
    server_version: str | None
    model: str | None
    max_model_len: int | None
    server_probed: bool | None
    gpus: str | None
    gpu_driver: str | None
    gpu_absent: str | None
    cpu_model: str | None
    kernel: str | None
    tailscope_version: str | None
    scenario_sha256: str | None


@dataclass(frozen=True, slots=True)
class DamagedFile:
    """A run file read only up to a damaged batch: the file, the batch index (None when unknown),
    the reason code and a sentence for the report."""

    file: str
    batch: int | None
    reason: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """Manifest facts plus status, completeness and the load period. Times are epoch ns (None where
    the manifest or the records do not say); ``load_start_ns``/``load_end_ns`` the load period (first
    scheduled send to last completion) and ``duration_s`` its length in s (0 without requests).
    ``incomplete`` is true for a run whose harness stopped while running (``status`` "running"),
    ``incomplete_reason`` then says when. ``scenario`` and ``host`` are the manifest's objects as they
    are. ``environment``, ``damaged_files`` and ``abort_reasons`` are later additions: an older
    analysis reads as no environment, nothing damaged, no abort."""

    path: str
    name: str
    status: str
    incomplete: bool
    incomplete_reason: str | None
    format_version: str | None = None
    tailscope_version: str | None = None
    start_ns: int | None
    end_ns: int | None
    load_start_ns: int | None
    load_end_ns: int | None
    duration_s: float
    target: str | None
    scenario: dict[str, Any]
    host: dict[str, Any]
    environment: Environment | None = written_when_set()
    truncated_files: tuple[str, ...]
    damaged_files: tuple[DamagedFile, ...] = ()
    abort_reasons: tuple[str, ...] = ()

    @property
    def load_origin_ns(self) -> int | None:
        """Where the report's times count from (epoch ns): the load start, else the run's start
        where the load start is unknown; None where neither is known. Charts draw x in s since it."""
        return self.load_start_ns or self.start_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSample:
    """One distinct error of a class (error_samples.json; texts are the target's): HTTP status,
    ``error_kind``, message and body (≤ 256 characters), how many requests failed so, and the
    first one's time (epoch ns; None where the file does not say)."""

    status: int | None
    error_kind: str | None
    message: str | None
    body: str | None
    count: int
    first_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ClassErrorSamples:
    """A class's errors, those not sampled (beyond the per-class limit) and the samples, most
    frequent first."""

    errors: int
    unsampled: int
    samples: tuple[ErrorSample, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSamples:
    """Up to ``max_per_class`` distinct errors per class with counts; ``available`` false (and no
    classes) where the run has no error_samples.json."""

    available: bool
    max_per_class: int | None = None
    classes: dict[str, ClassErrorSamples]
