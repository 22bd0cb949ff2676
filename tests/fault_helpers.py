"""Helpers for the fault-injector tests: a real reference target, in a cgroup of its own when possible."""

from __future__ import annotations

import http.client
import json
import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from tailscope.faults.injector import FaultSetupError
from tailscope.faults.own_cgroup import create_own_cgroups, remove_own_cgroups

STARTUP_TIMEOUT_S = 30.0
TARGET_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PYTHONUNBUFFERED": "1"}


def cgroups_or_skip(name: str):
    """Own cgroups for a test target, or pytest.skip with the printed reason."""
    try:
        return create_own_cgroups(name)
    except FaultSetupError as exc:
        print(f"skipping: {exc}")
        pytest.skip(f"needs root and writable cgroups: {exc}")


class LabTarget:
    """``python -m tailscope.targets.reference`` (no tracing) on a free loopback port, optionally in ``cgroups`` and on ``cpus``."""

    def __init__(self, args: list[str], cgroups=(), cpus: str | None = None) -> None:
        target = [sys.executable, "-m", "tailscope.targets.reference", "--host", "127.0.0.1", "--port", "0",
                  "--no-tracing", *args]
        placement = [a for c in cgroups for a in ("--cgroup", c.path)] + (["--cpus", cpus] if cpus else [])
        argv = [sys.executable, "-m", "tailscope.faults.own_cgroup", *placement, "--", *target] if placement else target
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        env=dict(os.environ, **TARGET_ENV))
        self.port = self._read_port()
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_port(self) -> int:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                self.close()
                raise TimeoutError("the target printed no LISTENING line")
        line = self.process.stdout.readline()
        return int(line.split()[1])

    def post(self, path: str, document: dict, timeout: float = 30.0) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("POST", path, body=json.dumps(document), headers={"content-type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get(self, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def timed_requests(target: LabTarget, seconds: float, text: str = "some words to classify " * 20) -> list[tuple]:
    """Send sequential text requests for ``seconds``; return (start_ns, end_ns, status) per request."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.time_ns()
        status, _ = target.post("/v1/infer/text", {"text": text})
        out.append((start, time.time_ns(), status))
    return out


def close_all(target: LabTarget | None, cgroups) -> None:
    try:
        if target is not None:
            target.close()
    finally:
        remove_own_cgroups(list(cgroups))
