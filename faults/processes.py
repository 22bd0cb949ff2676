"""Helper processes the injectors start (burners, burst generators), stopped by PID only.

Each child gets ``PR_SET_PDEATHSIG = SIGKILL`` so it dies with the agent even
if the agent is killed with ``kill -9``, optional CPU pinning
(``sched_setaffinity``) before it runs, and is stopped by :func:`stop_process`:
SIGTERM, a grace period, then SIGKILL, then reaped.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Sequence

from tailscope.support.python_child import python_module

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0


def _setup(cpus: Sequence[int] | None):
    def preexec() -> None:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass
        if cpus:
            os.sched_setaffinity(0, set(cpus))

    return preexec


def start_python_module(module: str, args: Sequence[str], *, cpus: Sequence[int] | None = None,
                        log_path: str | None = None, stdout=None) -> subprocess.Popen:
    """Start ``python -P -m module args`` (this interpreter, safe path: see
    :mod:`tailscope.support.python_child`), optionally pinned to ``cpus``."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            python_module(module, *args),
            stdin=subprocess.DEVNULL, stdout=stdout if stdout is not None else log, stderr=log,
            preexec_fn=_setup(cpus), close_fds=True,
        )
    finally:
        if log is not subprocess.DEVNULL:
            log.close()


def stop_process(process: subprocess.Popen, grace_s: float = STOP_GRACE_S,
                 first_signal: int = signal.SIGTERM) -> int:
    """Send ``first_signal`` to ``process`` by PID, wait ``grace_s``, SIGKILL if
    needed; return its exit status. Only ever signals the PID we started."""
    if process.poll() is None:
        try:
            os.kill(process.pid, first_signal)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    return process.returncode


def parse_cpu_list(text: str) -> list[int]:
    """``"0-2,5"`` → ``[0, 1, 2, 5]``; raises ValueError on malformed text."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = (int(x) for x in part.split("-", 1))
            if high < low:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(low, high + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"no CPUs in {text!r}")
    return sorted(cpus)
