"""Where a process's cgroups are: /proc/<pid>/cgroup and mountinfo → cgroup directories.

Both cgroup v1 (per-controller hierarchies) and v2 (unified) are supported. A leaf
module (it imports only :mod:`tailscope.support.procfs`): the cgroup sampler
(``signals/cgroup.py``) reads the directories it finds, the fault injectors
(``faults/cgroupfs.py``) create child cgroups below them.

The cgroup is found from a pid (:func:`locate_process_cgroups`), from a cgroup path
or directory (:func:`locate_cgroup_path`), or from a container id
(:func:`find_container_cgroup`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tailscope.support.procfs import read_text

#: Controllers whose directories are located; "unified" is the cgroup2 directory.
CONTROLLERS = ("cpu", "cpuacct", "memory")
#: How deep below a cgroup mount a container's cgroup is searched for.
CONTAINER_SEARCH_DEPTH = 6


@dataclass
class CgroupLocation:
    """Directories of a process's cgroups: ``cpu``/``cpuacct``/``memory`` → dir,
    each with the version (1 or 2) of the hierarchy it lives in."""

    dirs: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # hierarchy name → cgroup path
    unified_dir: str | None = None  # the cgroup2 directory (pressure files), v2 or hybrid
    #: The cgroup2 directory is the hierarchy's root: its pressure files are the whole host's
    #: (a process nobody put in a cgroup of its own), so they are not read as the cgroup's.
    unified_is_root: bool = False

    @property
    def version(self) -> str:
        """"v1", "v2", "hybrid" (both in use) or "none"."""
        used = set(self.versions.values())
        if used == {1}:
            return "v1"
        if used == {2}:
            return "v2"
        return "hybrid" if used else "none"


def parse_proc_cgroup(text: str) -> list[tuple[str, list[str], str]]:
    """Parse /proc/<pid>/cgroup into (hierarchy id, controllers, path) per line."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], [c for c in parts[1].split(",") if c], parts[2]))
    return out


def parse_mountinfo_cgroups(text: str) -> list[tuple[str, str, str, list[str]]]:
    """Cgroup mounts from /proc/self/mountinfo: (mount point, root, fstype, super options)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((fields[4], fields[3], tail[0], tail[2].split(",")))
    return out


def _join(mount_point: str, mount_root: str, cgroup_path: str) -> str:
    """Directory of ``cgroup_path`` under a mount whose root is ``mount_root``."""
    if mount_root != "/" and (cgroup_path == mount_root or cgroup_path.startswith(mount_root + "/")):
        cgroup_path = cgroup_path[len(mount_root):]
    return os.path.join(mount_point, cgroup_path.lstrip("/"))


def locate_cgroups(proc_cgroup_text: str, mountinfo_text: str) -> CgroupLocation:
    """Where the cpu, cpuacct and memory cgroups of a process are mounted.

    A v1 hierarchy that carries the controller wins; otherwise the v2 unified
    hierarchy is used (its files are absent if the controller is not enabled).
    """
    mounts = parse_mountinfo_cgroups(mountinfo_text)
    location = CgroupLocation()
    unified = None
    for hierarchy, controllers, path in parse_proc_cgroup(proc_cgroup_text):
        if hierarchy == "0" and not controllers:
            unified = path
            location.paths["unified"] = path
            continue
        location.paths[",".join(controllers)] = path
        for controller in controllers:
            if controller not in ("cpu", "cpuacct", "memory"):
                continue
            for mount_point, root, fstype, options in mounts:
                if fstype == "cgroup" and controller in options:
                    location.dirs[controller] = _join(mount_point, root, path)
                    location.versions[controller] = 1
                    break
    if unified is not None:
        for mount_point, root, fstype, _ in mounts:
            if fstype == "cgroup2":
                location.unified_dir = _join(mount_point, root, unified)
                for controller in ("cpu", "memory"):
                    if controller not in location.dirs:
                        location.dirs[controller] = location.unified_dir
                        location.versions[controller] = 2
                break
    return location


def _cgroup_path_of_directory(directory: str, mounts) -> str | None:
    """The cgroup path (as /proc/<pid>/cgroup writes it) of a directory under a cgroup mount."""
    directory = os.path.normpath(directory)
    for mount_point, root, _, _ in sorted(mounts, key=lambda m: -len(m[0])):
        if directory == mount_point or directory.startswith(mount_point.rstrip("/") + "/"):
            relative = directory[len(mount_point):].lstrip("/")
            return os.path.normpath(os.path.join(root, relative)) if relative else root
    return None


def locate_cgroup_path(path: str, mountinfo_text: str, isdir=os.path.isdir) -> CgroupLocation:
    """Locate a cgroup given as a directory (``/sys/fs/cgroup/memory/docker/ID``)
    or as a cgroup path (``/docker/ID``, ``/system.slice/x.service``).

    The same cgroup path is looked up in every hierarchy (v1 controllers and
    the cgroup2 mount), as container runtimes and systemd create it in each;
    only directories that exist are kept. Raises FileNotFoundError when no
    hierarchy has it.
    """
    mounts = parse_mountinfo_cgroups(mountinfo_text)
    cgroup_path = _cgroup_path_of_directory(path, mounts) if os.path.isabs(path) else None
    if cgroup_path is None:
        cgroup_path = "/" + path.strip("/")
    location = CgroupLocation()
    for mount_point, root, fstype, options in mounts:
        if root != "/" and not (cgroup_path == root or cgroup_path.startswith(root.rstrip("/") + "/")):
            continue
        directory = _join(mount_point, root, cgroup_path)
        if not isdir(directory):
            continue
        if fstype == "cgroup2":
            location.unified_dir = directory
            location.paths["unified"] = cgroup_path
            continue
        location.paths[",".join(o for o in options if o in CONTROLLERS) or mount_point] = cgroup_path
        for controller in CONTROLLERS:
            if controller in options and controller not in location.dirs:
                location.dirs[controller] = directory
                location.versions[controller] = 1
    if location.unified_dir is not None:
        for controller in ("cpu", "memory"):
            if controller not in location.dirs:
                location.dirs[controller] = location.unified_dir
                location.versions[controller] = 2
    if not location.dirs:
        raise FileNotFoundError(f"cgroup {path!r} exists in no cgroup hierarchy mounted here")
    return location


def _matches_container(name: str, container_id: str) -> bool:
    """Whether a cgroup directory name belongs to ``container_id`` (full or a prefix):
    ``<id>`` (docker cgroupfs), ``docker-<id>.scope``, ``cri-containerd-<id>.scope``,
    ``libpod-<id>.scope``, ``crio-<id>.scope``."""
    stem = name[: -len(".scope")] if name.endswith(".scope") else name
    return stem.startswith(container_id) or stem.rsplit("-", 1)[-1].startswith(container_id)


def find_container_cgroup(container_id: str, mountinfo_text: str,
                          max_depth: int = CONTAINER_SEARCH_DEPTH) -> str:
    """The cgroup path of a container, found by searching every cgroup mount for
    a directory named after ``container_id`` (at least 4 characters; a short
    id is a prefix of the full one) at most ``max_depth`` levels deep.

    Raises ValueError for a too-short or ambiguous id, FileNotFoundError when
    nothing matches.
    """
    container_id = container_id.strip().lower()
    if len(container_id) < 4:
        raise ValueError(f"container id {container_id!r} is too short (give at least 4 characters)")
    found: set[str] = set()
    for mount_point, root, _, _ in parse_mountinfo_cgroups(mountinfo_text):
        base_depth = mount_point.rstrip("/").count("/")
        for directory, subdirs, _ in os.walk(mount_point):
            if directory.count("/") - base_depth >= max_depth:
                subdirs[:] = []
            for name in subdirs:
                if _matches_container(name, container_id):
                    relative = os.path.join(directory, name)[len(mount_point):].lstrip("/")
                    found.add(os.path.normpath(os.path.join(root, relative)))
    if not found:
        raise FileNotFoundError(f"no cgroup of container {container_id!r} under any cgroup mount")
    if len(found) > 1:
        raise ValueError(f"container id {container_id!r} is ambiguous: {sorted(found)}")
    return found.pop()


def locate_process_cgroups(pid: int, proc_root: str = "/proc") -> CgroupLocation:
    """The cgroup directories of ``pid`` (reads /proc/<pid>/cgroup and our mountinfo)."""
    return locate_cgroups(read_text(f"{proc_root}/{pid}/cgroup"), read_text(f"{proc_root}/self/mountinfo"))
