"""The run's error samples (``error_samples.json``) as the analysis's ``error_samples`` section.

The harness keeps, per request class, up to 20 distinct errors with their counts
and the first 256 bytes of each response body (tailscope.loadgen.error_samples).
Here they are read, checked for shape, and each class's samples ordered by count
(most frequent first). A run without the file (older runs, imported or
synthetic runs) has ``available: false`` and no classes. The texts are the
service's and untrusted: reports escape them.
"""

from __future__ import annotations

import os

from tailscope.rundir import RunDirError, read_json, schema

_SAMPLE_FIELDS = ("status", "error_kind", "message", "body", "count", "first_ns")


def _sample(entry) -> dict | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("count"), int):
        return None
    sample = {key: entry.get(key) for key in _SAMPLE_FIELDS}
    for key in ("message", "body", "error_kind"):
        if sample[key] is not None and not isinstance(sample[key], str):
            sample[key] = str(sample[key])
    if sample["status"] is not None and not isinstance(sample["status"], int):
        sample["status"] = None
    return sample


def error_samples_section(run_path: str) -> dict:
    """``{"available", "max_per_class", "classes": {cls: {"errors", "unsampled", "samples": [...]}}}``."""
    try:
        data = read_json(os.path.join(run_path, schema.ERROR_SAMPLES), None)
    except RunDirError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        return {"available": False, "max_per_class": None, "classes": {}}
    classes = {}
    for cls, entry in data["classes"].items():
        if not isinstance(entry, dict):
            continue
        samples = [s for s in (_sample(e) for e in entry.get("samples") or []) if s is not None]
        samples.sort(key=lambda s: -s["count"])
        classes[str(cls)] = {"errors": int(entry.get("errors") or 0), "unsampled": int(entry.get("unsampled") or 0),
                             "samples": samples}
    return {"available": True, "max_per_class": data.get("max_per_class"), "classes": classes}
