"""Companions that watch the harness itself while the load runs.

:class:`RunGuard` stops a run that can no longer record faithfully, with the
status ``failed`` and one clear reason, instead of letting it run on and
silently lose data:

* a harness stream failed to write (``disk full: …``, from the
  :class:`~tailscope.rundir.PeriodicFlusher`);
* the run directory used up its ``retention.disk_budget``
  (:class:`~tailscope.loadgen.record_keeper.RecordKeeper`);
* a bookkeeping child (OTLP receiver, signal sampler) exited with a non-zero
  status: :data:`~tailscope.rundir.appender.EXIT_DISK_FULL` means its disk
  filled up, anything else is a crash (its log is named). Status 0 is a child
  that was told to stop (a terminal's Ctrl-C reaches the whole process group)
  and flushed: not a failure.

:class:`ResourceMonitor` records the resident memory of the harness and of
its children once per progress tick (about 1 s) into
``signals.harness.arrow`` — ``harness.rss_bytes``, ``receiver.rss_bytes``,
``sampler.rss_bytes`` — so that a soak report shows whether tailscope's own
memory stayed flat.

Both are checked from the progress callback (about once a second), so a
failure stops the load within about a second.
"""

from __future__ import annotations

import os
import time

import psutil

from tailscope.conductor.companion import Companion, RunContext
from tailscope.rundir import Appender, schema
from tailscope.rundir.appender import EXIT_DISK_FULL

#: Children whose death ends the run, by their Child.name → short series/role name.
WATCHED_CHILDREN = {"OTLP receiver": "receiver", "signal sampler": "sampler"}
HARNESS_WRITER = "harness"


def child_exit_reason(name: str, code: int, log_path: str | None) -> str:
    """One line for a bookkeeping child that exited during the run."""
    if code == EXIT_DISK_FULL:
        return f"disk full: the {name} could not write and stopped"
    where = f"; see {log_path}" if log_path else ""
    return f"the {name} exited during the run with status {code}{where}"


class RunGuard(Companion):
    """Fails the run on write errors, an exhausted disk budget or a dead child."""

    name = "run guard"

    def __init__(self, writer, keeper, children):
        self.writer = writer
        self.keeper = keeper
        self.children = list(children)  # the bookkeeping children, started before the load
        self.ctx: RunContext | None = None

    def start(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def on_progress(self, progress) -> None:
        reason = self.check()
        if reason is not None and self.ctx is not None and not self.ctx.failures:
            self.ctx.fail(reason)

    def check(self) -> str | None:
        """The first reason the run must stop, or None."""
        error = self.writer.write_error()
        if error is not None:
            from tailscope.rundir.manifest import describe_write_error

            return describe_write_error(error)
        if self.keeper is not None and self.keeper.failure:
            return self.keeper.failure
        for child in list(self.children):
            if child.name in WATCHED_CHILDREN and child.proc is not None:
                code = child.proc.poll()
                if code not in (None, 0):
                    return child_exit_reason(child.name, code, child.log_path)
        return None


class ResourceMonitor(Companion):
    """Samples the RSS of the harness and its bookkeeping children (bytes, ~1 Hz)."""

    name = "resource monitor"

    def __init__(self, run_dir: str, children):
        self.children = list(children)
        self.appender = Appender(os.path.join(run_dir, schema.writer_file(schema.SIGNALS, HARNESS_WRITER)),
                                 schema.SIGNALS_SCHEMA)
        self._processes: dict[str, psutil.Process] = {"harness": psutil.Process(os.getpid())}

    def on_progress(self, progress) -> None:
        self.sample()

    def sample(self) -> None:
        t_ns = time.time_ns()
        for child in list(self.children):
            role = WATCHED_CHILDREN.get(child.name)
            if role and role not in self._processes and child.pid:
                try:
                    self._processes[role] = psutil.Process(child.pid)
                except psutil.Error:
                    continue
        for role, process in list(self._processes.items()):
            try:
                rss = process.memory_info().rss
            except psutil.Error:
                del self._processes[role]
                continue
            self.appender.append(t_ns, f"{role}.rss_bytes", float(rss))
        try:
            self.appender.flush()
        except OSError:
            pass  # the run guard reports write errors of the harness's own streams

    def stop(self) -> None:
        try:
            self.appender.close()
        except OSError:
            pass
