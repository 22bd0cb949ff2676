"""fsync'd writes in the request path, switchable at run time (the io_stall fault).

While on, every request's preprocessing appends ``kb`` KB to one file of the
process (in ``directory``) and calls ``fsync``: the request — and, because
the write is synchronous, the event loop — waits for the disk, as a service
that appends to an audit log or a spill file per request does. The bytes are
made once when the fault is switched on, so a request spends its time in the
write and the flush, not in making data. Appending allocates blocks, so each
fsync also commits the file system's journal; the file is truncated and
restarted when it reaches :data:`MAX_FILE_BYTES`. On a tmpfs or a disk with a
volatile write cache ``fsync`` is cheap and the fault is weak (docs/lab.md).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

#: Size at which the io-stall file is truncated and written again from its start (bytes).
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class IoStallState:
    enabled: bool
    kb: int
    path: str | None
    writes: int  # fsync'd writes since the process started

    def as_dict(self) -> dict:
        return asdict(self)


class IoStall:
    """The switch and the file. ``write()`` is called once per request; ``close()`` removes the file."""

    def __init__(self, directory: str = "") -> None:
        self._directory = directory or tempfile.gettempdir()
        self._lock = threading.Lock()
        self._kb = 0
        self._fd: int | None = None
        self._path: str | None = None
        self._writes = 0
        self._block = b""
        self._offset = 0

    def configure(self, enabled: bool, kb: int) -> IoStallState:
        """Switch on (``kb`` > 0: the file is created) or off (the file is removed)."""
        if kb < 0:
            raise ValueError(f"kb must be >= 0, got {kb}")
        with self._lock:
            self._kb = kb if enabled else 0
            if self._kb and self._fd is None:
                fd, self._path = tempfile.mkstemp(prefix=f"tailscope-io-stall-{os.getpid()}-", dir=self._directory)
                self._fd, self._offset = fd, 0
            if self._kb and len(self._block) != self._kb * 1024:
                self._block = os.urandom(self._kb * 1024)
            elif not self._kb:
                self._remove_file()
        return self.state()

    def state(self) -> IoStallState:
        with self._lock:
            return IoStallState(enabled=self._kb > 0, kb=self._kb, path=self._path, writes=self._writes)

    def write(self) -> float | None:
        """When on: append ``kb`` KB and fsync; return the time it took (ms). None when off."""
        with self._lock:
            if not self._kb or self._fd is None:
                return None
            started = time.perf_counter()
            if self._offset + len(self._block) > MAX_FILE_BYTES:
                os.ftruncate(self._fd, 0)
                self._offset = 0
            os.pwrite(self._fd, self._block, self._offset)
            self._offset += len(self._block)
            os.fsync(self._fd)
            self._writes += 1
            return (time.perf_counter() - started) * 1000.0

    def close(self) -> None:
        with self._lock:
            self._kb = 0
            self._remove_file()

    def _remove_file(self) -> None:
        self._block = b""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
