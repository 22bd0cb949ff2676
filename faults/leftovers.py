"""Put back what a killed fault agent left on the host, from its undo journal.

``python -m tailscope.faults.leftovers RUN_DIR`` does it by hand (after the
harness and its agent were both killed with ``kill -9``); the harness's fault
companion does it on its own when its agent ends without cleaning up.
"""

from __future__ import annotations

import argparse
import os
import sys

from tailscope.faults.cgroupfs import CgroupDir, remove_cgroup
from tailscope.faults.cpu_throttle import write_limit
from tailscope.faults.injector import FaultCleanupError
from tailscope.faults.swapfile import SwapFile
from tailscope.faults.undo_journal import JOURNAL_NAME, read_undo_journal


def undo_leftovers(journal_path: str) -> tuple[list[str], list[str]]:
    """Replay the journal, newest entry first: (what was put back, what could not be, with why).

    The journal is deleted when every entry was replayed without error."""
    done, errors = [], []
    for entry in reversed(read_undo_journal(journal_path)):
        try:
            done.append(_undo(entry))
        except (OSError, ValueError, KeyError, FaultCleanupError) as exc:
            errors.append(f"{entry['undo']} {entry.get('path')}: {exc}")
    if not errors:
        try:
            os.unlink(journal_path)
        except FileNotFoundError:
            pass
    return done, errors


def _undo(entry: dict) -> str:
    kind, path = entry["undo"], entry["path"]
    if kind == "remove_cgroup":
        version, controller = int(entry["version"]), entry["controller"]
        remove_cgroup(CgroupDir(path, version, controller), CgroupDir(entry["fallback"], version, controller))
        return f"removed cgroup {path}"
    if kind == "restore_file":
        if not os.path.exists(path):
            return f"{path} is gone (its cgroup was removed)"
        with open(path, "w", encoding="ascii") as fh:
            fh.write(entry["value"])
        return f"restored {path} to {entry['value']}"
    if kind == "restore_cpu_limit":
        if not os.path.isdir(path):
            return f"{path} is gone"
        write_limit(CgroupDir(path, int(entry["version"]), "cpu"), int(entry["quota_us"]), int(entry["period_us"]))
        return f"restored the CPU limit of {path}"
    SwapFile(path, 0).remove()  # remove_swap_file
    return f"removed swap file {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailscope.faults.leftovers", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="the run directory whose fault agent was killed")
    args = parser.parse_args(argv)
    done, errors = undo_leftovers(os.path.join(args.run_dir, JOURNAL_NAME))
    for line in done:
        print(line)
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    if not done and not errors:
        print("nothing to put back")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
