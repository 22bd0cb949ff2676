"""README command 1 as a new user runs it: a plain (non-editable) install, then ``tailscope demo``
from the clone's root.

The repository's files (tracked, plus untracked ones git does not ignore: what a fresh clone
of this work holds) are copied to a temporary folder and installed WITHOUT ``-e`` into a fresh
virtual environment. The demo then runs from the copy's root, where folders that become
subpackages of ``tailscope`` at install time (``tracing/``, ``loadgen/``, ...) sit in the working
directory; it and every child it starts must import the installed package (issue 17).

The environment sees the dependencies already installed (``--system-site-packages``) and pip
runs with ``--no-index --no-deps --no-build-isolation``, so nothing is downloaded: the build
uses the setuptools and wheel that the ``test`` extras install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Demo length: long enough for every child (receiver, samplers, target) to start and report.
DEMO_DURATION = "3s"


def copy_repository(dest: str) -> None:
    """Copy the files a clone of this work would hold (``git ls-files -co --exclude-standard``)."""
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = os.path.join(ROOT, rel)
        if os.path.isfile(source):  # a tracked file moved or deleted in the work tree is not copied
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(source, os.path.join(dest, rel))


def clean_env(venv: str) -> dict[str, str]:
    """The environment of a user whose shell runs the venv's ``tailscope``: nothing points into the repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "PYTHONHOME")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_plain_install_runs_the_demo_from_the_clone_root(tmp_path):
    clone, venv = str(tmp_path / "clone"), str(tmp_path / "venv")
    copy_repository(clone)
    assert not os.path.exists(os.path.join(clone, "tailscope"))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    python, env = os.path.join(venv, "bin", "python"), clean_env(venv)
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                "--no-build-isolation", "."], cwd=clone, env=env, capture_output=True, text=True,
                               timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # Every package pyproject lists comes from the venv, imported from the clone's root (cwd on sys.path),
    # not from the checkout nor from an editable install the system may also hold.
    packages = tomllib.load(open(os.path.join(clone, "pyproject.toml"), "rb"))["tool"]["setuptools"]["packages"]
    where = subprocess.run(
        [python, "-c", "import importlib.util, json, sys\n"
                       "print(json.dumps({p: list(importlib.util.find_spec(p).submodule_search_locations)\n"
                       "                  for p in sys.argv[1:]}))", *packages],
        cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    site = os.path.realpath(venv)
    strays = {p: dirs for p, dirs in json.loads(where.stdout).items()
              if not dirs or not all(os.path.realpath(d).startswith(site + os.sep) for d in dirs)}
    assert not strays, f"packages not imported from the installed copy: {strays}"
    untyped = [p for p, dirs in json.loads(where.stdout).items()
               if p.count(".") == 1 and not os.path.isfile(os.path.join(dirs[0], "py.typed"))]
    assert not untyped, f"PEP 561 marker py.typed missing from the installed {untyped}"

    entry_point = os.path.join(venv, "bin", "tailscope")
    version = subprocess.run([entry_point, "--version"], cwd=clone, env=env, capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("tailscope 0."), version.stdout + version.stderr

    demo = subprocess.run([entry_point, "demo", "--duration", DEMO_DURATION], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=120)
    # 0: every SLO held; 1: an SLO failed on a loaded machine. Both mean the install works; 2 is a setup error.
    assert demo.returncode in (0, 1), demo.stdout[-2000:] + demo.stderr[-3000:]
    report = re.search(r"^html: (\S+)$", demo.stdout, re.MULTILINE)
    assert report, demo.stdout[-2000:]
    assert os.path.isfile(os.path.join(clone, report.group(1)))
    assert os.path.realpath(os.path.join(clone, report.group(1))).startswith(os.path.realpath(clone) + os.sep)


def test_children_start_so_that_the_working_directory_cannot_shadow_tailscope(tmp_path):
    """A ``tailscope`` folder in the working directory would shadow the installed package for a
    plain ``python -m``; the harness's children are started in safe-path mode and ignore it."""
    from tailscope.support.python_child import python_module

    shadow = tmp_path / "tailscope"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the working directory shadowed tailscope')\n")
    plain = subprocess.run([sys.executable, "-m", "tailscope.support.version"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0 and "shadowed tailscope" in plain.stderr  # the hazard is real
    safe = subprocess.run(python_module("tailscope.support.version"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert safe.returncode == 0, safe.stderr
