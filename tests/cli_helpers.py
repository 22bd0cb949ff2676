"""Helpers shared by the end-to-end tests: run the real `tailscope` command, find its run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tailscope(*args: str, timeout: float = 240, cwd: str | None = None,
                  env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real `tailscope` command (python -m tailscope.cli.main) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "tailscope.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env=dict(os.environ, **(env or {})),
    )


def only_run_dir(parent) -> str:
    dirs = [os.path.join(parent, d) for d in os.listdir(parent)
            if os.path.isdir(os.path.join(parent, d))]
    assert len(dirs) == 1, f"expected one run directory in {parent}, found {dirs}"
    return dirs[0]


def load_analysis(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "analysis.json"), encoding="utf-8") as fh:
        return json.load(fh)
