"""How the conductor finds the target and starts the sampler process for it.

Kept here, beside the samplers, so the conductor needs two calls:
:func:`find_target` (manifest ``target_process``) and
:func:`sampler_arguments` (the ``python -m tailscope.signals`` flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin

from tailscope.signals.discovery import (
    TargetNotFound,
    describe_process,
    find_cgroup_target,
    find_container_target,
    find_listening_pid,
    find_process_target,
    service_root,
)


@dataclass(frozen=True)
class TargetChoice:
    """What the command line says about the target: at most one way to pick its
    process (pid, name, container) plus, optionally, a cgroup to sample."""

    pid: int | None = None
    process_name: str | None = None
    container: str | None = None
    cgroup: str | None = None


def find_target(choice: TargetChoice, port: int | None, loopback: bool) -> dict:
    """The manifest's ``target_process``: found by pid, name, container, cgroup,
    or (for a loopback target) by the process listening on ``port``.

    An explicit ``cgroup`` is sampled instead of the process's own. Raises
    :class:`TargetNotFound` (one-line reason) when a named target is absent.
    """
    if choice.pid is not None:
        try:
            found = {**describe_process(choice.pid), "found_by": "--target-pid"}
        except Exception as exc:  # noqa: BLE001  (psutil raises several kinds)
            raise TargetNotFound(f"--target-pid {choice.pid}: {exc}") from exc
    elif choice.process_name is not None:
        found = find_process_target(choice.process_name, port)
    elif choice.container is not None:
        found = find_container_target(choice.container)
    elif choice.cgroup is not None:
        return find_cgroup_target(choice.cgroup)
    else:
        found = _by_port(port) if loopback and port is not None else None
        if found is None:
            return {"pid": None, "found_by": None,
                    "reason": f"no local process listens on port {port}; target-process signals are off "
                              "(give --target-pid, --target-process, --target-container or --target-cgroup)"}
    if choice.cgroup is not None:
        cgroup = find_cgroup_target(choice.cgroup)
        found = {**found, **{k: v for k, v in cgroup.items() if k.startswith("cgroup")},
                 "found_by": f"{found['found_by']}, --target-cgroup {choice.cgroup}"}
    return found


def _by_port(port: int) -> dict | None:
    """The process listening on ``port``, or the top of its service (:func:`service_root`: PyTriton
    above its ``tritonserver``) with the listener named in ``found_by`` and ``listener``."""
    pid = find_listening_pid(port)
    if pid is None:
        return None
    root = service_root(pid)
    if root == pid:
        return {**describe_process(pid), "found_by": f"listening port {port}"}
    listener = describe_process(pid)
    return {**describe_process(root), "listener": {"pid": pid, "name": listener["name"]},
            "found_by": f"listening port {port} ({listener['name']}, pid {pid}), the top of its process group"}


def prometheus_urls(entries, target_url: str) -> list[str]:
    """Scenario ``signals.prometheus`` entries as absolute URLs (a path is relative to the target)."""
    return [urljoin(target_url.rstrip("/") + "/", entry.lstrip("/")) if entry.startswith("/") else entry
            for entry in entries]


def sampler_arguments(target_process: dict, rate_hz: float, prometheus: list[str], process_tree: bool) -> list[str]:
    """Flags of ``python -m tailscope.signals`` (after ``--run-dir``)."""
    args = ["--rate", str(rate_hz)]
    if target_process.get("pid"):
        args += ["--pid", str(target_process["pid"])]
    if target_process.get("cgroup_path"):
        args += ["--cgroup", target_process["cgroup_path"]]
    for url in prometheus:
        args += ["--prometheus", url]
    if not process_tree:
        args.append("--no-children")
    return args
