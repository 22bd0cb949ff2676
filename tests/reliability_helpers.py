"""Helpers for the reliability tests: a reference target we own, a `tailscope run` we can kill.

Every process started here is stopped by its own PID (SIGTERM, then SIGKILL)
in the callers' ``finally`` blocks or fixtures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from cli_helpers import free_port

TARGET_ENV = {
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
}


class OwnedProcess:
    """A subprocess started by a test, stopped by PID only."""

    def __init__(self, argv, env=None, stdout=subprocess.DEVNULL, cwd=None):
        self.proc = subprocess.Popen(argv, env=dict(os.environ, **(env or {})), stdout=stdout,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=cwd)
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self):
        for raw in self.proc.stderr:
            self.stderr_lines.append(raw.decode(errors="replace"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, grace_s: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        return self.proc.returncode


def start_target(port: int, receiver_port: int | None = None, extra=()) -> OwnedProcess:
    """The reference target on 127.0.0.1:``port``, exporting spans to ``receiver_port`` (or not)."""
    env = dict(TARGET_ENV)
    args = [sys.executable, "-m", "tailscope.targets.reference", "--host", "127.0.0.1", "--port", str(port), *extra]
    if receiver_port is None:
        args.append("--no-tracing")
    else:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver_port}"
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    target = OwnedProcess(args, env=env, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 30
    for raw in target.proc.stdout:
        if raw.startswith(b"LISTENING"):
            threading.Thread(target=lambda: [None for _ in target.proc.stdout], daemon=True).start()
            return target
        if time.monotonic() > deadline:
            break
    target.stop()
    raise RuntimeError(f"reference target did not start: {''.join(target.stderr_lines)[-2000:]}")


def write_scenario(path, target_url: str, *, duration="20s", rate=50, timeout="2s", extra: str = "",
                   request_path: str = "/v1/infer/text") -> str:
    """A small text-only scenario (POST of a small JSON body to ``request_path``) against
    ``target_url``; returns its path."""
    text = f"""name: reliability
target: {target_url}
duration: {duration}
timeout: {timeout}
seed: 3
arrival: {{process: poisson, rate: {rate}}}
classes:
  - name: text
    path: {request_path}
    headers: {{Content-Type: application/json}}
    payload: {{kind: json_text, size: 64}}
signals: {{rate: 2}}
{extra}
"""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)


def start_run(scenario: str, out_dir: str, *args: str) -> OwnedProcess:
    """`tailscope run` as a subprocess (its own receiver on a free port)."""
    return OwnedProcess([sys.executable, "-m", "tailscope.cli.main", "run", scenario, "--out", str(out_dir),
                         "--receiver-port", str(free_port()), "--receiver-grpc-port", "-1", *args],
                        stdout=subprocess.PIPE)


def wait_for_file(path: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def run_dir_of(out_dir: str, timeout_s: float = 60.0) -> str:
    """The one run directory under ``out_dir`` once its manifest exists."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dirs = [os.path.join(out_dir, d) for d in os.listdir(out_dir)] if os.path.isdir(out_dir) else []
        for d in dirs:
            if os.path.exists(os.path.join(d, "manifest.json")):
                return d
        time.sleep(0.05)
    raise TimeoutError(f"no run directory with a manifest under {out_dir}")


def manifest(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as fh:
        return json.load(fh)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out
