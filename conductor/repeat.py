"""``tailscope run --repeat N``: one scenario run N times, one after the other, into one folder.

The folder (``<out>/<name>-<UTC stamp>-x<N>``) holds ``run-1`` … ``run-N``, each a normal run
directory with its own report, so ``tailscope compare`` reads the folder as one side of a
comparison (the run-to-run spread then enters its intervals: docs/analyzers/compare.md). This is
the sequencing only: each run is executed, analysed and reported by the caller's ``run_once``
(the CLI's run → report path, which prints and picks exit codes); this module prints nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from tailscope.conductor.run_setup import safe_name
from tailscope.rundir import RunDirError, read_json
from tailscope.rundir.manifest import make_unique_dir, utc_stamp


@dataclass(frozen=True)
class RepeatedRun:
    """One run of a repeat: its number (1-based), its run directory (None when it could not
    start) and the exit code ``run_once`` gave it."""

    index: int
    run_dir: str | None
    code: int


def repeat_folder(parent: str, name: str, count: int) -> str:
    """Create and return ``parent/<name>-<UTC stamp>-x<count>`` (``-2``, ``-3`` … appended when taken)."""
    return make_unique_dir(os.path.join(parent, f"{safe_name(name)}-{utc_stamp()}-x{count}"))


def _stopped_early(run_dir: str | None) -> bool:
    """Whether the repeat must stop after this run: it could not start, or the user interrupted it."""
    if run_dir is None:
        return True
    try:
        manifest = read_json(os.path.join(run_dir, "manifest.json"), {}) or {}
    except RunDirError:
        return True
    return manifest.get("status") == "interrupted"


def run_repeated(options, scenario_name: str, count: int,
                 run_once: Callable[[object], tuple[int, str | None]],
                 on_run: Callable[[RepeatedRun], None] | None = None) -> tuple[str, list[RepeatedRun]]:
    """Run ``count`` times: ``run_once(options')`` with ``options'`` = ``options`` (a conductor
    RunOptions) writing into the repeat folder as ``run-<i>``; ``on_run`` hears each result.

    Stops early when a run could not start or was interrupted (SIGINT/SIGTERM); the runs made so
    far stay in the folder. Returns (the folder, the results in order).
    """
    if count < 1:
        raise ValueError(f"a repeat needs at least one run, got {count}")
    folder = repeat_folder(options.out_dir, scenario_name, count)
    results = []
    for index in range(1, count + 1):
        code, run_dir = run_once(replace(options, out_dir=folder, run_dir_name=f"run-{index}"))
        result = RepeatedRun(index, run_dir, code)
        results.append(result)
        if on_run is not None:
            on_run(result)
        if _stopped_early(run_dir):
            break
    return folder, results
