"""What a run ran against and on, read from its manifest: the analysis's ``run.environment``
section and what ``compare`` warns about when two runs differ in it.

``environment_facts(manifest)`` gathers the reproducibility facts the manifest holds in three
places (docs/run-format.md): ``server`` (kind, version, model, max_model_len, from the probe
before the load), ``host`` (kernel, CPU model, GPUs and driver through NVML),
``tailscope_version`` and ``scenario_sha256``. A fact the run did not record (an older run, a
server that does not say, no NVML) is None, with ``gpu_absent`` giving NVML's reason.

``environment_differences(baseline, current)`` lists the facts that make two runs' figures
incomparable or suspect — server kind, version or model, max_model_len, GPU models and count,
GPU driver, CPU model — each ``{"field", "baseline", "current", "message"}``; a fact unknown on
either side is not a difference (nothing to compare).
"""

from __future__ import annotations

#: Facts compared between two runs, in the order warned: (field, words).
COMPARED = (
    ("server_kind", "server kind"),
    ("server_version", "server version"),
    ("model", "model"),
    ("max_model_len", "max_model_len"),
    ("gpus", "GPUs"),
    ("gpu_driver", "GPU driver"),
    ("cpu_model", "CPU model"),
)


def _gpu_names(gpu: dict) -> str | None:
    """The GPUs as ``2 x NVIDIA H100 80GB HBM3`` (names counted), None when NVML gave none."""
    names = [g.get("name") for g in gpu.get("gpus") or [] if g.get("name")]
    if not names:
        return None
    counted: dict[str, int] = {}
    for name in names:
        counted[name] = counted.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" if n > 1 else name for name, n in counted.items())


def environment_facts(manifest: dict) -> dict:
    """The run's ``environment`` section (analysis-schema.md): ``server_kind``,
    ``server_version``, ``model``, ``max_model_len``, ``server_probed`` (whether the server was
    asked at all), ``gpus`` (names counted, e.g. ``2 x NVIDIA H100``), ``gpu_driver``,
    ``gpu_absent`` (NVML's reason when no GPU was read), ``cpu_model``, ``kernel``,
    ``tailscope_version``, ``scenario_sha256``; None where the manifest does not say."""
    server = manifest.get("server") or {}
    host = manifest.get("host") or {}
    gpu = host.get("gpu") or {}
    return {
        "server_kind": server.get("kind"),
        "server_version": server.get("version"),
        "model": server.get("model"),
        "max_model_len": server.get("max_model_len"),
        "server_probed": server.get("probed") if server else None,
        "gpus": _gpu_names(gpu),
        "gpu_driver": gpu.get("driver_version"),
        "gpu_absent": gpu.get("nvml") if gpu else None,
        "cpu_model": host.get("cpu_model"),
        "kernel": host.get("kernel"),
        "tailscope_version": manifest.get("tailscope_version"),
        "scenario_sha256": manifest.get("scenario_sha256"),
    }


def _compared(environment: dict, field: str):
    """A fact as compared: GPUs that NVML stated absent are ``none``, not unknown."""
    value = environment.get(field)
    if field == "gpus" and value is None and environment.get("gpu_absent"):
        return "none"
    return value


def environment_differences(baseline: dict, current: dict) -> list[dict]:
    """The compared facts (:data:`COMPARED`) in which two ``environment`` sections differ, each
    ``{"field", "baseline", "current", "message"}``; [] when they agree or one side does not say."""
    differences = []
    for field, words in COMPARED:
        before, now = _compared(baseline, field), _compared(current, field)
        if before is None or now is None or before == now:
            continue
        differences.append({"field": field, "baseline": before, "current": now,
                            "message": f"the runs differ in {words}: {before} (baseline) vs {now} (current); "
                                       "a change in the figures may come from that"})
    return differences
