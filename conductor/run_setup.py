"""What every run opens before its load: its run directory, the OTLP receiver child, the manifest.

Shared by ``tailscope run`` (:mod:`tailscope.conductor.session`) and the ``locust``
command (:mod:`tailscope.conductor.locust_plugin`), so a run directory reads the same
whichever started it (docs/run-format.md). No Locust import.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

from tailscope.conductor.children import Child
from tailscope.loadgen.distributed import split_description
from tailscope.rundir import new_run_dir, read_json, schema
from tailscope.support.python_child import python_module
from tailscope.support.receiver_token import TOKEN_ENV

#: CPU priority drop of the receiver and the samplers (nice value): they are
#: bookkeeping and must not delay the generator's sends on a small machine.
BOOKKEEPING_NICENESS = 5
#: The OTLP/gRPC port a receiver binds when none is given and its HTTP port is fixed.
DEFAULT_RECEIVER_GRPC_PORT = 4317


def open_run_dir(out_dir: str, name: str, dir_name: str | None = None) -> str:
    """A new, empty run directory for a run called ``name`` under ``out_dir`` (created if missing):
    ``<UTC stamp>-<name>``, or exactly ``dir_name`` when given (FileExistsError if it exists)."""
    os.makedirs(out_dir, exist_ok=True)
    if dir_name is not None:
        path = os.path.join(out_dir, safe_name(dir_name))
        os.makedirs(path)
        return path
    return new_run_dir(out_dir, safe_name(name))


def safe_name(name: str) -> str:
    """``name`` as a folder-name part: letters, digits, ``-_.`` (others become ``-``), at most 60 characters."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)[:60] or "run"


def receiver_grpc_port(http_port: int, grpc_port: int | None = None) -> int:
    """The receiver's ``--grpc-port``: ``grpc_port`` as given, else 4317 — or a free port (0) when
    the HTTP port is a free one too, so that parallel runs never collide; -1 is off."""
    if grpc_port is not None:
        return grpc_port
    return 0 if http_port == 0 else DEFAULT_RECEIVER_GRPC_PORT


def receiver_child(run_dir: str, host: str, port: int, grpc_port: int, *, token: str | None = None,
                   extra_args: Sequence[str] = ()) -> Child:
    """The OTLP receiver (not started) writing into ``run_dir``, on ``host:port`` (HTTP; 0: a free
    port) and ``grpc_port`` (gRPC; 0: a free port, -1: off), logging to ``receiver.log``.

    ``token``: the bearer token every request must carry, passed through the child's
    environment (never its argv); None: none is required (an inherited one is cleared).
    ``extra_args``: more receiver flags (e.g. TLS files). Start it with ``wait_listening=True``:
    its HTTP port is then ``child.port``."""
    return Child("OTLP receiver",
                 python_module("tailscope.tracing.ingest.receiver", "--run-dir", run_dir,
                               "--host", host, "--port", str(port), "--grpc-port", str(grpc_port), *extra_args),
                 env={TOKEN_ENV: token or ""},
                 log_path=os.path.join(run_dir, "receiver.log"), niceness=BOOKKEEPING_NICENESS)


def bound_grpc_port(run_dir: str) -> int | None:
    """The OTLP/gRPC port the run's receiver bound (None: gRPC off), from its ``receiver.json``,
    which it writes before it reports ``LISTENING``."""
    return (read_json(os.path.join(run_dir, schema.RECEIVER_STATS), {}) or {}).get("grpc_port")


def receiver_options(*, host: str, port: int | None, grpc_port: int | None, token: str | None = None,
                     tls: bool = False) -> dict:
    """The manifest ``options`` entries that describe the run's receiver: its ports (None: no
    receiver ran; gRPC None: off), the address it bound, whether it required a token and served TLS.
    The token itself is never written."""
    return {"receiver_port": port, "receiver_grpc_port": grpc_port, "receiver_host": host,
            "receiver_auth": "bearer token" if token else "none", "receiver_tls": tls}


def run_manifest(*, name: str, scenario_path: str | None, scenario_raw: dict, plan, target_process: dict,
                 receiver: dict, signal_rate_hz: float | None = None, extra: dict | None = None,
                 workers: int = 0, server: dict | None = None) -> dict:
    """The manifest a run starts with (docs/run-format.md): the scenario as given, the load plan's
    settings (``plan``: a tailscope.loadgen.spec.LoadPlan), the receiver's ``options`` entries
    (``receiver``: from :func:`receiver_options`),
    the signal sampling rate (Hz; omitted when no sampler runs) and ``extra`` top-level keys.
    ``workers`` > 0: the load is split over that many Locust worker processes, which
    ``arrival`` describes (:func:`~tailscope.loadgen.distributed.split_description`).
    ``server``: the target's kind, version and model (conductor/server_facts.py); the scenario as
    run is fingerprinted in ``scenario_sha256`` (:func:`scenario_sha256`)."""
    options = {
        "duration_s": plan.duration_s,
        "max_requests": plan.max_requests,
        "seed": plan.seed,
        "timeout_s": plan.timeout_s,
        "max_in_flight": plan.max_in_flight,
        "in_flight_policy": plan.in_flight_policy,
        "trace_sample_rate": plan.trace_sample_rate,
        **receiver,
    }
    if signal_rate_hz is not None:
        options["signal_rate_hz"] = signal_rate_hz
    return {
        "name": name,
        "scenario_path": scenario_path,
        "scenario": scenario_raw,
        "scenario_sha256": scenario_sha256(scenario_raw),
        "target": plan.target,
        **({"server": server} if server is not None else {}),
        "target_process": target_process,
        "options": options,
        "arrival": {**plan.arrival.describe(), **(split_description(plan.arrival, workers) if workers else {})},
        **llm_classes(plan),
        **(extra or {}),
    }


def scenario_sha256(scenario_raw: dict) -> str:
    """SHA-256 (hex) of the scenario as run: its manifest copy as canonical JSON (keys sorted, no
    spaces, UTF-8), so two runs of the same settings share it and anyone can recompute it from
    the manifest's ``scenario``."""
    canonical = json.dumps(scenario_raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def llm_classes(plan) -> dict:
    """``{"llm_classes": {class name: LLMSpec.describe()}}`` for the plan's OpenAI-API classes
    (their api, model, token distributions, as resolved from the scenario); ``{}`` without any."""
    described = {c.name: c.llm.describe() for c in plan.classes if getattr(c, "llm", None) is not None}
    return {"llm_classes": described} if described else {}
