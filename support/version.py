"""The installed tailscope's version, read from its distribution metadata (pyproject.toml)."""

from __future__ import annotations

from importlib import metadata


def tailscope_version() -> str:
    """The version of the installed ``tailscope`` distribution ("unknown" when not installed)."""
    try:
        return metadata.version("tailscope")
    except metadata.PackageNotFoundError:
        return "unknown"
