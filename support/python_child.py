"""How tailscope starts a Python child process, and how it reports one that failed.

Every harness child (receiver, samplers, reference target, fault agent, burners,
Locust workers, lab experiments) is started through :func:`python_module`, so
all of them run the same interpreter as the harness with Python's safe-path
flag ``-P`` (Python >= 3.11): the working directory is *not* put on
``sys.path``, so a folder in it (a clone's root, say, where ``tracing/`` or
``loadgen/`` sit) can never shadow the installed ``tailscope`` package or one
of its dependencies. The installed package is what every child imports,
whatever folder the user runs ``tailscope`` from.
"""

from __future__ import annotations

import os
import sys

#: Safe-path flag: neither the working directory (``-m``, ``-c``) nor a script's folder goes on sys.path.
SAFE_PATH_FLAG = "-P"
#: How many lines of a failed child's output :func:`output_tail` returns by default.
TAIL_LINES = 12
#: How many bytes from the end of a log :func:`output_tail` reads at most.
TAIL_BYTES = 16384


def python_argv(*args: str) -> list[str]:
    """argv of this interpreter in safe-path mode followed by ``args`` (``"-c", code`` or ``"-m", module``)."""
    return [sys.executable, SAFE_PATH_FLAG, *args]


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs ``python -P -m module args`` with this interpreter."""
    return python_argv("-m", module, *args)


def output_tail(path: str | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` non-blank lines of the log at ``path`` (at most
    :data:`TAIL_BYTES` read from its end), decoded leniently; ``""`` when there
    is no path, no file or nothing in it."""
    if not path:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])
