"""Triton Inference Server, as PyTriton ships it, for the real-server tests.

:data:`TRITON_STEPS` make the cached venv (``real_servers.venvs``): ``nvidia-pytriton`` (Triton
2.51's binary inside) and the OpenTelemetry SDK + OTLP/HTTP exporter that PyTriton needs once
trace options are set. :func:`start_triton` runs ``pytriton_model.py`` (a numpy model whose
cost grows with its input) in that venv with Triton's OpenTelemetry tracing sent to a
tailscope receiver's ``/v1/traces``, waits until it answers, and stops it by PID on exit.

Two things a plain start gets wrong here, both handled:

* Triton's Python-backend stub links the ``libpython`` the dynamic loader finds first; where
  that is the system's and the venv runs another Python build (pyenv here), the stub fails
  with ``'_thread.RLock' object has no attribute '_recursion_count'``. ``LD_LIBRARY_PATH``
  points at the venv interpreter's own ``LIBDIR`` first.
* Triton stops on SIGTERM (SIGINT is not enough), and PyTriton leaves a workspace behind
  when it is killed: the workspace is a temporary folder of ours, removed on stop, and any
  ``~/.cache/pytriton/workspace_*`` that appeared while it ran is removed too.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from cli_helpers import free_port

from real_servers.venvs import Venv, cached_venv

#: What the venv holds (the cache key): PyTriton and what its tracing imports.
TRITON_STEPS = [["-m", "pip", "install", "nvidia-pytriton==0.7.0", "opentelemetry-sdk==1.45.2",
                 "opentelemetry-exporter-otlp-proto-http==1.45.2"]]
MODEL = "tiny_mlp"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytriton_model.py")
#: Longest wait for Triton to load the model and answer, s.
START_TIMEOUT_S = 120.0
#: Longest wait for it to stop after SIGTERM before SIGKILL, s.
STOP_TIMEOUT_S = 30.0
PYTRITON_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pytriton")


@dataclass
class TritonServer:
    """A running Triton: its ports, the PID of the PyTriton process (the model's Python code
    runs there; ``tritonserver`` is its child), how long it took to answer (s) and its log."""

    pid: int
    http_port: int
    metrics_port: int
    receiver_port: int
    start_s: float
    venv: Venv
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def infer_body(self, n: int) -> str:
        """A KServe v2 JSON request of ``n`` FP32 values (the model's cost grows with ``n``)."""
        data = ",".join(f"{(i % 97) / 97:.3f}" for i in range(n))
        return f'{{"inputs": [{{"name": "x", "shape": [1, {n}], "datatype": "FP32", "data": [{data}]}}]}}'


def triton_venv() -> Venv:
    """The cached PyTriton venv (raises InstallFailed with pip's error)."""
    return cached_venv("pytriton", TRITON_STEPS)


def _libdir(venv: Venv) -> str:
    done = subprocess.run([venv.python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/models/{MODEL}/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def start_triton(receiver_port: int | None = None) -> Iterator[TritonServer]:
    """Start Triton with its traces going to ``http://127.0.0.1:RECEIVER_PORT/v1/traces``
    (a free port when None: start tailscope's receiver there), yield it once the model is
    ready, stop it by PID on exit (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and remove
    what it left. Raises RuntimeError with its log when it does not become ready."""
    venv = triton_venv()
    receiver_port = receiver_port or free_port()
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    workspace = tempfile.mkdtemp(prefix="tailscope-pytriton-")
    before = set(glob.glob(os.path.join(PYTRITON_CACHE, "workspace_*")))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PYTHONPATH"))}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (_libdir(venv), env.get("LD_LIBRARY_PATH")) if p)
    started = time.monotonic()
    proc = subprocess.Popen(
        [venv.python, SCRIPT, "--http-port", str(http_port), "--grpc-port", str(grpc_port),
         "--metrics-port", str(metrics_port), "--trace-url", f"http://127.0.0.1:{receiver_port}/v1/traces",
         "--workspace", os.path.join(workspace, "ws")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    server = TritonServer(proc.pid, http_port, metrics_port, receiver_port, 0.0, venv)
    reader = threading.Thread(target=lambda: server.log.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        url = f"http://127.0.0.1:{http_port}"
        while not _ready(url):
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"Triton did not become ready (exit {proc.poll()}):\n" + "".join(server.log[-40:]))
            time.sleep(0.5)
        server.start_s = time.monotonic() - started
        yield server
    finally:
        _stop(proc)
        reader.join(timeout=5)
        shutil.rmtree(workspace, ignore_errors=True)
        for left in set(glob.glob(os.path.join(PYTRITON_CACHE, "workspace_*"))) - before:
            shutil.rmtree(left, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the PyTriton process (it stops tritonserver and its stubs), SIGKILL to its
    process group if it has not exited in STOP_TIMEOUT_S."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything of its session still alive (tritonserver, stubs)
    proc.wait(timeout=10)
