"""A swap file for one run: create (dd + mkswap), enable (swapon), disable (swapoff), delete.

The file is allocated with ``dd`` from /dev/zero (no holes: swap files must
not be sparse), mode 0600, under a directory on a disk filesystem (tmpfs and
most overlay filesystems refuse swap files: ``swapon`` fails in
:meth:`SwapFile.enable`, before any load). ``swapoff`` pulls every swapped
page back into memory, so disabling takes about as long as reading the
swapped-out data.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from tailscope.faults.injector import FaultCleanupError, FaultSetupError

TOOLS = ("dd", "mkswap", "swapon", "swapoff")
SWAPOFF_TIMEOUT_S = 300.0


def missing_tools() -> list[str]:
    """The swap tools not found on PATH (also /sbin, /usr/sbin)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"])
    return [tool for tool in TOOLS if shutil.which(tool, path=search) is None]


def _tool(name: str) -> str:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"])
    return shutil.which(name, path=search) or name


def active_swap_files() -> list[str]:
    """Paths listed in /proc/swaps."""
    try:
        with open("/proc/swaps", encoding="utf-8") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return []
    return [line.split()[0] for line in lines if line.strip()]


class SwapFile:
    """One swap file at ``path`` of ``size_mb`` MB."""

    def __init__(self, path: str, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self.created = False
        self.enabled = False

    def create(self) -> None:
        """Write the file and format it as swap; FaultSetupError on failure (the file is removed)."""
        try:
            _run([_tool("dd"), "if=/dev/zero", f"of={self.path}", "bs=1M", f"count={self.size_mb}", "status=none"])
            self.created = True
            os.chmod(self.path, 0o600)
            _run([_tool("mkswap"), self.path])
        except (OSError, subprocess.CalledProcessError) as exc:
            self.delete()
            raise FaultSetupError(f"cannot create swap file {self.path}: {_reason(exc)}") from exc

    def enable(self) -> None:
        try:
            _run([_tool("swapon"), self.path])
        except (OSError, subprocess.CalledProcessError) as exc:
            raise FaultSetupError(f"swapon {self.path} failed (tmpfs/overlay cannot hold swap; "
                                  f"give params.swap_dir on a disk): {_reason(exc)}") from exc
        self.enabled = True

    def disable(self) -> None:
        if self.path in active_swap_files():
            try:
                _run([_tool("swapoff"), self.path], timeout=SWAPOFF_TIMEOUT_S)
            except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                raise FaultCleanupError(f"swapoff {self.path} failed: {_reason(exc)}") from exc
        self.enabled = False

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.created = False

    def remove(self) -> None:
        """Disable and delete (idempotent)."""
        self.disable()
        self.delete()


def _run(argv: list[str], timeout: float = 120.0) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=timeout)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        return (exc.stderr or b"").decode(errors="replace").strip() or f"exit status {exc.returncode}"
    return str(exc)
