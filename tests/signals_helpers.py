"""Shared helpers of the signal-sampler tests: CPU-burner children and reading series back."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time

from tailscope.rundir import read_json, read_stream, schema

BURNER_CODE = "while True: pass"
#: A child that writes 4 MiB and fsyncs it, over and over (it spends most of its time in state D).
FSYNC_WRITER_CODE = (
    "import os, sys, tempfile\n"
    "fd, path = tempfile.mkstemp(dir=sys.argv[1]); os.unlink(path); block = os.urandom(4 << 20)\n"
    "while True:\n    os.pwrite(fd, block, 0); os.fsync(fd)\n"
)


def start_burner(preexec_fn=None) -> subprocess.Popen:
    """A child process spinning one CPU until killed."""
    return subprocess.Popen([sys.executable, "-c", BURNER_CODE], preexec_fn=preexec_fn)


def start_fsync_writer(directory: str) -> subprocess.Popen:
    """A child process writing and fsyncing 4 MiB in a loop, in a file (already unlinked) in ``directory``."""
    return subprocess.Popen([sys.executable, "-c", FSYNC_WRITER_CODE, directory])


class StateWatcher:
    """Polls ``/proc/<pid>/stat`` from a thread at ~1 kHz and counts the process's states ("R", "S", "D", ...).

    An observer independent of the sampler: it says how often the process was really in a state, so a test
    can tell "the sampler missed it" from "this host never put the process in that state".
    """

    def __init__(self, pid: int, interval_s: float = 0.001):
        self.counts: collections.Counter[str] = collections.Counter()
        self._path = f"/proc/{pid}/stat"
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> StateWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def share(self, state: str) -> float:
        """Fraction of polls that found the process in ``state`` (0 when nothing was polled)."""
        total = sum(self.counts.values())
        return self.counts[state] / total if total else 0.0

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                with open(self._path) as f:
                    self.counts[f.read().rsplit(")", 1)[1].split()[0]] += 1
            except (OSError, IndexError):
                return
            self._stop.wait(self._interval_s)


def stop_process(process: subprocess.Popen) -> None:
    """SIGKILL and reap ``process`` if it is still running."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def run_sampler_process(run_dir: str, pid: int | None, rate_hz: float, duration_s: float) -> int:
    """Run ``python -m tailscope.signals`` for ``duration_s``, SIGTERM it, return its exit code."""
    cmd = [sys.executable, "-m", "tailscope.signals", "--run-dir", run_dir, "--rate", str(rate_hz)]
    if pid is not None:
        cmd += ["--pid", str(pid)]
    sampler = subprocess.Popen(cmd)
    try:
        _wait_until_sampling(run_dir, sampler)  # start-up (imports, probes) is not part of duration_s
        time.sleep(duration_s)
        sampler.send_signal(signal.SIGTERM)
        return sampler.wait(timeout=10)
    finally:
        stop_process(sampler)


def _wait_until_sampling(run_dir: str, sampler: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Until the sampler has probed its sources (signals.json written) and so handles SIGTERM."""
    deadline = time.monotonic() + timeout_s
    path = os.path.join(run_dir, schema.SIGNALS_META)
    while not os.path.exists(path) and sampler.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def read_series(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """``{series: [(t_ns, value), ...]}`` from signals.arrow, in time order."""
    read = read_stream(os.path.join(run_dir, schema.SIGNALS), schema.SIGNALS_SCHEMA)
    assert not read.truncated and not read.missing
    out: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for row in read.table.to_pylist():
        out[row["series"]].append((row["t_ns"], row["value"]))
    for values in out.values():
        values.sort()
    return dict(out)


def read_signals_meta(run_dir: str) -> dict:
    return read_json(os.path.join(run_dir, schema.SIGNALS_META))
