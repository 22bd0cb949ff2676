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
from datetime import UTC, datetime

import psutil

from tailscope.rundir import schema as fmt
from tailscope.rundir.appender import Appender, PeriodicFlusher
from tailscope.support.host_inventory import cpu_model, gpu_inventory

#: Space set aside when a run starts (a ballast file, ``.reserve-<harness pid>``)
#: and given back when it ends, so that a run stopped by a full disk can still
#: write its final manifest and its report. Bytes.
RESERVE_BYTES = 8 * 1024 * 1024
RESERVE_FILE = ".reserve"


def write_json_atomic(path: str | os.PathLike, data) -> None:
    """Write ``data`` as JSON to ``path`` atomically (readers see old or new, never half)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def utc_stamp() -> str:
    """Now in UTC as the run folders name it: ``20261206T032926Z``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def make_unique_dir(base: str) -> str:
    """Create ``base`` (``base-2``, ``base-3`` … when taken) and return the path created."""
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    os.makedirs(path)
    return path


def new_run_dir(parent: str | os.PathLike, name: str) -> str:
    """Create ``parent/<UTC timestamp>-<name>`` and return its path."""
    return make_unique_dir(os.path.join(os.fspath(parent), f"{utc_stamp()}-{name}"))


def host_info() -> dict:
    """Facts about the machine the harness runs on (docs/run-format.md, ``host``): names,
    kernel, CPU model and count, the CPUs the harness may run on, memory (bytes), and the GPUs with their driver through NVML
    (``gpu``: :func:`tailscope.support.host_inventory.gpu_inventory`; absent GPUs are stated
    with NVML's reason, never guessed)."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "harness_cpus": sorted(os.sched_getaffinity(0)),
        "memory_bytes": psutil.virtual_memory().total,
        "gpu": gpu_inventory(),
    }


class RunWriter:
    """The harness's side of a run directory: manifest, requests and events.

    Other processes (receiver, samplers) write their own files in the same
    directory; see :func:`tailscope.rundir.schema.table_files`.
    """

    def __init__(self, path: str, manifest: dict):
        from tailscope.support.version import tailscope_version

        self.path = path
        os.makedirs(path, exist_ok=True)
        self.manifest = {
            "format_version": fmt.FORMAT_VERSION,
            "tailscope_version": tailscope_version(),
            "status": "running",
            "start_ns": time.time_ns(),
            "end_ns": None,
            "host": host_info(),
            **manifest,
        }
        self.save_manifest()
        self._reserve_path = os.path.join(path, f"{RESERVE_FILE}-{os.getpid()}")
        reserve_space(self._reserve_path, RESERVE_BYTES)
        self.requests = Appender(os.path.join(path, fmt.REQUESTS), fmt.REQUESTS_SCHEMA)
        self.events = Appender(os.path.join(path, fmt.EVENTS), fmt.EVENTS_SCHEMA)
        self.windows = Appender(os.path.join(path, fmt.WINDOWS), fmt.WINDOWS_SCHEMA)
        self.chunks = Appender(os.path.join(path, fmt.CHUNKS), fmt.CHUNKS_SCHEMA)
        self.generator_signals = Appender(
            os.path.join(path, fmt.writer_file(fmt.SIGNALS, fmt.GENERATOR_WRITER)), fmt.SIGNALS_SCHEMA)
        self.flusher = PeriodicFlusher([self.requests, self.events, self.windows, self.chunks,
                                        self.generator_signals]).start()

    def save_manifest(self) -> None:
        write_json_atomic(os.path.join(self.path, fmt.MANIFEST), self.manifest)

    def update(self, **fields) -> None:
        """Merge ``fields`` into the manifest and save it."""
        self.manifest.update(fields)
        self.save_manifest()

    def add_event(self, kind: str, start_ns: int, end_ns: int, source: str, attributes: dict) -> None:
        self.events.append(kind, int(start_ns), int(end_ns), source, json.dumps(attributes))

    def write_error(self) -> OSError | None:
        """The first error of the harness's streams (e.g. disk full), or None —
        whoever flushed them (the periodic flusher or the load generator's watcher)."""
        if self.flusher.error is not None:
            return self.flusher.error
        return next((a.error for a in self.flusher.appenders if a.error is not None), None)

    def close(self, status: str = "complete", **fields) -> None:
        """Flush and close the streams, give back the reserved space, then mark
        the manifest ``status``. A stream that could not be written (disk full)
        turns the status into ``failed`` with ``failure`` set."""
        self.flusher.stop()
        release_space(self._reserve_path)
        error = self.write_error()
        if error is not None and status != "failed":
            fields.setdefault("failure", describe_write_error(error))
            status = "failed"
        self.update(status=status, end_ns=time.time_ns(), **fields)


def describe_write_error(error: OSError) -> str:
    """One line for a stream write failure: "disk full: ..." for ENOSPC."""
    if getattr(error, "errno", None) == 28:
        return f"disk full: {error.strerror or error}"
    return f"write error: {error}"


def reserve_space(path: str, size: int) -> bool:
    """Allocate ``size`` bytes in a ballast file; False when the disk cannot spare them."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def release_space(path: str) -> None:
    """Delete a ballast file made by :func:`reserve_space` (absent is fine)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def release_stale_reserves(run_dir: str) -> int:
    """Delete the reserve files of harnesses that no longer run (killed with ``kill -9``);
    returns how many. A live harness's reserve is left alone."""
    released = 0
    for name in os.listdir(run_dir):
        if name.startswith(RESERVE_FILE + "-") and name[len(RESERVE_FILE) + 1:].isdigit():
            if not psutil.pid_exists(int(name[len(RESERVE_FILE) + 1:])):
                release_space(os.path.join(run_dir, name))
                released += 1
    return released
