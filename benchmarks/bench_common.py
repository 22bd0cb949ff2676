"""Helpers shared by the benchmarks: the loopback server, pinned generator subprocesses and
the reference target over loopback. Every process started here is stopped by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

from tailscope.support.python_child import python_argv, python_module

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


#: Single-threaded BLAS in the reference target: one request's model call uses one core.
SINGLE_THREADED_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def start_reference_target(port: int, receiver_port: int, *target_args: str, **env: str) -> subprocess.Popen:
    """The reference target on 127.0.0.1:``port``, exporting spans over OTLP/HTTP to the receiver on
    ``receiver_port`` every 200 ms (``env`` adds variables); returns once it listens."""
    child_env = dict(os.environ, **SINGLE_THREADED_BLAS, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver_port}",
                     OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_BSP_SCHEDULE_DELAY="200", **env)
    proc = subprocess.Popen(python_module("tailscope.targets.reference", "--host", "127.0.0.1", "--port", str(port),
                                          *target_args), env=child_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in proc.stdout:
        if line.startswith(b"LISTENING"):
            return proc
    raise RuntimeError("the reference target did not start")


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc`` by its PID, SIGKILL after 15 s; nothing when it has already exited."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
