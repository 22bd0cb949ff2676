"""Finding the target: by listening port, process name, cgroup or container.

Every ``find_*_target`` returns the manifest's ``target_process`` dict
(:func:`describe_process` facts, or cgroup facts when there is no process)
plus ``found_by`` saying how; a target that cannot be found raises
:class:`TargetNotFound` with a one-line reason.
"""

from __future__ import annotations

import os

import psutil

from tailscope.signals.cgroup import cgroup_pids
from tailscope.support.cgroups import CgroupLocation, find_container_cgroup, locate_cgroup_path, locate_process_cgroups
from tailscope.support.procfs import read_text

_ANY_ADDRESSES = ("0.0.0.0", "::", "")
MOUNTINFO = "/proc/self/mountinfo"


class TargetNotFound(LookupError):
    """The target named on the command line is not here (message: why)."""


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


def service_root(pid: int) -> int:
    """The top process of the service that ``pid`` belongs to: its ancestors are followed while
    they are in ``pid``'s process group (one job: a shell with job control gives each command
    line a group of its own, and a server's helpers inherit it), never to PID 1 and never into
    tailscope's own ancestors (a test runner or a script that started both). Returns ``pid``
    itself when its parent is elsewhere (the usual case: ``uvicorn …`` from a shell).

    Why: a server may listen from a child while its work runs in the parent — PyTriton's
    ``tritonserver`` listens, the model's Python code runs in the PyTriton process above it;
    sampling the root (the sampler sums its descendants in) covers both."""
    lineage = _own_lineage()
    try:
        process = psutil.Process(pid)
        group = os.getpgid(pid)
        while True:
            parent = process.parent()
            if parent is None or parent.pid <= 1 or parent.pid in lineage or os.getpgid(parent.pid) != group:
                return process.pid
            process = parent
    except (psutil.Error, OSError):
        return pid


def describe_process(pid: int) -> dict:
    """Facts about ``pid`` for the run manifest.

    Returns ``{"pid", "name", "cmdline", "cgroups": {hierarchy: path},
    "cgroup_dirs": {controller: directory}, "cgroup_version": "v1"|"v2"|"hybrid"|"none",
    "cpus": [CPU numbers it may run on] or None}``.
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
    try:
        cpus = sorted(os.sched_getaffinity(pid))
    except OSError:
        cpus = None
    return {
        "pid": pid,
        "name": name,
        "cmdline": cmdline,
        "cgroups": cgroups,
        "cgroup_dirs": dirs,
        "cgroup_version": version,
        "cpus": cpus,
    }


# --------------------------------------------------------------------------- by name


def _name_matches(name: str, info: dict) -> bool:
    """``name`` is the process name (comm), the file name of its executable or
    of its first argument (``python serve.py``, ``python /usr/bin/uvicorn``),
    or the module of ``python -m MODULE`` (interpreter flags before ``-m``
    allowed, as in tailscope's own ``python -P -m MODULE`` children)."""
    if info.get("name") == name:
        return True
    cmdline = info.get("cmdline") or []
    if _python_module_of(cmdline) == name:
        return True
    return any(os.path.basename(arg) == name for arg in cmdline[:2])


def _python_module_of(cmdline: list[str]) -> str | None:
    """MODULE of ``python [flags] -m MODULE ...``, else None (``-W``/``-X`` take a value)."""
    args = iter(cmdline[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg in ("-W", "-X"):
            next(args, None)
        elif not arg.startswith("-") or arg in ("-", "-c", "--"):
            return None
    return None


def _own_lineage() -> set[int]:
    """Our pid and our ancestors' (their command lines may contain the name searched for)."""
    lineage = {os.getpid()}
    try:
        lineage.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return lineage


def find_pids_by_name(name: str) -> list[int]:
    """PIDs of processes matching ``name`` (see :func:`_name_matches`), ours excluded, oldest first."""
    lineage = _own_lineage()
    found = []
    for process in psutil.process_iter(["name", "cmdline", "create_time"]):
        if process.pid in lineage:
            continue
        if _name_matches(name, process.info):
            found.append((process.info.get("create_time") or 0.0, process.pid))
    return [pid for _, pid in sorted(found)]


def _root_processes(pids: list[int]) -> list[int]:
    """The pids whose parent is not itself in ``pids`` (a server's master, not its workers)."""
    members = set(pids)
    roots = []
    for pid in pids:
        try:
            if psutil.Process(pid).ppid() not in members:
                roots.append(pid)
        except psutil.NoSuchProcess:
            continue
    return roots


def find_process_target(name: str, port: int | None = None) -> dict:
    """The target process called ``name``: the one match, the root of a matching
    process tree (its workers are summed in by the sampler), or among several
    unrelated matches the one listening on ``port``."""
    roots = _root_processes(find_pids_by_name(name))
    if not roots:
        raise TargetNotFound(f"no process named {name!r} is running here")
    if len(roots) > 1 and port is not None:
        listener = find_listening_pid(port)
        listening = [pid for pid in roots if pid == listener]
        roots = listening or roots
    if len(roots) > 1:
        raise TargetNotFound(f"{len(roots)} unrelated processes are named {name!r} (pids {roots}); "
                             "give --target-pid")
    return {**describe_process(roots[0]), "found_by": f"--target-process {name}"}


# --------------------------------------------------------------------------- by cgroup


def _cgroup_facts(location: CgroupLocation, cgroup_path: str) -> dict:
    return {"cgroup_path": cgroup_path, "cgroup_dirs": dict(location.dirs),
            "cgroup_unified_dir": location.unified_dir,
            "cgroup_version": location.version}


def find_cgroup_target(path: str, mountinfo_text: str | None = None) -> dict:
    """Sample the cgroup at ``path`` (a directory or a cgroup path), with no process."""
    try:
        location = locate_cgroup_path(path, mountinfo_text if mountinfo_text is not None else read_text(MOUNTINFO))
    except FileNotFoundError as exc:
        raise TargetNotFound(str(exc)) from None
    cgroup_path = next(iter(location.paths.values()), path)
    return {"pid": None, "found_by": f"--target-cgroup {path}", **_cgroup_facts(location, cgroup_path),
            "processes_in_cgroup": len(cgroup_pids(location))}


def _oldest(pids: list[int]) -> int | None:
    ages = []
    for pid in pids:
        try:
            ages.append((psutil.Process(pid).create_time(), pid))
        except psutil.NoSuchProcess:
            continue
    return min(ages)[1] if ages else None


def find_container_target(container_id: str, mountinfo_text: str | None = None) -> dict:
    """The cgroup of container ``container_id`` (full id or a prefix of at least 4
    characters) and its oldest process (the container's entrypoint) as the pid."""
    mountinfo_text = mountinfo_text if mountinfo_text is not None else read_text(MOUNTINFO)
    try:
        cgroup_path = find_container_cgroup(container_id, mountinfo_text)
        location = locate_cgroup_path(cgroup_path, mountinfo_text)
    except (FileNotFoundError, ValueError) as exc:
        raise TargetNotFound(str(exc)) from None
    pid = _oldest(cgroup_pids(location))
    facts = describe_process(pid) if pid is not None else {"pid": None}
    return {**facts, "found_by": f"--target-container {container_id}", **_cgroup_facts(location, cgroup_path)}
