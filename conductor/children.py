"""Child processes the harness starts (receiver, samplers, reference target).

Each child is started with ``PR_SET_PDEATHSIG = SIGTERM`` so that it is told
to flush and exit even when the harness itself is killed with ``kill -9``.
Children are stopped by their own PID only (never by name or process group
we did not create): SIGTERM, a grace period, then SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from tailscope.faults.processes import stop_process
from tailscope.support.python_child import output_tail

PR_SET_PDEATHSIG = 1
#: How long a child may take to print its ``LISTENING <port>`` line.
READY_TIMEOUT_S = 30.0
#: How long a child may take to flush and exit after SIGTERM.
STOP_GRACE_S = 10.0


class ChildError(RuntimeError):
    """A child process failed to start or to become ready."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _child_setup(niceness: int):
    """preexec function: die with the parent, and lower the child's CPU priority
    by ``niceness`` so bookkeeping children never delay the load generator."""

    def setup() -> None:
        _die_with_parent()
        if niceness:
            try:
                os.nice(niceness)
            except OSError:
                pass

    return setup


class Child:
    """One child process with a name, for messages, and its PID."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None,
                 log_path: str | None = None, niceness: int = 0):
        self.name = name
        self.niceness = niceness
        self.argv = list(argv)
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._log = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, wait_listening: bool = False, timeout_s: float = READY_TIMEOUT_S) -> Child:
        """Start the process; with ``wait_listening`` read its port from a
        ``LISTENING <port>`` line on stdout. Raises :class:`ChildError`."""
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        env = dict(os.environ, **(self.env or {}))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE if wait_listening else self._log,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_child_setup(self.niceness),
        )
        if wait_listening:
            self.port = self._read_port(timeout_s)
            self._drain_stdout()
        return self

    def _read_port(self, timeout_s: float) -> int:
        assert self.proc and self.proc.stdout
        deadline = time.monotonic() + timeout_s
        result: dict = {}

        def reader():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith("LISTENING "):
                    result["port"] = int(line.split()[1])
                    return

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        while thread.is_alive() and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                thread.join(timeout=1)
                break
            thread.join(timeout=0.05)
        if "port" not in result:
            if not thread.is_alive():  # stdout closed without a port: the child is exiting, get its code
                try:
                    self.proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            code = self.proc.poll()
            self.stop()
            state = f"exited with code {code}" if code is not None else f"not ready after {timeout_s:.0f} s"
            raise ChildError(self._failure(state))
        return result["port"]

    def _failure(self, state: str) -> str:
        """The error for a child that did not come up: its state and the last lines it wrote.

        The lines are quoted here rather than the log named, because a run that
        never started removes its run directory, the log included."""
        if not self.log_path:
            return f"{self.name} {state}"
        tail = output_tail(self.log_path)
        if not tail:
            return f"{self.name} {state} and wrote nothing to its log"
        quoted = "\n".join(f"    {line}" for line in tail.splitlines())
        return f"{self.name} {state}; its last output:\n{quoted}"

    def _drain_stdout(self) -> None:
        """Keep reading the child's stdout so it never blocks on a full pipe."""
        proc, log = self.proc, self._log

        def drain():
            for raw in proc.stdout:
                if log not in (None, subprocess.DEVNULL):
                    log.write(raw)

        threading.Thread(target=drain, daemon=True).start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the child by PID, wait ``grace_s``, then SIGKILL. Returns its exit code."""
        if self.proc is None:
            return None
        stop_process(self.proc, grace_s=grace_s)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None
        return self.proc.returncode


class ChildGroup:
    """Children stopped together, in reverse start order, on exit or error."""

    def __init__(self):
        self.children: list[Child] = []

    def start(self, child: Child, wait_listening: bool = False) -> Child:
        self.children.append(child)
        return child.start(wait_listening=wait_listening)

    def stop_all(self) -> None:
        while self.children:
            self.children.pop().stop()

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
