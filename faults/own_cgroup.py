"""A cgroup of its own for a process tailscope starts (the lab's target), like a container.

:func:`create_own_cgroups` makes ``<name>`` under this process's own cpu and
memory cgroups (one directory on cgroup v2), without limits;
``python -m tailscope.faults.own_cgroup [--cpus LIST] --cgroup DIR ... -- ARGV``
pins itself to LIST (a cpuset, as containers have), moves itself into those
directories and then ``exec``\\ s ARGV, so everything the
program ever allocates is charged there, and the samplers and the fault
injectors act on a cgroup that holds only the target. :func:`remove_own_cgroups`
moves stragglers back and removes the directories.
"""

from __future__ import annotations

import argparse
import os
import sys

from tailscope.faults.cgroupfs import CgroupDir, make_child, move_process, remove_cgroup, target_cgroup
from tailscope.faults.injector import FaultCleanupError, FaultSetupError
from tailscope.faults.processes import parse_cpu_list

CONTROLLERS = ("cpu", "memory")
#: Created too when mounted as a hierarchy of its own (cgroup v1), so CPU usage is the target's.
OPTIONAL_CONTROLLERS = ("cpuacct",)


def create_own_cgroups(name: str) -> list[CgroupDir]:
    """Create ``name`` under this process's cpu and memory cgroups; FaultSetupError when not possible.

    On a failure, the directories already created are removed.
    """
    if os.geteuid() != 0:
        raise FaultSetupError("a cgroup of its own for the target needs root")
    created: list[CgroupDir] = []
    seen: set[str] = set()
    try:
        for controller in (*CONTROLLERS, *OPTIONAL_CONTROLLERS):
            try:
                parent = target_cgroup(os.getpid(), controller)
            except FaultSetupError:
                if controller in OPTIONAL_CONTROLLERS:
                    continue
                raise
            if parent.path in seen:
                continue
            seen.add(parent.path)
            created.append(make_child(parent, name))
    except OSError as exc:
        remove_own_cgroups(created)
        raise FaultSetupError(f"cannot create cgroup {name!r}: {exc}") from exc
    return created


def remove_own_cgroups(cgroups: list[CgroupDir]) -> None:
    """Move any process left back to the parent and remove each directory. Raises FaultCleanupError."""
    errors = []
    for cgroup in cgroups:
        parent = CgroupDir(os.path.dirname(cgroup.path), cgroup.version, cgroup.controller)
        try:
            remove_cgroup(cgroup, parent)
        except FaultCleanupError as exc:
            errors.append(str(exc))
    if errors:
        raise FaultCleanupError("; ".join(errors))


def remove_leftover_cgroups(name: str) -> list[str]:
    """Remove ``name`` under this process's cgroups if a killed process left it; return what was removed.

    For a crashed child that created its cgroup with :func:`create_own_cgroups`
    (its cgroups are this process's). Raises FaultCleanupError when one cannot be removed.
    """
    removed, leftovers = [], []
    for controller in (*CONTROLLERS, *OPTIONAL_CONTROLLERS):
        try:
            parent = target_cgroup(os.getpid(), controller)
        except FaultSetupError:
            continue
        candidate = CgroupDir(os.path.join(parent.path, name), parent.version, controller)
        if os.path.isdir(candidate.path) and candidate.path not in removed:
            leftovers.append(candidate)
            removed.append(candidate.path)
    remove_own_cgroups(leftovers)
    return removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.own_cgroup",
                                     description="move into cgroup directories, then exec a command")
    parser.add_argument("--cgroup", action="append", default=[], metavar="DIR")
    parser.add_argument("--cpus", default=None, metavar="LIST", help="CPU affinity first, e.g. '1' or '2-3'")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    if args.cpus:
        os.sched_setaffinity(0, parse_cpu_list(args.cpus))
    for directory in args.cgroup:
        move_process(os.getpid(), CgroupDir(directory, 0, ""))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
