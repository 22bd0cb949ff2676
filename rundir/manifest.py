"""Creating a run directory and keeping its manifest current.

The manifest is written when the run starts (``status: running``) and again
when it ends. A run whose manifest still says ``running`` was stopped without
closing (``kill -9``, power loss); readers then take its end from the data.
JSON files are replaced atomically (write, fsync, rename) so a crash never
leaves a half-written manifest.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from datetime import datetime, timezone

import psutil

from . import schema as fmt
from .appender import Appender, PeriodicFlusher


def write_json_atomic(path: str | os.PathLike, data) -> None:
    """Write ``data`` as JSON to ``path`` atomically (readers see old or new, never half)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def new_run_dir(parent: str | os.PathLike, name: str) -> str:
    """Create ``parent/<UTC timestamp>-<name>`` and return its path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(os.fspath(parent), f"{stamp}-{name}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    os.makedirs(path)
    return path


def host_info() -> dict:
    """Facts about the machine the harness runs on."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
    }


class RunWriter:
    """The harness's side of a run directory: manifest, requests and events.

    Other processes (receiver, samplers) write their own files in the same
    directory; see :func:`tailscope.rundir.schema.table_files`.
    """

    def __init__(self, path: str, manifest: dict):
        from tailscope import __version__

        self.path = path
        os.makedirs(path, exist_ok=True)
        self.manifest = {
            "format_version": fmt.FORMAT_VERSION,
            "tailscope_version": __version__,
            "status": "running",
            "start_ns": time.time_ns(),
            "end_ns": None,
            "host": host_info(),
            **manifest,
        }
        self.save_manifest()
        self.requests = Appender(os.path.join(path, fmt.REQUESTS), fmt.REQUESTS_SCHEMA)
        self.events = Appender(os.path.join(path, fmt.EVENTS), fmt.EVENTS_SCHEMA)
        self.flusher = PeriodicFlusher([self.requests, self.events]).start()

    def save_manifest(self) -> None:
        write_json_atomic(os.path.join(self.path, fmt.MANIFEST), self.manifest)

    def update(self, **fields) -> None:
        """Merge ``fields`` into the manifest and save it."""
        self.manifest.update(fields)
        self.save_manifest()

    def add_event(self, kind: str, start_ns: int, end_ns: int, source: str, attributes: dict) -> None:
        self.events.append(kind, int(start_ns), int(end_ns), source, json.dumps(attributes))

    def close(self, status: str = "complete", **fields) -> None:
        """Flush and close the streams, then mark the manifest ``status``."""
        self.flusher.stop()
        self.update(status=status, end_ns=time.time_ns(), **fields)
