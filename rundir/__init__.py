"""The run directory: the contract between every part of tailscope.

Writers append Arrow IPC streams (:mod:`.appender`); readers load them back,
tolerating a truncated last batch (:mod:`.reader`). File names and columns are
defined once, in :mod:`.schema`, and documented in docs/run-format.md.
"""

from tailscope.rundir.appender import Appender, DiskFullError, PeriodicFlusher, FLUSH_INTERVAL_S
from tailscope.rundir.manifest import RunWriter, write_json_atomic, new_run_dir
from tailscope.rundir.reader import Run, RunDirError, TableRead, load_run, read_json, read_stream, release_pages
from tailscope.rundir import schema

__all__ = [
    "Appender",
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
