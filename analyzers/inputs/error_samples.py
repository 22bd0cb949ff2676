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

from tailscope.analysis_model.run import ClassErrorSamples, ErrorSample, ErrorSamples
from tailscope.rundir import RunDirError, read_json, schema

_SAMPLE_FIELDS = ("status", "error_kind", "message", "body", "count", "first_ns")


def _integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sample(entry) -> ErrorSample | None:
    """One sample of error_samples.json (the harness's file, read defensively): texts as text, a
    status or first time that is not an integer as None; None for an entry without an integer count."""
    if not isinstance(entry, dict) or not isinstance(entry.get("count"), int):
        return None
    sample = {key: entry.get(key) for key in _SAMPLE_FIELDS}
    for key in ("message", "body", "error_kind"):
        if sample[key] is not None and not isinstance(sample[key], str):
            sample[key] = str(sample[key])
    for key in ("status", "first_ns"):
        sample[key] = _integer(sample[key])
    return ErrorSample(**sample)


def error_samples_section(run_path: str) -> ErrorSamples:
    """The ``error_samples`` section (:class:`~tailscope.analysis_model.run.ErrorSamples`): per class,
    the errors, those not sampled and the samples, most frequent first; not ``available`` (no
    classes) when the run has no readable error_samples.json."""
    try:
        data = read_json(os.path.join(run_path, schema.ERROR_SAMPLES), None)
    except RunDirError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        return ErrorSamples(available=False, max_per_class=None, classes={})
    classes = {}
    for cls, entry in data["classes"].items():
        if not isinstance(entry, dict):
            continue
        samples = [s for s in (_sample(e) for e in entry.get("samples") or []) if s is not None]
        samples.sort(key=lambda s: -s.count)
        classes[str(cls)] = ClassErrorSamples(errors=int(entry.get("errors") or 0),
                                              unsampled=int(entry.get("unsampled") or 0), samples=tuple(samples))
    return ErrorSamples(available=True, max_per_class=_integer(data.get("max_per_class")), classes=classes)
