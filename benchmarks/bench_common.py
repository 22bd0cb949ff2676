"""Helpers shared by the load-generator benchmarks: the loopback server and
pinned generator subprocesses. Every process started here is stopped by PID."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from tailscope.support.python_child import python_argv

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER_CPU = 0
GENERATOR_CPU = 1 if (os.cpu_count() or 1) > 1 else 0


@contextlib.contextmanager
def loopback_server(*args: str):
    """Start benchmarks/loopback_server.py on SERVER_CPU; yields (url, start epoch ns)."""
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "loopback_server.py"),
                                "--cpu", str(SERVER_CPU), *args], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline().split()
        if not line or line[0] != "LISTENING":
            raise RuntimeError(f"the loopback server did not start: {line}")
        yield f"http://127.0.0.1:{line[1]}", int(line[2])
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_python(code: str, config: dict, timeout_s: float = 300) -> dict:
    """Run ``code`` (which reads CONFIG and prints one JSON line) in a fresh
    interpreter pinned to GENERATOR_CPU; return the parsed JSON."""
    prelude = (f"import os, json\nos.sched_setaffinity(0, {{{GENERATOR_CPU}}})\n"
               f"CONFIG = json.loads({json.dumps(json.dumps(config))})\n")
    proc = subprocess.run(python_argv("-c", prelude + code), capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())
