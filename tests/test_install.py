"""README command 1 as a new user runs it, exactly as written, from a fresh clone.

The repository's files (tracked, plus untracked ones git does not ignore: what a fresh clone
of this work holds) are copied to a temporary folder; ``python3`` on PATH is a Python that
refuses system installs (an ``EXTERNALLY-MANAGED`` marker, as Debian 12's has). The README's
line makes a virtual environment, installs tailscope (not editable) and its dependencies from
the package index the machine's pip is configured for, and runs ``tailscope demo`` from the
copy's root, where folders that become subpackages of ``tailscope`` at install time
(``tracing/``, ``loadgen/``, ...) sit in the working directory: the demo and every child it
starts must import the installed package (issue 17).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def readme_command_1() -> str:
    """The shell line of README command 1 (the first ``sh`` block under "Two commands")."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme.split("## Two commands", 1)[1]
    block = re.search(r"```sh\n(.+?)\n\s*```", section, re.S)
    assert block, "README: no sh block under 'Two commands'"
    lines = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 1, f"README command 1 must be one line a person can paste, got {lines}"
    return lines[0]


def externally_managed_python(root: str) -> str:
    """A Python that refuses system installs as Debian 12's does: this interpreter's base
    installation laid out under ``root`` (the binary copied, the standard library linked entry
    by entry, pip visible) with an ``EXTERNALLY-MANAGED`` marker in its stdlib folder (PEP 668).
    Returns ``root``, its prefix (``root/bin`` goes first on PATH)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base_binary = os.path.join(sys.base_prefix, "bin", version)
    stdlib = os.path.dirname(os.__file__)
    bin_dir, lib_dir = os.path.join(root, "bin"), os.path.join(root, "lib")
    fake_stdlib = os.path.join(lib_dir, version)
    os.makedirs(bin_dir)
    os.makedirs(os.path.join(fake_stdlib, "site-packages"))
    shutil.copy2(base_binary, os.path.join(bin_dir, version))
    os.symlink(version, os.path.join(bin_dir, "python3"))
    for entry in os.listdir(stdlib):
        if entry not in ("site-packages", "EXTERNALLY-MANAGED"):
            os.symlink(os.path.join(stdlib, entry), os.path.join(fake_stdlib, entry))
    base_lib = os.path.join(sys.base_prefix, "lib")
    for entry in os.listdir(base_lib):  # a shared libpython found relative to the binary
        if entry.startswith("libpython"):
            os.symlink(os.path.join(base_lib, entry), os.path.join(lib_dir, entry))
    pip_dir = importlib.util.find_spec("pip").submodule_search_locations[0]
    os.symlink(pip_dir, os.path.join(fake_stdlib, "site-packages", "pip"))
    with open(os.path.join(fake_stdlib, "EXTERNALLY-MANAGED"), "w") as marker:
        marker.write("[externally-managed]\nError=this Python refuses system installs (a test of README command 1)\n")
    return root


def test_readme_command_1_installs_and_runs_the_demo_under_a_python_that_refuses_system_installs(tmp_path):
    """README command 1, exactly as written, in a fresh clone whose ``python3`` refuses system
    installs (PEP 668, as on Debian 12): it makes its own virtual environment, installs tailscope
    and its dependencies from the package index into it, and runs the demo."""
    clone = str(tmp_path / "clone")
    copy_repository(clone)
    assert not os.path.exists(os.path.join(clone, "tailscope"))
    system_python = externally_managed_python(str(tmp_path / "system-python"))
    env = clean_env(system_python)
    env.pop("VIRTUAL_ENV", None)
    prefix = subprocess.run(["python3", "-c", "import sys; print(sys.prefix)"], cwd=clone, env=env,
                            capture_output=True, text=True, timeout=60)
    assert prefix.stdout.strip() == system_python, prefix.stdout + prefix.stderr  # never the real environment
    refused = subprocess.run(["python3", "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "."], cwd=clone, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr, (
        refused.stdout + refused.stderr)  # the hazard is real: a plain `pip install .` stops here

    command = readme_command_1()
    ran = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=480)
    # 0: every SLO held; 1: an SLO failed on a loaded machine. Both mean the install works;
    # 2 is a setup error, 3 an inconclusive run (the demo is long enough to claim its SLOs), 4 a bug.
    assert ran.returncode in (0, 1), f"{command!r} exited {ran.returncode}:\n" + ran.stdout[-2000:] + ran.stderr[-3000:]
    report = re.search(r"^html: (\S+)$", ran.stdout, re.MULTILINE)
    assert report, ran.stdout[-2000:]
    assert os.path.isfile(os.path.join(clone, report.group(1)))
    assert os.path.realpath(os.path.join(clone, report.group(1))).startswith(os.path.realpath(clone) + os.sep)

    # Every package pyproject lists comes from the new venv, imported from the clone's root (cwd on
    # sys.path), not from the checkout nor from an editable install the system may also hold.
    venv = os.path.join(clone, ".venv")
    python = os.path.join(venv, "bin", "python")
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
    version = subprocess.run([os.path.join(venv, "bin", "tailscope"), "--version"], cwd=clone, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("tailscope 0."), version.stdout + version.stderr


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
