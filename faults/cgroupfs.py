"""Small cgroup-filesystem operations the injectors share (cgroup v1 and v2).

A :class:`CgroupDir` is one directory of one controller's hierarchy. The
injectors act either on the target's own cgroup, *in place*, when the target
is alone in it (a container, a systemd unit, the lab's launcher) — then the
samplers, which watch that cgroup, see the effect — or on a *child* cgroup
they create under it and move the target into for the window.

Memory charges do not move with a process (cgroup v1's
``memory.move_charge_at_immigrate`` is deprecated and ignored by recent
kernels; v2 never moved charges), so memory faults need the in-place mode.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

import psutil

from tailscope.faults.injector import FaultCleanupError, FaultSetupError
from tailscope.support.cgroups import locate_process_cgroups

#: How long rmdir of a just-emptied cgroup is retried (the kernel frees it asynchronously).
RMDIR_RETRY_S = 5.0


@dataclass(frozen=True)
class CgroupDir:
    """A cgroup directory, its hierarchy version (1 or 2) and the controller it was found for."""

    path: str
    version: int
    controller: str

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def read(self, name: str) -> str:
        with open(self.file(name), encoding="ascii") as fh:
            return fh.read().strip()

    def write(self, name: str, value: str) -> None:
        with open(self.file(name), "w", encoding="ascii") as fh:
            fh.write(value)

    def has(self, name: str) -> bool:
        return os.path.exists(self.file(name))

    def processes(self) -> list[int]:
        """PIDs in this cgroup (``cgroup.procs``)."""
        text = self.read("cgroup.procs")
        return [int(line) for line in text.split()]

    def is_root(self) -> bool:
        return not os.path.exists(os.path.join(os.path.dirname(self.path), "cgroup.procs"))


def target_cgroup(pid: int, controller: str) -> CgroupDir:
    """The ``controller`` (``cpu`` or ``memory``) cgroup of ``pid``; FaultSetupError when none is mounted."""
    try:
        location = locate_process_cgroups(pid)
    except OSError as exc:
        raise FaultSetupError(f"cannot read the cgroup of process {pid}: {exc}") from exc
    path = location.dirs.get(controller)
    if path is None or not os.path.isdir(path):
        raise FaultSetupError(f"process {pid} has no {controller} cgroup mounted here (cgroup {location.version})")
    return CgroupDir(path, location.versions[controller], controller)


def family(pid: int) -> set[int]:
    """``pid`` and its descendants."""
    try:
        process = psutil.Process(pid)
        return {pid, *(child.pid for child in process.children(recursive=True))}
    except psutil.NoSuchProcess:
        return {pid}


def owns_cgroup(cgroup: CgroupDir, pid: int) -> bool:
    """True when only ``pid`` and its descendants live in ``cgroup`` and it is not a hierarchy root."""
    if cgroup.is_root():
        return False
    return set(cgroup.processes()) <= family(pid)


def require_writable(cgroup: CgroupDir, names: tuple[str, ...]) -> None:
    """FaultSetupError unless every file in ``names`` exists and is writable."""
    for name in names:
        path = cgroup.file(name)
        if not os.path.exists(path):
            raise FaultSetupError(f"{path} does not exist (controller not enabled in cgroup v{cgroup.version}?)")
        if not os.access(path, os.W_OK):
            raise FaultSetupError(f"{path} is not writable (needs root and a writable cgroup filesystem)")


def make_child(parent: CgroupDir, name: str) -> CgroupDir:
    """Create ``parent/name`` (cgroup v2: enabling the controller for children first)."""
    if parent.version == 2:
        enabled = parent.read("cgroup.subtree_control").split()
        if parent.controller not in enabled:
            parent.write("cgroup.subtree_control", f"+{parent.controller}")
    path = os.path.join(parent.path, name)
    os.mkdir(path)
    return CgroupDir(path, parent.version, parent.controller)


def create_child(parent: CgroupDir, name: str, what: str) -> CgroupDir:
    """:func:`make_child`, raising FaultSetupError that names ``what`` (the fault, e.g.
    ``"memory_swap (victim neighbour)"``), the cgroup and its parent when it cannot be made."""
    try:
        return make_child(parent, name)
    except OSError as exc:
        raise FaultSetupError(f"{what}: cannot create {name} under {parent.path}: {exc.strerror or exc}") from exc


def move_process(pid: int, destination: CgroupDir) -> None:
    """Move ``pid`` with all its threads into ``destination`` (``cgroup.procs``)."""
    destination.write("cgroup.procs", str(pid))


def remove_cgroup(cgroup: CgroupDir, fallback: CgroupDir) -> None:
    """Move any process left in ``cgroup`` to ``fallback``, then rmdir it (retried briefly).

    Raises FaultCleanupError when it cannot be removed.
    """
    if not os.path.isdir(cgroup.path):
        return
    deadline = time.monotonic() + RMDIR_RETRY_S
    while True:
        try:
            for pid in cgroup.processes():
                try:
                    move_process(pid, fallback)
                except OSError as exc:
                    if exc.errno != errno.ESRCH:
                        raise
            os.rmdir(cgroup.path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise FaultCleanupError(f"cannot remove cgroup {cgroup.path}: {exc}") from exc
            time.sleep(0.05)
