"""The fault agent's undo journal: how to put back every change it makes to the host.

Before an injector changes the host — creates a cgroup, lowers a limit,
enables a swap file — it writes one JSON line saying how to undo that change
(``faults.undo.jsonl`` in the run directory, flushed and fsynced before the
change is made). The agent undoes its changes itself on every ordinary end;
the journal is for the end it cannot handle, ``kill -9`` of the agent: the
harness then replays it (:mod:`.leftovers`), newest entry first.

Every entry is safe to replay more than once and after its change was
already undone (a missing cgroup, an inactive swap file, a limit already at
its old value are no-ops), so an entry is never taken back.

Entry kinds (``undo``), with their fields:

* ``remove_cgroup``: ``path``, ``fallback`` (where its processes go), ``version``, ``controller``;
* ``restore_file``: ``path``, ``value`` (a cgroup file's previous text);
* ``restore_cpu_limit``: ``path``, ``version``, ``quota_us`` (−1: none), ``period_us``;
* ``remove_swap_file``: ``path`` (swapoff, then delete).
"""

from __future__ import annotations

import json
import os
import threading

JOURNAL_NAME = "faults.undo.jsonl"
KINDS = ("remove_cgroup", "restore_file", "restore_cpu_limit", "remove_swap_file")


class UndoJournal:
    """Appends undo entries to ``path`` (None: a journal that keeps nothing, for injectors used
    outside an agent, as in tests of one injector)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def remove_cgroup(self, path: str, fallback: str, version: int, controller: str) -> None:
        self._write({"undo": "remove_cgroup", "path": path, "fallback": fallback, "version": version,
                     "controller": controller})

    def restore_file(self, path: str, value: str) -> None:
        self._write({"undo": "restore_file", "path": path, "value": value})

    def restore_cpu_limit(self, path: str, version: int, quota_us: int, period_us: int) -> None:
        self._write({"undo": "restore_cpu_limit", "path": path, "version": version, "quota_us": quota_us,
                     "period_us": period_us})

    def remove_swap_file(self, path: str) -> None:
        self._write({"undo": "remove_swap_file", "path": path})

    def discard(self) -> None:
        """Delete the journal (the agent ended having undone everything itself)."""
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def _write(self, entry: dict) -> None:
        if self.path is None:
            return
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def read_undo_journal(path: str) -> list[dict]:
    """The entries of the journal at ``path``, oldest first ([] when there is none). A torn last
    line (the agent killed mid-write: its change was not made yet) and unknown kinds are skipped."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("undo") in KINDS:
            entries.append(entry)
    return entries
