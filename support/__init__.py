"""Leaf helpers every layer of tailscope may import: units, the plug-in registry, kernel files.

Nothing here imports another tailscope package, so no arrow can point back up
from it (docs/architecture.md, "Dependency direction").
"""
