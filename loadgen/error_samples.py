"""What the failed requests said: per class, up to 20 distinct errors with their counts.

A record's error is identified by its status, error kind, message (the
exception text, or ``HTTP 500``) and the first 256 bytes of the response body
(``error_body``: an HTTP error's body, an OpenAI-API server's error JSON). The
first :data:`MAX_SAMPLES_PER_CLASS` distinct errors of each class are kept with
a count each; later errors equal to a kept one add to its count, the others are
counted in the class's ``unsampled``. So a user sees what the service answered
("upstream timeout", a validation message, an HTML error page) and not only
``HTTP 500``.

:class:`ErrorSamples` is fed every record by the harness's record keeper
(:mod:`.record_keeper`), which sees every request of a run — a distributed run's
workers' rows included, as the master merges them — and writes
``error_samples.json`` (:data:`tailscope.rundir.schema.ERROR_SAMPLES`) at most
once a second while errors arrive, and at the end. Memory: at most 20 entries of
under 1 kB per class. The body is the service's, untrusted: it is stored as
text (invalid UTF-8 replaced) and escaped wherever it is shown.

File format: ``{"max_per_class": 20, "body_bytes": 256, "classes": {CLASS:
{"errors": N, "unsampled": M, "samples": [{"status", "error_kind", "message",
"body", "count", "first_ns"}]}}}``, samples in order of first occurrence.
"""

from __future__ import annotations

import os

from tailscope.rundir.manifest import write_json_atomic
from tailscope.rundir.request_record import RequestRecord
from tailscope.rundir.schema import ERROR_SAMPLES

#: Distinct errors kept per request class.
MAX_SAMPLES_PER_CLASS = 20
#: Bytes of a response body kept (the record's ``error_body`` holds no more).
BODY_BYTES = 256
#: Characters of an error message kept.
MESSAGE_CHARS = 256


def _message(value) -> str | None:
    return None if value is None else str(value)[:MESSAGE_CHARS]


def _body(value) -> str | None:
    """At most BODY_BYTES bytes of UTF-8 (a character cut in two is dropped)."""
    if value is None:
        return None
    return str(value).encode("utf-8")[:BODY_BYTES].decode("utf-8", "ignore")


class ErrorSamples:
    """Distinct errors per class, bounded (see the module docstring). One thread adds."""

    def __init__(self, max_per_class: int = MAX_SAMPLES_PER_CLASS):
        self.max_per_class = max_per_class
        self._samples: dict[str, dict[tuple, dict]] = {}
        self._unsampled: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self.changed = False

    def add(self, cls: str | None, status: int | None, error_kind: str, error: str | None,
            body: str | None = None, end_ns: int | None = None) -> None:
        """Count one failed request."""
        cls = cls if cls is not None else ""
        message, body = _message(error), _body(body)
        key = (status, error_kind, message, body)
        samples = self._samples.setdefault(cls, {})
        self._errors[cls] = self._errors.get(cls, 0) + 1
        self.changed = True
        entry = samples.get(key)
        if entry is not None:
            entry["count"] += 1
        elif len(samples) < self.max_per_class:
            samples[key] = {"status": status, "error_kind": error_kind, "message": message, "body": body,
                            "count": 1, "first_ns": end_ns}
        else:
            self._unsampled[cls] = self._unsampled.get(cls, 0) + 1

    def add_record(self, record: RequestRecord) -> None:
        """Count a request's record when it is an error."""
        if record.error_kind is None:
            return
        self.add(record.cls, record.status, record.error_kind, record.error, record.error_body, record.end_ns)

    def as_dict(self) -> dict:
        """The ``error_samples.json`` object (module docstring)."""
        return {"max_per_class": self.max_per_class, "body_bytes": BODY_BYTES, "classes": {
            cls: {"errors": self._errors.get(cls, 0), "unsampled": self._unsampled.get(cls, 0),
                  "samples": list(samples.values())}
            for cls, samples in self._samples.items()}}

    def save(self, run_dir: str) -> None:
        """Write ``error_samples.json`` into ``run_dir`` (atomically) when anything changed."""
        if not self.changed:
            return
        write_json_atomic(os.path.join(run_dir, ERROR_SAMPLES), self.as_dict())
        self.changed = False
