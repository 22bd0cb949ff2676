"""Finding the target process: who listens on a port, and what it is."""

from __future__ import annotations

import psutil

from .cgroup import locate_process_cgroups

_ANY_ADDRESSES = ("0.0.0.0", "::", "")


def find_listening_pid(port: int, host: str | None = None) -> int | None:
    """PID of the process listening on TCP ``port`` (optionally bound to ``host``).

    A socket bound to the wildcard address (0.0.0.0 or ::) matches any
    ``host``. Returns None when no listener is found or its owner is not
    visible to us (another user's process without root).
    """
    for conn in psutil.net_connections(kind="inet"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if host is not None and conn.laddr.ip not in (host, *_ANY_ADDRESSES):
            continue
        if conn.pid is not None:
            return conn.pid
    return None


def describe_process(pid: int) -> dict:
    """Facts about ``pid`` for the run manifest.

    Returns ``{"pid", "name", "cmdline", "cgroups": {hierarchy: path},
    "cgroup_dirs": {controller: directory}, "cgroup_version": "v1"|"v2"|"hybrid"|"none"}``.
    Raises :class:`psutil.NoSuchProcess` if the process does not exist.
    """
    process = psutil.Process(pid)
    with process.oneshot():
        name = process.name()
        cmdline = process.cmdline()
    try:
        location = locate_process_cgroups(pid)
        cgroups, dirs, version = location.paths, location.dirs, location.version
    except OSError:
        cgroups, dirs, version = {}, {}, "none"
    return {
        "pid": pid,
        "name": name,
        "cmdline": cmdline,
        "cgroups": cgroups,
        "cgroup_dirs": dirs,
        "cgroup_version": version,
    }
