"""The run directory: the contract between every part of tailscope.

Writers append Arrow IPC streams (:mod:`.appender`); readers load them back,
tolerating a truncated last batch (:mod:`.reader`). File names and columns are
defined once, in :mod:`.schema`, and documented in docs/run-format.md.
"""

from tailscope.rundir import schema
from tailscope.rundir.appender import FLUSH_INTERVAL_S, Appender, DiskFullError, PeriodicFlusher
from tailscope.rundir.manifest import RunWriter, new_run_dir, write_json_atomic
from tailscope.rundir.reader import Damage, Run, RunDirError, TableRead, load_run, read_json, read_stream, release_pages

__all__ = [
    "Appender",
    "Damage",
    "DiskFullError",
    "PeriodicFlusher",
    "FLUSH_INTERVAL_S",
    "Run",
    "RunDirError",
    "RunWriter",
    "TableRead",
    "load_run",
    "new_run_dir",
    "read_json",
    "read_stream",
    "release_pages",
    "schema",
    "write_json_atomic",
]
